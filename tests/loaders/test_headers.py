"""`loaders.headers.parse_load_request`: stream-load headers → `LoadRequest`, with Doris's defaults and texts.

Headers are given as starlette `Headers`, so names are case-insensitive exactly as they are over HTTP.
"""

from __future__ import annotations

from typing import Any

import pytest
from starlette.datastructures import Headers

from loaders.headers import LABEL_PATTERN, parse_load_request
from tables.errors import BadExpression, BadHeader, LoadError
from tables.load_spec import ColumnMapping, LoadRequest, MergeType

LABEL_RULE = "Label format error. regex: ^[-_A-Za-z0-9:]{1,128}$, label: "
LONG_LABEL = "L" * 129


def parse(headers: dict[str, str]) -> LoadRequest:
    return parse_load_request("db1", "t1", Headers(headers=headers))


def assert_refused(headers: dict[str, str], error: type[LoadError], message: str) -> LoadError:
    """The headers are refused with exactly this error class and a message containing `message`."""
    with pytest.raises(LoadError) as info:
        parse(headers)
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    assert message in str(info.value), str(info.value)
    return info.value


# --- defaults ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        pytest.param("db", "db1", id="db-comes-from-the-url"),
        pytest.param("table", "t1", id="table-comes-from-the-url"),
        pytest.param("column_separator", "\t", id="column-separator-defaults-to-tab"),
        pytest.param("line_delimiter", "\n", id="line-delimiter-defaults-to-newline"),
        pytest.param("merge_type", MergeType.APPEND, id="merge-type-defaults-to-append"),
        pytest.param("max_filter_ratio", 0.0, id="max-filter-ratio-defaults-to-zero"),
        pytest.param("strict_mode", False, id="strict-mode-defaults-to-false"),
        pytest.param("timeout_s", 259200, id="timeout-defaults-to-three-days"),
        pytest.param("skip_lines", 0, id="no-lines-are-skipped-by-default"),
        pytest.param("columns", None, id="no-columns-means-table-order"),
        pytest.param("hidden_columns", (), id="no-hidden-columns-by-default"),
        pytest.param("where", None, id="no-where-by-default"),
        pytest.param("delete", None, id="no-delete-by-default"),
        pytest.param("sequence_col", None, id="no-sequence-column-by-default"),
        pytest.param("comment", "", id="comment-defaults-to-empty"),
        pytest.param("source", "stream_load", id="source-is-stream-load"),
    ],
)
def test_no_headers_gives_doris_defaults(field: str, expected: Any) -> None:
    assert getattr(parse({}), field) == expected


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-label-header"),
        pytest.param({"label": ""}, id="empty-label-header"),
    ],
)
def test_label_is_generated_when_not_given(headers: dict[str, str]) -> None:
    first, second = parse(headers).label, parse(headers).label
    assert LABEL_PATTERN.match(first), first
    assert first != second


# --- accepted values --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "field", "expected"),
    [
        pytest.param({"column_separator": ","}, "column_separator", ",", id="comma-separator"),
        pytest.param({"column_separator": "|"}, "column_separator", "|", id="pipe-separator"),
        pytest.param({"column_separator": "\\x01"}, "column_separator", "\x01", id="hex-escape-separator"),
        pytest.param({"column_separator": "\\x7C"}, "column_separator", "|", id="upper-case-hex-escape-separator"),
        pytest.param(
            {"column_separator": "\\x01\\x02"}, "column_separator", "\x01\x02", id="multi-char-hex-escape-separator"
        ),
        pytest.param({"column_separator": "||"}, "column_separator", "||", id="multi-char-separator"),
        pytest.param(
            {"column_separator": "a\\x01b"}, "column_separator", "a\x01b", id="hex-escape-inside-multi-char-separator"
        ),
        pytest.param({"column_separator": "\\t"}, "column_separator", "\t", id="escaped-tab-separator"),
        pytest.param({"Column_Separator": ","}, "column_separator", ",", id="header-names-are-case-insensitive"),
        pytest.param({"line_delimiter": "\\r\\n"}, "line_delimiter", "\r\n", id="crlf-line-delimiter"),
        pytest.param({"line_delimiter": "\\x02"}, "line_delimiter", "\x02", id="hex-escape-line-delimiter"),
        pytest.param({"merge_type": "APPEND"}, "merge_type", MergeType.APPEND, id="merge-type-append"),
        pytest.param({"merge_type": "delete"}, "merge_type", MergeType.DELETE, id="merge-type-is-case-insensitive"),
        pytest.param(
            {"MERGE_TYPE": "Delete"}, "merge_type", MergeType.DELETE, id="merge-type-header-name-and-value-in-any-case"
        ),
        pytest.param(
            {"merge_type": "merge", "delete": "k1 = 1"},
            "merge_type",
            MergeType.MERGE,
            id="merge-type-merge-with-delete-condition",
        ),
        pytest.param({"strict_mode": "true"}, "strict_mode", True, id="strict-mode-true"),
        pytest.param({"strict_mode": "TRUE"}, "strict_mode", True, id="strict-mode-is-case-insensitive"),
        pytest.param({"strict_mode": "false"}, "strict_mode", False, id="strict-mode-false"),
        pytest.param({"timeout": "60"}, "timeout_s", 60, id="timeout-in-seconds"),
        pytest.param({"timeout": "1"}, "timeout_s", 1, id="timeout-of-one-second"),
        pytest.param({"timeout": "259200"}, "timeout_s", 259200, id="timeout-at-the-maximum"),
        pytest.param({"max_filter_ratio": "0.2"}, "max_filter_ratio", 0.2, id="max-filter-ratio-fraction"),
        pytest.param({"max_filter_ratio": "1"}, "max_filter_ratio", 1.0, id="max-filter-ratio-one"),
        pytest.param({"max_filter_ratio": "0"}, "max_filter_ratio", 0.0, id="max-filter-ratio-zero"),
        pytest.param(
            {"label": "load-2024_01:part1"}, "label", "load-2024_01:part1", id="label-with-dash-underscore-colon"
        ),
        pytest.param({"label": "L" * 128}, "label", "L" * 128, id="label-of-128-chars"),
        pytest.param({"format": "csv"}, "skip_lines", 0, id="csv-skips-nothing"),
        pytest.param({"format": "CSV"}, "skip_lines", 0, id="format-is-case-insensitive"),
        pytest.param({"format": "csv_with_names"}, "skip_lines", 1, id="csv-with-names-skips-the-header-line"),
        pytest.param(
            {"format": "csv_with_names_and_types"}, "skip_lines", 2, id="csv-with-names-and-types-skips-two-lines"
        ),
        pytest.param({"skip_lines": "3"}, "skip_lines", 3, id="skip-lines-header"),
        pytest.param({"function_column.sequence_col": "ts"}, "sequence_col", "ts", id="sequence-column-kept"),
        pytest.param(
            {"hidden_columns": "__DORIS_DELETE_SIGN__,__DORIS_SEQUENCE_COL__"},
            "hidden_columns",
            ("__DORIS_DELETE_SIGN__", "__DORIS_SEQUENCE_COL__"),
            id="hidden-columns-split-on-commas",
        ),
        pytest.param(
            {"hidden_columns": " a , b ,"},
            "hidden_columns",
            ("a", "b"),
            id="hidden-columns-trimmed-and-empty-entries-dropped",
        ),
        pytest.param({"comment": "nightly load"}, "comment", "nightly load", id="comment-kept"),
        pytest.param({"group_commit": "off_mode"}, "group_commit", "off_mode", id="group-commit-off-is-accepted"),
        pytest.param({"group_commit": "ASYNC_MODE"}, "group_commit", "async_mode", id="group-commit-mode-any-case"),
        pytest.param({}, "group_commit", None, id="group-commit-absent-table-decides"),
        pytest.param({"two_phase_commit": "true"}, "two_phase_commit", True, id="two-phase-commit"),
        pytest.param({"two_phase_commit": "True"}, "two_phase_commit", False, id="two-phase-commit-exact-string"),
    ],
)
def test_header_value_is_applied(headers: dict[str, str], field: str, expected: Any) -> None:
    assert getattr(parse(headers), field) == expected


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"x-custom-header": "1"}, id="custom-header"),
        pytest.param({"Expect": "100-continue", "User-Agent": "curl/8.0"}, id="http-headers"),
        pytest.param({"exec_mem_limit": "2147483648", "send_batch_parallelism": "2"}, id="doris-tuning-headers"),
        pytest.param({"load_to_single_tablet": "true", "memtable_on_sink_node": "true"}, id="doris-sink-headers"),
        pytest.param({"enable_profile": "true", "skip_record_to_audit_log_table": "true"}, id="doris-audit-headers"),
    ],
)
def test_unknown_headers_are_ignored(headers: dict[str, str]) -> None:
    assert parse(headers).model_dump(exclude={"label"}) == parse({}).model_dump(exclude={"label"})


# --- refused values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "error", "message"),
    [
        pytest.param({"merge_type": "upsert"}, BadHeader, "Invalid merge type upsert", id="unknown-merge-type"),
        pytest.param(
            {"merge_type": "Replace"},
            BadHeader,
            "Invalid merge type Replace",
            id="unknown-merge-type-is-quoted-as-sent",
        ),
        pytest.param(
            {"merge_type": "MERGE"},
            BadHeader,
            "Excepted DELETE ON clause when merge type is MERGE.",
            id="merge-type-merge-without-delete-header",
        ),
        pytest.param(
            {"merge_type": "DELETE", "delete": "k1 = 1"},
            BadHeader,
            "Not support DELETE ON clause when merge type is not MERGE.",
            id="merge-type-delete-with-delete-header",
        ),
        pytest.param(
            {"delete": "k1 = 1"},
            BadHeader,
            "Not support DELETE ON clause when merge type is not MERGE.",
            id="delete-header-with-default-append",
        ),
        pytest.param(
            {"strict_mode": "yes"}, BadHeader, "Invalid strict mode format. Must be bool type", id="strict-mode-yes"
        ),
        pytest.param(
            {"strict_mode": "1"}, BadHeader, "Invalid strict mode format. Must be bool type", id="strict-mode-one"
        ),
        pytest.param({"timeout": "abc"}, BadHeader, "Invalid timeout format", id="timeout-not-a-number"),
        pytest.param({"timeout": "1.5"}, BadHeader, "Invalid timeout format", id="timeout-not-an-integer"),
        pytest.param(
            {"timeout": "0"}, BadHeader, "Invalid timeout: 0, must be between 1 and 259200 seconds", id="timeout-zero"
        ),
        pytest.param({"timeout": "-5"}, BadHeader, "Invalid timeout: -5", id="timeout-negative"),
        pytest.param({"timeout": "259201"}, BadHeader, "Invalid timeout: 259201", id="timeout-above-the-maximum"),
        pytest.param(
            {"max_filter_ratio": "abc"},
            BadHeader,
            "Invalid max_filter_ratio format: abc",
            id="max-filter-ratio-not-a-number",
        ),
        pytest.param(
            {"max_filter_ratio": "1.5"},
            BadHeader,
            "max_filter_ratio must be between 0 and 1, got 1.5",
            id="max-filter-ratio-above-one",
        ),
        pytest.param(
            {"max_filter_ratio": "-0.1"},
            BadHeader,
            "max_filter_ratio must be between 0 and 1, got -0.1",
            id="max-filter-ratio-negative",
        ),
        pytest.param(
            {"max_filter_ratio": "nan"},
            BadHeader,
            "max_filter_ratio must be between 0 and 1, got nan",
            id="max-filter-ratio-nan",
        ),
        pytest.param(
            {"label": "my label"},
            BadHeader,
            f"{LABEL_RULE}my label",
            id="label-with-a-space",
        ),
        pytest.param({"label": LONG_LABEL}, BadHeader, f"{LABEL_RULE}{LONG_LABEL}", id="label-of-129-chars"),
        pytest.param({"label": "a/b"}, BadHeader, LABEL_RULE, id="label-with-a-slash"),
        pytest.param({"label": "a.b"}, BadHeader, LABEL_RULE, id="label-with-a-dot"),
        pytest.param({"label": "étiquette"}, BadHeader, LABEL_RULE, id="label-with-non-ascii"),
        pytest.param(
            {"format": "json", "strip_outer_array": "true", "read_json_by_line": "true"},
            BadHeader,
            "Don't support both strip_outer_array and read_json_by_line",
            id="json-array-and-lines-together",
        ),
        pytest.param({"format": "arrow"}, BadHeader, "format arrow is not supported", id="format-arrow"),
        pytest.param({"format": "xml"}, BadHeader, "unknown data format, format=xml", id="unknown-format"),
        pytest.param(
            {"skip_lines": "-1"},
            BadHeader,
            "Invalid 'skip_lines': -1",
            id="skip-lines-negative",
        ),
        pytest.param(
            {"group_commit": "bogus"},
            BadHeader,
            "group_commit can only be [async_mode, sync_mode, off_mode]",
            id="group-commit-unknown-mode",
        ),
        pytest.param(
            {"unique_key_update_mode": "UPDATE_FLEXIBLE_COLUMNS", "format": "json"},
            BadHeader,
            "UPDATE_FLEXIBLE_COLUMNS is not supported",
            id="flexible-partial-update-not-built",
        ),
        pytest.param(
            {"unique_key_update_mode": "sometimes"},
            BadHeader,
            "Invalid unique_key_partial_mode sometimes, must be one of 'UPSERT', 'UPDATE_FIXED_COLUMNS' or "
            "'UPDATE_FLEXIBLE_COLUMNS'",
            id="unknown-update-mode",
        ),
        pytest.param(
            {"partial_update_new_key_behavior": "maybe"},
            BadHeader,
            "Invalid partial_update_new_key_behavior MAYBE, must be one of {'APPEND', 'ERROR'}",
            id="unknown-new-key-behavior",
        ),
        pytest.param({"compress_type": "LZO"}, BadHeader, "compress_type LZO is not supported", id="lzo-not-built"),
        pytest.param(
            {"compress_type": "rar"},
            BadHeader,
            "unknown data format, format=, compress_type=rar",
            id="unknown-compress-type",
        ),
        pytest.param({"Content-Encoding": "br"}, BadHeader, "unsupported Content-Encoding: br", id="brotli-encoding"),
        pytest.param(
            {"format": "json", "jsonpaths": '["a"]'}, BadHeader, 'Invalid json path: ["a"]', id="jsonpath-without-root"
        ),
        pytest.param({"format": "json", "jsonpaths": "$.a"}, BadHeader, "Invalid json path", id="jsonpaths-not-array"),
        pytest.param({"column_separator": ""}, BadHeader, "column_separator is empty", id="empty-column-separator"),
        pytest.param({"line_delimiter": ""}, BadHeader, "line_delimiter is empty", id="empty-line-delimiter"),
        pytest.param({"columns": "k1, k1"}, BadExpression, "Duplicate column: k1", id="duplicate-name-in-columns"),
        pytest.param(
            {"columns": "k1, v1 = reflect('java.lang.Runtime', 'getRuntime')"},
            BadExpression,
            "function reflect is not allowed",
            id="reflect-in-columns",
        ),
        pytest.param({"where": "k1 >"}, BadExpression, "failed to parse where 'k1 >'", id="unparsable-where"),
        pytest.param({"where": "k1 > sleep(1)"}, BadExpression, "function sleep is not allowed", id="sleep-in-where"),
        pytest.param(
            {"merge_type": "MERGE", "delete": "k1 in (select 1)"}, BadExpression, "(Subquery)", id="subquery-in-delete"
        ),
    ],
)
def test_bad_header_is_refused(headers: dict[str, str], error: type[LoadError], message: str) -> None:
    assert_refused(headers, error, message)


@pytest.mark.parametrize(
    "headers, fmt, strip",
    [
        pytest.param({"format": "JSON"}, "json", False, id="json-any-case-reads-lines-by-default"),
        pytest.param({"format": "json", "strip_outer_array": "true"}, "json", True, id="json-array"),
        pytest.param({"strip_outer_array": "true"}, "csv", False, id="strip-outer-array-ignored-for-csv"),
    ],
)
def test_json_format_headers(headers: dict[str, str], fmt: str, strip: bool) -> None:
    request = parse_load_request("db", "t", Headers(headers=headers))
    assert request.format == fmt and request.strip_outer_array is strip


@pytest.mark.parametrize(
    "headers, partial, behavior",
    [
        pytest.param({}, False, "APPEND", id="upsert-by-default"),
        pytest.param({"partial_columns": "true"}, True, "APPEND", id="partial-columns-true"),
        pytest.param({"partial_columns": "TRUE"}, True, "APPEND", id="partial-columns-any-case"),
        pytest.param({"unique_key_update_mode": "update_fixed_columns"}, True, "APPEND", id="fixed-columns-mode"),
        pytest.param(
            {"unique_key_update_mode": "UPSERT", "partial_columns": "true"},
            False,
            "APPEND",
            id="update-mode-wins-over-partial-columns",
        ),
        pytest.param({"partial_update_new_key_behavior": "error"}, False, "ERROR", id="new-key-behavior-any-case"),
    ],
)
def test_partial_update_headers(headers: dict[str, str], partial: bool, behavior: str) -> None:
    request = parse_load_request("db", "t", Headers(headers=headers))
    assert request.partial_columns is partial
    assert request.partial_update_new_key_behavior == behavior


def test_merge_type_delete_with_delete_header_is_refused_with_the_doris_message() -> None:
    exc = assert_refused(
        {"merge_type": "DELETE", "delete": "k1 = 1"},
        BadHeader,
        "Not support DELETE ON clause when merge type is not MERGE.",
    )
    assert exc.doris_message == "[INVALID_ARGUMENT]Not support DELETE ON clause when merge type is not MERGE."


# --- expressions in headers -------------------------------------------------------------------------------


def test_columns_header_is_parsed_into_mappings() -> None:
    columns = parse({"columns": "k1, tmp, v1 = tmp * 10"}).columns
    assert columns is not None
    assert [c.name for c in columns] == ["k1", "tmp", "v1"]
    assert columns[0] == ColumnMapping(name="k1")
    assert columns[1] == ColumnMapping(name="tmp")
    v1 = columns[2].expr
    assert v1 is not None
    assert v1.refs == ("tmp",)
    assert "`tmp`" in v1.spark_sql
    assert v1.spark_sql == "`tmp` * 10"


@pytest.mark.parametrize(
    ("headers", "field", "spark_sql", "refs"),
    [
        pytest.param({"where": "k1 > 1"}, "where", "`k1` > 1", ("k1",), id="where-comparison"),
        pytest.param({"where": "v1 in ('a', 'b')"}, "where", "`v1` IN ('a', 'b')", ("v1",), id="where-in-list"),
        pytest.param(
            {"merge_type": "MERGE", "delete": "flag = 1"}, "delete", "`flag` = 1", ("flag",), id="delete-with-merge"
        ),
        pytest.param(
            {"Merge_Type": "merge", "DELETE": "v1 is null"},
            "delete",
            "`v1` IS NULL",
            ("v1",),
            id="delete-header-name-in-any-case",
        ),
    ],
)
def test_condition_header_is_parsed(headers: dict[str, str], field: str, spark_sql: str, refs: tuple[str, ...]) -> None:
    expr = getattr(parse(headers), field)
    assert expr is not None
    assert expr.spark_sql == spark_sql
    assert expr.refs == refs
    assert expr.text == Headers(headers=headers)[field]


def test_negative_header() -> None:
    assert parse_load_request("db", "t", Headers(headers={"negative": "false"})).negative is False
    assert parse_load_request("db", "t", Headers(headers={"negative": "true"})).negative is True


# --- requests kept by shape -------------------------------------------------------------------------------------

SHAPES = [
    {"column_separator": ","},
    {"format": "json", "jsonpaths": '["$.a", "$.b"]', "strip_outer_array": "true"},
    {"columns": "k1, tmp, v1 = tmp * 2", "where": "k1 > 0", "merge_type": "MERGE", "delete": "v1 = 0"},
    {"compress_type": "gz", "max_filter_ratio": "0.5", "strict_mode": "true", "timezone": "Asia/Tokyo"},
    {"Content-Encoding": "gzip", "group_commit": "async_mode"},
    {"partial_columns": "true", "columns": "k1, v1", "function_column.sequence_col": "v1"},
]


class Recording(dict[str, str]):
    """Headers that note every name looked up."""

    def __init__(self, headers: dict[str, str]) -> None:
        super().__init__({name.lower(): value for name, value in headers.items()})
        self.asked: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return super().get(key, default)


@pytest.mark.parametrize("headers", SHAPES)
def test_a_request_of_a_shape_seen_before_is_the_one_built_afresh(headers: dict[str, str]) -> None:
    """The second load of a shape gets the request the first one built, with its own label (or a new one)."""
    from loaders.headers import build_request
    from loaders.options import OptionValues

    for label in ("first", "second", None):
        sent = {**headers, **({"label": label} if label else {})}
        if "group_commit" in headers and label:  # Doris refuses a label of the client's own there
            assert_refused(sent, BadHeader, "label and group_commit can't be set at the same time")
            continue
        request = parse(sent)
        fresh = build_request("db1", "t1", OptionValues(Headers(headers=sent)))
        assert request.model_dump(exclude={"label"}) == fresh.model_dump(exclude={"label"})
        if label:
            assert request.label == label
        else:
            assert LABEL_PATTERN.fullmatch(request.label) and request.label != fresh.label
    assert_refused({**headers, "label": LONG_LABEL}, BadHeader, LABEL_RULE)  # a known shape: the label still checked


@pytest.mark.parametrize("headers", SHAPES)
def test_building_a_request_reads_no_header_but_the_option_headers(headers: dict[str, str]) -> None:
    """Requests are kept by the values of `OPTION_HEADERS`: a header read beside them would be missed."""
    from loaders.headers import build_request
    from loaders.options import OPTION_HEADERS, OptionValues

    label = {} if "group_commit" in headers else {"label": "l1"}
    sent = Recording({**headers, **label, "format": headers.get("format", "csv")})
    build_request("db1", "t1", OptionValues(sent))
    assert sent.asked and sent.asked <= OPTION_HEADERS, sent.asked - OPTION_HEADERS


def test_a_shape_seen_before_is_not_parsed_again() -> None:
    """The second load's `columns` and `where` are the very objects the first load's parse made."""
    headers = {"columns": "k1, tmp, v1 = tmp * 3", "where": "k1 > 7"}
    first, second = parse({**headers, "label": "a"}), parse({**headers, "label": "b"})
    assert (second.label, second.columns, second.where) == ("b", first.columns, first.where)
    assert second.columns is first.columns and second.where is first.where
    assert parse({**headers, "where": "k1 > 8"}).where is not first.where  # another shape
