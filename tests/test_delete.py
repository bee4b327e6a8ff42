"""DELETE FROM, SHOW DELETE and TRUNCATE: the examples of 004_719a6f3ac1a41aa8.txt, delete markers with the
row's sequence on unique tables, stored predicates on duplicate and aggregate tables, and the errors."""

from __future__ import annotations

import pytest

from tests.helpers import DorisClient, assert_doris_result

EXAMPLE = """CREATE TABLE example_table (event_day INT, event_key INT, siteid INT, city VARCHAR(8))
DUPLICATE KEY(event_day, event_key) DISTRIBUTED BY HASH(event_day) BUCKETS 2"""
CSV = {"column_separator": ","}


def test_seed_004_delete_show_delete_and_truncate(doris: DorisClient, db: str) -> None:
    doris.sql(db, EXAMPLE)
    rows = [
        (20200930, 1000, 1, "a"),
        (20200930, 999, 2, "b"),
        (20201001, 1001, 3, "c"),
        (20201005, 1002, 4, "d"),
        (20201006, 7, 5, "e"),
    ]
    body = "".join(",".join(map(str, r)) + "\n" for r in rows)
    assert_doris_result(doris.stream_load(db, "example_table", body, headers=CSV), loaded=5)
    # the seed's statements (the second names the table's own single partition: this server has no partitions)
    doris.sql(db, "DELETE FROM example_table WHERE event_day < 20201001 AND event_key != 1000")
    doris.sql(db, "DELETE FROM example_table PARTITION example_table WHERE event_key in (1000, 1001, 1002, 1003)")
    assert doris.rows(db, "SELECT event_day, event_key FROM example_table") == [[20201006, 7]]
    shown = doris.rows(db, f"SHOW DELETE FROM {db}")
    assert [[r[0], r[1], r[3], r[4]] for r in shown] == [
        ["example_table", "example_table", 'event_day LT "20201001" AND event_key NE "1000"', "FINISHED"],
        ["example_table", "example_table", 'event_key IN ("1000", "1001", "1002", "1003")', "FINISHED"],
    ]
    assert "Partition does not exist: p202010" in doris.sql_error(
        db, "DELETE FROM example_table PARTITION p202010 WHERE event_key in (1000, 1001, 1002, 1003)"
    )

    # a DELETE does not touch rows loaded after it
    assert_doris_result(doris.stream_load(db, "example_table", body, headers=CSV), loaded=5)
    assert doris.rows(db, "SELECT count(*) FROM example_table") == [[6]]

    doris.sql(db, "TRUNCATE TABLE example_table")
    assert doris.rows(db, "SELECT count(*) FROM example_table") == [[0]]
    assert_doris_result(doris.stream_load(db, "example_table", body, headers=CSV), loaded=5)
    assert doris.rows(db, "SELECT count(*) FROM example_table") == [[5]]


def test_aggregate_delete_takes_key_predicates_and_later_loads_start_fresh(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE a (k INT, s BIGINT SUM, m INT MAX) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2")
    assert_doris_result(doris.stream_load(db, "a", "1,10,5\n2,20,6\n1,1,9\n", headers=CSV), loaded=3)
    message = doris.sql_error(db, "DELETE FROM a WHERE s > 3")
    assert "delete predicate on value column only supports Unique table with merge-on-write enabled and " in message
    doris.sql(db, "DELETE FROM a WHERE k = 1")
    assert doris.rows(db, "SELECT * FROM a ORDER BY k") == [[2, 20, 6]]
    assert_doris_result(doris.stream_load(db, "a", "1,4,2\n", headers=CSV), loaded=1)
    assert doris.rows(db, "SELECT * FROM a ORDER BY k") == [[1, 4, 2], [2, 20, 6]]


def test_unique_delete_writes_markers_with_the_rows_sequence(doris: DorisClient, db: str) -> None:
    doris.sql(
        db,
        "CREATE TABLE u (k INT, v VARCHAR(8), seq INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2 "
        "PROPERTIES ('function_column.sequence_col' = 'seq')",
    )
    assert_doris_result(doris.stream_load(db, "u", "1,a,5\n2,b,5\n3,c,1\n", headers=CSV), loaded=3)
    doris.sql(db, "DELETE FROM u WHERE v IN ('a', 'b')")
    assert doris.rows(db, "SELECT k FROM u ORDER BY k") == [[3]]
    hidden = doris.rows(
        db, "SET show_hidden_columns = true; SELECT k, seq, __DORIS_DELETE_SIGN__ FROM u WHERE k < 3 ORDER BY k"
    )
    assert hidden == [[1, 5, 1], [2, 5, 1]]
    # a later row with a lower sequence stays below the delete; an equal one from a newer load wins
    assert_doris_result(doris.stream_load(db, "u", "1,low,4\n2,same,5\n", headers=CSV), loaded=2)
    assert doris.rows(db, "SELECT * FROM u ORDER BY k") == [[2, "same", 5], [3, "c", 1]]
    assert doris.rows(db, f"SHOW DELETE FROM {db}") == []  # unique deletes are rows, as on merge-on-write Doris


@pytest.mark.parametrize(
    "stmt, message",
    [
        ("DELETE FROM d", "DELETE without a WHERE clause is not supported, use TRUNCATE TABLE"),
        ("DELETE FROM d WHERE k = 1 OR v = 'x'", "Where clause only supports compound predicate"),
        ("DELETE FROM d WHERE nope = 1", "Unknown column 'nope' in 'd'"),
        ("DELETE FROM d WHERE k = 'abc'", "Invalid column value[abc] for column k"),
        ("DELETE FROM d WHERE f > 1.5", "Column[f] type is float or double."),
        ("DELETE FROM d WHERE k = v", "Right expr of binary predicate should be value, column: k"),
    ],
)
def test_delete_errors_change_nothing(doris: DorisClient, db: str, stmt: str, message: str) -> None:
    doris.sql(db, "CREATE TABLE d (k INT, v VARCHAR(8), f DOUBLE) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(db, "INSERT INTO d VALUES (1, 'x', 1.0)")
    assert message in doris.sql_error(db, stmt)
    assert doris.rows(db, "SELECT * FROM d") == [[1, "x", 1.0]]
    assert doris.rows(db, f"SHOW DELETE FROM {db}") == []


def test_columns_of_a_delete_condition_cannot_be_dropped_or_renamed(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE d (k INT, v VARCHAR(8), w INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(db, "DELETE FROM d WHERE v = 'x'")
    assert "a DELETE condition of the table uses it" in doris.sql_error(db, "ALTER TABLE d DROP COLUMN v")
    assert "a DELETE condition of the table uses it" in doris.sql_error(db, "ALTER TABLE d RENAME COLUMN v vv")
    doris.sql(db, "ALTER TABLE d DROP COLUMN w")


SEQ_MAP = """CREATE TABLE m (a BIGINT, b INT, c INT, d INT, e INT, s1 INT, s2 INT)
UNIQUE KEY(a, b) DISTRIBUTED BY HASH(a, b) BUCKETS 2
PROPERTIES ("enable_unique_key_merge_on_write" = "false", "sequence_mapping.s1" = "c,d", "sequence_mapping.s2" = "e")"""


def _groups(doris: DorisClient, db: str, body: str, group: str) -> None:
    columns = {"s1": "a,b,c,d,s1", "s2": "a,b,e,s2"}[group]
    assert_doris_result(doris.stream_load(db, "m", body, headers={**CSV, "columns": columns}))


def test_sequence_mapping_delete_is_a_stored_predicate_on_earlier_versions(doris: DorisClient, db: str) -> None:
    """Doris takes a predicate DELETE on a sequence-mapping (merge-on-read) table as on duplicate tables: key
    columns only, applied to each older rowset's rows before the merge, so the whole old row goes and a later
    load of one column group brings the key back with the other group empty."""
    doris.sql(db, SEQ_MAP)
    _groups(doris, db, "1,1,10,10,5\n2,2,20,20,5\n3,3,30,30,5\n", "s1")
    _groups(doris, db, "1,1,100,5\n2,2,200,5\n", "s2")
    doris.sql(db, "DELETE FROM m WHERE a IN (1, 3) AND b != 9")
    assert doris.rows(db, "SELECT * FROM m ORDER BY a") == [[2, 2, 20, 20, 200, 5, 5]]
    shown = doris.rows(db, f"SHOW DELETE FROM {db}")
    assert [[r[0], r[1], r[3], r[4]] for r in shown] == [["m", "m", 'a IN ("1", "3") AND b NE "9"', "FINISHED"]]

    # a later load of one group, with a sequence below the deleted row's: the key is back, the other group empty
    _groups(doris, db, "1,1,101,1\n", "s2")
    _groups(doris, db, "3,3,31,31,1\n", "s1")
    after = [[1, 1, None, None, 101, None, 1], [2, 2, 20, 20, 200, 5, 5], [3, 3, 31, 31, None, 1, None]]
    assert doris.rows(db, "SELECT * FROM m ORDER BY a") == after

    # compaction never changes the answer: rowsets before and after the DELETE merged together, then all of them
    doris.sql(db, "ADMIN COMPACT TABLE m WHERE TYPE = 'CUMULATIVE'")
    assert doris.rows(db, "SELECT * FROM m ORDER BY a") == after
    _groups(doris, db, "1,1,11,11,0\n", "s1")
    after[0][2:6] = [11, 11, 101, 0]
    doris.sql(db, "DELETE FROM m WHERE a = 2")
    assert doris.rows(db, "SELECT * FROM m ORDER BY a") == [after[0], after[2]]
    doris.sql(db, "ADMIN COMPACT TABLE m WHERE TYPE = 'BASE'")
    assert doris.rows(db, "SELECT * FROM m ORDER BY a") == [after[0], after[2]]
    assert len(doris.rows(db, f"SHOW DELETE FROM {db}")) == 2
    _groups(doris, db, "2,2,7,0\n", "s2")
    assert doris.rows(db, "SELECT * FROM m WHERE a = 2") == [[2, 2, None, None, 7, None, 0]]


def test_sequence_mapping_delete_refuses_value_column_predicates(doris: DorisClient, db: str) -> None:
    """Merge-on-read unique tables take key-column predicates only (Doris `DeleteFromCommand.checkColumn`);
    its fallback, a delete-sign load, does not exist on sequence-mapping tables."""
    doris.sql(db, SEQ_MAP)
    _groups(doris, db, "1,1,10,10,5\n", "s1")
    for stmt in ("DELETE FROM m WHERE c = 10", "DELETE FROM m WHERE a = 1 AND s1 > 3"):
        message = doris.sql_error(db, stmt)
        assert (
            "delete predicate on value column only supports Unique table with merge-on-write enabled and "
            "Duplicate table, but Table[m] is an unique table without merge-on-write." in message
        )
    assert doris.rows(db, "SELECT a, c FROM m") == [[1, 10]]
    assert doris.rows(db, f"SHOW DELETE FROM {db}") == []


def test_sequence_mapping_delete_on_a_partitioned_table_names_its_partitions(doris: DorisClient, db: str) -> None:
    """A predicate delete, so Doris's partition rule holds: named or inferred partitions, else
    `delete_without_partition`."""
    doris.sql(
        db,
        """CREATE TABLE m (a BIGINT, b INT, c INT, s1 INT) UNIQUE KEY(a, b)
        PARTITION BY RANGE(a) (PARTITION p1 VALUES LESS THAN ("10"), PARTITION p2 VALUES LESS THAN ("20"))
        DISTRIBUTED BY HASH(a, b) BUCKETS 2
        PROPERTIES ("enable_unique_key_merge_on_write" = "false", "sequence_mapping.s1" = "c")""",
    )
    assert_doris_result(doris.stream_load(db, "m", "1,1,10,5\n11,1,20,5\n12,2,30,5\n", headers=CSV), loaded=3)
    refused = doris.sql_error(db, "DELETE FROM m WHERE b = 1")
    assert "You should specify partition in delete stmt, or set delete_without_partition to true" in refused
    doris.sql(db, "DELETE FROM m PARTITION p2 WHERE b = 1")
    doris.sql(db, "DELETE FROM m WHERE a = 12")  # the partition inferred from the filter
    assert doris.rows(db, "SELECT a, c FROM m ORDER BY a") == [[1, 10]]
    shown = [[r[0], r[1], r[3]] for r in doris.rows(db, f"SHOW DELETE FROM {db}")]
    assert shown == [["m", "p2", 'b EQ "1"'], ["m", "p2", 'a EQ "12"']]
    assert_doris_result(doris.stream_load(db, "m", "11,1,21,0\n", headers=CSV))
    assert doris.rows(db, "SELECT a, c, s1 FROM m ORDER BY a") == [[1, 10, 5], [11, 21, 0]]
