"""Issue 20: partitioned tables (`tables.partitions`, `sql.partition_ddl`).

RANGE and LIST partitions in CREATE TABLE with Doris's syntax and errors; every row stored with its partition's id
in `__DORIS_PARTITION__`, an identity field of the Iceberg partition spec, so each data file holds one partition;
loads route rows to their partitions and filter the rows no partition holds (`no partition for this tuple`), or
that are outside the partitions a load names (`partitions` header).
"""

from __future__ import annotations

from typing import Any

import httpx
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tests.foreign_readers import as_reply, duckdb_rows, load_table, pyiceberg_rows
from tests.helpers import AUTH, DorisClient, assert_doris_result

PARTITION = "__DORIS_PARTITION__"
DAILY = """CREATE TABLE t (d DATE, k INT, v VARCHAR(20), s INT) UNIQUE KEY(d, k)
PARTITION BY RANGE(d) (
    PARTITION p_old VALUES LESS THAN ("2024-01-01"),
    FROM ("2024-01-01") TO ("2024-01-04") INTERVAL 1 DAY
)
DISTRIBUTED BY HASH(k) BUCKETS 2 PROPERTIES ("function_column.sequence_col" = "s")"""


def _load(doris: DorisClient, db: str, table: str, lines: list[str], **headers: str) -> dict[str, Any]:
    body = "".join(f"{line}\n" for line in lines)
    reply: dict[str, Any] = doris.stream_load(db, table, body, headers={"column_separator": ",", **headers}).json()
    return reply


def test_range_partitions_route_rows_and_filter_those_no_partition_holds(
    doris: DorisClient, db: str, server_settings: Any
) -> None:
    doris.sql(db, DAILY)
    rows = ["2023-12-30,1,old,1", "2024-01-01,2,a,1", "2024-01-02,3,b,1", "2024-01-03,4,c,1", "2024-01-03,5,c5,1"]
    reply = _load(doris, db, "t", [*rows, "2024-01-04,6,late,1"], max_filter_ratio="0.5")
    assert_doris_result(reply, loaded=5, filtered=1)
    errors = httpx.get(reply["ErrorURL"], auth=AUTH).text
    assert "no partition for this tuple" in errors
    # the same key in another partition is another row; within one, the sequence column decides
    assert_doris_result(_load(doris, db, "t", ["2024-01-02,2,b2,1", "2024-01-03,4,c_new,2", "2024-01-03,5,lost,0"]))
    expected = [
        ["2023-12-30", 1, "old", 1],
        ["2024-01-01", 2, "a", 1],
        ["2024-01-02", 2, "b2", 1],
        ["2024-01-02", 3, "b", 1],
        ["2024-01-03", 4, "c_new", 2],
        ["2024-01-03", 5, "c5", 1],
    ]
    assert doris.rows(db, "SELECT * FROM t ORDER BY d, k") == expected
    data_dir = server_settings.resolved_data_dir
    assert pyiceberg_rows(data_dir, db, "t") == as_reply(expected)
    assert duckdb_rows(data_dir, db, "t") == as_reply(expected)

    table = load_table(data_dir, db, "t")
    assert [f.name for f in table.spec().fields] == ["__DORIS_BUCKET__", PARTITION]
    ids = {}
    for f in table.inspect.files().to_pylist():
        if f["content"] != 0:
            continue
        stored = pq.read_table(f["file_path"].removeprefix("file://"), columns=["d", PARTITION])
        assert pc.unique(stored.column(PARTITION)).to_pylist() == [f["partition"][PARTITION]]  # one per file
        for day in stored.column("d").to_pylist():
            ids.setdefault(str(day), set()).add(f["partition"][PARTITION])
    assert all(len(v) == 1 for v in ids.values()) and len({min(v) for v in ids.values()}) == 4


def test_no_partition_rows_fail_a_strict_load_and_leave_nothing(doris: DorisClient, db: str) -> None:
    doris.sql(db, DAILY)
    reply = _load(doris, db, "t", ["2024-01-01,1,a,1", "2025-01-01,2,b,1"])
    assert reply["Status"] == "Fail"
    assert "too many filtered rows" in reply["Message"]
    assert doris.rows(db, "SELECT count(*) FROM t") == [[0]]


def test_partitions_header_loads_only_the_named_partitions(doris: DorisClient, db: str) -> None:
    doris.sql(db, DAILY)
    lines = ["2024-01-01,1,a,1", "2024-01-02,2,b,1", "2024-01-03,3,c,1"]
    reply = _load(doris, db, "t", lines, partitions="p_20240101, p_20240103", max_filter_ratio="0.5")
    assert_doris_result(reply, loaded=2, filtered=1)
    assert doris.rows(db, "SELECT k FROM t ORDER BY k") == [[1], [3]]
    reply = _load(doris, db, "t", lines, partitions="p_nope")
    assert reply["Status"] == "Fail" and "Unknown partition 'p_nope' in table 't'" in reply["Message"]
    both = _load(doris, db, "t", lines, partitions="p_20240101", temporary_partitions="tp1")
    assert both["Status"] == "Fail" and "Can not specify both partitions and temporary partitions" in both["Message"]


def test_list_partitions_with_several_columns(doris: DorisClient, db: str) -> None:
    doris.sql(
        db,
        """CREATE TABLE l (city VARCHAR(10), k INT, v INT) UNIQUE KEY(city, k)
        PARTITION BY LIST(city, k) (
            PARTITION p_a VALUES IN (("Paris", 1), ("Paris", 2)),
            PARTITION p_b VALUES IN (("Rome", 1))
        ) DISTRIBUTED BY HASH(k) BUCKETS 1""",
    )
    reply = _load(doris, db, "l", ["Paris,1,10", "Paris,2,20", "Rome,1,30", "Rome,2,40"], max_filter_ratio="0.5")
    assert_doris_result(reply, loaded=3, filtered=1)
    assert doris.rows(db, "SELECT * FROM l ORDER BY city, k") == [["Paris", 1, 10], ["Paris", 2, 20], ["Rome", 1, 30]]


def test_partition_ddl_errors_are_dorises(doris: DorisClient, db: str) -> None:
    overlap = doris.sql_error(
        db,
        """CREATE TABLE e (k INT, v INT) DUPLICATE KEY(k) PARTITION BY RANGE(k) (
            PARTITION p1 VALUES [("0"), ("10")), PARTITION p2 VALUES [("5"), ("20"))) DISTRIBUTED BY HASH(k)""",
    )
    assert overlap.endswith(
        "Range [types: [INT]; keys: [5]; ..types: [INT]; keys: [20]; ) is intersected with range: "
        "[types: [INT]; keys: [0]; ..types: [INT]; keys: [10]; )"
    )
    not_key = doris.sql_error(
        db,
        """CREATE TABLE e (k INT, v INT) UNIQUE KEY(k) PARTITION BY RANGE(v) (PARTITION p1 VALUES LESS THAN (10))
        DISTRIBUTED BY HASH(k)""",
    )
    assert "unique table's partition column must be key column" in not_key
    duplicate = doris.sql_error(
        db,
        """CREATE TABLE e (k INT, v INT) DUPLICATE KEY(k) PARTITION BY RANGE(k) (
            PARTITION p1 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20)) DISTRIBUTED BY HASH(k)""",
    )
    assert duplicate.endswith("Duplicate partition name p1")
    missing = doris.sql_error(
        db, "CREATE TABLE e (k INT) DUPLICATE KEY(k) PARTITION BY RANGE(x) () DISTRIBUTED BY HASH(k)"
    )
    assert missing.endswith("Partition column[x] does not exist in column list.")
