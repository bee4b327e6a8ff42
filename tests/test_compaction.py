"""Compaction as users drive and see it: `ADMIN COMPACT TABLE`, `SHOW TABLETS`, the BE's compaction endpoints,
background compaction past the thresholds, loads racing compactions (nothing lost), giving way to TRUNCATE,
and housekeeping removing the files compaction replaced."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DorisClient, assert_doris_result

TABLE = "CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 3"


def _load(doris: DorisClient, db: str, body: str, **headers: str) -> None:
    assert_doris_result(doris.stream_load(db, "t", body, headers={"column_separator": ",", **headers}))


def _rowsets(doris: DorisClient, tablet: int) -> dict[str, Any]:
    resp = doris.http.get("/api/compaction/show", params={"tablet_id": tablet})
    assert resp.status_code == 200
    return resp.json()  # type: ignore[no-any-return]


def test_tablets_rowsets_and_compaction_on_demand_through_sql_and_the_be_endpoints(doris: DorisClient, db: str) -> None:
    doris.sql(db, TABLE)
    for i in range(4):
        _load(doris, db, f"{i},{i}\n{i + 1},{10 * i}\n")
    _load(doris, db, "2,0\n", merge_type="DELETE")
    answer = doris.rows(db, "SELECT * FROM t ORDER BY k")
    assert answer == [[0, 0], [1, 1], [3, 3], [4, 30]]

    tablets = doris.sql(db, "SHOW TABLETS FROM t")
    names = [c["name"] for c in tablets["meta"]]
    assert names[:5] == ["TabletId", "ReplicaId", "BackendId", "SchemaHash", "Version"]
    assert "CompactionStatus" in names and len(tablets["data"]) == 3  # one tablet per bucket
    ids = [int(row[0]) for row in tablets["data"]]
    assert len(set(ids)) == 3 and doris.sql(db, "SHOW TABLETS FROM t")["data"] == tablets["data"]  # stable
    assert sum(int(row[names.index("RowCount")]) for row in tablets["data"]) == 9  # stored rows, all versions
    assert {int(row[names.index("VersionCount")]) for row in tablets["data"]} == {5}

    status = _rowsets(doris, ids[1])
    assert [r.split()[0] for r in status["rowsets"]] == ["[2-2]", "[3-3]", "[4-4]", "[5-5]", "[6-6]"]
    assert [d["rows"] for d in status["rowsets_detail"]] == [2, 2, 2, 2, 1]
    assert all(d["data_size"] > 0 for d in status["rowsets_detail"])

    run = doris.http.post("/api/compaction/run", params={"tablet_id": ids[0], "compact_type": "cumulative"})
    assert run.json() == {"status": "Success", "msg": "compaction task is successfully triggered."}
    status = _rowsets(doris, ids[2])
    assert [r.split()[0] for r in status["rowsets"]] == ["[2-6]"]
    assert status["rowsets_detail"][0]["rows"] == 5  # one row per key, the delete marker kept
    assert status["last cumulative success time"] > "1970-01-01 08:00:00.000"
    assert doris.rows(db, "SELECT * FROM t ORDER BY k") == answer

    marked = "SET show_hidden_columns = true; SELECT k FROM t WHERE __DORIS_DELETE_SIGN__ = 1"
    assert doris.rows(db, marked) == [[2]]
    doris.sql(db, "ADMIN COMPACT TABLE t WHERE TYPE = 'BASE'")
    assert doris.rows(db, "SELECT * FROM t ORDER BY k") == answer
    assert doris.rows(db, marked) == []  # base compaction of a table without sequence drops markers
    _load(doris, db, "9,9\n")
    assert doris.rows(db, "SELECT * FROM t ORDER BY k") == [*answer, [9, 9]]


def test_compaction_requests_doris_refuses(doris: DorisClient, db: str) -> None:
    doris.sql(db, TABLE)
    run = doris.http.post("/api/compaction/run", params={"tablet_id": 1, "compact_type": "base"})
    assert run.json() == {"status": "Fail", "msg": "Tablet not found"}
    assert _rowsets(doris, 1) == {"status": "Fail", "msg": "Tablet not found"}
    tablet = int(doris.sql(db, "SHOW TABLETS FROM t")["data"][0][0])
    bad = doris.http.post("/api/compaction/run", params={"tablet_id": tablet, "compact_type": "full"})
    assert bad.json()["status"] == "Fail"
    empty = doris.http.post("/api/compaction/run", params={"tablet_id": tablet, "compact_type": "cumulative"})
    assert empty.json()["status"] == "Fail" and "no suitable versions" in empty.json()["msg"]
    assert "BASE or CUMULATIVE" in doris.sql_error(db, "ADMIN COMPACT TABLE t WHERE TYPE = 'FULL'")
    assert "Unknown table" in doris.sql_error(db, "ADMIN COMPACT TABLE nope WHERE TYPE = 'BASE'")
    doris.sql(db, "ADMIN COMPACT TABLE t WHERE TYPE = 'CUMULATIVE'")  # nothing to do is OK, as in Doris


# -- in-process: background rules, races, housekeeping -------------------------------------------
@pytest.fixture
def services(spark: Any, tmp_path: Path) -> Any:
    from app.main import build_services
    from app.settings import Settings

    settings = Settings(
        data_dir=tmp_path / "data",
        compaction_interval_seconds=0.2,
        compaction_min_rowsets=3,
        compaction_base_min_rowsets=2,
    )
    svc = build_services(settings, spark)
    _sql(svc, "CREATE DATABASE m")
    yield svc
    svc.txns.close()


def _sql(services: Any, stmt: str, *, hidden: bool = False) -> list[list[Any]]:
    from sql.session import Session
    from tables.accounts import ALL_PRIVS, Grant, Identity, Privileges, Scope

    session = Session(db="m", privileges=Privileges(Identity("root"), (Grant(Scope(), ALL_PRIVS),)))
    if hidden:
        session.set("show_hidden_columns", "true")
    return [list(r) for r in getattr(services.sql.execute(stmt, session), "rows", [])]


def _versions(services: Any, table: str) -> list[str]:
    return [r.version for r in services.catalog.load("m", table).rowsets()]


def test_background_compaction_runs_past_the_rowset_threshold(services: Any) -> None:
    from app.compaction import compaction_loop

    _sql(services, "CREATE TABLE a (k INT, n BIGINT SUM) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2")
    for i in range(2):
        _sql(services, f"INSERT INTO a VALUES ({i}, 1), (9, 1)")
    assert services.sql.compactor.run_background_pass() == []  # two small rowsets: below the threshold
    _sql(services, "INSERT INTO a VALUES (2, 1), (9, 1)")

    async def run_loop_until_compacted() -> None:
        loop = asyncio.create_task(compaction_loop(services))  # the server's loop, on its 0.2 s interval
        for _ in range(300):
            await asyncio.sleep(0.1)
            if services.sql.compactor.stats.cumulative:
                break
        loop.cancel()

    asyncio.run(run_loop_until_compacted())
    assert _versions(services, "a") == ["[2-4]"]
    assert services.sql.compactor.stats.cumulative == 1
    assert _sql(services, "SELECT * FROM a ORDER BY k") == [[0, 1], [1, 1], [2, 1], [9, 3]]


class _HeldJob:
    """The writer's pause hook, holding the job of loads into one table until `release` (the server's own hook
    holds a job forever: for kill tests)."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.reached = threading.Event()
        self.go = threading.Event()

    def hit(self, point: str, table: str) -> None:
        if point == "job" and table == self.table:
            self.reached.set()
            self.go.wait(60)


def test_background_compaction_waits_for_a_bulk_load_up_to_its_bound(
    services: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a bulk load's job runs (a body past `PARTITION_BYTES`), background compaction waits, at most
    `compaction_defer_seconds`; then it runs anyway."""
    from app.compaction import compaction_loop
    from loaders.headers import parse_load_request
    from spark_runner import service

    services.settings.compaction_defer_seconds = 4
    _sql(services, "CREATE TABLE a (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    _sql(services, "CREATE TABLE b (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    for i in range(3):
        _sql(services, f"INSERT INTO a VALUES ({i}, {i})")  # three small rowsets: past the threshold
    monkeypatch.setattr(service, "PARTITION_BYTES", 8)  # a 12-byte body is a bulk load here
    held = _HeldJob("b")
    services.loads.writer.pauses = held
    body = tmp_path / "body.csv"
    body.write_text("1,1\n2,2\n3,3\n")
    prepared = services.loads.prepare(parse_load_request("m", "b", {"label": "bulk", "column_separator": ","}))
    results: list[Any] = []
    load = threading.Thread(
        target=lambda: results.append(services.loads.run_staged(prepared, body, load_bytes=12)), daemon=True
    )
    load.start()
    assert held.reached.wait(60)
    assert services.loads.big_loads == 1
    compacted_after: list[float] = []

    async def loop_until_compacted() -> None:
        loop = asyncio.create_task(compaction_loop(services))
        started = time.monotonic()
        while time.monotonic() - started < 30 and not services.sql.compactor.stats.cumulative:
            await asyncio.sleep(0.05)
        compacted_after.append(time.monotonic() - started)
        loop.cancel()

    asyncio.run(loop_until_compacted())
    # the first check came at 0.2 s and found the bulk load: compaction waited its 4 s, then ran beside it
    assert compacted_after[0] >= 4, compacted_after
    assert services.sql.compactor.stats.cumulative == 1
    assert services.loads.big_loads == 1  # the load was still running all along
    held.go.set()
    load.join(60)
    assert results and results[0].status == "Success", results
    assert services.loads.big_loads == 0
    assert _sql(services, "SELECT k, v FROM b ORDER BY k") == [[1, 1], [2, 2], [3, 3]]
    assert _versions(services, "a") == ["[2-4]"]


def test_loads_racing_compactions_lose_nothing(services: Any) -> None:
    from spark_runner.compaction import CompactionType, NothingToCompact
    from tables.rowsets import RowsetsChanged

    _sql(services, "CREATE TABLE u (k INT, v INT, n INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2")
    loads = 16
    done = threading.Event()
    compactions: list[str] = []

    def compact_all_the_time() -> None:
        kinds = [CompactionType.CUMULATIVE, CompactionType.BASE]
        while not done.is_set():
            try:
                services.sql.compactor.compact("m", "u", kinds[len(compactions) % 2])
                compactions.append("done")
            except (NothingToCompact, RowsetsChanged):
                time.sleep(0.05)

    racer = threading.Thread(target=compact_all_the_time)
    racer.start()
    try:
        for i in range(loads):  # key i is new, key 1000 is updated by every load
            _sql(services, f"INSERT INTO u VALUES ({i}, {i}, 0), (1000, {i}, {i})")
    finally:
        done.set()
        racer.join()
    assert len(compactions) >= 2, "the race needs compactions committing between loads"
    rows = _sql(services, "SELECT k, v, n, __DORIS_VERSION_COL__ FROM u ORDER BY k", hidden=True)
    assert [r[:3] for r in rows] == [[i, i, 0] for i in range(loads)] + [[1000, loads - 1, loads - 1]]
    versions = [r[3] for r in rows[:loads]]
    assert versions == sorted(versions) and len(set(versions)) == loads  # every load kept its own version
    _sql(services, "INSERT INTO u VALUES (2000, 0, 0)")  # the version counter survived the compactions
    assert _sql(services, "SELECT __DORIS_VERSION_COL__ FROM u WHERE k = 2000", hidden=True) == [[versions[-1] + 1]]


def test_compaction_gives_way_to_a_truncate_and_leaves_no_files(services: Any) -> None:
    from tables.rowsets import RowsetsChanged

    _sql(services, "CREATE TABLE g (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    for i in range(3):
        _sql(services, f"INSERT INTO g VALUES ({i}, {i})")
    handle = services.catalog.load("m", "g")
    writer = services.loads.writer
    with pytest.raises(RowsetsChanged):
        with writer.rewrite("m", "g", label=f"c_{uuid.uuid4().hex}", planned=handle.definition) as pending:
            pending.replaced = handle.data_files()
            services.sql.execute("TRUNCATE TABLE g", _session())
            (pending.directory / "part-0.parquet").parent.mkdir(parents=True)
            (pending.directory / "part-0.parquet").write_bytes(b"not committed")
    assert not pending.directory.exists()
    assert _sql(services, "SELECT * FROM g") == []
    _sql(services, "INSERT INTO g VALUES (5, 5)")
    assert _sql(services, "SELECT * FROM g") == [[5, 5]]


def _session() -> Any:
    from sql.session import Session
    from tables.accounts import ALL_PRIVS, Grant, Identity, Privileges, Scope

    return Session(db="m", privileges=Privileges(Identity("root"), (Grant(Scope(), ALL_PRIVS),)))


def test_housekeeping_removes_the_files_compaction_replaced(services: Any) -> None:
    from spark_runner.compaction import CompactionType
    from tables.maintenance import run_maintenance

    _sql(services, "CREATE TABLE d (k INT, v VARCHAR(8)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    for i in range(3):
        _sql(services, f"INSERT INTO d VALUES ({i}, 'x'), ({i}, 'y')")
    answer = _sql(services, "SELECT * FROM d ORDER BY k, v")
    services.sql.compactor.compact("m", "d", CompactionType.BASE)
    data = services.catalog.load("m", "d").location / "data"
    assert len(list(data.rglob("*.parquet"))) == 4  # three replaced files, still referenced by old snapshots
    settings = services.settings
    run_maintenance(
        services.catalog,
        services.txns,
        staging=settings.resolved_data_dir / "staging",
        grace_seconds=0,
        snapshot_keep_seconds=0,
        now=time.time() + 10,
    )
    files = list(data.rglob("*.parquet"))
    assert [f.name.split("-")[0] for f in files] == ["r2_4"]  # only the compacted rowset is left
    assert _sql(services, "SELECT * FROM d ORDER BY k, v") == answer


def test_compaction_keeps_answers_of_sequence_mapping_and_late_added_columns(services: Any) -> None:
    from spark_runner.compaction import CompactionType

    _sql(
        services,
        "CREATE TABLE sm (k INT, a INT, b INT, s1 INT, s2 INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2 "
        'PROPERTIES ("enable_unique_key_merge_on_write" = "false", '
        '"sequence_mapping.s1" = "a", "sequence_mapping.s2" = "b")',
    )
    for stmt in (
        "INSERT INTO sm (k, a, s1) VALUES (1, 10, 5), (2, 20, 1)",
        "INSERT INTO sm (k, b, s2) VALUES (1, 100, 3)",
        "INSERT INTO sm (k, a, s1) VALUES (1, 11, 5), (2, 21, 0)",  # equal sequence: later wins; lower: loses
        "INSERT INTO sm (k, b, s2) VALUES (1, 101, 2), (2, 200, 9)",
    ):
        _sql(services, stmt)
    answer = _sql(services, "SELECT * FROM sm ORDER BY k")
    assert answer == [[1, 11, 100, 5, 3], [2, 20, 200, 1, 9]]
    rowsets = services.catalog.load("m", "sm").rowsets()
    services.sql.compactor.compact("m", "sm", CompactionType.CUMULATIVE, rowsets=rowsets[1:3])
    assert _sql(services, "SELECT * FROM sm ORDER BY k") == answer
    services.sql.compactor.compact("m", "sm", CompactionType.BASE)
    assert _sql(services, "SELECT * FROM sm ORDER BY k") == answer

    # rows loaded before ADD COLUMN read its DEFAULT, and a SUM adds those defaults up, compacted or not
    _sql(services, "CREATE TABLE ag (k INT, n INT SUM) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    _sql(services, "INSERT INTO ag VALUES (1, 1)")
    _sql(services, "INSERT INTO ag VALUES (1, 1)")
    _sql(services, 'ALTER TABLE ag ADD COLUMN m INT SUM DEFAULT "5"')
    assert _sql(services, "SELECT * FROM ag") == [[1, 2, 10]]
    services.sql.compactor.compact("m", "ag", CompactionType.BASE)
    assert _sql(services, "SELECT * FROM ag") == [[1, 2, 10]]
    _sql(services, "INSERT INTO ag VALUES (1, 1, 1)")
    assert _sql(services, "SELECT * FROM ag") == [[1, 3, 11]]
