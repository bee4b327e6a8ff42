"""Group commit's WAL bound: acknowledged async loads whose rows are not visible yet are at most
`group_commit_max_wal_num_per_table` per table and `group_commit_wal_max_disk_limit` bytes; a load past the bound
waits for its group and is answered once visible, and every load ends visible exactly once."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DorisClient, serving
from tests.test_group_commit import assert_group_reply

LOADS = 16
BOUND = 5
LINE = "{k:04d},x\n"  # every body the same size, so a bound in bytes holds BOUND loads
DDL = (
    "CREATE TABLE t (k INT NOT NULL, v VARCHAR(8)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"
    ' PROPERTIES ("group_commit_mode" = "async_mode")'
)


def wal_loads(doris: DorisClient) -> int:
    """The server's gauge of acknowledged async loads not visible yet (GET /metrics)."""
    found = re.search(r"^doris_group_commit_wal_loads (\S+)$", doris.http.get("/metrics").text, re.MULTILINE)
    assert found is not None
    return int(float(found.group(1)))


@pytest.mark.parametrize(
    "bound",
    [
        pytest.param({"group_commit_max_wal_num_per_table": BOUND}, id="loads-per-table"),
        pytest.param({"group_commit_wal_max_disk_limit": str(BOUND * len(LINE.format(k=0)))}, id="bytes"),
    ],
)
def test_acknowledged_async_loads_not_yet_visible_never_exceed_the_wal_bound(
    spark: Any, tmp_path: Path, bound: dict[str, Any]
) -> None:
    from app.main import create_app
    from app.settings import Settings

    # a long interval: the group's first load opens it, every other load arrives while it collects
    settings = Settings(
        data_dir=tmp_path, mysql_port=0, compaction_interval_seconds=0, group_commit_interval_ms=2500, **bound
    )
    with serving(create_app(settings, spark=spark), settings=settings) as (url,):
        doris = DorisClient(url)
        doris.sql("d", "CREATE DATABASE d")
        doris.sql("d", DDL)
        # the first query of a table is the slowest (seconds on a loaded machine): run it before the loads, so the
        # watcher samples the backlog while a group collects, not after it committed
        assert doris.rows("d", "SELECT count(*) FROM t") == [[0]]
        answered: list[dict[str, Any]] = []
        done = threading.Event()
        gaps: list[int] = []
        in_wal: list[int] = []

        def watch() -> None:
            # answered is read before the table: the gap read can only overstate the backlog, never hide it
            while not done.is_set():
                acknowledged = sum(1 for body in list(answered) if body["Status"] == "Success")
                visible = doris.rows("d", "SELECT count(*) FROM t")[0][0]
                gaps.append(acknowledged - visible)
                in_wal.append(wal_loads(doris))
                time.sleep(0.05)

        barrier = threading.Barrier(LOADS)

        def load(k: int) -> dict[str, Any]:
            barrier.wait()
            body: dict[str, Any] = doris.stream_load(
                "d", "t", LINE.format(k=k), {"column_separator": ",", "label": f"load_{k}"}
            ).json()
            answered.append(body)
            return body

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        with ThreadPoolExecutor(LOADS) as pool:
            replies = list(pool.map(load, range(LOADS)))
        deadline = time.monotonic() + 60
        while doris.rows("d", "SELECT count(*) FROM t") != [[LOADS]]:  # the last acknowledged loads' group
            assert time.monotonic() < deadline, doris.rows("d", "SELECT count(*) FROM t")
            time.sleep(0.1)
        done.set()
        watcher.join(timeout=60)

        for body in replies:
            assert_group_reply(body, mode="async_mode", loaded=1)
        assert gaps and 0 < max(gaps) <= BOUND, f"acknowledged minus visible loads over time: {gaps}"
        assert max(in_wal) <= BOUND and wal_loads(doris) == 0, in_wal
        assert doris.rows("d", "SELECT k FROM t ORDER BY k") == [[k] for k in range(LOADS)]
        for k in range(LOADS):
            state = doris.http.get("/api/d/get_load_state", params={"label": f"load_{k}"}).json()["data"]
            assert state == "VISIBLE", (k, state)


@pytest.mark.parametrize(
    "spec, free, limit",
    [
        pytest.param("10%", 1000, 100, id="percent-of-free-space"),
        pytest.param("2.5%", 1000, 25, id="fractional-percent"),
        pytest.param("4096", 1000, 4096, id="bytes"),
    ],
)
def test_wal_disk_limit_reads_bytes_or_a_percentage_of_free_space(spec: str, free: int, limit: int) -> None:
    from spark_runner.group_commit import wal_disk_limit

    assert wal_disk_limit(spec, free) == limit


def test_wal_backlog_bounds_loads_per_table_and_bytes_overall_and_counts_replayed_loads_whatever_the_bounds() -> None:
    from spark_runner.group_commit import WalBacklog

    backlog = WalBacklog(max_loads_per_table=2, max_bytes=100)
    assert backlog.admit(("d", "a"), 1, 10) and backlog.admit(("d", "a"), 2, 10)
    assert not backlog.admit(("d", "a"), 3, 10)  # the table's bound
    assert backlog.admit(("d", "b"), 4, 70)  # another table has its own count
    assert not backlog.admit(("d", "c"), 5, 20)  # 110 bytes: the bound in bytes is for every table
    backlog.release(1)
    assert backlog.admit(("d", "a"), 3, 10)
    backlog.add(("d", "a"), 6, 50)  # replayed at start: owed whatever the bounds
    assert backlog.size() == (4, 140)
    for txn_id in (2, 3, 4, 6, 99):  # 99 never counted (a sync load): releasing it changes nothing
        backlog.release(txn_id)
    assert backlog.size() == (0, 0)


def test_async_payloads_kept_in_memory_are_bounded_over_every_table_and_freed_with_their_entry() -> None:
    # a small async body waits in memory for its group; many tables' backlogs must not fill the server's memory
    from spark_runner.group_commit import WalBacklog

    backlog = WalBacklog(max_loads_per_table=100, max_bytes=10_000, max_memory_bytes=100)
    for txn_id, table in ((1, "a"), (2, "b"), (3, "c")):
        assert backlog.admit(("d", table), txn_id, 40)
    assert backlog.keep_in_memory(1, 40) and backlog.keep_in_memory(2, 40)
    assert not backlog.keep_in_memory(3, 40)  # 120 bytes: waits as a file instead
    assert not backlog.keep_in_memory(7, 1)  # not admitted to the backlog: nothing to keep
    assert backlog.memory() == 80
    backlog.release(1)
    assert backlog.memory() == 40 and backlog.admit(("d", "a"), 4, 40) and backlog.keep_in_memory(4, 40)
    for txn_id in (2, 3, 4):
        backlog.release(txn_id)
    assert backlog.memory() == 0 and backlog.size() == (0, 0)
