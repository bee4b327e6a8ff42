"""The test tiers: tests/conftest.py marks each test from the fixtures it uses. A fresh pytest collects a few
known tests with this module as its plugin (nothing runs) and prints each test's tier markers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIERS = frozenset({"unit", "spark", "server", "process"})
PREFIX = "tier-of "

# test (node id, or a parametrized test's name) → its tier, and why
KNOWN = {
    # no fixture beyond tmp_path: unit, even in a module whose other tests start servers
    "tests/tables/test_maintenance.py::test_finished_labels_are_forgotten_after_the_keep_time": "unit",
    "tests/test_server_process.py::test_start_without_java_17_exits_2_and_says_what_to_install": "unit",
    "tests/test_mysql_protocol.py::test_password_is_the_http_password": "unit",
    # `services` is built on `spark`
    "tests/tables/test_maintenance.py::test_orphans_go_but_live_young_and_unresolved_files_stay": "spark",
    # `conn` asks for `mysql_port` and `db`, which stand on `base_url`
    "tests/test_mysql_protocol.py::test_create_insert_select_over_mysql_with_doris_metadata": "server",
    # fixtures of their own that serve an app with tests.helpers.serving
    "tests/test_fe_redirect.py::test_fe_port_answers_307_to_the_be_port_with_credentials": "server",
    "tests/test_two_phase_commit.py::test_precommitted_transaction_times_out_and_aborts": "server",
    # `server` starts `python -m app` with subprocess.Popen; the module's own `doris` overrides the conftest one
    "tests/test_server_process.py::test_beyond_loopback_only_the_root_password_logs_in": "process",
    "tests/test_server_process.py::test_health_answers_in_the_fe_envelope": "process",
    # `server` is a tests.server_process.ServerProcess
    "tests/test_crash_recovery.py::test_kill_at_every_point_of_a_load[1]": "process",
}


def pytest_collection_finish(session: pytest.Session) -> None:
    """Only when this module is loaded as a plugin (`-p tests.test_markers`): print every collected test's tiers."""
    for item in session.items:
        tiers = sorted(m.name for m in item.iter_markers() if m.name in TIERS)
        print(f"{PREFIX}{item.nodeid} {','.join(tiers)}")


@pytest.fixture(scope="module")
def collected() -> dict[str, str]:
    """node id → its tier markers, comma-separated, as a fresh `pytest --collect-only` of the KNOWN files marks."""
    files = sorted({test.split("::")[0] for test in KNOWN})
    plugins = ["-p", "tests.test_markers", "-p", "no:cacheprovider", "-p", "no:hypothesispytest"]  # the last: 1 s
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *plugins, *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.removeprefix(PREFIX) for line in done.stdout.splitlines() if line.startswith(PREFIX)]
    return dict(line.rsplit(" ", 1) for line in lines)


@pytest.mark.parametrize(("test", "tier"), KNOWN.items())
def test_known_test_has_its_tier(collected: dict[str, str], test: str, tier: str) -> None:
    items = {node: tiers for node, tiers in collected.items() if node == test or node.startswith(f"{test}[")}
    assert items, f"{test} was not collected"
    assert set(items.values()) == {tier}, items


def test_every_collected_test_has_exactly_one_tier(collected: dict[str, str]) -> None:
    assert {node: tiers for node, tiers in collected.items() if tiers not in TIERS} == {}
