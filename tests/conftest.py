"""Shared fixtures: one SparkSession per run, one real server on a free loopback port, a database per test; and
the test tiers, read from the fixtures each test uses.
"""

from __future__ import annotations

import inspect
import os
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DorisClient, serving

pytest_plugins = ["tests.postgres"]  # the `postgres` server and a `postgres_uri` database per module

# the documents the project comes from, copied into the repo (tests/data/README.md says where from)
DATA = Path(__file__).resolve().parent / "data"


# no JVM warm-up at a test server's start (app/settings.py `warm_up_seconds`): every start would spend its seconds
# of CPU; tests/test_warm_up.py turns it on
WARM_UP_OFF = ("SL_WARM_UP_SECONDS", "0")
os.environ.setdefault(*WARM_UP_OFF)


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No SL_* or PYICEBERG_* setting of the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith(("SL_", "PYICEBERG_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv(*WARM_UP_OFF)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path_factory.getbasetemp() / "pyiceberg-home"))


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    from spark_runner.session import build_session

    session = build_session(
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"},
        app_name="tests",
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def server_settings(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from app.settings import Settings

    # routine load tests end batches by a few rows (Doris's 200000-row floor stays the default elsewhere);
    # background compaction off: tests that count rowsets run it themselves (tests/test_compaction.py);
    # broker loads read under one folder, Kafka certificates from another (tests/test_security_sources.py)
    return Settings(
        data_dir=tmp_path_factory.mktemp("server-data"),
        mysql_port=0,
        routine_load_min_batch_rows=1,
        compaction_interval_seconds=0,
        broker_allowed_roots=[str(tmp_path_factory.mktemp("broker-files"))],
        kafka_cert_dir=tmp_path_factory.mktemp("kafka-certs"),
        login_max_failures=0,  # many tests try wrong passwords from 127.0.0.1 (the backoff: test_http_privileges)
    )


@pytest.fixture(scope="session")
def served_app(spark, server_settings):  # type: ignore[no-untyped-def]
    from app.main import create_app

    return create_app(server_settings, spark=spark)


@pytest.fixture(scope="session")
def base_url(served_app, server_settings) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A real uvicorn serving the app on 127.0.0.1:<free port>, sharing the test run's SparkSession."""
    with serving(served_app, settings=server_settings) as (url,):
        yield url


@pytest.fixture(scope="session")
def mysql_port(base_url: str, served_app) -> int:  # type: ignore[no-untyped-def]
    """The MySQL-protocol port of the test server (started by the app's lifespan on a free port)."""
    return int(served_app.state.mysql_port)


@pytest.fixture(scope="session")
def doris(base_url: str) -> DorisClient:
    return DorisClient(base_url)


@pytest.fixture
def db(doris: DorisClient) -> str:
    """A fresh database for one test."""
    name = f"db_{uuid.uuid4().hex[:12]}"
    doris.sql(name, f"CREATE DATABASE {name}")
    return name


def pytest_configure(config: pytest.Config) -> None:
    # pyspark emits DeprecationWarnings from its own modules on import; ours must stay clean
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="pyspark")


# --- test tiers ----------------------------------------------------------------------------------------------
# Every test gets exactly one tier marker (registered in pyproject.toml), the heaviest thing its fixtures start,
# so no test file has to carry one; `make test-fast` runs `-m unit`. A marker written on a test wins.
#   process  a server in a process of its own (`python -m app`, with its own JVM): a fixture that starts one
#            (it names `ServerProcess` from tests/server_process.py, or `Popen`)
#   server   the app served in this process: `base_url` (and `doris`, `db`, `mysql_port` above it), or a fixture
#            that serves an app of its own with tests.helpers.serving
#   spark    the run's SparkSession (the `spark` fixture, and whatever is built on it)
#   unit     none of these: no JVM, no server
TIERS = ("process", "server", "spark", "unit")  # heaviest first
PROCESS_NAMES = frozenset({"ServerProcess", "Popen"})
SERVER_NAMES = frozenset({"serving"})


def _names_used(fixturedef: Any) -> frozenset[str]:
    """The global and attribute names a fixture's own body uses (`ServerProcess(...)`, `subprocess.Popen(...)`)."""
    code = getattr(inspect.unwrap(fixturedef.func), "__code__", None)
    return frozenset(code.co_names) if code is not None else frozenset()


def tier_of(item: pytest.Item) -> str:
    """The tier of a collected test: its own tier marker, or the heaviest tier its fixtures (all of them, the ones
    it asks for and the ones those ask for) belong to."""
    for marker in item.iter_markers():
        if marker.name in TIERS:
            return marker.name
    fixturenames: list[str] = getattr(item, "fixturenames", [])
    # pytest's own record of which definition serves each name; the last one wins where a module overrides
    name2defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    used: set[str] = set()
    for name in fixturenames:
        if name2defs.get(name):
            used |= _names_used(name2defs[name][-1])
    if used & PROCESS_NAMES:
        return "process"
    if "base_url" in fixturenames or used & SERVER_NAMES:
        return "server"
    if "spark" in fixturenames:
        return "spark"
    return "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item)
        if item.get_closest_marker(tier) is None:
            item.add_marker(tier)
