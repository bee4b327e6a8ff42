"""Issue 20: partitioned tables (`tables.partitions`, `sql.partition_ddl`).

RANGE and LIST partitions in CREATE TABLE with Doris's syntax and errors; every row stored with its partition's id
in `__DORIS_PARTITION__`, an identity field of the Iceberg partition spec, so each data file holds one partition;
loads route rows to their partitions and filter the rows no partition holds (`no partition for this tuple`), or
that are outside the partitions a load names (`partitions` header).
"""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import httpx
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tests.foreign_readers import as_reply, duckdb_rows, load_table, pyiceberg_rows
from tests.helpers import AUTH, DorisClient, assert_doris_result
from tests.test_broker_load import wait_for_job

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
    for name in ("`p x`", "`1p`", "`p/../q`"):
        bad = doris.sql_error(
            db, f"CREATE TABLE e (k INT) DUPLICATE KEY(k) PARTITION BY RANGE(k) (PARTITION {name} VALUES LESS THAN (1))"
        )
        assert bad.endswith(f"Incorrect partition name '{name.strip('`')}'"), bad


def test_show_partitions_and_show_create_table_recreate_the_table(doris: DorisClient, db: str) -> None:
    doris.sql(db, DAILY)
    assert_doris_result(_load(doris, db, "t", ["2024-01-02,1,a,1", "2024-01-02,2,b,1"]))
    assert_doris_result(_load(doris, db, "t", ["2024-01-03,3,c,1"]))
    names = [c["name"] for c in doris.sql(db, "SHOW PARTITIONS FROM t")["meta"]]
    rows = doris.rows(db, "SHOW PARTITIONS FROM t")
    by_name = {r[1]: r for r in rows}
    assert list(by_name) == ["p_old", "p_20240101", "p_20240102", "p_20240103"]
    assert by_name["p_20240102"][6] == "[types: [DATEV2]; keys: [2024-01-02]; ..types: [DATEV2]; keys: [2024-01-03]; )"
    assert by_name["p_old"][6] == "[types: [DATEV2]; keys: [0000-01-01]; ..types: [DATEV2]; keys: [2024-01-01]; )"
    # VisibleVersion: the last load that touched the partition; an untouched one is at 1
    versions = {name: int(r[2]) for name, r in by_name.items()}
    assert versions["p_old"] == versions["p_20240101"] == 1
    assert 1 < versions["p_20240102"] < versions["p_20240103"]
    assert by_name["p_20240102"][5] == "d" and int(by_name["p_20240102"][-1]) == 2
    assert names[:3] == ["PartitionId", "PartitionName", "VisibleVersion"] and names[-1] == "RowCount"

    created = doris.rows(db, "SHOW CREATE TABLE t")[0][1]
    assert "PARTITION BY RANGE(`d`)" in created
    assert 'PARTITION p_20240101 VALUES [("2024-01-01"), ("2024-01-02"))' in created
    doris.sql(db, created.replace("CREATE TABLE `t`", "CREATE TABLE `t2`"))
    assert doris.rows(db, "SHOW CREATE TABLE t2")[0][1] == created.replace("CREATE TABLE `t`", "CREATE TABLE `t2`")
    assert [r[1] for r in doris.rows(db, "SHOW PARTITIONS FROM t2")] == list(by_name)
    # an unpartitioned table is one partition named as the table
    doris.sql(db, "CREATE TABLE u (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    assert [r[1] for r in doris.rows(db, "SHOW PARTITIONS FROM u")] == ["u"]


def test_add_drop_and_truncate_partitions(doris: DorisClient, db: str, server_settings: Any) -> None:
    doris.sql(db, DAILY)
    lines = ["2023-06-01,1,old,1", "2024-01-01,2,a,1", "2024-01-02,3,b,1", "2024-01-03,4,c,1"]
    assert_doris_result(_load(doris, db, "t", lines))
    # a new partition takes rows it did not before
    late = _load(doris, db, "t", ["2024-01-04,5,d,1"])
    assert late["Status"] == "Fail"
    doris.sql(db, 'ALTER TABLE t ADD PARTITION p_20240104 VALUES LESS THAN ("2024-01-05")')
    assert_doris_result(_load(doris, db, "t", ["2024-01-04,5,d,1"]))
    overlap = doris.sql_error(db, 'ALTER TABLE t ADD PARTITION p_x VALUES [("2024-01-03"), ("2024-01-10"))')
    assert "is intersected with range" in overlap
    assert doris.sql_error(db, "ALTER TABLE t DROP PARTITION p_nope").endswith("Error in list of partitions to p_nope")
    doris.sql(db, "ALTER TABLE t DROP PARTITION IF EXISTS p_nope")

    data_dir = server_settings.resolved_data_dir
    before = load_table(data_dir, db, "t")
    snapshots = len(before.metadata.snapshots)
    doris.sql(db, "ALTER TABLE t DROP PARTITION p_20240102")
    after = load_table(data_dir, db, "t")
    assert len(after.metadata.snapshots) == snapshots + 1  # the files go in one commit with the definition
    assert doris.rows(db, "SELECT k FROM t ORDER BY k") == [[1], [2], [4], [5]]
    assert pyiceberg_rows(data_dir, db, "t") == as_reply(doris.rows(db, "SELECT * FROM t ORDER BY d, k"))
    assert "p_20240102" not in [r[1] for r in doris.rows(db, "SHOW PARTITIONS FROM t")]
    dropped = _load(doris, db, "t", ["2024-01-02,9,z,1"])
    assert dropped["Status"] == "Fail" and "too many filtered rows" in dropped["Message"]

    doris.sql(db, "TRUNCATE TABLE t PARTITION (p_old, p_20240103)")
    assert doris.rows(db, "SELECT k FROM t ORDER BY k") == [[2], [5]]
    assert "Partition does not exist: p_nope" in doris.sql_error(db, "TRUNCATE TABLE t PARTITION (p_nope)")
    assert_doris_result(_load(doris, db, "t", ["2023-06-01,1,back,1"]))
    assert doris.rows(db, "SELECT k, v FROM t ORDER BY k") == [[1, "back"], [2, "a"], [5, "d"]]


def test_select_from_partitions_and_pruning_by_the_partition_column(
    doris: DorisClient, db: str, server_settings: Any
) -> None:
    doris.sql(db, DAILY)
    lines = ["2023-06-01,1,old,1", "2024-01-01,2,a,1", "2024-01-02,3,b,1", "2024-01-03,4,c,1"]
    assert_doris_result(_load(doris, db, "t", lines))
    assert doris.rows(db, "SELECT k FROM t PARTITION (p_20240102) ORDER BY k") == [[3]]
    assert doris.rows(db, "SELECT k FROM t PARTITION (p_old, p_20240103) ORDER BY k") == [[1], [4]]
    assert "Unknown partition 'p_nope' in table 't'" in doris.sql_error(db, "SELECT * FROM t PARTITION (p_nope)")
    doris.sql(db, "INSERT INTO t PARTITION (p_20240101) VALUES ('2024-01-01', 7, 'i', 1)")
    assert "filtered" in doris.sql_error(db, "INSERT INTO t PARTITION (p_20240101) VALUES ('2024-01-02', 8, 'i', 1)")

    # pruning: with the files of p_20240103 gone from the disk, a query its filter keeps away still answers
    table = load_table(server_settings.resolved_data_dir, db, "t")
    ids = {r[1]: int(r[0]) for r in doris.rows(db, "SHOW PARTITIONS FROM t")}
    for f in table.inspect.files().to_pylist():
        if f["partition"]["__DORIS_PARTITION__"] == ids["p_20240103"]:
            Path(f["file_path"].removeprefix("file://")).unlink()
    pruned = {
        "d = '2024-01-02'": [[3]],
        "d < '2024-01-03'": [[1], [2], [3], [7]],
        "d BETWEEN '2024-01-01' AND '2024-01-02' AND k > 0": [[2], [3], [7]],
        "d IN ('2023-06-01', '2024-01-01')": [[1], [2], [7]],
        "'2024-01-02' >= d AND d > '2023-12-31'": [[2], [3], [7]],
    }
    for where, expected in pruned.items():
        assert doris.rows(db, f"SELECT k FROM t WHERE {where} ORDER BY k") == expected, where
    assert doris.sql_raw(db, "SELECT k FROM t WHERE d >= '2024-01-02'")["code"] != 0  # reads the lost files


def test_delete_from_partitions_and_show_delete(doris: DorisClient, db: str) -> None:
    # the seed 004 example, verbatim, on a table made for it
    doris.sql(
        db,
        """CREATE TABLE example_table (event_day INT, event_key INT, siteid INT) DUPLICATE KEY(event_day, event_key)
        PARTITION BY RANGE(event_day) (
            PARTITION p202009 VALUES LESS THAN ("20201001"), PARTITION p202010 VALUES LESS THAN ("20201101"))
        DISTRIBUTED BY HASH(event_day) BUCKETS 2""",
    )
    rows = ["20200930,1000,1", "20200930,999,2", "20201001,1001,3", "20201005,1002,4", "20201006,7,5"]
    assert_doris_result(_load(doris, db, "example_table", rows))
    doris.sql(db, "DELETE FROM example_table WHERE event_day < 20201001 AND event_key != 1000")
    doris.sql(db, "DELETE FROM example_table PARTITION p202010 WHERE event_key in (1000, 1001, 1002, 1003)")
    assert doris.rows(db, "SELECT event_day, event_key FROM example_table ORDER BY event_key") == [
        [20201006, 7],
        [20200930, 1000],
    ]
    shown = [[r[0], r[1], r[3]] for r in doris.rows(db, f"SHOW DELETE FROM {db}")]
    assert shown == [
        ["example_table", "p202009", 'event_day LT "20201001" AND event_key NE "1000"'],
        ["example_table", "p202010", 'event_key IN ("1000", "1001", "1002", "1003")'],
    ]
    refused = doris.sql_error(db, "DELETE FROM example_table WHERE siteid = 1")
    assert "You should specify partition in delete stmt, or set delete_without_partition to true" in refused
    doris.sql(db, "SET delete_without_partition = true; DELETE FROM example_table WHERE siteid = 5")
    assert doris.rows(db, "SELECT event_key FROM example_table") == [[1000]]

    # a unique table: the markers of the named partition only
    doris.sql(db, DAILY)
    assert_doris_result(_load(doris, db, "t", ["2024-01-01,1,a,1", "2024-01-02,1,b,1", "2024-01-03,1,c,1"]))
    doris.sql(db, "DELETE FROM t PARTITION (p_20240101, p_20240103) WHERE k = 1")
    assert doris.rows(db, "SELECT d, v FROM t") == [["2024-01-02", "b"]]


def test_broker_load_into_named_partitions(doris: DorisClient, db: str, server_settings: Any) -> None:
    doris.sql(db, DAILY)
    files = Path(server_settings.broker_allowed_roots[0]) / uuid.uuid4().hex[:12]
    files.mkdir()
    (files / "days.csv").write_text("2024-01-01,1,a,1\n2024-01-02,2,b,1\n2024-01-03,3,c,1\n")
    doris.sql(
        db,
        f"""LOAD LABEL {db}.by_partition (
            DATA INFILE("{files}/days.csv") INTO TABLE t PARTITION (p_20240101, p_20240103)
            COLUMNS TERMINATED BY "," (d, k, v, s)
        ) PROPERTIES ("max_filter_ratio" = "0.5")""",
    )
    job = wait_for_job(doris, db, "by_partition")
    assert job["State"] == "FINISHED", job
    assert doris.rows(db, "SELECT k FROM t ORDER BY k") == [[1], [3]]


def test_a_year_of_daily_partitions_loaded_in_one_stream_load(doris: DorisClient, db: str) -> None:
    doris.sql(
        db,
        """CREATE TABLE y (d DATE, k INT, v INT) UNIQUE KEY(d, k)
        PARTITION BY RANGE(d) (FROM ("2024-01-01") TO ("2025-01-01") INTERVAL 1 DAY)
        DISTRIBUTED BY HASH(k) BUCKETS 1""",
    )
    start = dt.date(2024, 1, 1)
    days = [start + dt.timedelta(days=i) for i in range(366)]
    lines = [f"{day.isoformat()},{k},{i * 10 + k}" for i, day in enumerate(days) for k in range(3)]
    assert_doris_result(_load(doris, db, "y", lines), loaded=len(lines))
    partitions = doris.rows(db, "SHOW PARTITIONS FROM y")
    assert len(partitions) == 366 and {int(r[-1]) for r in partitions} == {3}
    assert partitions[59][1] == "p_20240229"
    assert doris.rows(db, "SELECT count(*), sum(v) FROM y") == [[1098, sum(i * 30 + 3 for i in range(366))]]
    assert doris.rows(db, "SELECT k, v FROM y WHERE d = '2024-02-29' ORDER BY k") == [[0, 590], [1, 591], [2, 592]]


def test_auto_partitions_are_created_by_the_loads_that_need_them(doris: DorisClient, db: str) -> None:
    doris.sql(
        db,
        """CREATE TABLE a (d DATE NOT NULL, k INT, v INT) UNIQUE KEY(d, k)
        AUTO PARTITION BY RANGE (date_trunc(`d`, 'month')) () DISTRIBUTED BY HASH(k) BUCKETS 2""",
    )
    assert doris.rows(db, "SHOW PARTITIONS FROM a") == []
    assert_doris_result(_load(doris, db, "a", ["2024-01-05,1,10", "2024-01-20,2,20", "2024-03-01,3,30"]))
    shown = {r[1]: r[6] for r in doris.rows(db, "SHOW PARTITIONS FROM a")}
    assert list(shown) == ["p20240101000000", "p20240301000000"]
    assert shown["p20240301000000"].endswith("keys: [2024-03-01]; ..types: [DATEV2]; keys: [2024-04-01]; )")
    # a failed load leaves no partition behind; a big load creates many at once
    failed = _load(doris, db, "a", ["2024-05-01,1,1", "not-a-date,2,2"])
    assert failed["Status"] == "Fail"
    assert len(doris.rows(db, "SHOW PARTITIONS FROM a")) == 2
    lines = [f"2023-{m:02d}-{d:02d},{d},{m}" for m in range(1, 13) for d in range(1, 29)]
    assert_doris_result(_load(doris, db, "a", lines), loaded=len(lines))
    assert len(doris.rows(db, "SHOW PARTITIONS FROM a")) == 14
    assert doris.rows(db, "SELECT count(*) FROM a WHERE d >= '2023-06-01' AND d < '2023-07-01'") == [[28]]
    created = doris.rows(db, "SHOW CREATE TABLE a")[0][1]
    assert "AUTO PARTITION BY RANGE (date_trunc(`d`, 'month'))" in created
    doris.sql(db, created.replace("CREATE TABLE `a`", "CREATE TABLE `a2`"))
    assert len(doris.rows(db, "SHOW PARTITIONS FROM a2")) == 14

    doris.sql(
        db,
        """CREATE TABLE l (city VARCHAR(20), k INT, v INT) UNIQUE KEY(city, k)
        AUTO PARTITION BY LIST (city) () DISTRIBUTED BY HASH(k) BUCKETS 1""",
    )
    assert_doris_result(_load(doris, db, "l", ["Paris,1,1", "New York,2,2", "Paris,3,3"]))
    assert_doris_result(_load(doris, db, "l", ["Paris,4,4", "Rome,5,5"]))
    shown = {r[1]: r[6] for r in doris.rows(db, "SHOW PARTITIONS FROM l")}
    assert list(shown) == ["pParis", "pNewYork", "pRome"] or sorted(shown) == ["pNewYork", "pParis", "pRome"]
    assert doris.rows(db, "SELECT k FROM l PARTITION (pParis) ORDER BY k") == [[1], [3], [4]]
    assert "AUTO RANGE PARTITION doesn't support NULL column" in doris.sql_error(
        db, "CREATE TABLE n (d DATE, k INT) DUPLICATE KEY(d) AUTO PARTITION BY RANGE (date_trunc(d, 'day')) ()"
    )


def test_json_group_commit_and_two_phase_loads_route_rows(doris: DorisClient, db: str) -> None:
    doris.sql(db, DAILY.replace("PROPERTIES (", 'PROPERTIES ("group_commit_mode" = "sync_mode", ', 1))
    json_rows = '[{"d": "2024-01-01", "k": 1, "v": "j", "s": 1}, {"d": "2025-01-01", "k": 2, "v": "x", "s": 1}]'
    headers = {"format": "json", "strip_outer_array": "true", "max_filter_ratio": "0.5"}
    reply = doris.stream_load(db, "t", json_rows, headers=headers).json()
    assert (reply["Status"], reply["NumberLoadedRows"], reply["NumberFilteredRows"]) == ("Success", 1, 1), reply
    assert reply.get("GroupCommit") is True
    txn = doris.precommit(db, "t", b"2024-01-02,3,two,1\n", {"column_separator": ",", "label": "tp1"})
    assert doris.rows(db, "SELECT k FROM t ORDER BY k") == [[1]]
    doris.commit_txn(db, txn)
    assert doris.rows(db, "SELECT d, k FROM t PARTITION (p_20240102)") == [["2024-01-02", 3]]


def test_schema_changes_keep_the_partition_columns(doris: DorisClient, db: str) -> None:
    doris.sql(
        db,
        """CREATE TABLE s (k INT, d DATE, v INT) DUPLICATE KEY(k) PARTITION BY RANGE(d) (
            PARTITION p1 VALUES LESS THAN ("2024-01-01"), PARTITION p2 VALUES LESS THAN ("2025-01-01"))
        DISTRIBUTED BY HASH(k) BUCKETS 1""",
    )
    assert doris.sql_error(db, "ALTER TABLE s DROP COLUMN d").endswith("Partition column[d] cannot be dropped")
    assert doris.sql_error(db, "ALTER TABLE s MODIFY COLUMN d DATETIME").endswith("Can not modify partition column[d]")
    assert_doris_result(_load(doris, db, "s", ["1,2023-05-01,1", "2,2024-05-01,2"]))
    doris.sql(db, "ALTER TABLE s RENAME COLUMN d day")
    assert_doris_result(_load(doris, db, "s", ["3,2024-06-01,3"]))
    assert doris.rows(db, "SELECT k FROM s PARTITION (p2) ORDER BY k") == [[2], [3]]
    assert "PARTITION BY RANGE(`day`)" in doris.rows(db, "SHOW CREATE TABLE s")[0][1]


def test_show_partitions_filters_orders_and_limits_and_batches_add(doris: DorisClient, db: str) -> None:
    doris.sql(db, DAILY)
    doris.sql(db, 'ALTER TABLE t ADD PARTITIONS FROM ("2024-01-04") TO ("2024-01-07") INTERVAL 1 DAY')
    names = [r[1] for r in doris.rows(db, "SHOW PARTITIONS FROM t")]
    assert names[-3:] == ["p_20240104", "p_20240105", "p_20240106"]
    assert [r[1] for r in doris.rows(db, "SHOW PARTITIONS FROM t WHERE PartitionName = 'p_old'")] == ["p_old"]
    liked = doris.rows(db, "SHOW PARTITIONS FROM t WHERE PartitionName LIKE 'p_202401%' ORDER BY PartitionId DESC")
    assert [r[1] for r in liked] == list(reversed(names[1:]))
    assert [r[1] for r in doris.rows(db, "SHOW PARTITIONS FROM t ORDER BY PartitionName LIMIT 2 OFFSET 1")] == [
        "p_20240102",
        "p_20240103",
    ]


def test_aligned_partitions_are_an_iceberg_time_transform_foreign_readers_prune_by(
    doris: DorisClient, db: str, server_settings: Any
) -> None:
    doris.sql(
        db,
        """CREATE TABLE m (d DATE NOT NULL, k INT, v INT) UNIQUE KEY(d, k)
        AUTO PARTITION BY RANGE (date_trunc(`d`, 'month')) () DISTRIBUTED BY HASH(k) BUCKETS 1""",
    )
    assert_doris_result(_load(doris, db, "m", ["2024-01-05,1,1", "2024-02-10,2,2", "2024-02-11,3,3", "2024-03-01,4,4"]))
    data_dir = server_settings.resolved_data_dir
    table = load_table(data_dir, db, "m")
    assert [str(f.transform) for f in table.spec().fields] == ["identity", "identity", "month"]
    february = table.scan(row_filter="d >= '2024-02-01' and d < '2024-03-01'")
    assert len(list(february.plan_files())) == 1  # pruned by month(d): the other months' files are not read
    assert sorted(r["k"] for r in february.to_arrow().to_pylist()) == [2, 3]
    # a range that is not one month: the field goes (files keep theirs), every reader still answers the same
    doris.sql(db, 'ALTER TABLE m ADD PARTITION p_half VALUES [("2025-01-01"), ("2025-01-15"))')
    assert_doris_result(_load(doris, db, "m", ["2025-01-02,5,5", "2024-02-12,6,6"]))
    assert [str(f.transform) for f in load_table(data_dir, db, "m").spec().fields] == ["identity", "identity"]
    expected = doris.rows(db, "SELECT * FROM m ORDER BY d, k")
    assert [r[1] for r in expected] == [1, 2, 3, 6, 4, 5]
    assert pyiceberg_rows(data_dir, db, "m") == as_reply(expected)
    assert duckdb_rows(data_dir, db, "m") == as_reply(expected)


def test_list_partitions_prune_by_string_values(doris: DorisClient, db: str, server_settings: Any) -> None:
    doris.sql(
        db,
        """CREATE TABLE c (city VARCHAR(10), k INT, v INT) UNIQUE KEY(city, k) PARTITION BY LIST(city) (
            PARTITION p_fr VALUES IN ("Paris", "Lyon"), PARTITION p_it VALUES IN ("Rome")) DISTRIBUTED BY HASH(k)""",
    )
    assert_doris_result(_load(doris, db, "c", ["Paris,1,1", "Lyon,2,2", "Rome,3,3"]))
    ids = {r[1]: int(r[0]) for r in doris.rows(db, "SHOW PARTITIONS FROM c")}
    for f in load_table(server_settings.resolved_data_dir, db, "c").inspect.files().to_pylist():
        if f["partition"]["__DORIS_PARTITION__"] == ids["p_it"]:
            Path(f["file_path"].removeprefix("file://")).unlink()
    assert doris.rows(db, "SELECT k FROM c WHERE city IN ('Paris', 'Lyon') ORDER BY k") == [[1], [2]]
    assert doris.rows(db, "SELECT k FROM c WHERE city = 'Lyon'") == [[2]]
    assert doris.sql_raw(db, "SELECT k FROM c WHERE city = 'Rome'")["code"] != 0  # reads the lost file
