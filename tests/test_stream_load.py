"""Stream load through the public interface: reply shape, labels, data quality, merge rules, bad input."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import AUTH, DORIS_LOAD_KEYS, DorisClient, assert_doris_result, curl_stream_load

SEQ_TABLE = """CREATE TABLE t (k INT NOT NULL, v VARCHAR(8), s INT)
UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2 PROPERTIES ("function_column.sequence_col" = "s")"""
PLAIN_TABLE = (
    "CREATE TABLE t (k INT NOT NULL, v VARCHAR(8) NOT NULL, n INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"
)
CSV = {"column_separator": ","}
TWO_COLUMNS = "CREATE TABLE t (k INT NOT NULL, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"


def rows(doris: DorisClient, db: str, table: str = "t") -> list[list[object]]:
    return doris.rows(db, f"select * from {table} order by k")


def test_success_reply_has_exactly_doris_fields_in_order(doris: DorisClient, db: str) -> None:
    doris.sql(db, PLAIN_TABLE)
    comment = 'héllo ☃ "x" \\ \t/end'
    headers = {**CSV, "label": "golden_1", "comment": comment.encode()}  # UTF-8 bytes on the wire
    resp = doris.stream_load(db, "t", "1,a,1\n", headers=headers)  # type: ignore[arg-type]
    body = assert_doris_result(resp, total=1, loaded=1)
    assert list(body) == DORIS_LOAD_KEYS
    assert body["Label"] == "golden_1" and body["Comment"] == comment and body["TwoPhaseCommit"] == "false"
    assert body["Message"] == "OK" and body["TxnId"] > 0 and body["LoadBytes"] == 6
    # the BE's rapidjson PrettyWriter: 4 spaces, text as it is (no \u escapes past ASCII), a trailing newline
    assert resp.text == json.dumps(body, indent=4, ensure_ascii=False) + "\n"
    assert resp.text.startswith('{\n    "TxnId"') and "héllo ☃" in resp.text


def test_reused_label_answers_label_already_exists_with_finished_job(doris: DorisClient, db: str) -> None:
    doris.sql(db, PLAIN_TABLE)
    first = assert_doris_result(doris.stream_load(db, "t", "1,a,1\n", headers={**CSV, "label": "once"}))
    again = assert_doris_result(
        doris.stream_load(db, "t", "2,b,2\n", headers={**CSV, "label": "once"}), status="Label Already Exists"
    )
    assert again["TxnId"] == -1 and again["ExistingJobStatus"] == "FINISHED"
    assert again["Message"] == (
        "[LABEL_ALREADY_EXISTS]TStatus: errCode = 2, detailMessage = Label [once] has already been used, "
        f"relate to txn [{first['TxnId']}], status [VISIBLE]."
    )
    assert rows(doris, db) == [[1, "a", 1]]
    state = doris.http.get(f"/api/{db}/get_load_state", params={"label": "once"}).json()
    assert state == {"msg": "success", "code": 0, "data": "VISIBLE", "count": 0}


def test_failed_load_frees_its_label_and_leaves_nothing(doris: DorisClient, db: str) -> None:
    doris.sql(db, PLAIN_TABLE)
    failed = doris.stream_load(db, "t", "1,a,1\n2,b\n", headers={**CSV, "label": "retry_me"})
    body = assert_doris_result(
        failed,
        status="Fail",
        message_contains="[DATA_QUALITY_ERROR]too many filtered rows",
        total=2,
        filtered=1,
        loaded=0,
    )
    assert "ErrorURL" in body and body["FirstErrorMsg"].startswith("Reason: actual column number")
    log = httpx.get(body["ErrorURL"], auth=AUTH).text
    assert "actual column number in csv file is  less than  schema column number" in log and "src line [2,b]" in log
    assert rows(doris, db) == []
    state = doris.http.get(f"/api/{db}/get_load_state", params={"label": "retry_me"}).json()["data"]
    assert state == "ABORTED"
    assert_doris_result(doris.stream_load(db, "t", "1,a,1\n", headers={**CSV, "label": "retry_me"}), loaded=1)
    assert rows(doris, db) == [[1, "a", 1]]


def test_get_load_state_of_unknown_label_and_missing_label(doris: DorisClient, db: str) -> None:
    assert doris.http.get(f"/api/{db}/get_load_state", params={"label": "nope"}).json()["data"] == "UNKNOWN"
    missing = doris.http.get(f"/api/{db}/get_load_state").json()
    assert missing == {"msg": "Bad Request", "code": 403, "data": "No label selected", "count": 0}


@pytest.mark.parametrize(
    "data, headers, counts, expected",
    [
        pytest.param(
            "1,a,1\n2,b\n3,c,3\n",
            {"max_filter_ratio": "0.5"},
            dict(total=3, loaded=2, filtered=1),
            [[1, "a", 1], [3, "c", 3]],
            id="filtered-rows-within-ratio-succeed-with-error-url",
        ),
        pytest.param(
            "1,a,x\n",
            {},
            dict(total=1, loaded=1, filtered=0),
            [[1, "a", None]],
            id="non-strict-bad-number-becomes-null",
        ),
        pytest.param(
            "1,a,1\n2,b,2\n3,c,3\n",
            {"where": "n > 1"},
            dict(total=3, loaded=2, unselected=1),
            [[2, "b", 2], [3, "c", 3]],
            id="where-drops-rows-as-unselected",
        ),
        pytest.param(
            "1,a,1\n2,b,2\n",
            {"columns": "k, v, tmp, n = tmp * 10"},
            dict(loaded=2),
            [[1, "a", 10], [2, "b", 20]],
            id="derived-column-from-temporary-field",
        ),
        pytest.param("1|a|1\n", {"column_separator": "|"}, dict(loaded=1), [[1, "a", 1]], id="pipe-separator"),
        pytest.param(
            b"1\\x01a\\x011\n".decode("unicode_escape"),
            {"column_separator": "\\x01"},
            dict(loaded=1),
            [[1, "a", 1]],
            id="invisible-separator-as-hex-escape",
        ),
        pytest.param(
            "1::a::1||2::b::2||",
            {"column_separator": "::", "line_delimiter": "||"},
            dict(loaded=2),
            [[1, "a", 1], [2, "b", 2]],
            id="multi-character-separators",
        ),
        pytest.param("1,a,\\N\n", {}, dict(loaded=1), [[1, "a", None]], id="backslash-n-is-null"),
        pytest.param(
            "k,v,n\n1,a,1\n",
            {"format": "csv_with_names"},
            dict(loaded=1),
            [[1, "a", 1]],
            id="csv-with-names-skips-header",
        ),
        pytest.param("", {}, dict(total=0, loaded=0), [], id="empty-body-loads-nothing"),
        pytest.param(
            '"1"|"a,b"|\\N\n',
            {"trim_double_quotes": "true", "column_separator": "|"},
            dict(loaded=1),
            [[1, "a,b", None]],
            id="trim-double-quotes",
        ),
        pytest.param("1,a,\n", {}, dict(loaded=1), [[1, "a", None]], id="empty-field-into-int-is-null"),
        pytest.param(
            "1,,2\n",
            {"empty_field_as_null": "true", "max_filter_ratio": "1"},
            dict(filtered=1),
            [],
            id="empty-field-as-null-into-not-null-is-filtered",
        ),
        pytest.param("1,,2\n", {}, dict(loaded=1), [[1, "", 2]], id="empty-field-is-empty-string"),
    ],
)
def test_csv_load_rules(
    doris: DorisClient,
    db: str,
    data: str,
    headers: dict[str, str],
    counts: dict[str, int],
    expected: list[list[object]],
) -> None:
    doris.sql(db, PLAIN_TABLE)
    body = assert_doris_result(doris.stream_load(db, "t", data, headers={**CSV, **headers}), **counts)
    assert ("ErrorURL" in body) == bool(body["NumberFilteredRows"])
    assert rows(doris, db) == expected


@pytest.mark.parametrize(
    "data, headers, filtered",
    [
        pytest.param("1,a,x\n", {"strict_mode": "true"}, 1, id="strict-mode-filters-bad-number"),
        pytest.param("1,\\N,1\n", {}, 1, id="null-into-not-null-column-is-filtered"),
        pytest.param("1,abcdefghij,1\n", {}, 1, id="string-longer-than-varchar-is-filtered"),
        pytest.param("1,a,1,9\n", {}, 1, id="too-many-columns-is-filtered"),
        pytest.param("x,a,1\n", {}, 1, id="bad-key-into-not-null-key-is-filtered"),
    ],
)
def test_bad_rows_fail_the_load_and_change_nothing(
    doris: DorisClient, db: str, data: str, headers: dict[str, str], filtered: int
) -> None:
    doris.sql(db, PLAIN_TABLE)
    assert_doris_result(doris.stream_load(db, "t", "7,keep,7\n", headers=CSV))
    assert_doris_result(
        doris.stream_load(db, "t", data, headers={**CSV, **headers}),
        status="Fail",
        message_contains="too many filtered rows",
        filtered=filtered,
        loaded=0,
    )
    assert rows(doris, db) == [[7, "keep", 7]]


@pytest.mark.parametrize(
    "headers, message",
    [
        pytest.param({"merge_type": "UPSERT"}, "Invalid merge type UPSERT", id="unknown-merge-type"),
        pytest.param(
            {"merge_type": "MERGE"}, "Excepted DELETE ON clause when merge type is MERGE.", id="merge-without-delete"
        ),
        pytest.param(
            {"delete": "k=1"}, "Not support DELETE ON clause when merge type is not MERGE.", id="delete-without-merge"
        ),
        pytest.param(
            {"strict_mode": "yes"}, "Invalid strict mode format. Must be bool type", id="strict-mode-not-bool"
        ),
        pytest.param({"timeout": "soon"}, "Invalid timeout format", id="timeout-not-integer"),
        pytest.param({"max_filter_ratio": "lots"}, "max_filter_ratio", id="max-filter-ratio-not-number"),
        pytest.param(
            {"label": "bad label"},
            "Label format error. regex: ^[-_A-Za-z0-9:]{1,128}$, label: bad label",
            id="label-with-space",
        ),
        pytest.param(
            {"columns": "k, v, n = reflect('java.lang.Runtime', 'getRuntime')"},
            "function reflect is not allowed",
            id="reflect-in-columns",
        ),
        pytest.param(
            {"where": "java_method('java.lang.System', 'exit', 1) = 1"},
            "function java_method is not allowed",
            id="java-method-in-where",
        ),
        pytest.param({"where": "k > sleep(1)"}, "function sleep is not allowed", id="sleep-in-where"),
        pytest.param({"columns": "k, v, n = nosuch + 1"}, "Unknown column 'nosuch'", id="unknown-column-in-columns"),
        pytest.param({"where": "nosuch = 1"}, "Unknown column 'nosuch'", id="unknown-column-in-where"),
        pytest.param({"columns": "k, v"}, None, id="unmapped-columns-take-null"),
        pytest.param({"columns": "k, n"}, "Column has no default value. column: v", id="not-null-column-unmapped"),
        pytest.param(
            {"function_column.sequence_col": "n"},
            "There is no sequence column in the table t",
            id="sequence-header-on-table-without-sequence",
        ),
        pytest.param({"format": "arrow"}, "arrow", id="arrow-not-yet"),
        pytest.param({"enclose": "''"}, "enclose must be single-char", id="enclose-of-two-chars"),
    ],
)
def test_bad_headers_fail_before_loading_anything(
    doris: DorisClient, db: str, headers: dict[str, str], message: str | None
) -> None:
    doris.sql(
        db,
        "CREATE TABLE t (k INT NOT NULL, v VARCHAR(8) NOT NULL, n INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1",
    )
    resp = doris.stream_load(
        db, "t", "1,a\n" if headers.get("columns") == "k, v" else "1,a,1\n", headers={**CSV, **headers}
    )
    if message is None:
        assert_doris_result(resp, loaded=1)
        return
    body = assert_doris_result(resp, status="Fail", message_contains=message, loaded=0)
    assert body["TxnId"] == -1
    assert rows(doris, db) == []


def test_unknown_database_and_table_fail(doris: DorisClient, db: str) -> None:
    assert_doris_result(
        doris.stream_load(db, "nosuch", "1\n"), status="Fail", message_contains="Unknown table 'nosuch'"
    )
    assert_doris_result(
        doris.stream_load("nosuchdb", "t", "1\n"), status="Fail", message_contains="Unknown database 'nosuchdb'"
    )


@pytest.mark.parametrize(
    "auth",
    [
        pytest.param(None, id="no-credentials"),
        pytest.param(("root", "x"), id="wrong-password"),
        pytest.param(("bob", ""), id="unknown-user"),
    ],
)
def test_bad_credentials_get_a_doris_fail_and_load_nothing(doris: DorisClient, db: str, auth) -> None:  # type: ignore[no-untyped-def]
    doris.sql(db, PLAIN_TABLE)
    resp = httpx.put(f"{doris.base_url}/api/{db}/t/_stream_load", content=b"1,a,1\n", headers=CSV, auth=auth)
    assert_doris_result(resp, status="Fail", message_contains="[NOT_AUTHORIZED]")
    assert rows(doris, db) == []


def test_unknown_headers_are_ignored(doris: DorisClient, db: str) -> None:
    doris.sql(db, PLAIN_TABLE)
    headers = {**CSV, "fileName": "x.csv", "exec_mem_limit": "100", "x-whatever": "1"}
    assert_doris_result(doris.stream_load(db, "t", "1,a,1\n", headers=headers), loaded=1)


def test_sequence_rules_across_loads(doris: DorisClient, db: str) -> None:
    doris.sql(db, SEQ_TABLE)
    assert_doris_result(doris.stream_load(db, "t", "1,a,5\n2,a,\\N\n3,a,1\n", headers=CSV))
    assert_doris_result(doris.stream_load(db, "t", "1,lower,4\n2,nulls,\\N\n3,b,1\n", headers=CSV))
    # a lower sequence is ignored; NULL against NULL and equal sequences go to the newer load
    assert rows(doris, db) == [[1, "a", 5], [2, "nulls", None], [3, "b", 1]]
    assert_doris_result(doris.stream_load(db, "t", "2,some,0\n", headers=CSV))
    assert_doris_result(doris.stream_load(db, "t", "2,nullseq,\\N\n", headers=CSV))
    # a non-NULL sequence beats NULL (also 0 and negatives), and a later NULL never replaces it
    assert rows(doris, db)[1] == [2, "some", 0]


def test_same_key_in_one_load_equal_sequence_later_row_wins(doris: DorisClient, db: str) -> None:
    doris.sql(db, SEQ_TABLE)
    assert_doris_result(doris.stream_load(db, "t", "1,first,3\n1,second,3\n1,low,2\n", headers=CSV), loaded=3)
    assert rows(doris, db) == [[1, "second", 3]]


def test_delete_merge_type_removes_keys_and_lower_sequence_delete_is_ignored(doris: DorisClient, db: str) -> None:
    doris.sql(db, SEQ_TABLE)
    assert_doris_result(doris.stream_load(db, "t", "1,a,5\n2,b,5\n3,c,5\n", headers=CSV))
    assert_doris_result(doris.stream_load(db, "t", "1,x,5\n2,x,4\n", headers={**CSV, "merge_type": "DELETE"}))
    assert rows(doris, db) == [[2, "b", 5], [3, "c", 5]]
    hidden = doris.rows(db, "set show_hidden_columns=true; select k, __DORIS_DELETE_SIGN__ from t order by k")
    assert hidden == [[1, 1], [2, 0], [3, 0]]
    assert_doris_result(doris.stream_load(db, "t", "1,back,4\n", headers=CSV))
    assert rows(doris, db)[0][0] == 2
    assert_doris_result(doris.stream_load(db, "t", "1,back,6\n", headers=CSV))
    assert rows(doris, db)[0] == [1, "back", 6]


@pytest.mark.parametrize(
    "headers",
    [
        {"merge_type": "DELETE"},
        {"merge_type": "MERGE", "delete": "v = 'x'"},
        {"merge_type": "APPEND"},
    ],
)
def test_every_merge_type_without_the_sequence_column_is_refused(
    doris: DorisClient, db: str, headers: dict[str, str]
) -> None:
    """Doris refuses a load whose `columns` omit the table's `sequence_col`, whatever its merge type; nothing
    is deleted."""
    doris.sql(db, SEQ_TABLE)
    assert_doris_result(doris.stream_load(db, "t", "1,a,5\n2,b,5\n", headers=CSV))
    assert_doris_result(
        doris.stream_load(db, "t", "1,x\n", headers={**CSV, "columns": "k,v", **headers}),
        status="Fail",
        message_contains="Table t has sequence column, need to specify the sequence column",
    )
    assert rows(doris, db) == [[1, "a", 5], [2, "b", 5]]


def test_delete_load_may_omit_a_current_timestamp_sequence_column(doris: DorisClient, db: str) -> None:
    """A sequence column that defaults to CURRENT_TIMESTAMP may be left out, by a DELETE load too: the delete
    carries the load's time, which beats the stored rows' older times."""
    doris.sql(
        db,
        "CREATE TABLE t (k INT NOT NULL, v VARCHAR(8), s DATETIME DEFAULT CURRENT_TIMESTAMP) UNIQUE KEY(k) "
        'DISTRIBUTED BY HASH(k) BUCKETS 2 PROPERTIES ("function_column.sequence_col" = "s")',
    )
    assert_doris_result(doris.stream_load(db, "t", "1,a,2020-01-01 00:00:00\n2,b,2020-01-01 00:00:00\n", headers=CSV))
    assert_doris_result(doris.stream_load(db, "t", "1\n", headers={**CSV, "columns": "k", "merge_type": "DELETE"}))
    assert doris.rows(db, "select k, v from t order by k") == [[2, "b"]]


def test_sequence_type_table_requires_the_sequence_header(doris: DorisClient, db: str) -> None:
    doris.sql(
        db,
        "CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
        "PROPERTIES ('function_column.sequence_type' = 'int')",
    )
    assert_doris_result(
        doris.stream_load(db, "t", "1,1\n", headers=CSV),
        status="Fail",
        message_contains="Table t has sequence column, need to specify the sequence column",
    )
    assert_doris_result(doris.stream_load(db, "t", "1,1\n", headers={**CSV, "function_column.sequence_col": "v"}))


def test_merge_type_on_duplicate_table_is_refused(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE d (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    assert_doris_result(
        doris.stream_load(db, "d", "1,1\n", headers={**CSV, "merge_type": "DELETE"}),
        status="Fail",
        message_contains="load by MERGE or DELETE is only supported in unique tables.",
    )


def test_duplicate_table_keeps_every_row(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE d (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    assert_doris_result(doris.stream_load(db, "d", "1,1\n1,1\n1,2\n", headers=CSV), loaded=3)
    assert doris.rows(db, "select k, v from d order by v") == [[1, 1], [1, 1], [1, 2]]


def test_curl_chunked_body_and_expect_continue(doris: DorisClient, db: str, tmp_path: Path) -> None:
    doris.sql(db, PLAIN_TABLE)
    data = "".join(f"{i},v{i},{i}\n" for i in range(2000))
    headers = {"column_separator": ",", "Expect": "100-continue"}
    reply = curl_stream_load(f"{doris.base_url}/api/{db}/t/_stream_load", headers, stdin=data)
    assert_doris_result(reply, loaded=2000)
    assert doris.rows(db, "select count(*) from t") == [[2000]]


def test_concurrent_loads_into_one_table_all_commit_with_distinct_versions(doris: DorisClient, db: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    doris.sql(db, SEQ_TABLE)
    doris.sql(db, "CREATE TABLE plain (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")

    def load(i: int) -> tuple[dict[str, object], dict[str, object]]:
        seq = doris.stream_load(db, "t", f"{100 + i},own,{i}\n0,from{i},{i}\n", headers={**CSV, "label": f"c{i}"})
        plain = doris.stream_load(db, "plain", f"0,{i}\n", headers={**CSV, "label": f"p{i}"})
        return seq.json(), plain.json()

    with ThreadPoolExecutor(max_workers=8) as pool:
        replies = list(pool.map(load, range(8)))
    for seq_reply, plain_reply in replies:
        assert_doris_result(seq_reply, loaded=2)
        assert_doris_result(plain_reply, loaded=1)
    hidden = "set show_hidden_columns=true; "
    versions = doris.rows(db, hidden + "select k, __DORIS_VERSION_COL__ from t where k >= 100 order by k")
    assert [k for k, _ in versions] == list(range(100, 108))
    assert len({v for _, v in versions}) == 8, "every load got its own version"
    assert doris.rows(db, "select v, s from t where k = 0") == [["from7", 7]]
    # without a sequence column the newest commit wins: the visible row carries the table's last
    # version (a new table is at version 1, and each of the 8 loads committed one more)
    assert doris.rows(db, hidden + "select __DORIS_VERSION_COL__ from plain") == [[9]]
    assert len({r["TxnId"] for _, r in replies}) == 8


@pytest.mark.parametrize(
    "data, headers, counts, expected",
    [
        pytest.param(
            '{"k": 1, "v": "a", "n": 1}\n{"n": 2, "k": 2, "v": "b"}\n',
            {"format": "json"},
            dict(loaded=2),
            [[1, "a", 1], [2, "b", 2]],
            id="json-lines-by-key-name-in-any-order",
        ),
        pytest.param(
            '[{"k": 1, "v": "a"}, {"k": 2, "v": "b", "n": 20, "extra": true}]',
            {"format": "json", "strip_outer_array": "true"},
            dict(loaded=2),
            [[1, "a", None], [2, "b", 20]],
            id="json-array-missing-key-is-null-unknown-key-ignored",
        ),
        pytest.param(
            '{"k": 1, "v": "a"}\nnot json\n{"x": 1}\n',
            {"format": "json", "max_filter_ratio": "0.9"},
            dict(loaded=1, filtered=2),
            [[1, "a", None]],
            id="json-bad-lines-and-rows-without-known-keys-are-filtered",
        ),
        pytest.param(
            '{"id": 5, "name": "e", "num": "7"}\n',
            {"format": "json", "columns": "id, name, num, k = id, v = name, n = num * 2"},
            dict(loaded=1),
            [[5, "e", 14]],
            id="json-columns-map-keys-and-derive",
        ),
        pytest.param(
            '{"a": {"id": 3, "s": "c"}, "x": 9}\n',
            {"format": "json", "jsonpaths": '["$.a.id", "$.a.s", "$.x"]'},
            dict(loaded=1),
            [[3, "c", 9]],
            id="jsonpaths-extract-nested-fields-in-order",
        ),
        pytest.param(
            '{"data": [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]}',
            {"format": "json", "json_root": "$.data", "strip_outer_array": "true"},
            dict(loaded=2),
            [[1, "a", None], [2, "b", None]],
            id="json-root-then-outer-array",
        ),
        pytest.param(
            '[{"p": {"q": 4}}, {"p": {"q": 5}}]',
            {"format": "json", "strip_outer_array": "true", "jsonpaths": '["$.p.q"]', "columns": "k, v = 'z'"},
            dict(loaded=2),
            [[4, "z", None], [5, "z", None]],
            id="jsonpaths-over-outer-array-with-columns",
        ),
        pytest.param(
            '{\n  "k": 7,\n  "v": "pretty",\n  "n": 70\n}\n',
            {"format": "json", "read_json_by_line": "false"},
            dict(loaded=1),
            [[7, "pretty", 70]],
            id="read-json-by-line-false-reads-one-pretty-printed-document",
        ),
        pytest.param(
            '{\n  "k": 7,\n  "v": "pretty"\n}\n',
            {"format": "json", "max_filter_ratio": "1"},
            dict(loaded=0, filtered=4),
            [],
            id="newest-default-reads-json-by-line",
        ),
    ],
)
def test_json_loads(
    doris: DorisClient,
    db: str,
    data: str,
    headers: dict[str, str],
    counts: dict[str, int],
    expected: list[list[object]],
) -> None:
    doris.sql(db, "CREATE TABLE t (k INT NOT NULL, v VARCHAR(8), n INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    assert_doris_result(doris.stream_load(db, "t", data, headers=headers), **counts)
    assert rows(doris, db) == expected


def test_replace_if_not_null_table_keeps_stored_values_for_null_input(doris: DorisClient, db: str) -> None:
    # 004_719a6f3ac1a41aa8.txt: with "replace_if_not_null" = "true", `1001, \N, PAID` keeps order_type
    doris.sql(
        db,
        "CREATE TABLE order_table ( order_id BIGINT, order_type VARCHAR(8), order_status VARCHAR(32) ) "
        "UNIQUE KEY(order_id) DISTRIBUTED BY HASH(order_id) BUCKETS 8 "
        'PROPERTIES ( "replace_if_not_null" = "true" )',
    )
    assert_doris_result(
        doris.stream_load(db, "order_table", "1000,TYPE#1,PAID\n1001,TYPE#2,PENDING\n1002,TYPE#3,PAID\n", headers=CSV)
    )
    assert_doris_result(doris.stream_load(db, "order_table", "1001,\\N,PAID\n", headers=CSV))
    assert doris.rows(db, "select * from order_table order by order_id") == [
        [1000, "TYPE#1", "PAID"],
        [1001, "TYPE#2", "PAID"],
        [1002, "TYPE#3", "PAID"],
    ]


def _compress(kind: str, data: bytes) -> bytes:
    import bz2
    import gzip
    import zlib

    import lz4.frame
    import zstandard

    return {
        "gz": gzip.compress,
        "bz2": bz2.compress,
        "lz4": lz4.frame.compress,
        "zstd": zstandard.ZstdCompressor().compress,
        "deflate": zlib.compress,
    }[kind](data)


@pytest.mark.parametrize(
    "kind, headers",
    [
        pytest.param("gz", {"compress_type": "GZ"}, id="gz"),
        pytest.param("bz2", {"compress_type": "bz2"}, id="bz2"),
        pytest.param("lz4", {"compress_type": "LZ4"}, id="lz4-frame"),
        pytest.param("zstd", {"compress_type": "ZSTD"}, id="zstd"),
        pytest.param("deflate", {"compress_type": "DEFLATE"}, id="deflate"),
        pytest.param("gz", {"Content-Encoding": "gzip"}, id="content-encoding-gzip"),
        pytest.param("lz4", {"Content-Encoding": "lz4", "compress_type": "LZ4"}, id="streamloader-sends-both-once"),
    ],
)
def test_compressed_bodies(doris: DorisClient, db: str, kind: str, headers: dict[str, str]) -> None:
    doris.sql(db, PLAIN_TABLE)
    plain = "".join(f"{i},v{i},{i}\n" for i in range(500)).encode()
    body = _compress(kind, plain)
    reply = assert_doris_result(doris.stream_load(db, "t", body, headers={**CSV, **headers}), loaded=500)
    assert reply["LoadBytes"] == len(body)
    assert doris.rows(db, "select count(*), sum(n) from t") == [[500, sum(range(500))]]


def test_corrupt_compressed_body_fails_and_loads_nothing(doris: DorisClient, db: str) -> None:
    doris.sql(db, PLAIN_TABLE)
    body = assert_doris_result(
        doris.stream_load(db, "t", b"not gzip at all", headers={**CSV, "compress_type": "GZ", "label": "bad_gz"}),
        status="Fail",
        message_contains="failed to decompress the body as gz",
    )
    assert body["TxnId"] > 0
    assert rows(doris, db) == []
    assert_doris_result(
        doris.stream_load(
            db, "t", _compress("gz", b"1,a,1\n"), headers={**CSV, "compress_type": "gz", "label": "bad_gz"}
        )
    )


@pytest.mark.parametrize("fmt", ["parquet", "orc"])
def test_columnar_bodies_match_columns_by_name(doris: DorisClient, db: str, fmt: str, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.orc as orc
    import pyarrow.parquet as pq

    doris.sql(db, PLAIN_TABLE)
    table = pa.table({"N": [5, 6], "k": [1, 2], "v": ["a", None], "extra": [0.5, 0.25]})
    path = tmp_path / f"body.{fmt}"
    pq.write_table(table, path) if fmt == "parquet" else orc.write_table(table, path)
    body = assert_doris_result(
        doris.stream_load(db, "t", path.read_bytes(), headers={"format": fmt, "max_filter_ratio": "0.5"}),
        loaded=1,
        filtered=1,
    )
    assert "column(v) values is null while columns is not nullable" in httpx.get(body["ErrorURL"], auth=AUTH).text
    assert rows(doris, db) == [[1, "a", 5]]


def test_load_past_its_timeout_fails_and_commits_nothing(doris: DorisClient, db: str) -> None:
    doris.sql(db, PLAIN_TABLE)
    # a million rows through the slowest CSV path (enclose: Spark's CSV parser per line) take well over 1 s
    data = "".join(f"{i},v{i % 1000},{i}\n" for i in range(1_000_000))
    body = assert_doris_result(
        doris.stream_load(db, "t", data, headers={**CSV, "enclose": '"', "timeout": "1", "label": "too_slow"}),
        status="Fail",
        message_contains="[TIMEOUT]load timed out after 1 s",
    )
    assert body["NumberLoadedRows"] == 0
    assert rows(doris, db) == []
    assert doris.http.get(f"/api/{db}/get_load_state", params={"label": "too_slow"}).json()["data"] == "ABORTED"
    assert_doris_result(doris.stream_load(db, "t", "1,a,1\n", headers={**CSV, "label": "too_slow"}), loaded=1)


def test_slow_body_past_its_timeout_fails(doris: DorisClient, db: str) -> None:
    doris.sql(db, PLAIN_TABLE)

    def slow() -> Iterator[bytes]:
        yield b"1,a,1\n"
        time.sleep(1.5)
        yield b"2,b,2\n"

    resp = doris.http.put(f"/api/{db}/t/_stream_load", content=slow(), headers={**CSV, "timeout": "1"})
    assert_doris_result(resp, status="Fail", message_contains="[TIMEOUT]")
    assert rows(doris, db) == []


@pytest.mark.parametrize(
    "headers, hour",
    [
        pytest.param({}, 0, id="server-default-utc"),
        pytest.param({"timezone": "Asia/Shanghai"}, 8, id="timezone-name"),
        pytest.param({"time_zone": "-05:00"}, 19, id="time-zone-alias-offset"),
        pytest.param({"timezone": "+01:00", "time_zone": "Asia/Shanghai"}, 1, id="timezone-wins-over-alias"),
    ],
)
def test_timezone_header_applies_to_load_expressions(
    doris: DorisClient, db: str, headers: dict[str, str], hour: int
) -> None:
    doris.sql(db, PLAIN_TABLE)
    columns = {"columns": "k, v, n = hour(from_unixtime(0))"}
    assert_doris_result(doris.stream_load(db, "t", "1,a\n", headers={**CSV, **columns, **headers}), loaded=1)
    assert rows(doris, db) == [[1, "a", hour]]


def test_unknown_timezone_is_refused(doris: DorisClient, db: str) -> None:
    doris.sql(db, PLAIN_TABLE)
    assert_doris_result(
        doris.stream_load(db, "t", "1,a,1\n", headers={**CSV, "timezone": "Mars/Olympus"}),
        status="Fail",
        message_contains="Unknown or incorrect time zone: 'Mars/Olympus'",
    )


@pytest.mark.parametrize(
    "data, headers, counts, expected",
    [
        pytest.param('1,"a,b",3\n', {"enclose": '"'}, dict(loaded=1), [[1, "a,b", 3]], id="enclose-protects-separator"),
        pytest.param(
            '1,"a\\"b",3\n',
            {"enclose": '"', "escape": "\\"},
            dict(loaded=1),
            [[1, 'a"b', 3]],
            id="escape-inside-enclose",
        ),
        pytest.param(
            '1,"x"\n2,"y",2,9\n3,"z",\\N\n',
            {"enclose": '"', "max_filter_ratio": "1"},
            dict(loaded=1, filtered=2),
            [[3, "z", None]],
            id="enclose-keeps-column-count-checks",
        ),
        pytest.param(
            "1|'p|q'|4\n",
            {"enclose": "'", "column_separator": "|"},
            dict(loaded=1),
            [[1, "p|q", 4]],
            id="enclose-with-other-separator",
        ),
        pytest.param('1,"q",3\n', {"escape": "\\"}, dict(loaded=1), [[1, '"q"', 3]], id="escape-without-enclose"),
    ],
)
def test_enclose_and_escape(
    doris: DorisClient,
    db: str,
    data: str,
    headers: dict[str, str],
    counts: dict[str, int],
    expected: list[list[object]],
) -> None:
    doris.sql(db, PLAIN_TABLE)
    assert_doris_result(doris.stream_load(db, "t", data, headers={**CSV, **headers}), **counts)
    assert rows(doris, db) == expected


def test_a_bug_under_a_stream_load_is_answered_as_a_failed_load(
    doris: DorisClient, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream load skips FastAPI's routing (`app.stream_load.DirectStreamLoads`); an exception no step caught
    is still answered as the app's handlers answer it: the load JSON, Status Fail, its label, no internals."""
    import app.stream_load

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a secret path /etc/internal")

    doris.sql(db, TWO_COLUMNS)
    monkeypatch.setattr(app.stream_load, "execute_stream_load", broken)
    resp = doris.stream_load(db, "t", "1,a\n", {"label": "bug_1", "column_separator": ","})
    assert resp.status_code == 200
    body = resp.json()
    assert body["Status"] == "Fail" and body["Label"] == "bug_1", body
    assert body["Message"] == "[INTERNAL_ERROR]internal error (RuntimeError); the server log has the details", body
    monkeypatch.undo()
    assert doris.stream_load(db, "t", "1,a\n", {"label": "bug_1", "column_separator": ","}).json()["Status"] == (
        "Success"
    )


def test_a_stream_loads_path_parameters_are_decoded_as_fastapi_decodes_them(doris: DorisClient, db: str) -> None:
    """The database and table of `/api/{db}/{table}/_stream_load` arrive percent-decoded; a path with a trailing
    slash or a further segment is not a stream load."""
    doris.sql(db, TWO_COLUMNS)
    quoted = "".join(f"%{b:02X}" for b in db.encode())
    reply = doris.http.put(f"/api/{quoted}/%74/_stream_load", content=b"7,q\n", headers={"column_separator": ","})
    assert reply.json()["Status"] == "Success", reply.text
    assert [7, "q"] in rows(doris, db)
    for path in (f"/api/{db}/t/_stream_load/", f"/api/{db}/t/x/_stream_load"):
        assert doris.http.put(path, content=b"8,r\n").status_code in (307, 404, 405), path
