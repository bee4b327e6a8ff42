"""The worked examples of the seeds, run with curl as printed (tables created first, `-u root:`,
`column_separator: ,` for comma data, one row per line), with the seeds' results."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import DorisClient, assert_doris_result

TEST_TABLE_002 = """
CREATE TABLE test_table (
    user_id BIGINT NOT NULL, date DATE NOT NULL, group_id BIGINT NOT NULL,
    modify_date DATE NOT NULL, keyword VARCHAR(128) NOT NULL
) UNIQUE KEY(user_id, date, group_id)
DISTRIBUTED BY HASH(user_id, date) BUCKETS 10
PROPERTIES ("function_column.sequence_type" = 'Date')
"""


def _file(tmp_path: Path, name: str, lines: list[str]) -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_seed_002_sequence_column_keeps_largest_modify_date(doris: DorisClient, db: str, tmp_path: Path) -> None:
    doris.sql(db, TEST_TABLE_002)
    desc = doris.rows(db, "DESC test_table")
    assert [r[0] for r in desc] == ["user_id", "date", "group_id", "modify_date", "keyword"]
    assert [r[2] for r in desc] == ["No"] * 5
    hidden = doris.rows(db, "SET show_hidden_columns=true; DESC test_table")
    assert "__DORIS_SEQUENCE_COL__" in [r[0] for r in hidden]

    first = _file(
        tmp_path,
        "testData",
        [
            "1\t2020-02-22\t1\t2020-02-22\ta",
            "1\t2020-02-22\t1\t2020-02-22\tb",
            "1\t2020-02-22\t1\t2020-03-05\tc",
            "1\t2020-02-22\t1\t2020-02-26\td",
            "1\t2020-02-22\t1\t2020-02-22\te",
            "1\t2020-02-22\t1\t2020-02-22\tb",
        ],
    )
    assert_doris_result(
        doris.curl_load(db, "test_table", first, {"function_column.sequence_col": "modify_date"}), total=6, loaded=6
    )
    assert doris.rows(db, "select * from test_table") == [[1, "2020-02-22", 1, "2020-03-05", "c"]]

    lower = _file(tmp_path, "testData2", ["1\t2020-02-22\t1\t2020-02-22\ta", "1\t2020-02-22\t1\t2020-02-23\tb"])
    assert_doris_result(doris.curl_load(db, "test_table", lower, {"function_column.sequence_col": "modify_date"}))
    assert doris.rows(db, "select * from test_table") == [[1, "2020-02-22", 1, "2020-03-05", "c"]]

    higher = _file(tmp_path, "testData3", ["1\t2020-02-22\t1\t2020-02-22\ta", "1\t2020-02-22\t1\t2020-03-23\tw"])
    assert_doris_result(doris.curl_load(db, "test_table", higher, {"function_column.sequence_col": "modify_date"}))
    assert doris.rows(db, "select * from test_table") == [[1, "2020-02-22", 1, "2020-03-23", "w"]]


ORDER_TABLE = """CREATE TABLE order_table ( order_id BIGINT, order_type VARCHAR(8), order_status VARCHAR(32) )
UNIQUE KEY(order_id) DISTRIBUTED BY HASH(order_id) BUCKETS 8"""


def test_seed_004_unique_key_upsert_replaces_order_status(doris: DorisClient, db: str, tmp_path: Path) -> None:
    doris.sql(db, ORDER_TABLE)
    batch = _file(tmp_path, "batch1", ["1000,TYPE#1,PAID", "1001,TYPE#2,PENDING", "1002,TYPE#3,PAID"])
    assert_doris_result(doris.curl_load(db, "order_table", batch, {"column_separator": ","}), loaded=3)
    update = _file(tmp_path, "batch2", ["1001,TYPE#2,PAID"])
    assert_doris_result(doris.curl_load(db, "order_table", update, {"column_separator": ","}), loaded=1)
    assert doris.rows(db, "select * from order_table order by order_id") == [
        [1000, "TYPE#1", "PAID"],
        [1001, "TYPE#2", "PAID"],
        [1002, "TYPE#3", "PAID"],
    ]


def test_seed_004_mark_delete_with_hidden_delete_sign(doris: DorisClient, db: str, tmp_path: Path) -> None:
    doris.sql(db, ORDER_TABLE)
    headers = {"column_separator": ",", "hidden_columns": "__DORIS_DELETE_SIGN__"}
    first = _file(
        tmp_path, "a", ["1000,TYPE#1,PENDING,false", "1001,TYPE#2,PENDING,false", "1002,TYPE#3,PENDING,false"]
    )
    assert_doris_result(doris.curl_load(db, "order_table", first, headers), loaded=3)
    assert len(doris.rows(db, "select * from order_table")) == 3
    second = _file(tmp_path, "b", ["1001,TYPE#2,PENDING,true", "1002,TYPE#3,PAID,false"])
    assert_doris_result(doris.curl_load(db, "order_table", second, headers), loaded=2)
    assert doris.rows(db, "select * from order_table order by order_id") == [
        [1000, "TYPE#1", "PENDING"],
        [1002, "TYPE#3", "PAID"],
    ]


def test_seed_004_merge_type_merge_deletes_rows_matching_delete_label(
    doris: DorisClient, db: str, tmp_path: Path
) -> None:
    doris.sql(db, ORDER_TABLE)
    existing = _file(tmp_path, "existing", ["1003,TYPE#2,PENDING", "1004,TYPE#3,PENDING"])
    assert_doris_result(doris.curl_load(db, "order_table", existing, {"column_separator": ","}))
    data = _file(
        tmp_path,
        "data.txt",
        [
            "1000,TYPE#1,PENDING,0",
            "1001,TYPE#2,PENDING,0",
            "1002,TYPE#3,PENDING,0",
            "1003,TYPE#2,PENDING,1",
            "1004,TYPE#3,PAID,1",
        ],
    )
    headers = {
        "column_separator": ",",
        "columns": "order_id, order_type, order_status, delete_label",
        "merge_type": "MERGE",
        "delete": "delete_label=1",
    }
    assert_doris_result(doris.curl_load(db, "order_table", data, headers), total=5, loaded=5)
    assert doris.rows(db, "select order_id, order_status from order_table order by order_id") == [
        [1000, "PENDING"],
        [1001, "PENDING"],
        [1002, "PENDING"],
    ]


def test_seed_004_sequence_column_with_source_sequence_header(doris: DorisClient, db: str, tmp_path: Path) -> None:
    doris.sql(
        db,
        """CREATE TABLE order_table ( order_id BIGINT, order_type VARCHAR(8), order_status VARCHAR(32) )
        UNIQUE KEY(order_id) DISTRIBUTED BY HASH(order_id) BUCKETS 8
        PROPERTIES ( "function_column.sequence_type" = 'Date' )""",
    )
    data = _file(
        tmp_path,
        "data.txt",
        [
            "1000,TYPE#1,PENDING,2020-10-01",
            "1001,TYPE#2,PAID,2020-10-02",
            "1002,TYPE#3,PENDING,2020-10-03",
            "1001,TYPE#2,PENDING,2020-10-01",
            "1004,TYPE#3,PAID,2020-10-03",
        ],
    )
    headers = {
        "column_separator": ",",
        "columns": "order_id, order_type, order_status, source_sequence",
        "function_column.sequence_col": "source_sequence",
    }
    assert_doris_result(doris.curl_load(db, "order_table", data, headers), loaded=5)
    assert doris.rows(db, "select order_status from order_table where order_id = 1001") == [["PAID"]]
    assert len(doris.rows(db, "select * from order_table")) == 4


def test_seed_004_test_table_hidden_sequence_and_replacement_order(doris: DorisClient, db: str, tmp_path: Path) -> None:
    doris.sql(
        db,
        """CREATE TABLE test_table ( user_id BIGINT, date DATE, group_id BIGINT, keyword VARCHAR(128) )
        UNIQUE KEY(user_id, date, group_id) DISTRIBUTED BY HASH(user_id, date) BUCKETS 10
        PROPERTIES ( "function_column.sequence_type" = 'Date' )""",
    )
    desc = doris.rows(db, "set show_hidden_columns=true; desc test_table")
    assert ["__DORIS_SEQUENCE_COL__", "date", "Yes", "false", None] == desc[
        [r[0] for r in desc].index("__DORIS_SEQUENCE_COL__")
    ][:5]
    headers = {
        "column_separator": ",",
        "columns": "user_id, date, group_id, modify_date, keyword",
        "function_column.sequence_col": "modify_date",
    }
    first = _file(
        tmp_path,
        "testData",
        [
            "1,2020-02-22,1,2020-02-22,a",
            "1,2020-02-22,1,2020-02-22,b",
            "1,2020-02-22,1,2020-03-05,c",
            "1,2020-02-22,1,2020-02-26,d",
            "1,2020-02-22,1,2020-02-22,e",
            "1,2020-02-22,1,2020-02-22,b",
        ],
    )
    assert_doris_result(doris.curl_load(db, "test_table", first, headers), loaded=6)
    assert doris.rows(db, "select * from test_table") == [[1, "2020-02-22", 1, "c"]]
    hidden = doris.sql(db, "set show_hidden_columns=true; select * from test_table")
    names = [m["name"] for m in hidden["meta"]]
    assert hidden["data"][0][names.index("__DORIS_SEQUENCE_COL__")] == "2020-03-05"
    lower = _file(tmp_path, "t2", ["1,2020-02-22,1,2020-02-22,a", "1,2020-02-22,1,2020-02-23,b"])
    assert_doris_result(doris.curl_load(db, "test_table", lower, headers))
    assert doris.rows(db, "select * from test_table") == [[1, "2020-02-22", 1, "c"]]
    higher = _file(tmp_path, "t3", ["1,2020-02-22,1,2020-02-22,a", "1,2020-02-22,1,2020-03-23,w"])
    assert_doris_result(doris.curl_load(db, "test_table", higher, headers))
    assert doris.rows(db, "select * from test_table") == [[1, "2020-02-22", 1, "w"]]
