"""Fixed partial-column updates on merge-on-write unique tables (contract §6.8), through stream load and INSERT."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import DorisClient, assert_doris_result

TABLE = """CREATE TABLE t (k INT NOT NULL, a INT, b VARCHAR(8) DEFAULT 'dflt', c INT NOT NULL DEFAULT '7')
UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2"""
PARTIAL = {"column_separator": ",", "partial_columns": "true"}


@pytest.fixture
def table(doris: DorisClient, db: str) -> str:
    doris.sql(db, TABLE)
    doris.sql(db, "INSERT INTO t VALUES (1, 10, 'x', 100), (2, 20, 'y', 200)")
    return db


def rows(doris: DorisClient, db: str) -> list[list[object]]:
    return doris.rows(db, "SELECT * FROM t ORDER BY k")


def test_unlisted_columns_keep_stored_values_and_new_keys_take_defaults(doris: DorisClient, table: str) -> None:
    body = assert_doris_result(
        doris.stream_load(table, "t", "1,11\n3,33\n", headers={**PARTIAL, "columns": "k,a"}), loaded=2
    )
    assert body["Status"] == "Success"
    assert rows(doris, table) == [[1, 11, "x", 100], [2, 20, "y", 200], [3, 33, "dflt", 7]]


def test_new_key_behavior_error_fails_the_whole_load(doris: DorisClient, table: str) -> None:
    headers = {**PARTIAL, "columns": "k,a", "partial_update_new_key_behavior": "ERROR"}
    assert_doris_result(
        doris.stream_load(table, "t", "1,99\n5,55\n6,66\n", headers=headers),
        status="Fail",
        message_contains="[E-7003]Can't append new rows in partial update when partial_update_new_key_behavior "
        "is ERROR. Row with key=[5] is not in table.",
    )
    assert rows(doris, table) == [[1, 10, "x", 100], [2, 20, "y", 200]]


@pytest.mark.parametrize(
    "ddl, headers, message",
    [
        pytest.param(
            "CREATE TABLE m (k INT, a INT, b INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
            "PROPERTIES ('enable_unique_key_merge_on_write' = 'false')",
            {"columns": "k,a"},
            "Only unique key merge on write support partial update",
            id="merge-on-read-table",
        ),
        pytest.param(
            "CREATE TABLE m (k INT, j INT, a INT, b INT) UNIQUE KEY(k, j) DISTRIBUTED BY HASH(k) BUCKETS 1",
            {"columns": "k,a"},
            "Partial update should include all key columns, missing: j",
            id="missing-key-column",
        ),
        pytest.param(
            "CREATE TABLE m (k INT, a INT, b INT NOT NULL) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1",
            {"columns": "k,a"},
            "the unmentioned column `b` should have default value or be nullable for newly inserted rows",
            id="new-key-with-unlisted-not-null-column",
        ),
    ],
)
def test_partial_update_refusals(doris: DorisClient, db: str, ddl: str, headers: dict[str, str], message: str) -> None:
    doris.sql(db, ddl)
    assert_doris_result(
        doris.stream_load(db, "m", "1,1\n", headers={**PARTIAL, **headers}), status="Fail", message_contains=message
    )
    assert doris.rows(db, "SELECT count(*) FROM m") == [[0]]


def test_listing_every_column_is_a_plain_upsert(doris: DorisClient, table: str) -> None:
    headers = {**PARTIAL, "columns": "k,a,b,c", "partial_update_new_key_behavior": "ERROR"}
    assert_doris_result(doris.stream_load(table, "t", "9,9,z,9\n", headers=headers), loaded=1)
    assert rows(doris, table)[-1] == [9, 9, "z", 9]


def test_deleted_key_comes_back_with_defaults_not_old_values(doris: DorisClient, table: str) -> None:
    assert_doris_result(
        doris.stream_load(table, "t", "1\n", headers={**PARTIAL, "columns": "k", "merge_type": "DELETE"})
    )
    assert rows(doris, table) == [[2, 20, "y", 200]]
    assert_doris_result(doris.stream_load(table, "t", "1,12\n", headers={**PARTIAL, "columns": "k,a"}))
    assert rows(doris, table)[0] == [1, 12, "dflt", 7]


def test_insert_with_partial_update_session_variable(doris: DorisClient, table: str) -> None:
    doris.sql(table, "SET enable_unique_key_partial_update = true; INSERT INTO t (k, b) VALUES (2, 'new')")
    assert rows(doris, table)[1] == [2, 20, "new", 200]
    message = doris.sql_error(
        table,
        "SET enable_unique_key_partial_update = true; SET partial_update_new_key_behavior = 'ERROR'; "
        "INSERT INTO t (k, b) VALUES (2, 'again'), (8, 'nope')",
    )
    assert "[E-7003]Can't append new rows" in message and "key=[8]" in message
    assert rows(doris, table)[1] == [2, 20, "new", 200]


def test_concurrent_partial_updates_of_different_columns_both_survive(doris: DorisClient, table: str) -> None:
    def update(i: int) -> dict[str, object]:
        column = "a" if i % 2 == 0 else "b"
        value = str(1000 + i) if column == "a" else f"s{i}"
        return doris.stream_load(table, "t", f"1,{value}\n", headers={**PARTIAL, "columns": f"k,{column}"}).json()

    with ThreadPoolExecutor(max_workers=6) as pool:
        replies = list(pool.map(update, range(6)))
    for reply in replies:
        assert_doris_result(reply, loaded=1)
    k, a, b, c = rows(doris, table)[0]
    assert a in (1000, 1002, 1004) and b in ("s1", "s3", "s5") and c == 100, "an update of the other column was lost"


def test_partial_update_with_its_own_time_zone(doris: DorisClient, table: str) -> None:
    headers = {**PARTIAL, "columns": "k, a = hour(from_unixtime(0))", "timezone": "Asia/Shanghai"}
    assert_doris_result(doris.stream_load(table, "t", "1\n", headers=headers), loaded=1)
    assert rows(doris, table)[0] == [1, 8, "x", 100]
