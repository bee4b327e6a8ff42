"""Bad input over HTTP, format by format: each load is refused with Doris's reply and the table keeps its one row.

Every group loads one good row into its own table first; each case then sends one bad load and checks the reply
(Status, Message, TxnId, row counts, the first rejected row's reason) and that the table still holds exactly that
row. Header refusals happen before the transaction begins (TxnId -1, as Doris answers for checks in the BE's
`_on_header`); data errors are found after it began (a real TxnId, rolled back).
"""

from __future__ import annotations

import base64
import bz2
import gzip
import http.client
import io
import socket
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

import httpx
import lz4.frame
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest
import zstandard

from tests.helpers import AUTH, DorisClient, SeededTables, assert_doris_result, serving

CSV = {"column_separator": ","}
QUALITY = "[DATA_QUALITY_ERROR]too many filtered rows"
TABLE = (
    "CREATE TABLE {name} (k INT NOT NULL, v VARCHAR(4) NOT NULL, n INT, d DATE) "
    "UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"
)
GOOD_LINE = "7,keep,7,2024-01-01\n"
GOOD = [[7, "keep", 7, "2024-01-01"]]


class Seeded(SeededTables):
    """One database per module; each group of cases gets a table holding one good row."""

    def __init__(self, doris: DorisClient) -> None:
        super().__init__(doris, ddl=TABLE, good_line=GOOD_LINE, headers=CSV)

    def assert_unchanged(self, table: str) -> None:
        assert self.doris.rows(self.db, f"select * from {table} order by k") == GOOD


@pytest.fixture(scope="module")
def seeded(doris: DorisClient) -> Seeded:
    return Seeded(doris)


def assert_filtered(resp: httpx.Response, reason: str | None, *, total: int = 1, filtered: int = 1) -> None:
    """A data-quality failure: the transaction began (TxnId > 0), nothing loaded, the first reason reported."""
    body = assert_doris_result(
        resp, status="Fail", message_contains=QUALITY, total=total, filtered=filtered, loaded=0, unselected=0
    )
    assert body["Message"] == QUALITY
    assert body["TxnId"] > 0
    assert "ErrorURL" in body
    if reason is not None:
        assert reason in body["FirstErrorMsg"], body
        assert reason in httpx.get(body["ErrorURL"], auth=AUTH).text


def assert_refused(resp: httpx.Response | dict[str, Any], message: str, *, txn: bool) -> dict[str, Any]:
    """A load refused as a whole: Status Fail, the message, nothing loaded; `txn` says whether it had begun."""
    body = assert_doris_result(resp, status="Fail", message_contains=message, loaded=0, filtered=0)
    assert (body["TxnId"] > 0) if txn else (body["TxnId"] == -1), body
    assert "ErrorURL" not in body
    return body


# ---------------------------------------------------------------------------------------------------------------
# CSV

STRICT = {**CSV, "strict_mode": "true"}


@pytest.mark.parametrize(
    "data, headers, reason",
    [
        pytest.param(
            "1,a,1\n",
            CSV,
            "actual column number in csv file is  less than  schema column number.actual number: 3",
            id="too-few-fields",
        ),
        pytest.param(
            "1,a,1,2024-01-01,9\n",
            CSV,
            "actual column number in csv file is  more than  schema column number.actual number: 5",
            id="too-many-fields",
        ),
        pytest.param(
            "1|a|1|2024-01-01\n",
            CSV,
            "actual column number in csv file is  less than  schema column number.actual number: 1",
            id="other-separator-is-one-field",
        ),
        pytest.param(
            "1,a,x,2024-01-01\n",
            STRICT,
            "column(n) value is incorrect while strict mode is true, src value is x",
            id="strict-int-not-a-number",
        ),
        pytest.param(
            "1,a,99999999999,2024-01-01\n",
            STRICT,
            "column(n) value is incorrect while strict mode is true, src value is 99999999999",
            id="strict-int-out-of-range",
        ),
        pytest.param(
            "1,a,1,2024-13-45\n",
            STRICT,
            "column(d) value is incorrect while strict mode is true, src value is 2024-13-45",
            id="strict-date-invalid",
        ),
        pytest.param(
            "x,a,1,2024-01-01\n",
            CSV,
            "column(k) values is null while columns is not nullable",
            id="bad-key-becomes-null-into-not-null",
        ),
        pytest.param(
            "1,\\N,1,2024-01-01\n",
            CSV,
            "column(v) values is null while columns is not nullable",
            id="null-into-not-null",
        ),
        pytest.param(
            "1,abcde,1,2024-01-01\n",
            CSV,
            "column(v) the length of input is too long than schema",
            id="varchar-too-long",
        ),
        pytest.param(
            "k,v,n,d\n1,a,x,2024-01-01\n",
            {**STRICT, "format": "csv_with_names"},
            "src value is x",
            id="csv-with-names-bad-row-after-header",
        ),
        pytest.param(
            "k,v,n,d\nint,varchar,int,date\n1,a\n",
            {**CSV, "format": "csv_with_names_and_types"},
            "less than  schema column number.actual number: 2",
            id="csv-with-names-and-types-short-row",
        ),
        pytest.param(
            "skip me\n1,\\N,1,2024-01-01\n",
            {**CSV, "skip_lines": "1"},
            "column(v) values is null",
            id="bad-row-after-skipped-lines",
        ),
    ],
)
def test_bad_csv_rows_fail_the_load(seeded: Seeded, data: str, headers: dict[str, str], reason: str) -> None:
    assert_filtered(seeded.load("csv_rows", data, headers), reason)
    seeded.assert_unchanged("csv_rows")


def test_one_bad_row_among_good_ones_loads_none_of_them(seeded: Seeded) -> None:
    data = "1,a,1,2024-01-01\n2,toolong,2,2024-01-01\n3,c,3,2024-01-01\n"
    assert_filtered(seeded.load("csv_rows", data, CSV), "column(v) the length", total=3, filtered=1)
    seeded.assert_unchanged("csv_rows")


@pytest.mark.parametrize(
    "data, headers",
    [
        pytest.param("1,a,1,2024-01-01\n2,b,2,2024-01-01\n", {**CSV, "skip_lines": "5"}, id="skip-lines-past-the-end"),
        pytest.param("k,v,n,d\n", {**CSV, "format": "csv_with_names"}, id="csv-with-names-header-only"),
        pytest.param(
            "k,v,n,d\nint,varchar,int,date\n",
            {**CSV, "format": "csv_with_names_and_types"},
            id="csv-with-names-and-types-headers-only",
        ),
        pytest.param("\n\n\n", CSV, id="blank-lines-only"),
        pytest.param("", {"format": "json"}, id="empty-json-body"),
        pytest.param("[]", {"format": "json", "strip_outer_array": "true"}, id="empty-json-array"),
        pytest.param(gzip.compress(b""), {**CSV, "compress_type": "gz"}, id="empty-gz-body"),
    ],
)
def test_bodies_holding_no_rows_succeed_with_zero_rows(
    seeded: Seeded, data: str | bytes, headers: dict[str, str]
) -> None:
    """Doris: `selected == 0` never fails the filter ratio; the load is a Success that loads nothing."""
    body = assert_doris_result(seeded.load("no_rows", data, headers), total=0, loaded=0, filtered=0)
    assert body["TxnId"] > 0
    seeded.assert_unchanged("no_rows")


# ---------------------------------------------------------------------------------------------------------------
# JSON

JSON = {"format": "json"}


@pytest.mark.parametrize(
    "data, headers, reason",
    [
        pytest.param('{"k": 1, "v": "a"\n', JSON, "Parse json data failed", id="malformed-document"),
        pytest.param("5\n", JSON, "Parse json data failed", id="scalar-not-an-object"),
        pytest.param(
            '[{"k": 1, "v": "a", "n": 1}]\n',
            JSON,
            "JSON data is array-object, `strip_outer_array` must be TRUE.",
            id="array-without-strip-outer-array",
        ),
        pytest.param(
            '{"k": 1, "v": "a", "n": 1}',
            {**JSON, "strip_outer_array": "true"},
            "JSON data is not an array-object, `strip_outer_array` must be FALSE.",
            id="object-with-strip-outer-array",
        ),
        pytest.param(
            '[{"k": 1, "v": "a", "n": 1}, ',
            {**JSON, "strip_outer_array": "true"},
            "Parse json data failed",
            id="truncated-array",
        ),
        pytest.param(
            '{"rows": [{"k": 1, "v": "a"}]}\n',
            {**JSON, "json_root": "$.data"},
            "JSON Root not found.",
            id="json-root-missing",
        ),
        pytest.param(
            '{"k": 1, "n": 1}\n',
            JSON,
            "column(v) values is null while columns is not nullable",
            id="not-null-key-missing",
        ),
        pytest.param('{"x": 1, "y": 2}\n', JSON, "All fields is null, this is a invalid row.", id="no-key-matches"),
        pytest.param(
            '{"k": 1, "v": "a", "n": "x"}\n',
            {**JSON, "strict_mode": "true"},
            "column(n) value is incorrect while strict mode is true, src value is x",
            id="strict-number-not-a-number",
        ),
        pytest.param(
            '{"k": 1, "v": "abcdefg"}\n', JSON, "column(v) the length of input is too long than schema", id="too-long"
        ),
        pytest.param(
            '{"id": 1, "name": null}\n',
            {**JSON, "jsonpaths": '["$.id", "$.name"]', "columns": "k, v"},
            "column(v) values is null while columns is not nullable",
            id="jsonpaths-null-into-not-null",
        ),
    ],
)
def test_bad_json_fails_the_load(seeded: Seeded, data: str, headers: dict[str, str], reason: str) -> None:
    assert_filtered(seeded.load("json_rows", data, headers), reason)
    seeded.assert_unchanged("json_rows")


def test_json_by_line_with_one_broken_line_loads_nothing(seeded: Seeded) -> None:
    data = '{"k": 1, "v": "a", "n": 1}\n{"k": 2, "v": \n{"k": 3, "v": "c", "n": 3}\n'
    resp = seeded.load("json_rows", data, {**JSON, "read_json_by_line": "true"})
    assert_filtered(resp, "Parse json data failed", total=3, filtered=1)
    seeded.assert_unchanged("json_rows")


@pytest.mark.parametrize(
    "jsonpaths",
    [
        pytest.param("$.k", id="not-json"),
        pytest.param('{"k": "$.k"}', id="an-object"),
        pytest.param("[1, 2]", id="not-strings"),
        pytest.param('["$.k",', id="unterminated"),
        pytest.param("[" * 20000, id="nested-past-the-recursion-limit"),  # was [INTERNAL_ERROR]maximum recursion
    ],
)
def test_bad_jsonpaths_is_refused(seeded: Seeded, jsonpaths: str) -> None:
    resp = seeded.load("json_rows", '{"k": 1}\n', {**JSON, "jsonpaths": jsonpaths})
    assert assert_refused(resp, "Invalid json path", txn=False)["Message"] == (
        f"[INVALID_ARGUMENT]Invalid json path: {jsonpaths}"
    )
    seeded.assert_unchanged("json_rows")


# ---------------------------------------------------------------------------------------------------------------
# Parquet and ORC


def columnar(fmt: str, table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink) if fmt == "parquet" else orc.write_table(table, sink)
    return sink.getvalue()


GOOD_COLUMNS = pa.table({"k": [1, 2], "v": ["a", "b"], "n": [1, 2], "d": ["2024-01-01", "2024-01-02"]})


@pytest.mark.parametrize("fmt", ["parquet", "orc"])
@pytest.mark.parametrize(
    "make_body, message",
    [
        pytest.param(lambda fmt: b"this is not a columnar file\n", "is not a {fmt} file", id="not-a-file"),
        pytest.param(lambda fmt: columnar(fmt, GOOD_COLUMNS)[:-40], "is not a {fmt} file", id="truncated"),
        pytest.param(lambda fmt: b"PAR1" + b"\0" * 64 + b"PAR1", "is not a {fmt} file", id="magic-but-no-footer"),
    ],
)
def test_body_that_is_not_a_columnar_file_fails(
    seeded: Seeded, fmt: str, make_body: Callable[[str], bytes], message: str
) -> None:
    resp = seeded.load("columnar", make_body(fmt), {"format": fmt})
    body = assert_refused(resp, message.format(fmt=fmt), txn=True)
    assert body["NumberTotalRows"] == 0
    seeded.assert_unchanged("columnar")


@pytest.mark.parametrize("fmt", ["parquet", "orc"])
@pytest.mark.parametrize(
    "columns, headers, reason",
    [
        pytest.param(
            {"k": [1], "v": ["a"], "n": ["x"]},
            {"strict_mode": "true"},
            "column(n) value is incorrect while strict mode is true, src value is x",
            id="strict-string-into-int",
        ),
        pytest.param(
            {"k": [1], "v": ["a"], "n": [1], "d": [3.5]},
            {"strict_mode": "true"},
            "column(d) value is incorrect while strict mode is true, src value is 3.5",
            id="strict-double-into-date",
        ),
        pytest.param(
            {"k": ["one"], "v": ["a"]}, {}, "column(k) values is null while columns is not nullable", id="string-key"
        ),
        pytest.param({"k": [1], "v": ["toolong"]}, {}, "column(v) the length of input is too long", id="too-long"),
    ],
)
def test_columnar_value_that_does_not_convert_fails(
    seeded: Seeded, fmt: str, columns: dict[str, list[Any]], headers: dict[str, str], reason: str
) -> None:
    resp = seeded.load("columnar", columnar(fmt, pa.table(columns)), {"format": fmt, **headers})
    assert_filtered(resp, reason)
    seeded.assert_unchanged("columnar")


# ---------------------------------------------------------------------------------------------------------------
# Compression


def compress(kind: str, data: bytes) -> bytes:
    return {
        "gz": gzip.compress,
        "bz2": bz2.compress,
        "lz4": lz4.frame.compress,
        "zstd": zstandard.ZstdCompressor().compress,
        "deflate": zlib.compress,
    }[kind](data)


ROWS = b"".join(b"%d,v%d,%d,2024-01-01\n" % (i, i, i) for i in range(1, 200))
CODECS = {
    "gz": {"compress_type": "GZ"},
    "bz2": {"compress_type": "BZ2"},
    "lz4": {"compress_type": "LZ4"},
    "zstd": {"compress_type": "ZSTD"},
    "deflate": {"compress_type": "DEFLATE"},
    "content-encoding-gzip": {"Content-Encoding": "gzip"},
}
OTHER_CODEC = {"gz": "bz2", "bz2": "gz", "lz4": "zstd", "zstd": "lz4", "deflate": "gz", "content-encoding-gzip": "zstd"}
BODIES: dict[str, Callable[[str], bytes]] = {
    "garbage": lambda kind: b"definitely not compressed at all\n" * 4,
    "other-codec": lambda kind: compress(OTHER_CODEC[kind], ROWS),
    "truncated": lambda kind: compress("gz" if kind.startswith("content") else kind, ROWS)[:-24],
}


@pytest.mark.parametrize("body", list(BODIES))
@pytest.mark.parametrize("codec", list(CODECS))
def test_body_that_does_not_decompress_fails(seeded: Seeded, codec: str, body: str) -> None:
    kind = "gz" if codec.startswith("content") else codec
    resp = seeded.load("codecs", BODIES[body](codec), {**CSV, **CODECS[codec]})
    refused = assert_refused(resp, f"failed to decompress the body as {kind}", txn=True)
    assert refused["NumberTotalRows"] == 0
    seeded.assert_unchanged("codecs")


# ---------------------------------------------------------------------------------------------------------------
# Headers that take a value (the ones test_stream_load.py does not already cover)


@pytest.mark.parametrize(
    "headers, message",
    [
        pytest.param({"format": "xml"}, "[DATA_FILE_TYPE_ERROR]unknown data format, format=xml", id="format-unknown"),
        pytest.param(
            {"compress_type": "rar"},
            "[DATA_FILE_TYPE_ERROR]unknown data format, format=, compress_type=rar",
            id="compress-type-unknown",
        ),
        pytest.param(
            {"format": "csv", "compress_type": "zip"},
            "[DATA_FILE_TYPE_ERROR]unknown data format, format=csv, compress_type=zip",
            id="compress-type-unknown-with-format",
        ),
        pytest.param({"compress_type": "LZO"}, "compress_type LZO is not supported", id="compress-type-lzo-not-built"),
        pytest.param({"Content-Encoding": "br"}, "unsupported Content-Encoding: br", id="content-encoding-unknown"),
        pytest.param(
            {"unique_key_update_mode": "sometimes"},
            "[INVALID_ARGUMENT]Invalid unique_key_partial_mode sometimes, must be one of 'UPSERT', "
            "'UPDATE_FIXED_COLUMNS' or 'UPDATE_FLEXIBLE_COLUMNS'",
            id="unique-key-update-mode-unknown",
        ),
        pytest.param(
            {"unique_key_update_mode": "UPDATE_FLEXIBLE_COLUMNS"},
            "flexible partial update only support json format as input file currently",
            id="flexible-update-of-csv",
        ),
        pytest.param(
            {"unique_key_update_mode": "update_flexible_columns", "format": "json"},
            "UPDATE_FLEXIBLE_COLUMNS is not supported",
            id="flexible-update-not-built",
        ),
        pytest.param(
            {"partial_columns": "true", "partial_update_new_key_behavior": "maybe"},
            "[INVALID_ARGUMENT]Invalid partial_update_new_key_behavior MAYBE, must be one of {'APPEND', 'ERROR'}",
            id="new-key-behavior-unknown",
        ),
        pytest.param(
            {"format": "json", "strip_outer_array": "true", "read_json_by_line": "true"},
            "Don't support both strip_outer_array and read_json_by_line",
            id="strip-outer-array-and-read-json-by-line",
        ),
        pytest.param({"skip_lines": "-1"}, "[INVALID_ARGUMENT]Invalid 'skip_lines': -1", id="skip-lines-negative"),
        pytest.param({"skip_lines": "two"}, "skip_lines", id="skip-lines-not-a-number"),
        pytest.param({"timeout": "0"}, "Invalid timeout", id="timeout-zero"),
        pytest.param({"timeout": "259201"}, "Invalid timeout", id="timeout-past-the-maximum"),
        pytest.param({"max_filter_ratio": "1.5"}, "max_filter_ratio", id="max-filter-ratio-above-one"),
        pytest.param(
            {"send_batch_parallelism": "many"},
            "[INVALID_ARGUMENT]Invalid send_batch_parallelism format",
            id="send-batch-parallelism-not-a-number",
        ),
        pytest.param(
            {"exec_mem_limit": "lots"}, "[INVALID_ARGUMENT]Invalid mem limit format", id="exec-mem-limit-not-a-number"
        ),
        pytest.param({"hidden_columns": "__DORIS_NOSUCH__"}, "__DORIS_NOSUCH__", id="hidden-column-unknown"),
        pytest.param({"timezone": "+25:00"}, "Unknown or incorrect time zone: '+25:00'", id="timezone-offset-too-big"),
        pytest.param({"escape": "ab"}, "escape must be single-char, actually is ab", id="escape-of-two-chars"),
        pytest.param({"enclose": "ab"}, "enclose must be single-char, actually is ab", id="enclose-of-two-chars"),
        pytest.param({"column_separator": ""}, "column_separator is empty", id="column-separator-empty"),
        pytest.param({"line_delimiter": ""}, "line_delimiter is empty", id="line-delimiter-empty"),
        pytest.param({"group_commit": "later"}, "group_commit can only be [async_mode, sync_mode, off_mode]", id="gc"),
        pytest.param(
            {"group_commit": "async_mode", "label": "gc_with_label"},
            "label and group_commit can't be set at the same time",
            id="group-commit-with-label",
        ),
    ],
)
def test_bad_header_value_is_refused_before_the_transaction(
    seeded: Seeded, headers: dict[str, str], message: str
) -> None:
    body = assert_refused(seeded.load("headers", GOOD_LINE, {**CSV, **headers}), message, txn=False)
    assert body["NumberTotalRows"] == 0
    seeded.assert_unchanged("headers")


@pytest.mark.parametrize(
    "data, headers, check",
    [
        pytest.param(
            '[{"k": 1, "v": "a"}]',
            {**JSON, "strip_outer_array": "yes"},
            "JSON data is array-object, `strip_outer_array` must be TRUE.",
            id="strip-outer-array-yes-is-false",
        ),
        pytest.param(
            "1,a\n",
            {**CSV, "columns": "k, n", "partial_columns": "1"},
            "Column has no default value. column: v",
            id="partial-columns-1-is-false",
        ),
    ],
)
def test_boolean_header_other_than_true_is_false(
    seeded: Seeded, data: str, headers: dict[str, str], check: str
) -> None:
    """Doris compares these booleans with `true` (any case); any other value means false, not an error."""
    resp = seeded.load("booleans", data, headers)
    body = resp.json()
    assert body["Status"] == "Fail" and check in (body.get("FirstErrorMsg", "") + body["Message"]), body
    seeded.assert_unchanged("booleans")


# ---------------------------------------------------------------------------------------------------------------
# Transport: framing, short bodies, size limit


def raw_put(base_url: str, path: str, headers: list[str], body: bytes, *, half_close: bool = False) -> dict[str, Any]:
    """A PUT written byte by byte on a socket, so framing a client library would fix can be sent as is."""
    import json

    url = urlparse(base_url)
    assert url.hostname and url.port
    auth = base64.b64encode(b"root:").decode()
    head = [f"PUT {path} HTTP/1.1", f"Host: {url.hostname}:{url.port}", f"Authorization: Basic {auth}", *headers]
    with socket.create_connection((url.hostname, url.port), timeout=60) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        assert resp.status == 200 and resp.reason == "OK"
        return json.loads(resp.read())  # type: ignore[no-any-return]


def chunked(data: bytes) -> bytes:
    return (b"%x\r\n%s\r\n" % (len(data), data) if data else b"") + b"0\r\n\r\n"


def test_content_length_and_chunked_together_are_refused(seeded: Seeded, base_url: str) -> None:
    body = GOOD_LINE.encode()
    reply = raw_put(
        base_url,
        f"/api/{seeded.db}/{seeded.table('transport')}/_stream_load",
        ["column_separator: ,", f"Content-Length: {len(chunked(body))}", "Transfer-Encoding: chunked"],
        chunked(body),
    )
    assert_refused(reply, "[INVALID_ARGUMENT]please do not set both content_length and transfer-encoding", txn=False)
    seeded.assert_unchanged("transport")


def test_content_length_and_chunked_together_close_the_connection_after_the_reply(
    seeded: Seeded, base_url: str
) -> None:
    """RFC 9112 6.1: a server answering a request with both framings closes the connection after it. A proxy in
    front that framed the body by its Content-Length would read what follows the chunked body as the next
    request of the same connection (request smuggling): nothing after the reply is answered."""
    url = urlparse(base_url)
    assert url.hostname and url.port
    body = chunked(GOOD_LINE.encode())
    auth = base64.b64encode(b"root:").decode()
    head = (
        f"PUT /api/{seeded.db}/{seeded.table('transport')}/_stream_load HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Basic {auth}\r\ncolumn_separator: ,\r\nContent-Length: {len(body)}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    smuggled = b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(head.encode() + body + smuggled)
        received = b""
        while chunk := sock.recv(65536):  # until the server closes the connection
            received += chunk
    assert received.count(b"HTTP/1.1 ") == 1, received
    assert b"please do not set both content_length and transfer-encoding" in received
    assert b"connection: close" in received.lower()
    seeded.assert_unchanged("transport")


def test_neither_content_length_nor_chunked_is_refused(seeded: Seeded, base_url: str) -> None:
    reply = raw_put(base_url, f"/api/{seeded.db}/{seeded.table('transport')}/_stream_load", ["Connection: close"], b"")
    assert_refused(reply, "content_length is empty and transfer-encoding!=chunked", txn=False)
    seeded.assert_unchanged("transport")


def test_body_shorter_than_its_content_length_aborts_the_load(seeded: Seeded, base_url: str) -> None:
    """The client stops sending (and half-closes) before Content-Length bytes arrived: no reply can be
    completed (a Doris BE logs `sender is gone`); the transaction is aborted, its label free, the table unchanged."""
    body = b"1,a,1,2024-01-01\n"
    with pytest.raises(http.client.RemoteDisconnected):
        raw_put(
            base_url,
            f"/api/{seeded.db}/{seeded.table('transport')}/_stream_load",
            ["column_separator: ,", "label: short_body", f"Content-Length: {len(body) + 100}"],
            body,
            half_close=True,
        )
    deadline = time.monotonic() + 30
    state = seeded.doris.http.get(f"/api/{seeded.db}/get_load_state", params={"label": "short_body"}).json()["data"]
    while state not in ("ABORTED", "UNKNOWN") and time.monotonic() < deadline:
        time.sleep(0.1)
        state = seeded.doris.http.get(f"/api/{seeded.db}/get_load_state", params={"label": "short_body"}).json()["data"]
    assert state in ("ABORTED", "UNKNOWN")
    seeded.assert_unchanged("transport")


def test_empty_chunked_body_loads_zero_rows(seeded: Seeded, base_url: str) -> None:
    reply = raw_put(
        base_url,
        f"/api/{seeded.db}/{seeded.table('transport')}/_stream_load",
        ["column_separator: ,", "Transfer-Encoding: chunked"],
        chunked(b""),
    )
    assert_doris_result(reply, total=0, loaded=0)
    seeded.assert_unchanged("transport")


LIMIT = 256
JSON_LIMIT = 64


@pytest.fixture(scope="module")
def small_limit(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Seeded]]:
    """A second server on the test run's SparkSession whose body limit (streaming_load_max_mb) is 256 bytes."""
    from app.main import create_app
    from app.settings import Settings

    settings = Settings(
        data_dir=tmp_path_factory.mktemp("small-limit"),
        mysql_port=0,
        compaction_interval_seconds=0,
        max_body_bytes=LIMIT,
        max_json_body_bytes=JSON_LIMIT,
    )
    with serving(create_app(settings, spark=spark), settings=settings) as (url,):
        yield url, Seeded(DorisClient(url))


OVER = b"".join(b"%d,v,%d,2024-01-01\n" % (i, i) for i in range(1, 40))


def test_body_over_the_size_limit_is_refused_from_its_content_length(small_limit: tuple[str, Seeded]) -> None:
    _, seeded = small_limit
    assert len(OVER) > LIMIT
    body = assert_refused(
        seeded.load("limit", OVER, CSV),
        f"[EXCEEDED_LIMIT]body size {len(OVER)} bytes (0.00 MiB) exceeds the limit of {LIMIT} bytes",
        txn=False,
    )
    assert "streaming_load_max_mb" in body["Message"]
    seeded.assert_unchanged("limit")


def test_chunked_body_over_the_size_limit_fails(small_limit: tuple[str, Seeded]) -> None:
    url, seeded = small_limit
    reply = raw_put(
        url,
        f"/api/{seeded.db}/{seeded.table('limit')}/_stream_load",
        ["column_separator: ,", "Transfer-Encoding: chunked"],
        chunked(OVER),
    )
    assert_refused(reply, f"exceeds the limit of {LIMIT} bytes", txn=True)
    seeded.assert_unchanged("limit")


def test_compressed_body_expanding_past_the_size_limit_fails(small_limit: tuple[str, Seeded]) -> None:
    _, seeded = small_limit
    for kind in ("gz", "deflate"):
        small = compress(kind, OVER)
        assert len(small) < LIMIT
        resp = seeded.load("limit", small, {**CSV, "compress_type": kind})
        assert_refused(resp, f"decompressed body exceeds the limit of {LIMIT} bytes", txn=True)
    seeded.assert_unchanged("limit")


def test_json_read_whole_over_its_own_limit_is_refused(small_limit: tuple[str, Seeded]) -> None:
    """JSON read as one document (not line by line) has Doris's smaller streaming_load_json_max_mb limit."""
    _, seeded = small_limit
    array = b"[" + b", ".join(b'{"k": %d, "v": "v"}' % i for i in range(1, 5)) + b"]"
    assert JSON_LIMIT < len(array) < LIMIT
    body = assert_refused(
        seeded.load("limit", array, {"format": "json", "strip_outer_array": "true"}),
        f"[EXCEEDED_LIMIT]json body size {len(array)} exceed BE's conf `streaming_load_json_max_mb` {JSON_LIMIT}.",
        txn=False,
    )
    assert body["NumberLoadedRows"] == 0
    seeded.assert_unchanged("limit")
