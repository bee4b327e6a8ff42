"""Issue 20: temporary partitions (`ADD / DROP TEMPORARY PARTITION`, loads into them, `REPLACE PARTITION`).

A temporary partition's rows live in the table's companion Iceberg table (`tables.catalog.Catalog.temporary`):
no query of the table and no foreign reader of its Iceberg table sees them until `REPLACE PARTITION` moves their
files into the table, in one snapshot with the replaced partitions' files removed.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx

from tests.foreign_readers import as_reply, load_table, pyiceberg_rows
from tests.helpers import AUTH, DorisClient, assert_doris_result
from tests.test_broker_load import wait_for_job

MONTHS = """CREATE TABLE t (d DATE, k INT, v VARCHAR(20), s INT) UNIQUE KEY(d, k)
PARTITION BY RANGE(d) (
    PARTITION p1 VALUES [("2024-01-01"), ("2024-02-01")),
    PARTITION p2 VALUES [("2024-02-01"), ("2024-03-01")),
    PARTITION p3 VALUES [("2024-03-01"), ("2024-04-01"))
)
DISTRIBUTED BY HASH(k) BUCKETS 2 PROPERTIES ("function_column.sequence_col" = "s")"""


def _load(doris: DorisClient, db: str, table: str, lines: list[str], **headers: str) -> dict[str, Any]:
    body = "".join(f"{line}\n" for line in lines)
    reply: dict[str, Any] = doris.stream_load(db, table, body, headers={"column_separator": ",", **headers}).json()
    return reply


def _names(doris: DorisClient, db: str, what: str = "TEMPORARY PARTITIONS") -> list[str]:
    return [row[1] for row in doris.rows(db, f"SHOW {what} FROM t")]


def test_add_and_drop_temporary_partitions_with_dorises_checks(doris: DorisClient, db: str) -> None:
    doris.sql(db, MONTHS)
    # a temporary partition may overlap formal ones; overlaps are checked among temporary partitions alone
    doris.sql(db, 'ALTER TABLE t ADD TEMPORARY PARTITION tp1 VALUES [("2024-01-01"), ("2024-03-01"))')
    assert "is intersected with range" in doris.sql_error(
        db, 'ALTER TABLE t ADD TEMPORARY PARTITION tp2 VALUES [("2024-02-01"), ("2024-04-01"))'
    )
    # LESS THAN takes its lower bound from the temporary partitions
    doris.sql(db, 'ALTER TABLE t ADD TEMPORARY PARTITION tp2 VALUES LESS THAN ("2024-05-01")')
    assert doris.sql_error(db, 'ALTER TABLE t ADD TEMPORARY PARTITION p1 VALUES LESS THAN ("2025-01-01")').endswith(
        "Duplicate partition name p1"
    )
    assert doris.sql_error(db, 'ALTER TABLE t ADD PARTITION tp1 VALUES LESS THAN ("2025-01-01")').endswith(
        "Duplicate partition name tp1"
    )
    shown = doris.sql(db, "SHOW TEMPORARY PARTITIONS FROM t")
    assert [c["name"] for c in shown["meta"]] == [c["name"] for c in doris.sql(db, "SHOW PARTITIONS FROM t")["meta"]]
    ranges = {row[1]: row[6] for row in shown["data"]}
    assert ranges["tp2"] == "[types: [DATEV2]; keys: [2024-03-01]; ..types: [DATEV2]; keys: [2024-05-01]; )"
    assert _names(doris, db, "PARTITIONS") == ["p1", "p2", "p3"]
    # no schema change while the table has temporary partitions (Doris's SchemaChangeHandler)
    assert doris.sql_error(db, "ALTER TABLE t ADD COLUMN x INT").endswith(
        "Can not alter table when there are temp partitions in table"
    )
    assert doris.sql_error(db, "ALTER TABLE t DROP TEMPORARY PARTITION nope").endswith(
        "Error in list of partitions to nope"
    )
    doris.sql(db, "ALTER TABLE t DROP TEMPORARY PARTITION IF EXISTS nope")
    doris.sql(db, "ALTER TABLE t DROP TEMPORARY PARTITION tp1")
    assert _names(doris, db) == ["tp2"]
    doris.sql(db, "ALTER TABLE t DROP TEMPORARY PARTITION tp2")
    doris.sql(db, "ALTER TABLE t ADD COLUMN x INT")
    assert _names(doris, db) == []


def test_loads_into_temporary_partitions_stay_hidden_until_replace(
    doris: DorisClient, db: str, server_settings: Any
) -> None:
    doris.sql(db, MONTHS)
    assert_doris_result(_load(doris, db, "t", ["2024-01-05,1,old,5", "2024-01-06,2,old,5", "2024-02-05,3,feb,1"]))
    doris.sql(db, 'ALTER TABLE t ADD TEMPORARY PARTITION tp1 VALUES [("2024-01-01"), ("2024-02-01"))')
    lines = ["2024-01-05,1,new,1", "2024-01-07,4,new,1", "2024-02-07,5,feb,1"]
    reply = _load(doris, db, "t", lines, temporary_partitions="tp1", max_filter_ratio="0.5")
    assert_doris_result(reply, loaded=2, filtered=1)
    assert "no partition for this tuple" in httpx.get(reply["ErrorURL"], auth=AUTH).text
    # a second load into the temporary partition merges with the first (sequence column, then the later load)
    assert_doris_result(_load(doris, db, "t", ["2024-01-07,4,newer,1"], temporary_partitions="tp1"))
    doris.sql(db, "INSERT INTO t TEMPORARY PARTITION (tp1) VALUES ('2024-01-08', 6, 'ins', 1)")
    before = [["2024-01-05", 1, "old", 5], ["2024-01-06", 2, "old", 5], ["2024-02-05", 3, "feb", 1]]
    assert doris.rows(db, "SELECT * FROM t ORDER BY k") == before
    data_dir = server_settings.resolved_data_dir
    assert pyiceberg_rows(data_dir, db, "t") == as_reply(before)  # foreign readers see no temporary row
    temp = [["2024-01-05", 1, "new", 1], ["2024-01-07", 4, "newer", 1], ["2024-01-08", 6, "ins", 1]]
    assert doris.rows(db, "SELECT * FROM t TEMPORARY PARTITION (tp1) ORDER BY k") == temp
    assert doris.rows(db, "SELECT count(*) FROM t TEMPORARY PARTITION(tp1) WHERE k > 1") == [[2]]
    shown = {row[1]: row for row in doris.rows(db, "SHOW TEMPORARY PARTITIONS FROM t")}
    assert list(shown) == ["tp1"] and shown["tp1"][2] > 2  # VisibleVersion: its last load's

    doris.sql(db, "ALTER TABLE t REPLACE PARTITION (p1) WITH TEMPORARY PARTITION (tp1)")
    after = [*temp, ["2024-02-05", 3, "feb", 1]]
    after.sort(key=lambda r: r[1])
    assert doris.rows(db, "SELECT * FROM t ORDER BY k") == after
    assert pyiceberg_rows(data_dir, db, "t") == as_reply(after)
    assert _names(doris, db, "PARTITIONS") == ["p2", "p3", "p1"] and _names(doris, db) == []
    assert doris.rows(db, "SELECT k FROM t PARTITION (p1) ORDER BY k") == [[1], [4], [6]]
    # a later load wins over the replaced rows by the usual rules: an equal sequence goes to the later load
    assert_doris_result(_load(doris, db, "t", ["2024-01-05,1,later,1", "2024-01-07,4,lower,0", "2024-01-08,6,l6,1"]))
    assert doris.rows(db, "SELECT k, v FROM t PARTITION (p1) ORDER BY k") == [[1, "later"], [4, "newer"], [6, "l6"]]
    assert "Unknown partition 'tp1' in table 't'" in _load(doris, db, "t", lines, temporary_partitions="tp1")["Message"]
    both = _load(doris, db, "t", lines, partitions="p1", temporary_partitions="tp1")
    assert both["Status"] == "Fail" and "Can not specify both partitions and temporary partitions" in both["Message"]


def test_replace_partition_checks_ranges_and_names_as_doris(doris: DorisClient, db: str) -> None:
    doris.sql(db, MONTHS)
    doris.sql(db, 'ALTER TABLE t ADD TEMPORARY PARTITION tp1 VALUES [("2024-01-01"), ("2024-01-15"))')
    doris.sql(db, 'ALTER TABLE t ADD TEMPORARY PARTITION tp2 VALUES [("2024-01-15"), ("2024-03-01"))')
    doris.sql(db, 'ALTER TABLE t ADD TEMPORARY PARTITION tp3 VALUES [("2024-03-01"), ("2024-03-20"))')
    assert_doris_result(_load(doris, db, "t", ["2024-01-03,1,a,1", "2024-02-03,2,b,1"], temporary_partitions="tp1,tp2"))
    error = doris.sql_error(db, "ALTER TABLE t REPLACE PARTITION (p3) WITH TEMPORARY PARTITION (tp3)")
    assert "2 range lists are not stricly matched" in error
    error = doris.sql_error(
        db,
        'ALTER TABLE t REPLACE PARTITION (p2) WITH TEMPORARY PARTITION (tp3) PROPERTIES ("strict_range" = "false")',
    )
    assert error.endswith("conflicts with existing range")
    assert doris.sql_error(db, "ALTER TABLE t REPLACE PARTITION (p9) WITH TEMPORARY PARTITION (tp1)").endswith(
        "Partition[p9] does not exist"
    )
    assert doris.sql_error(db, "ALTER TABLE t REPLACE PARTITION (p1) WITH TEMPORARY PARTITION (tp9)").endswith(
        "Temp partition[tp9] does not exist"
    )
    assert doris.sql_error(db, "ALTER TABLE t REPLACE PARTITION (p1) WITH PARTITION (p2)").endswith(
        "Only support replace partitions with temp partitions"
    )
    unknown = "ALTER TABLE t REPLACE PARTITION (p1) WITH TEMPORARY PARTITION (tp1) PROPERTIES ('invalid' = 'x')"
    assert "Unknown properties" in doris.sql_error(db, unknown)
    # {[Jan, Mar)} is exactly {[Jan 1, Jan 15), [Jan 15, Mar)}; fewer partitions replace more: the temporary names
    doris.sql(db, "ALTER TABLE t REPLACE PARTITION (p1, p2) WITH TEMPORARY PARTITION (tp1, tp2)")
    assert _names(doris, db, "PARTITIONS") == ["p3", "p1", "p2"]
    doris.sql(
        db,
        "ALTER TABLE t REPLACE PARTITION (p3) WITH TEMPORARY PARTITION (tp3) "
        'PROPERTIES ("strict_range" = "false", "use_temp_partition_name" = "true")',
    )
    assert _names(doris, db, "PARTITIONS") == ["p1", "p2", "tp3"] and _names(doris, db) == []
    assert doris.rows(db, "SELECT k, v FROM t PARTITION (p2)") == [[2, "b"]]
    # a row of the range p3 had and tp3 has not now fits no partition
    reply = _load(doris, db, "t", ["2024-03-25,9,x,1"], max_filter_ratio="1")
    assert_doris_result(reply, loaded=0, filtered=1)


def test_list_temporary_partitions_broker_load_and_truncate(doris: DorisClient, db: str, server_settings: Any) -> None:
    doris.sql(
        db,
        """CREATE TABLE l (city VARCHAR(10), k INT, v INT) DUPLICATE KEY(city, k)
        PARTITION BY LIST(city) (PARTITION p_fr VALUES IN ("Paris", "Lyon"), PARTITION p_it VALUES IN ("Rome"))
        DISTRIBUTED BY HASH(k) BUCKETS 1""",
    )
    assert_doris_result(_load(doris, db, "l", ["Paris,1,1", "Lyon,2,2", "Rome,3,3"]))
    doris.sql(db, 'ALTER TABLE l ADD TEMPORARY PARTITION tp_fr VALUES IN ("Paris", "Lyon")')
    assert "is conflict" in doris.sql_error(db, 'ALTER TABLE l ADD TEMPORARY PARTITION tp_x VALUES IN ("Lyon")')
    files = Path(server_settings.broker_allowed_roots[0]) / uuid.uuid4().hex[:12]
    files.mkdir()
    (files / "fr.csv").write_text("Paris,10,10\nRome,11,11\n")
    doris.sql(
        db,
        f"""LOAD LABEL {db}.into_temporary (
            DATA INFILE("{files}/fr.csv") INTO TABLE l TEMPORARY PARTITION (tp_fr)
            COLUMNS TERMINATED BY "," (city, k, v)
        ) PROPERTIES ("max_filter_ratio" = "0.5")""",
    )
    assert wait_for_job(doris, db, "into_temporary")["State"] == "FINISHED"
    assert doris.rows(db, "SELECT k FROM l ORDER BY k") == [[1], [2], [3]]
    # a DELETE on the table reaches neither the temporary partition nor, after the swap, the rows it brings
    doris.sql(db, "DELETE FROM l PARTITION p_fr WHERE k > 0")
    assert doris.rows(db, "SELECT k FROM l ORDER BY k") == [[3]]
    assert doris.rows(db, "SELECT k FROM l TEMPORARY PARTITION (tp_fr)") == [[10]]
    assert "2 partition key lists are not matched" in doris.sql_error(
        db, "ALTER TABLE l REPLACE PARTITION (p_it) WITH TEMPORARY PARTITION (tp_fr)"
    )
    doris.sql(db, "ALTER TABLE l REPLACE PARTITION (p_fr) WITH TEMPORARY PARTITION (tp_fr)")
    assert doris.rows(db, "SELECT k FROM l ORDER BY k") == [[3], [10]]
    # TRUNCATE TABLE drops the temporary partitions and their files; DROP TABLE removes the companion with the table
    location = Path(load_table(server_settings.resolved_data_dir, db, "l").location().removeprefix("file://"))
    earlier = set((location / "temporary").iterdir())
    doris.sql(db, 'ALTER TABLE l ADD TEMPORARY PARTITION tp_it VALUES IN ("Rome")')  # a fresh companion
    assert_doris_result(_load(doris, db, "l", ["Rome,20,20"], temporary_partitions="tp_it"))
    (companion,) = set((location / "temporary").iterdir()) - earlier
    assert list(companion.glob("data/*/*.parquet"))
    doris.sql(db, "TRUNCATE TABLE l")
    assert _names_of(doris, db, "l") == [] and doris.rows(db, "SELECT count(*) FROM l") == [[0]]
    assert not companion.exists()
    assert "Unknown partition 'tp_it'" in _load(doris, db, "l", ["Rome,21,21"], temporary_partitions="tp_it")["Message"]
    doris.sql(db, 'ALTER TABLE l ADD TEMPORARY PARTITION tp_it VALUES IN ("Rome")')
    assert_doris_result(_load(doris, db, "l", ["Rome,22,22"], temporary_partitions="tp_it"))
    doris.sql(db, "DROP TABLE l")
    assert not location.exists()


def _names_of(doris: DorisClient, db: str, table: str) -> list[str]:
    return [row[1] for row in doris.rows(db, f"SHOW TEMPORARY PARTITIONS FROM {table}")]


def test_merge_on_read_rows_keep_their_order_after_replace(doris: DorisClient, db: str) -> None:
    """Rows of a merge-on-read table merge by (sequence, version) at read time: the moved rows' versions (the
    companion's) must stay below those of the table's later loads."""
    doris.sql(db, MONTHS.replace("PROPERTIES (", 'PROPERTIES ("enable_unique_key_merge_on_write" = "false", ', 1))
    doris.sql(db, 'ALTER TABLE t ADD TEMPORARY PARTITION tp1 VALUES [("2024-01-01"), ("2024-02-01"))')
    for n in range(4):  # the companion's versions run ahead of the table's
        assert_doris_result(_load(doris, db, "t", [f"2024-01-05,1,t{n},1"], temporary_partitions="tp1"))
    assert doris.rows(db, "SELECT v FROM t TEMPORARY PARTITION (tp1)") == [["t3"]]
    doris.sql(db, "ALTER TABLE t REPLACE PARTITION (p1) WITH TEMPORARY PARTITION (tp1)")
    assert doris.rows(db, "SELECT v FROM t") == [["t3"]]
    assert_doris_result(_load(doris, db, "t", ["2024-01-05,1,later,1"]))
    assert doris.rows(db, "SELECT v FROM t") == [["later"]]


def test_two_phase_load_into_a_temporary_partition(doris: DorisClient, db: str) -> None:
    doris.sql(db, MONTHS)
    doris.sql(db, 'ALTER TABLE t ADD TEMPORARY PARTITION tp1 VALUES [("2024-01-01"), ("2024-02-01"))')
    txn = doris.precommit(db, "t", b"2024-01-02,1,two,1\n", {"column_separator": ",", "temporary_partitions": "tp1"})
    assert doris.rows(db, "SELECT k FROM t TEMPORARY PARTITION (tp1)") == []
    doris.commit_txn(db, txn)
    assert doris.rows(db, "SELECT k, v FROM t TEMPORARY PARTITION (tp1)") == [[1, "two"]]
    assert doris.rows(db, "SELECT count(*) FROM t") == [[0]]


def test_housekeeping_removes_moved_files_once_no_snapshot_needs_them(spark: Any, tmp_path: Path) -> None:
    """A REPLACE leaves the moved files where the companion wrote them; after a compaction rewrote them, orphan
    removal takes them, and never the files the table or the companion still reference."""
    import time

    from app.main import build_services
    from app.settings import Settings
    from spark_runner.compaction import CompactionType
    from tables.maintenance import run_maintenance
    from tests.test_compaction import _sql

    settings = Settings(data_dir=tmp_path / "data", compaction_interval_seconds=3600, compaction_base_min_rowsets=2)
    services = build_services(settings, spark)
    try:
        _sql(services, "CREATE DATABASE m")
        _sql(
            services,
            "CREATE TABLE d (k INT, v INT) DUPLICATE KEY(k) PARTITION BY RANGE(k) "
            '(PARTITION p1 VALUES LESS THAN ("10")) DISTRIBUTED BY HASH(k) BUCKETS 1',
        )
        _sql(services, "INSERT INTO d VALUES (1, 1)")
        _sql(services, 'ALTER TABLE d ADD TEMPORARY PARTITION tp1 VALUES LESS THAN ("10")')
        for k in (2, 3):
            _sql(services, f"INSERT INTO d TEMPORARY PARTITION (tp1) VALUES ({k}, {k})")
        _sql(services, "ALTER TABLE d REPLACE PARTITION (p1) WITH TEMPORARY PARTITION (tp1)")
        _sql(services, 'ALTER TABLE d ADD TEMPORARY PARTITION tp2 VALUES LESS THAN ("10")')
        _sql(services, "INSERT INTO d TEMPORARY PARTITION (tp2) VALUES (4, 4)")
        location = services.catalog.load("m", "d").location

        def housekeeping() -> None:
            run_maintenance(
                services.catalog,
                services.txns,
                staging=settings.resolved_data_dir / "staging",
                grace_seconds=0,
                snapshot_keep_seconds=0,
                now=time.time() + 10,
            )

        housekeeping()
        assert len(list((location / "temporary").rglob("*.parquet"))) == 3  # 2 moved, 1 of tp2: all referenced
        services.sql.compactor.compact("m", "d", CompactionType.BASE)
        housekeeping()
        assert len(list((location / "temporary").rglob("*.parquet"))) == 1  # tp2's
        assert _sql(services, "SELECT * FROM d ORDER BY k") == [[2, 2], [3, 3]]
        assert _sql(services, "SELECT * FROM d TEMPORARY PARTITION (tp2)") == [[4, 4]]
    finally:
        services.txns.close()


def test_a_temporary_partition_across_days_of_a_daily_table(doris: DorisClient, db: str, server_settings: Any) -> None:
    """The table's spec has Iceberg's `day` transform (every partition is one day); a temporary partition of three
    days is not, so the companion's files are not partitioned by it, and the REPLACE drops it from the table's."""
    doris.sql(
        db,
        """CREATE TABLE t (d DATE, k INT, v INT) DUPLICATE KEY(d, k)
        PARTITION BY RANGE(d) (FROM ("2024-01-01") TO ("2024-01-04") INTERVAL 1 DAY)
        DISTRIBUTED BY HASH(k) BUCKETS 1""",
    )
    data_dir = server_settings.resolved_data_dir
    assert [f.name for f in load_table(data_dir, db, "t").spec().fields][-1] == "d_day"
    doris.sql(db, 'ALTER TABLE t ADD TEMPORARY PARTITION tp VALUES [("2024-01-01"), ("2024-01-04"))')
    lines = ["2024-01-01,1,1", "2024-01-02,2,2", "2024-01-03,3,3"]
    assert_doris_result(_load(doris, db, "t", lines, temporary_partitions="tp"))
    doris.sql(db, "ALTER TABLE t REPLACE PARTITION (p_20240101, p_20240102, p_20240103) WITH TEMPORARY PARTITION (tp)")
    assert _names(doris, db, "PARTITIONS") == ["tp"]
    expected = [["2024-01-01", 1, 1], ["2024-01-02", 2, 2], ["2024-01-03", 3, 3]]
    assert doris.rows(db, "SELECT * FROM t ORDER BY k") == expected
    assert [f.name for f in load_table(data_dir, db, "t").spec().fields][-1] == "__DORIS_PARTITION__"
    assert pyiceberg_rows(data_dir, db, "t") == as_reply(expected)
