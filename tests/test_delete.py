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
