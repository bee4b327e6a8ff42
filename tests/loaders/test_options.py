"""`loaders.options`: the one table of load options, read as Doris reads headers; every option is accepted by
`parse_load_request`, the docs print the table, and SQL properties map onto it. No Spark."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from starlette.datastructures import Headers

from loaders.headers import parse_load_request
from loaders.options import DOCS_PATH, LOAD_OPTIONS, OptionValues, markdown, option, statement_options
from tables.errors import BadHeader
from tables.load_spec import LoadRequest
from tables.routine_load import STORE_FORMAT, JobState, RoutineLoadSpec, RoutineLoadStore

# a value for each option whose table entry documents neither a default nor values
EXAMPLES = {
    "label": "load_1",
    "column_separator": "\\x01",
    "line_delimiter": "\\r\\n",
    "enclose": '"',
    "escape": "\\",
    "columns": "k, tmp, v = upper(tmp)",
    "hidden_columns": "__DORIS_DELETE_SIGN__",
    "where": "k > 1",
    "delete": "k = 1",
    "function_column.sequence_col": "s",
    "timezone": "Asia/Shanghai",
    "comment": "nightly",
    "jsonpaths": '["$.k", "$.v"]',
    "json_root": "$.data",
    "exec_mem_limit": "2147483648",
    "send_batch_parallelism": "2",
    "load_stream_per_node": "4",
    "partitions": "p1, p2",
    "temporary_partitions": "tp1, tp2",
}
# headers an option needs beside it to be accepted
CONTEXT = {"delete": {"merge_type": "MERGE"}, "merge_type": {"delete": "k = 1"}, "jsonpaths": {"format": "json"}}


def _samples() -> list[Any]:
    cases = []
    for opt in LOAD_OPTIONS:
        values = list(opt.documented_values) or [
            str(v).lower() if isinstance(v, bool) else str(v) for v in (opt.documented_default,) if v is not None
        ]
        if opt.kind == "boolean":
            values = ["true", "false"]
        for value in values or [EXAMPLES[opt.name]]:
            context = {} if opt.name == "merge_type" and value != "MERGE" else CONTEXT.get(opt.name, {})
            cases.append(pytest.param(opt.name, value, context, id=f"{opt.name}={value}"))
    return cases


@pytest.mark.parametrize(("name", "value", "context"), _samples())
def test_every_option_and_documented_value_is_accepted(name: str, value: str, context: dict[str, str]) -> None:
    parse_load_request("db", "t", Headers(headers={name: value, **context}))


@pytest.mark.parametrize("opt", [pytest.param(o, id=o.name) for o in LOAD_OPTIONS])
def test_an_absent_option_gives_its_default(opt: Any) -> None:
    assert OptionValues({}).value(opt.name) == opt.default


# --- reading one value ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "name", "expected"),
    [
        pytest.param({"negative": "yes"}, "negative", False, id="bool-anything-but-true-is-false"),
        pytest.param({"negative": " TRUE "}, "negative", True, id="bool-any-case-stripped"),
        pytest.param({"strict_mode": "False"}, "strict_mode", False, id="strict-bool-any-case"),
        pytest.param({"merge_type": "delete"}, "merge_type", "DELETE", id="allowed-value-in-canonical-case"),
        pytest.param({"group_commit": "SYNC_MODE"}, "group_commit", "sync_mode", id="group-commit-lower-case"),
        pytest.param({"merge_type": ""}, "merge_type", "APPEND", id="empty-value-is-absent"),
        pytest.param({"timeout": " 60 "}, "timeout", 60, id="integer-stripped"),
        pytest.param({"max_filter_ratio": "1e-1"}, "max_filter_ratio", 0.1, id="number-as-python-reads-floats"),
        pytest.param({"two_phase_commit": "True"}, "two_phase_commit", False, id="two-phase-only-the-exact-text"),
        pytest.param({"two_phase_commit": " true "}, "two_phase_commit", True, id="two-phase-stripped"),
        pytest.param({"exec_mem_limit": "12abc"}, "exec_mem_limit", "12abc", id="tuning-integer-prefix-like-stoll"),
        pytest.param({"column_separator": " , "}, "column_separator", " , ", id="separator-keeps-spaces"),
        pytest.param({"comment": " c "}, "comment", " c ", id="comment-keeps-spaces"),
        pytest.param({"time_zone": "UTC"}, "timezone", "UTC", id="alias"),
        pytest.param({"timezone": "", "time_zone": "UTC"}, "timezone", "UTC", id="empty-name-gives-way-to-alias"),
        pytest.param({"timezone": "+08:00", "time_zone": "UTC"}, "timezone", "+08:00", id="name-wins-over-alias"),
        pytest.param({"hidden_columns": " a , b ,"}, "hidden_columns", ("a", "b"), id="names-list"),
        pytest.param({"MERGE_TYPE": "merge"}, "merge_type", "MERGE", id="header-names-any-case"),
    ],
)
def test_a_value_is_read_through_the_table(headers: dict[str, str], name: str, expected: Any) -> None:
    assert OptionValues(Headers(headers=headers)).value(name) == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        pytest.param("strict_mode", "", "Invalid strict mode format. Must be bool type", id="strict-empty"),
        pytest.param("timeout", "1.5", "Invalid timeout format", id="timeout-not-integer"),
        pytest.param("timeout", "+5", "Invalid timeout format", id="timeout-plus-sign"),
        pytest.param("timeout", "0", "Invalid timeout: 0, must be between 1 and 259200 seconds", id="timeout-zero"),
        pytest.param("max_filter_ratio", "nan", "max_filter_ratio must be between 0 and 1, got nan", id="ratio-nan"),
        pytest.param("max_filter_ratio", "x", "Invalid max_filter_ratio format: x", id="ratio-not-number"),
        pytest.param("unique_key_update_mode", "", "Invalid unique_key_partial_mode , must be", id="mode-empty"),
        pytest.param(
            "partial_update_new_key_behavior",
            "maybe",
            "Invalid partial_update_new_key_behavior MAYBE, must be one of {'APPEND', 'ERROR'}",
            id="behavior-quoted-upper",
        ),
        pytest.param("exec_mem_limit", "abc", "Invalid mem limit format, stoll", id="mem-limit"),
        pytest.param("skip_lines", "-1", "Invalid 'skip_lines': -1", id="skip-negative"),
        pytest.param("enclose", "ab", "enclose must be single-char, actually is ab", id="enclose-two-chars"),
        pytest.param("label", "a b", "Label format error", id="label"),
        pytest.param("format", "xml", "unknown data format, format=xml", id="format"),
    ],
)
def test_a_bad_value_gets_dorises_text(name: str, value: str, message: str) -> None:
    with pytest.raises(BadHeader) as info:
        OptionValues({name: value}).value(name)
    assert message in info.value.text


def test_given_values_are_used_as_they_are() -> None:
    values = OptionValues({"merge_type": "bogus", "negative": "false"}, {"merge_type": "MERGE", "negative": True})
    assert (values.value("merge_type"), values.value("negative"), values.sent("merge_type")) == ("MERGE", True, True)


# --- SQL statements and docs ---------------------------------------------------------------------------------


def test_sql_properties_that_set_load_options() -> None:
    assert set(statement_options("broker")) == {
        "timeout",
        "max_filter_ratio",
        "strict_mode",
        "timezone",
        "exec_mem_limit",
    }
    assert set(statement_options("routine")) == {
        "format",
        "strict_mode",
        "timezone",
        "jsonpaths",
        "json_root",
        "enclose",
        "escape",
        "empty_field_as_null",
        "partial_columns",
        "unique_key_update_mode",
        "partial_update_new_key_behavior",
    }
    assert option("strict_mode").property_error == "strict_mode should be a boolean"


def test_docs_print_the_option_table() -> None:
    assert DOCS_PATH.read_text() == markdown(), "docs/headers.md is stale: run `python -m loaders.options`"
    for opt in LOAD_OPTIONS:
        assert f"| `{opt.name}`" in DOCS_PATH.read_text()


# --- routine-load store format -------------------------------------------------------------------------------

V1_HEADERS = {"format": "json", "merge_type": "APPEND", "max_filter_ratio": "1.0", "columns": "k, v = upper(v)"}


def _v1_store(path: Path, headers: dict[str, str], state: str = "RUNNING") -> None:
    """A store as the release before the option table wrote it: raw headers in the spec, no format row."""
    store = RoutineLoadStore(path)
    job = store.create(RoutineLoadSpec(name="job", db="db", table="t", broker_list="h:9092", topic="x"))
    body = json.loads(job.model_dump_json())
    del body["spec"]["request"], body["spec"]["strip_outer_array"]
    body["spec"]["headers"] = headers
    body["state"] = state
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE routine_load_jobs SET body = ?", (json.dumps(body),))
        conn.execute("DROP TABLE routine_load_format")
    conn.close()


def test_a_v1_store_is_migrated_to_the_request_its_headers_stood_for(tmp_path: Path) -> None:
    _v1_store(tmp_path / "t.db", {**V1_HEADERS, "strip_outer_array": "true"})
    store = RoutineLoadStore(tmp_path / "t.db")
    assert store.format == 1
    with pytest.raises(ValueError, match="store format 1"):
        store.all()
    assert store.migrate(parse_load_request) == 1
    (job,) = store.all()
    expected = parse_load_request("db", "t", {**V1_HEADERS, "label": "job"})
    assert (job.spec.request, job.spec.strip_outer_array, job.state) == (expected, True, JobState.RUNNING)
    assert (store.format, store.migrate(parse_load_request)) == (STORE_FORMAT, 0)
    store.close()
    assert RoutineLoadStore(tmp_path / "t.db").format == STORE_FORMAT


def test_a_v1_job_whose_headers_no_longer_parse_is_cancelled_with_the_reason(tmp_path: Path) -> None:
    _v1_store(tmp_path / "t.db", {"timeout": "soon"})
    store = RoutineLoadStore(tmp_path / "t.db")
    store.migrate(parse_load_request)
    (job,) = store.all()
    assert (job.state, job.reason) == (
        JobState.CANCELLED,
        "ErrorReason{code=errCode = 103, msg='Invalid timeout format'}",
    )


def test_a_new_store_is_of_the_current_format_and_a_spec_defaults_to_a_plain_load(tmp_path: Path) -> None:
    store = RoutineLoadStore(tmp_path / "t.db")
    assert store.format == STORE_FORMAT
    spec = RoutineLoadSpec(name="job", db="db", table="t", broker_list="h:9092", topic="x")
    assert spec.request == LoadRequest(db="db", table="t", label="job")
