"""The HTTP SQL endpoint: reply shapes, sessions, DDL, INSERT through the load pipeline, queries over merged rows."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import DorisClient, assert_doris_result

CSV = {"column_separator": ","}


def test_result_set_shape(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE t (k INT, v VARCHAR(10), d DATE) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(db, "INSERT INTO t VALUES (1, 'a', '2024-01-02'), (2, NULL, NULL)")
    body = doris.sql_raw(db, "SELECT * FROM t ORDER BY k")
    assert set(body) == {"msg", "code", "data", "count"} and body["msg"] == "success" and body["count"] == 0
    data = body["data"]
    assert data["type"] == "result_set" and isinstance(data["time"], int)
    assert data["meta"] == [
        {"name": "k", "type": "INT"},
        {"name": "v", "type": "VARCHAR"},
        {"name": "d", "type": "DATE"},
    ]
    assert data["data"] == [[1, "a", "2024-01-02"], [2, None, None]]


def test_exec_status_carries_affected_rows(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    data = doris.sql(db, "INSERT INTO t VALUES (1, 1), (1, 2), (2, 2)")
    assert data["type"] == "exec_status" and data["status"]["affectedRows"] == 3
    assert doris.rows(db, "SELECT * FROM t ORDER BY k") == [[1, 2], [2, 2]]


@pytest.mark.parametrize(
    "stmt, message",
    [
        pytest.param("SELECT * FROM nosuch", "Unknown table 'nosuch'", id="unknown-table"),
        pytest.param("SELEC 1", "Failed to execute sql: ", id="syntax-error"),
        pytest.param(
            "SELECT reflect('java.lang.Runtime', 'getRuntime')", "function reflect is not allowed", id="reflect-refused"
        ),
        pytest.param(
            "CREATE TABLE bad (k INT, v INT SUM) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1",
            "UNIQUE_KEYS table should not specify aggregate type for non-key column[v]",
            id="aggregation-on-unique-value-column",
        ),
        pytest.param(
            "CREATE TABLE bad (k INT, v INT) UNIQUE KEY(v) DISTRIBUTED BY HASH(v) BUCKETS 1",
            "Key columns should be a ordered prefix of the schema",
            id="keys-not-a-prefix",
        ),
        pytest.param(
            "CREATE TABLE bad (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
            "PROPERTIES ('function_column.sequence_col' = 'nosuch')",
            "The specified sequence column[nosuch] not exists",
            id="sequence-column-missing",
        ),
        pytest.param(
            "CREATE TABLE bad (k INT, v VARCHAR(3)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
            "PROPERTIES ('function_column.sequence_col' = 'v')",
            "Sequence type only support integer types and date types",
            id="sequence-column-text",
        ),
        pytest.param(
            "CREATE TABLE bad (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
            "PROPERTIES ('function_column.sequence_col' = 'k')",
            "can not be a key column",
            id="sequence-column-is-key",
        ),
        pytest.param(
            "CREATE TABLE bad (k INT, v HLL HLL_UNION) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1",
            "Unsupported data type",
            id="hll-not-supported",
        ),
    ],
)
def test_errors_have_the_fe_error_shape(doris: DorisClient, db: str, stmt: str, message: str) -> None:
    body = doris.sql_raw(db, stmt)
    assert body["msg"] == "Error" and body["code"] == 1 and body["count"] == 0, body
    assert body["data"].startswith("Failed to execute sql: ") and message in body["data"], body


def test_unauthorized_and_missing_statement_shapes(doris: DorisClient, db: str) -> None:
    resp = httpx.post(
        f"{doris.base_url}/api/query/default_cluster/{db}", json={"stmt": "SHOW DATABASES"}, auth=("root", "wrong")
    )
    assert resp.status_code == 200
    assert resp.json()["msg"] == "Unauthorized" and resp.json()["code"] == 401
    body = doris.http.post(f"/api/query/default_cluster/{db}", json={"stmt": ""}).json()
    assert body == {"msg": "Bad Request", "code": 403, "data": "Missing statement request body", "count": 0}


def test_several_statements_run_in_one_session_and_set_lasts_for_the_request(doris: DorisClient, db: str) -> None:
    doris.sql(
        db, "CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1; INSERT INTO t VALUES (1, 1)"
    )
    with_hidden = doris.sql(db, "SET show_hidden_columns = true; SELECT * FROM t")
    assert [m["name"] for m in with_hidden["meta"]] == ["k", "v", "__DORIS_DELETE_SIGN__", "__DORIS_VERSION_COL__"]
    plain = doris.sql(db, "SELECT * FROM t")
    assert [m["name"] for m in plain["meta"]] == ["k", "v"]


def test_create_database_and_show_databases_need_no_existing_database(doris: DorisClient) -> None:
    import uuid

    name = f"fresh_{uuid.uuid4().hex[:8]}"
    doris.sql(name, f"CREATE DATABASE IF NOT EXISTS {name}")
    doris.sql(name, f"CREATE DATABASE IF NOT EXISTS {name}")
    assert [name] in doris.rows("nowhere", "SHOW DATABASES")
    assert "exists" in doris.sql_error(name, f"CREATE DATABASE {name}")


def test_show_tables_desc_and_drop_table(doris: DorisClient, db: str) -> None:
    doris.sql(
        db,
        "CREATE TABLE `upsert_test` (`a` bigint(20) NULL COMMENT \"\", `b` int(11) NOT NULL DEFAULT '7', "
        '`c` decimal(10,2) NULL) ENGINE=OLAP UNIQUE KEY(`a`) COMMENT "OLAP" '
        'DISTRIBUTED BY HASH(`a`) BUCKETS 1 PROPERTIES ("enable_unique_key_merge_on_write"="false", '
        '"replication_num" = "1")',
    )
    assert doris.rows(db, "SHOW TABLES") == [["upsert_test"]]
    assert doris.rows(db, "DESC upsert_test") == [
        ["a", "bigint", "Yes", "true", None, ""],
        ["b", "int", "No", "false", "7", "REPLACE"],
        ["c", "decimal(10,2)", "Yes", "false", None, "REPLACE"],
    ]
    doris.sql(db, "INSERT INTO upsert_test (a, c) VALUES (1, 2.5)")
    assert doris.rows(db, "SELECT * FROM upsert_test") == [[1, 7, 2.5]]
    doris.sql(db, "DROP TABLE upsert_test")
    assert doris.rows(db, "SHOW TABLES") == []
    assert "Unknown table" in doris.sql_error(db, "SELECT * FROM upsert_test")


def test_every_doris_column_type_round_trips(doris: DorisClient, db: str) -> None:
    doris.sql(
        db,
        """CREATE TABLE types (
        k BIGINT(20) NOT NULL, t TINYINT, s SMALLINT, i INT, l LARGEINT, f FLOAT, d DOUBLE, dec DECIMAL(12,3),
        c CHAR(4), vc VARCHAR(10), st STRING, tx TEXT, dt DATE, dtv DATEV2, ts DATETIME, tsv DATETIMEV2(3), b BOOLEAN
    ) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1""",
    )
    line = (
        "1,-128,32767,-5,170141183460469231731687303715884105,1.5,2.25,123456789.125,ab,xyz,long,text,"
        "2024-02-29,2024-03-01,2024-02-29 12:34:56,2024-02-29 12:34:56,true\n"
    )
    assert_doris_result(doris.stream_load(db, "types", line, headers=CSV), loaded=1)
    assert doris.rows(db, "SELECT * FROM types") == [
        [
            1,
            -128,
            32767,
            -5,
            170141183460469231731687303715884105,
            1.5,
            2.25,
            123456789.125,
            "ab",
            "xyz",
            "long",
            "text",
            "2024-02-29",
            "2024-03-01",
            "2024-02-29 12:34:56",
            "2024-02-29 12:34:56",
            True,
        ]
    ]
    assert_doris_result(doris.stream_load(db, "types", "2,128,,,,,,,,,,,2024-02-30,,,,\n", headers=CSV), loaded=1)
    assert doris.rows(db, "SELECT t, dt FROM types WHERE k = 2") == [[None, None]]


def test_insert_into_sequence_type_table_without_hidden_sequence_gets_null_sequence(
    doris: DorisClient, db: str
) -> None:
    doris.sql(
        db,
        "CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
        "PROPERTIES ('function_column.sequence_type' = 'int')",
    )
    doris.sql(db, "INSERT INTO t (k, v, __DORIS_SEQUENCE_COL__) VALUES (1, 10, 5)")
    doris.sql(db, "INSERT INTO t VALUES (1, 20)")
    assert doris.rows(db, "SET show_hidden_columns=true; SELECT k, v, __DORIS_SEQUENCE_COL__ FROM t") == [[1, 10, 5]]
    doris.sql(db, "INSERT INTO t VALUES (2, 1)")
    assert doris.rows(db, "SET show_hidden_columns=true; SELECT k, v, __DORIS_SEQUENCE_COL__ FROM t WHERE k = 2") == [
        [2, 1, None]
    ]


def test_insert_with_sequence_col_property_needs_the_mapped_column(doris: DorisClient, db: str) -> None:
    doris.sql(
        db,
        "CREATE TABLE t (k INT, v INT, s INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
        "PROPERTIES ('function_column.sequence_col' = 's')",
    )
    message = doris.sql_error(db, "INSERT INTO t (k, v) VALUES (1, 1)")
    assert "errCode = 2, detailMessage = Table t has sequence column, need to specify the sequence column" in message


def test_insert_strict_refuses_bad_values_and_changes_nothing(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE t (k INT NOT NULL, v INT NOT NULL) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    assert "Insert has filtered data in strict mode" in doris.sql_error(db, "INSERT INTO t VALUES (1, NULL), (2, 2)")
    assert "Column count doesn't match value count" in doris.sql_error(db, "INSERT INTO t VALUES (1)")
    assert doris.rows(db, "SELECT * FROM t") == []
    doris.sql(db, "SET enable_insert_strict = false; INSERT INTO t VALUES (1, NULL), (2, 2)")
    assert doris.rows(db, "SELECT * FROM t") == [[2, 2]]


def test_insert_select_goes_through_the_merge(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE src (k INT, v INT, s INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(
        db,
        "CREATE TABLE dst (k INT, v INT, s INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2 "
        "PROPERTIES ('function_column.sequence_col' = 's')",
    )
    doris.sql(db, "INSERT INTO src VALUES (1, 10, 3), (1, 20, 1), (2, 5, 5)")
    assert doris.sql(db, "INSERT INTO dst SELECT k, v, s FROM src")["status"]["affectedRows"] == 3
    assert doris.rows(db, "SELECT * FROM dst ORDER BY k") == [[1, 10, 3], [2, 5, 5]]


def test_queries_join_and_aggregate_merged_tables(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE a (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(db, "CREATE TABLE b (k INT, w VARCHAR(5)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(db, "INSERT INTO a VALUES (1, 1), (2, 2); INSERT INTO a VALUES (1, 100)")
    doris.sql(db, "INSERT INTO b VALUES (1, 'x'), (3, 'z')")
    assert doris.rows(db, "SELECT count(*), sum(v) FROM a") == [[2, 102]]
    assert doris.rows(db, f"SELECT a.k, a.v, b.w FROM a JOIN {db}.b AS b ON a.k = b.k") == [[1, 100, "x"]]
    # a column named with its database and table, as Doris and MySQL allow
    assert doris.rows(db, f"SELECT {db}.a.v FROM {db}.a WHERE {db}.a.k = 2") == [[2]]
    assert doris.rows(db, f"SELECT {db}.a.k, b.w FROM a JOIN {db}.b ON {db}.a.k = {db}.b.k") == [[1, "x"]]
    assert doris.rows(db, "SELECT k FROM a WHERE v > 50 ORDER BY k LIMIT 1") == [[1]]
    # value predicates apply after the merge: the old row v=1 of key 1 is not returned
    assert doris.rows(db, "SELECT k FROM a WHERE v = 1") == []


def test_truncate_keeps_the_schema_and_drops_the_rows(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(db, "INSERT INTO t VALUES (1, 1)")
    doris.sql(db, "TRUNCATE TABLE t")
    assert doris.rows(db, "SELECT * FROM t") == []
    doris.sql(db, "INSERT INTO t VALUES (2, 2)")
    assert doris.rows(db, "SELECT * FROM t") == [[2, 2]]


def test_update_follows_sequence_rules_and_keeps_a_hidden_sequence(doris: DorisClient, db: str) -> None:
    doris.sql(
        db,
        "CREATE TABLE s (k INT, v INT, w INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
        "PROPERTIES ('function_column.sequence_col' = 'v')",
    )
    doris.sql(db, "INSERT INTO s VALUES (1, 10, 1), (2, 20, 2), (3, 30, 3)")
    assert doris.sql(db, "UPDATE s SET v = 15, w = w * 100 WHERE k IN (1, 2)")["status"]["affectedRows"] == 2
    # k=1: 15 >= 10 applies; k=2: 15 < 20 lowers the sequence and is ignored
    assert doris.rows(db, "SELECT * FROM s ORDER BY k") == [[1, 15, 100], [2, 20, 2], [3, 30, 3]]
    doris.sql(db, "UPDATE s SET w = 0")
    assert doris.rows(db, "SELECT w FROM s ORDER BY k") == [[0], [0], [0]]

    doris.sql(
        db,
        "CREATE TABLE h (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
        "PROPERTIES ('function_column.sequence_type' = 'int')",
    )
    doris.sql(db, "INSERT INTO h (k, v, __DORIS_SEQUENCE_COL__) VALUES (1, 1, 13)")
    doris.sql(db, "UPDATE h SET v = 11 WHERE k = 1")
    hidden = "SET show_hidden_columns = true; SELECT k, v, __DORIS_SEQUENCE_COL__ FROM h"
    assert doris.rows(db, hidden) == [[1, 11, 13]]


@pytest.mark.parametrize(
    "ddl, stmt, message",
    [
        pytest.param(
            "CREATE TABLE u (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1",
            "UPDATE u SET k = 2",
            "Only value columns of unique table could be updated",
            id="key-column",
        ),
        pytest.param(
            "CREATE TABLE u (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1",
            "UPDATE u SET v = 2",
            "Only unique table could be updated.",
            id="duplicate-table",
        ),
        pytest.param(
            "CREATE TABLE u (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1",
            "UPDATE u SET nosuch = 2",
            "Unknown column 'nosuch'",
            id="unknown-column",
        ),
    ],
)
def test_update_refusals(doris: DorisClient, db: str, ddl: str, stmt: str, message: str) -> None:
    doris.sql(db, ddl)
    doris.sql(db, "INSERT INTO u VALUES (1, 1)")
    assert message in doris.sql_error(db, stmt)
    assert doris.rows(db, "SELECT * FROM u") == [[1, 1]]
