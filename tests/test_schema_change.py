"""Sequence mapping and light schema change: the worked example of 000_0c520fff6485a702.txt as printed,
ALTER TABLE ADD / DROP / RENAME / MODIFY COLUMN, SHOW ALTER TABLE COLUMN, SHOW CREATE TABLE, and loads racing
schema changes."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DorisClient, assert_doris_result

SEED_000 = Path(__file__).resolve().parent / "data" / "seeds" / "000_0c520fff6485a702.txt"
CSV = {"column_separator": ","}


def _seed_session() -> list[tuple[str, list[list[str]] | None]]:
    """The seed's statements in order, each with the table printed after it (cells as text), if any."""
    steps: list[tuple[str, list[list[str]] | None]] = []
    lines = SEED_000.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("CREATE TABLE"):
            stmt = [line]
            while lines[i] != ");":
                i += 1
                stmt.append(lines[i])
            steps.append(("\n".join(stmt).rstrip(";"), None))
        elif line.startswith("MySQL > "):
            steps.append((line[len("MySQL > ") :].rstrip(";"), None))
        elif line.startswith("| ") and steps and steps[-1][1] is None and not steps[-1][0].startswith("CREATE"):
            table: list[list[str]] = []
            while lines[i].startswith("|") or lines[i].startswith("+"):
                if lines[i].startswith("| "):
                    table.append([cell.strip() for cell in lines[i].strip().strip("|").split("|")])
                i += 1
            steps[-1] = (steps[-1][0], table[1:])  # drop the header row
            continue
        i += 1
    return steps


def _as_text(value: Any) -> str:
    return "NULL" if value is None else str(value)


def test_seed_000_sequence_mapping_example_prints_the_seed_tables(doris: DorisClient, db: str) -> None:
    steps = _seed_session()
    creates = [s for s, _ in steps if s.startswith("CREATE TABLE")]
    assert len(creates) == 2 and len(steps) == 26, steps  # the parse found the whole session
    checked = 0
    for stmt, printed in steps:
        if stmt.startswith("CREATE TABLE") and stmt is creates[1]:
            doris.sql(db, "DROP TABLE upsert_test")  # both parts create `upsert_test`
        if printed is None:
            doris.sql(db, stmt)
            continue
        got = [[_as_text(v) for v in row] for row in doris.rows(db, stmt)]
        assert got == printed, stmt
        checked += 1
    assert checked == 13


def test_add_column_default_drop_and_readd_never_brings_old_values_back(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2")
    doris.sql(db, "INSERT INTO t VALUES (1, 10), (2, 20)")
    doris.sql(db, "ALTER TABLE t ADD COLUMN n VARCHAR(8) NOT NULL DEFAULT 'dflt' AFTER k")
    assert doris.rows(db, "SELECT * FROM t ORDER BY k") == [[1, "dflt", 10], [2, "dflt", 20]]
    assert_doris_result(doris.stream_load(db, "t", "3,x,30\n", headers=CSV), loaded=1)
    doris.sql(db, "INSERT INTO t (k, v) VALUES (4, 40)")
    assert doris.rows(db, "SELECT k, n FROM t ORDER BY k") == [[1, "dflt"], [2, "dflt"], [3, "x"], [4, "dflt"]]

    doris.sql(db, "ALTER TABLE t DROP COLUMN n")
    assert doris.rows(db, "SELECT * FROM t ORDER BY k") == [[1, 10], [2, 20], [3, 30], [4, 40]]
    doris.sql(db, "ALTER TABLE t ADD COLUMN n VARCHAR(8) NULL")
    assert doris.rows(db, "SELECT k, n FROM t ORDER BY k") == [[1, None], [2, None], [3, None], [4, None]]

    doris.sql(db, "ALTER TABLE t RENAME COLUMN v val")
    assert doris.rows(db, "SELECT k, val FROM t WHERE k = 3") == [[3, 30]]
    doris.sql(db, "ALTER TABLE t MODIFY COLUMN val BIGINT")
    doris.sql(db, "INSERT INTO t (k, val) VALUES (5, 5000000000)")
    assert doris.rows(db, "SELECT k, val FROM t WHERE k IN (3, 5) ORDER BY k") == [[3, 30], [5, 5000000000]]
    assert [r[:2] for r in doris.rows(db, "DESC t")] == [["k", "int"], ["val", "bigint"], ["n", "varchar(8)"]]

    jobs = doris.rows(db, "SHOW ALTER TABLE COLUMN")
    assert len(jobs) == 5 and {r[1] for r in jobs} == {"t"} and {r[9] for r in jobs} == {"FINISHED"}


@pytest.mark.parametrize(
    "stmt, message",
    [
        ("ALTER TABLE t MODIFY COLUMN v TINYINT", "Can not change int to tinyint"),
        ("ALTER TABLE t MODIFY COLUMN v VARCHAR(10)", "Can not change int to varchar(10)"),
        ("ALTER TABLE t MODIFY COLUMN k BIGINT", "Can not modify distribution column[k]. index[t]"),
        ("ALTER TABLE t DROP COLUMN k", "Can not drop key column in Unique data model table"),
        ("ALTER TABLE t DROP COLUMN nope", "Column does not exists: nope"),
        ("ALTER TABLE t ADD COLUMN v INT", "Can not add column which already exists in base table: v"),
        ("ALTER TABLE t ADD COLUMN w INT NOT NULL", "it is NOT NULL and has no default value"),
        ("ALTER TABLE t ADD COLUMN w INT SUM", "Can not assign aggregation method on column in Unique data model"),
        ("ALTER TABLE t RENAME COLUMN v k", "Column name[k] is already used"),
        ("ALTER TABLE t ENABLE FEATURE 'NOPE'", "Unknown feature: NOPE"),
    ],
)
def test_schema_change_errors_change_nothing(doris: DorisClient, db: str, stmt: str, message: str) -> None:
    doris.sql(db, "CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(db, "INSERT INTO t VALUES (1, 10)")
    assert message in doris.sql_error(db, stmt)
    assert doris.rows(db, "SELECT * FROM t") == [[1, 10]]
    assert doris.rows(db, "SHOW ALTER TABLE COLUMN") == []


SEQ_MAP = """CREATE TABLE m (a BIGINT, b INT, c INT, d INT, e INT, s1 INT, s2 INT)
UNIQUE KEY(a, b) DISTRIBUTED BY HASH(a, b) BUCKETS 2
PROPERTIES ("enable_unique_key_merge_on_write" = "false", "sequence_mapping.s1" = "c,d", "sequence_mapping.s2" = "e")"""


@pytest.mark.parametrize(
    "stmt, message",
    [
        ("ALTER TABLE m RENAME COLUMN c cc", "Rename column is not supported on a table with sequence mapping"),
        ("ALTER TABLE m MODIFY COLUMN s1 BIGINT", "The type of sequence column s1 can not be changed"),
        ("ALTER TABLE m DROP COLUMN s1", "Can not drop sequence column [s1]: it still orders c, d"),
        ("ALTER TABLE m ADD COLUMN f INT", "The columns are not equal between the schema and prop"),
        (
            "ALTER TABLE m ADD COLUMN f INT PROPERTIES ('sequence_mapping.s1' = 'f')",
            "The mapping of sequence column [s1] can not be changed",
        ),
        (
            "ALTER TABLE m ENABLE FEATURE 'SEQUENCE_LOAD' WITH PROPERTIES ('function_column.sequence_type' = 'int')",
            "column group sequence and sequence column can't apply to both",
        ),
        ("ALTER TABLE m ENABLE FEATURE 'BATCH_DELETE'", "sequence mapping tables do not support batch delete"),
    ],
)
def test_sequence_mapping_rules_after_creation(doris: DorisClient, db: str, stmt: str, message: str) -> None:
    doris.sql(db, SEQ_MAP)
    assert message in doris.sql_error(db, stmt)


def test_sequence_mapping_refuses_batch_delete_loads(doris: DorisClient, db: str) -> None:
    doris.sql(db, SEQ_MAP)
    for headers in ({"merge_type": "DELETE"}, {"merge_type": "MERGE", "delete": "c = 1"}):
        assert_doris_result(
            doris.stream_load(db, "m", "1,1,1,1,1,1,1\n", headers={**CSV, **headers}),
            status="Fail",
            message_contains="load by MERGE or DELETE need to upgrade table to support batch delete.",
        )
    assert "Unknown column '__DORIS_DELETE_SIGN__'" in doris.sql_error(
        db, "INSERT INTO m (a, b, __DORIS_DELETE_SIGN__) VALUES (1, 1, 1)"
    )


def test_show_create_table_recreates_the_table_as_it_now_is(doris: DorisClient, db: str) -> None:
    doris.sql(db, SEQ_MAP)
    doris.sql(
        db,
        "ALTER TABLE m ADD COLUMN (f VARCHAR(4) NULL DEFAULT 'z' COMMENT 'new', s3 BIGINT) "
        "PROPERTIES ('sequence_mapping.s3' = 'f')",
    )
    doris.sql(db, "ALTER TABLE m DROP COLUMN e")
    [[name, ddl]] = doris.rows(db, "SHOW CREATE TABLE m")
    assert name == "m" and '"sequence_mapping.s3" = "f"' in ddl and '"sequence_mapping.s2" = ""' in ddl
    doris.sql(db, "CREATE DATABASE copy_" + db)
    doris.sql("copy_" + db, ddl)
    assert doris.rows("copy_" + db, "DESC m") == doris.rows(db, "DESC m")
    assert doris.rows("copy_" + db, "SHOW CREATE TABLE m") == [[name, ddl]]
    doris.sql(db, "DROP DATABASE copy_" + db)


def test_enable_sequence_load_then_loads_follow_the_sequence(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE s (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    assert_doris_result(doris.stream_load(db, "s", "1,a\n2,b\n", headers=CSV), loaded=2)
    doris.sql(
        db, 'ALTER TABLE s ENABLE FEATURE "SEQUENCE_LOAD" WITH PROPERTIES ("function_column.sequence_type" = "Date")'
    )
    doris.sql(db, 'ALTER TABLE s ENABLE FEATURE "BATCH_DELETE"')
    headers = {**CSV, "columns": "k,v,d", "function_column.sequence_col": "d"}
    assert_doris_result(doris.stream_load(db, "s", "1,new,2024-01-02\n", headers=headers), loaded=1)
    assert_doris_result(doris.stream_load(db, "s", "1,old,2024-01-01\n", headers=headers), loaded=1)
    assert_doris_result(
        doris.stream_load(db, "s", "2,x\n", headers=CSV),
        status="Fail",
        message_contains="need to specify the sequence column",
    )
    rows = doris.rows(db, "SET show_hidden_columns = true; SELECT k, v, __DORIS_SEQUENCE_COL__ FROM s ORDER BY k")
    assert rows == [[1, "new", "2024-01-02"], [2, "b", None]]


def test_loads_racing_schema_changes_land_whole_or_fail_cleanly(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE r (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2")
    landed: dict[int, int] = {}
    failures: list[str] = []
    stop = threading.Event()

    def loader(worker: int) -> None:
        n = 0
        while not stop.is_set():
            key = worker * 1000 + n
            body = doris.stream_load(db, "r", f"{key},{key * 2}\n", headers={**CSV, "columns": "k,v"}).json()
            if body["Status"] == "Success":
                landed[key] = key * 2
            else:
                failures.append(body["Message"])
            n += 1

    threads = [threading.Thread(target=loader, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(6):
            doris.sql(db, f"ALTER TABLE r ADD COLUMN c{i} INT DEFAULT '{i}'")
            if i % 2:
                doris.sql(db, f"ALTER TABLE r DROP COLUMN c{i - 1}")
        # a load that overlapped every ALTER failed cleanly; the table keeps taking loads once they are done
        settled = len(landed)
        deadline = time.monotonic() + 60
        while len(landed) == settled and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert landed, "some loads must land"
    assert all("schema of table r changed" in m for m in failures), failures
    rows = doris.rows(db, "SELECT k, v, c1, c3, c5 FROM r ORDER BY k")
    assert [[k, v] for k, v, *_ in rows] == [[k, landed[k]] for k in sorted(landed)]
    # rows loaded before an ADD read its DEFAULT, rows loaded after it got the DEFAULT as an unlisted column;
    # a load planned before the ADD that committed after it would show NULL here
    assert [r[2:] for r in rows] == [[1, 3, 5]] * len(rows)


def _held_load(doris: DorisClient, db: str, label: str, body: str, headers: dict[str, str]) -> tuple[Any, Any]:
    """A stream load into `db.t` whose body stops after its first byte until `release` is set: the server has
    planned it and claimed its label (PREPARE) when this returns. Returns (release, the reply's future)."""
    release = threading.Event()

    def chunks() -> Any:
        yield body[:1].encode()
        release.wait(60)
        yield body[1:].encode()

    pool = ThreadPoolExecutor(1)
    reply = pool.submit(lambda: doris.stream_load(db, "t", chunks(), {**CSV, **headers, "label": label}).json())
    pool.shutdown(wait=False)
    deadline = time.monotonic() + 30
    while doris.http.get(f"/api/{db}/get_load_state", params={"label": label}).json()["data"] != "PREPARE":
        assert time.monotonic() < deadline, "the load was not planned"
        time.sleep(0.05)
    time.sleep(0.3)  # its plan is made just after its label is claimed
    return release, reply


def test_a_load_meeting_a_schema_change_is_planned_again_against_it(doris: DorisClient, db: str) -> None:
    """A schema change that commits while a load runs: the load is planned again against the new schema and
    loads as if it had come after the change (an added column takes its default), unless it now reads its input
    otherwise (no `columns`: its fields map to the table's columns) or is refused now; those fail cleanly
    as before and load nothing (Doris lands loads racing a light schema change; ours either land as planned now or
    fail whole)."""
    doris.sql(db, "CREATE TABLE t (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    release, reply = _held_load(doris, db, "named", "1,a\n", {"columns": "k,v"})
    doris.sql(db, "ALTER TABLE t ADD COLUMN c INT DEFAULT '7'")
    release.set()
    assert_doris_result(reply.result(), loaded=1)
    assert doris.rows(db, "SELECT k, v, c FROM t") == [[1, "a", 7]]

    release, reply = _held_load(doris, db, "positional", "2,b,3\n", {})  # fields mapped to k, v, c
    doris.sql(db, "ALTER TABLE t ADD COLUMN d INT DEFAULT '8'")
    release.set()
    assert_doris_result(reply.result(), status="Fail", message_contains="schema of table t changed")

    release, reply = _held_load(doris, db, "dropped", "3,c,4\n", {"columns": "k,v,c"})
    doris.sql(db, "ALTER TABLE t DROP COLUMN c")
    release.set()
    assert_doris_result(reply.result(), loaded=1)  # `c` names no column now: its field is skipped, as Doris does
    assert doris.rows(db, "SELECT k, v, d FROM t ORDER BY k") == [[1, "a", 8], [3, "c", 8]]
    state = doris.http.get(f"/api/{db}/get_load_state", params={"label": "positional"}).json()["data"]
    assert state == "ABORTED"


def test_a_distribution_column_keeps_its_type_and_stays(doris: DorisClient, db: str) -> None:
    """A row's bucket is the hash of its distribution columns' values as typed: widening one would send the
    values stored before to other buckets than reads and key lookups look in (`WHERE v = 8` would miss a stored
    row), so, as in Doris, a distribution column is neither modified nor dropped (here a duplicate table's value
    column)."""
    doris.sql(db, "CREATE TABLE d (k INT, v INT, w INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(v) BUCKETS 4")
    doris.sql(db, "INSERT INTO d VALUES (1, 8, 1), (2, 9, 2)")
    assert doris.sql_error(db, "ALTER TABLE d MODIFY COLUMN v BIGINT").endswith(
        "Can not modify distribution column[v]. index[d]"
    )
    assert doris.sql_error(db, "ALTER TABLE d DROP COLUMN v").endswith(
        "Distribution column[v] cannot be dropped. index[d]"
    )
    doris.sql(db, "ALTER TABLE d MODIFY COLUMN w BIGINT")  # another column widens as before
    assert doris.rows(db, "SELECT k, v, w FROM d WHERE v = 8") == [[1, 8, 1]]
