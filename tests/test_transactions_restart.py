"""One SIGKILL, three promises kept: a precommitted two-phase load outlives the kill and is committed (or
aborted) after the restart, async group-commit loads acknowledged before the kill are replayed from the
write-ahead directory (many per job, each once), and a broker load caught mid-job is resumed, never
half-applied. One kill/restart cycle serves all three (a JVM start is the expensive part)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tables.commit import GROUP_PROPERTY
from tests.helpers import AUTH, assert_doris_result
from tests.server_process import ServerProcess
from tests.test_group_commit import DDL as GROUP_DDL
from tests.test_group_commit import assert_group_reply
from tests.test_two_phase_commit import DDL as TWO_PHASE_DDL
from tests.test_two_phase_commit import load_state, operate, precommit

REPLAYED = 40  # async loads left in the WAL of a duplicate-key table: a lost or doubled one shows in its rows
DUPLICATE_DDL = (
    "CREATE TABLE gd (k INT NOT NULL, v VARCHAR(32)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2"
    ' PROPERTIES ("group_commit_mode" = "async_mode")'
)


def group_commits(data_dir: Path, db: str, table: str) -> list[list[int]]:
    """The loads' transaction ids of each group-commit snapshot of a table (the group's own first), read from
    its Iceberg metadata."""
    from app.settings import Settings
    from tables.catalog import Catalog

    settings = Settings(data_dir=data_dir)
    catalog = Catalog(uri=settings.resolved_catalog_uri, warehouse=settings.resolved_warehouse)
    snapshots = catalog.load(db, table).iceberg.snapshots()
    return [
        [int(t) for t in s.summary.additional_properties[GROUP_PROPERTY].split(",")[1:]]
        for s in snapshots
        if s.summary is not None and GROUP_PROPERTY in s.summary.additional_properties
    ]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    # the broker load reads from tmp_path (the data dir inside it stays refused)
    proc = ServerProcess(
        tmp_path / "data", tmp_path / "server.log", SL_BROKER_ALLOWED_ROOTS=json.dumps([str(tmp_path)])
    )
    yield proc
    proc.kill()


def test_precommitted_async_and_broker_loads_survive_sigkill(server: ServerProcess, tmp_path: Path) -> None:
    # a long group interval: the async group is still collecting when the server dies; the broker load
    # into `b` stops at its job
    server.start(SL_GROUP_COMMIT_INTERVAL_MS="60000", SL_PAUSE_AT="job:b")
    server.sql("x", "CREATE DATABASE d")
    server.sql("d", TWO_PHASE_DDL)
    server.sql("d", GROUP_DDL.format(name="g", mode="async_mode"))
    with httpx.Client(base_url=server.base_url, auth=AUTH, timeout=60) as http:
        keep = assert_doris_result(precommit(http, "d", "keep", "1,kept\n2,kept\n"))["TxnId"]
        assert_doris_result(precommit(http, "d", "drop", "3,dropped\n"))
    for i in range(5):
        body = server.load("d", "g", f"{i},acked{i}\n".encode(), label=f"async_{i}")
        assert_group_reply(body, mode="async_mode", loaded=1)
    server.sql("d", DUPLICATE_DDL)
    acked = []
    for i in range(REPLAYED):
        body = server.load("d", "gd", f"{i},replayed{i}\n".encode(), label=f"replayed_{i}")
        assert_group_reply(body, mode="async_mode", loaded=1)
        acked.append(body["TxnId"])
    server.sql("d", "CREATE TABLE b (k INT NOT NULL, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    (tmp_path / "b.csv").write_text("1,10\n2,20\n")
    server.sql(
        "d", f'LOAD LABEL d.resume_me (DATA INFILE("{tmp_path}/b.csv") INTO TABLE b COLUMNS TERMINATED BY "," (k, v))'
    )
    server.wait_for_log(["paused at job"])
    # the stuck load holds only its own table: a load into another table still commits
    assert_doris_result(server.load("d", "t", b"9,plain\n", label="other_table"))
    server.kill()

    server.start()
    with httpx.Client(base_url=server.base_url, auth=AUTH, timeout=60) as http:
        assert load_state(http, "d", "keep") == "PRECOMMITTED"
        assert server.sql("d", "SELECT k FROM t")["data"] == [[9]]  # only the plain load is visible
        assert operate(http, "d", "commit", txn_id=keep)["status"] == "Success"
        assert operate(http, "d", "abort", label="drop")["status"] == "Success"
        assert server.sql("d", "SELECT k, v FROM t ORDER BY k")["data"] == [[1, "kept"], [2, "kept"], [9, "plain"]]
        assert load_state(http, "d", "drop") == "ABORTED"
    deadline = time.monotonic() + 60
    while server.sql("d", "SELECT count(*) FROM g")["data"] != [[5]]:
        assert time.monotonic() < deadline, "acknowledged async loads were lost"
        time.sleep(0.3)
    assert server.sql("d", "SELECT k, v FROM g ORDER BY k")["data"] == [[i, f"acked{i}"] for i in range(5)]
    assert server.label_state("d", "async_4") == "VISIBLE"
    while server.sql("d", "SELECT count(*) FROM gd")["data"] != [[REPLAYED]]:
        assert time.monotonic() < deadline, server.sql("d", "SELECT count(*) FROM gd")
        time.sleep(0.3)
    assert server.sql("d", "SELECT k, v FROM gd ORDER BY k")["data"] == [[i, f"replayed{i}"] for i in range(REPLAYED)]
    # replayed as live loads are grouped: they fit one group (group_commit_max_loads), so one job, each load once
    groups = group_commits(tmp_path / "data", "d", "gd")
    assert sorted(t for g in groups for t in g) == sorted(acked), groups
    assert len(groups) == 1, f"{REPLAYED} replayed loads took {len(groups)} jobs: {groups}"
    assert server.label_state("d", f"replayed_{REPLAYED - 1}") == "VISIBLE"
    while (job := server.sql("d", 'SHOW LOAD WHERE LABEL = "resume_me"')["data"][0])[2] != "FINISHED":
        assert time.monotonic() < deadline and job[2] == "LOADING", job
        time.sleep(0.3)
    assert server.sql("d", "SELECT k, v FROM b ORDER BY k")["data"] == [[1, 10], [2, 20]]
