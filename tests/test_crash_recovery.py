"""Kill the server (SIGKILL, whole process group) at every point of a load, restart, and check that an
answered load is visible exactly once, a load committed to Iceberg is visible with its label VISIBLE, and
every other load is absent with its label free. Three rounds; all four points are hit in each round at once
(four loads into four tables, each armed with its own pause point)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tables.pause import POINTS
from tests.server_process import ServerProcess

DB = "crash"
ARMED = ",".join(f"{p}:t_{p}" for p in POINTS)
TABLE_DDL = "CREATE TABLE {name} (k INT NOT NULL, v VARCHAR(16)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "data", tmp_path / "server.log")
    yield proc
    proc.kill()


def _send(server: ServerProcess, point: str, rnd: int, release: threading.Event) -> None:
    """A load into the armed table; the staging one keeps its body open until the server dies."""

    def body() -> Iterator[bytes]:
        yield f"{rnd},{point}\n".encode()
        if point == "staging":
            release.wait(timeout=120)

    try:
        httpx.put(
            f"{server.base_url}/api/{DB}/t_{point}/_stream_load",
            content=body() if point == "staging" else f"{rnd},{point}\n".encode(),
            headers={"column_separator": ",", "label": f"{point}_{rnd}"},
            auth=("root", ""),
            timeout=120,
        )
    except httpx.HTTPError:
        pass  # the server was killed under it: no answer is the expected outcome


def _rows(server: ServerProcess, table: str) -> list[list[object]]:
    return server.sql(DB, f"SELECT k, v FROM {table} ORDER BY k")["data"]


def _check_after_restart(server: ServerProcess, rounds_done: int) -> None:
    expected = [[r, f"ack{r}"] for r in range(1, rounds_done + 1)]
    assert _rows(server, "acked") == expected, "an answered load was lost or doubled"
    for r in range(1, rounds_done + 1):
        assert server.label_state(DB, f"ack_{r}") == "VISIBLE"
        assert server.label_state(DB, f"after_commit_{r}") == "VISIBLE"
        for point in ("staging", "job", "before_commit"):
            assert server.label_state(DB, f"{point}_{r}") in ("ABORTED", "UNKNOWN")
    assert _rows(server, "t_after_commit") == [[r, "after_commit"] for r in range(1, rounds_done + 1)]
    # where each table lives: the server names its directories, the catalog knows them
    from tables.catalog import Catalog

    catalog = Catalog(uri=f"sqlite:///{server.data_dir / 'catalog.db'}", warehouse=server.data_dir / "warehouse")
    locations = catalog.table_locations()
    for point in ("staging", "job", "before_commit"):
        assert _rows(server, f"t_{point}") == []
        location = locations[(DB, f"t_{point}")]
        assert location.is_dir(), location
        files = list(location.rglob("data/*/*.parquet"))
        assert files == [], f"a failed load left files behind: {files}"


# one round in `make test`, three in `make test-full`
@pytest.mark.parametrize("rounds", [1, pytest.param(3, marks=pytest.mark.full)])
def test_kill_at_every_point_of_a_load(server: ServerProcess, rounds: int) -> None:
    server.start(SL_PAUSE_AT=ARMED)
    server.sql(DB, f"CREATE DATABASE {DB}")
    for name in ["acked"] + [f"t_{p}" for p in POINTS]:
        server.sql(DB, TABLE_DDL.format(name=name))
    for rnd in range(1, rounds + 1):
        ack = server.load(DB, "acked", f"{rnd},ack{rnd}\n".encode(), label=f"ack_{rnd}")
        assert ack["Status"] == "Success", ack
        release = threading.Event()
        threads = [threading.Thread(target=_send, args=(server, p, rnd, release), daemon=True) for p in POINTS]
        for t in threads:
            t.start()
        server.wait_for_log([f"paused at {p} (table t_{p})" for p in POINTS])
        server.kill()
        release.set()
        for t in threads:
            t.join(timeout=30)
        server.start(SL_PAUSE_AT=ARMED if rnd < rounds else "")
        _check_after_restart(server, rnd)
    # the labels of the loads that did not commit are free again
    for point in ("staging", "job", "before_commit"):
        again = server.load(DB, f"t_{point}", b"99,retry\n", label=f"{point}_1")
        assert again["Status"] == "Success", again
    assert server.load(DB, "t_after_commit", b"99,retry\n", label="after_commit_1")["Status"] == "Label Already Exists"


def test_sigterm_lets_a_load_in_flight_finish_and_refuses_new_ones(server: ServerProcess) -> None:
    server.start(SL_SHUTDOWN_TIMEOUT_SECONDS="60")
    server.sql(DB, f"CREATE DATABASE {DB}")
    server.sql(DB, TABLE_DDL.format(name="slow"))
    release = threading.Event()
    result: dict[str, object] = {}

    def slow_body() -> Iterator[bytes]:
        yield b"1,a\n"
        release.wait(timeout=60)
        yield b"2,b\n"

    def send() -> None:
        try:
            resp = httpx.put(
                f"{server.base_url}/api/{DB}/slow/_stream_load",
                content=slow_body(),
                headers={"column_separator": ",", "label": "inflight"},
                auth=("root", ""),
                timeout=120,
            )
            result.update(resp.json())
        except httpx.HTTPError as exc:
            result["error"] = repr(exc)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while server.label_state(DB, "inflight") != "PREPARE":
        assert time.monotonic() < deadline, "the slow load never started"
        time.sleep(0.1)
    assert server.proc is not None
    os.killpg(server.proc.pid, signal.SIGTERM)  # the whole group, as Ctrl-C or `systemctl stop` do
    time.sleep(1.0)
    refused = server.load(DB, "slow", b"3,c\n", label="late")
    assert refused["Status"] == "Fail" and "shutting down" in refused["Message"], refused
    release.set()
    thread.join(timeout=60)
    assert result.get("Status") == "Success" and result.get("NumberLoadedRows") == 2, result
    # uvicorn re-raises the signal after its clean shutdown, so the exit status is the signal's
    assert server.proc.wait(timeout=60) in (0, -signal.SIGTERM)
