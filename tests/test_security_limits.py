"""Load input limits over HTTP: every size and time a stream load controls is bounded, with a Doris-shaped reply.

Each case sends one hostile load to a table holding one row, then checks the reply, that the table still holds
exactly that row, and that the JVM is alive: the same table loads a good row right after. Most cases run on a
second server in this process with tight limits (sharing the test run's SparkSession, so no JVM of its own):
small caps keep the bodies small and the idle limit short.
"""

from __future__ import annotations

import bz2
import gzip
import json
import re
import socket
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import lz4.frame
import pytest
import zstandard

from tests.helpers import AUTH, DorisClient, SeededTables, assert_doris_result, serving

CSV = {"column_separator": ","}
TABLE = "CREATE TABLE {name} (k INT NOT NULL, v STRING) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"
GOOD = [[1, "keep"]]
KIB = 1024
MIB = 1024 * KIB
LINE_LIMIT = 1 * MIB
STRING_LIMIT = 4 * KIB
LOG_LINE = 512
EXPRESSION = "SL_MAX_EXPRESSION_BYTES"


@pytest.fixture(scope="module")
def tight_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tight-data")


@pytest.fixture(scope="module")
def tight_app(spark, tight_dir: Path):  # type: ignore[no-untyped-def]
    from app.main import create_app
    from app.settings import Settings

    settings = Settings(
        data_dir=tight_dir,
        mysql_port=0,
        compaction_interval_seconds=0,
        max_line_bytes=LINE_LIMIT,
        max_string_bytes=STRING_LIMIT,
        max_expression_bytes=8 * MIB,
        body_idle_timeout_seconds=1,
        error_log_line_bytes=LOG_LINE,
    )
    return create_app(settings, spark=spark)


@pytest.fixture(scope="module")
def tight(tight_app) -> Iterator[DorisClient]:  # type: ignore[no-untyped-def]
    with serving(tight_app) as (url,):
        yield DorisClient(url)


class Guarded(SeededTables):
    """One database; each group of cases shares a table holding one good row, checked after every case."""

    def __init__(self, doris: DorisClient) -> None:
        super().__init__(doris, ddl=TABLE, good_line="1,keep\n", headers=CSV)

    def assert_survived(self, table: str, *, label: str | None = None) -> None:
        """The table is unchanged, and the JVM is alive: the table loads a good row (with `label`, if given)."""
        assert self.doris.rows(self.db, f"select k, v from {table} order by k") == GOOD
        headers = {**CSV, **({"label": label} if label else {})}
        assert_doris_result(self.doris.stream_load(self.db, table, "1,keep\n", headers=headers), loaded=1)


@pytest.fixture(scope="module")
def guarded(tight: DorisClient) -> Guarded:
    return Guarded(tight)


def refused(resp: httpx.Response, message: str, *, before_txn: bool = True) -> dict[str, Any]:
    body = assert_doris_result(resp, status="Fail", message_contains=message, loaded=0)
    assert (body["TxnId"] == -1) is before_txn, body
    return body


# ---------------------------------------------------------------------------------------------------------------
# string-growing functions


@pytest.mark.parametrize(
    "headers, message",
    [
        pytest.param(
            {"columns": "k, tmp, v = repeat('x', 2000000000)"}, EXPRESSION, id="a-huge-constant-repeat-is-refused"
        ),
        pytest.param({"columns": "k, tmp, v = repeat(tmp, k)"}, "constant integer", id="a-repeat-count-from-a-column"),
        pytest.param({"columns": "k, tmp, v = repeat(tmp, 9)"}, EXPRESSION, id="a-column-repeated-past-the-cap"),
        pytest.param(
            {"columns": "k, tmp, v = lpad(tmp, 2000000000, 'x')"}, EXPRESSION, id="an-lpad-to-two-billion-characters"
        ),
        pytest.param(
            {"columns": "k, tmp, v = repeat(repeat(repeat('ab', 4096), 4096), 4096)"},
            EXPRESSION,
            id="nested-repeats-are-bounded-at-the-innermost-that-passes",
        ),
        pytest.param(
            {"columns": "k, tmp, a = repeat(tmp, 4), v = repeat(a, 4)"},
            EXPRESSION,
            id="a-derived-column-carries-its-bound-to-the-next",
        ),
        pytest.param(
            {"columns": "k, v", "merge_type": "MERGE", "delete": "replace(v, '', v) = 'x'"},
            EXPRESSION,
            id="a-delete-replacing-every-character-by-the-column",
        ),
    ],
)
def test_string_growing_functions_are_refused_before_the_load(
    guarded: Guarded, headers: dict[str, str], message: str
) -> None:
    table = guarded.table("expr")
    refused(guarded.load(table, "2,a\n", {**CSV, **headers}), message)
    guarded.assert_survived(table)


def test_string_growing_functions_within_the_cap_still_load(guarded: Guarded) -> None:
    table = guarded.table("expr_ok")
    # ten columns concatenated count as one line (they share it), the repeated one twice: 2 MiB of the 8 allowed
    names = [f"c{i}" for i in range(10)]
    value = f"concat_ws('', repeat(c0, 2), {', '.join(names[1:])}, lpad('', 2, '-'))"
    headers = {**CSV, "columns": f"k, {', '.join(names)}, v = {value}", "where": "k > 1"}
    body = "1," + ",".join("n" * 10) + "\n2," + ",".join("abcdefghij") + "\n"
    assert_doris_result(guarded.load(table, body, headers), loaded=1, unselected=1)
    rows = guarded.doris.rows(guarded.db, f"select k, v from {table} order by k")
    assert rows == [[1, "keep"], [2, "aabcdefghij--"]]


# ---------------------------------------------------------------------------------------------------------------
# decompression

EXPANDING = (b"7," + b"a" * 1000 + b"\n") * (24 * 1024)  # 24 MiB compressing ~1000-fold: past 16 MiB and the ratio


def _compressed(kind: str) -> bytes:
    compressors = {
        "gz": lambda d: gzip.compress(d, compresslevel=1),
        "bz2": bz2.compress,
        "lz4": lz4.frame.compress,
        "zstd": zstandard.ZstdCompressor().compress,
        "deflate": zlib.compress,
    }
    return compressors[kind](EXPANDING)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "kind, headers",
    [
        pytest.param("gz", {"compress_type": "GZ"}, id="gzip"),
        pytest.param("bz2", {"compress_type": "BZ2"}, id="bzip2"),
        pytest.param("lz4", {"compress_type": "LZ4"}, id="lz4"),
        pytest.param("zstd", {"compress_type": "ZSTD"}, id="zstd"),
        pytest.param("deflate", {"compress_type": "DEFLATE"}, id="deflate"),
        pytest.param("gz", {"Content-Encoding": "gzip"}, id="content-encoding-gzip"),
    ],
)
def test_a_body_expanding_a_thousandfold_is_refused(guarded: Guarded, kind: str, headers: dict[str, str]) -> None:
    table = guarded.table("codec")
    body = _compressed(kind)
    assert len(body) * 100 < len(EXPANDING)
    resp = guarded.load(table, body, {**CSV, **headers})
    refused(resp, "[EXCEEDED_LIMIT]the body expands past", before_txn=False)
    assert "SL_MAX_DECOMPRESSION_RATIO" in resp.json()["Message"]
    guarded.assert_survived(table)


# ---------------------------------------------------------------------------------------------------------------
# lines and fields


@pytest.mark.parametrize(
    "body, headers",
    [
        pytest.param(b"2," + b"x" * (LINE_LIMIT + 10), CSV, id="a-csv-body-with-no-newline"),
        pytest.param(
            b"2,a|" + b"x" * (LINE_LIMIT + 10), {**CSV, "line_delimiter": "|"}, id="a-line-delimiter-that-never-comes"
        ),
        pytest.param(
            b'{"k": 2, "v": "' + b"x" * (LINE_LIMIT + 10) + b'"}',
            {"format": "json", "read_json_by_line": "true"},
            id="a-json-line-past-the-limit",
        ),
        pytest.param(
            gzip.compress(b"2," + b"x" * (2 * LINE_LIMIT)),
            {**CSV, "compress_type": "GZ"},
            id="a-compressed-body-is-checked-as-it-decompresses",
        ),
    ],
)
def test_a_line_past_the_limit_fails_the_load(guarded: Guarded, body: bytes, headers: dict[str, str]) -> None:
    table = guarded.table("lines")
    resp = guarded.load(table, body, headers)
    refused(resp, "[EXCEEDED_LIMIT]a line of the body is longer than 1048576 bytes", before_txn=False)
    guarded.assert_survived(table)


def test_a_string_past_the_soft_limit_is_a_filtered_row_with_a_cut_error_log_line(guarded: Guarded) -> None:
    table = guarded.table("strings")
    long = "y" * (STRING_LIMIT + 1)
    resp = guarded.load(table, f"2,{long}\n3,{'z' * STRING_LIMIT}\n", CSV)
    body = refused(resp, "[DATA_QUALITY_ERROR]too many filtered rows", before_txn=False)
    assert body["NumberFilteredRows"] == 1 and body["NumberTotalRows"] == 2
    log = httpx.get(body["ErrorURL"], auth=AUTH).text
    line = log.splitlines()[0]
    assert line.startswith(
        "Reason: column(v) the length of input string is too long than vec schema. first 32 bytes of input str: "
        f"[{'y' * 32}] limit length: {STRING_LIMIT}; actual length: {STRING_LIMIT + 1}; . src line [2,yyy"
    )
    assert line.endswith("error log is too long") and len(line.encode()) == LOG_LINE + len("error log is too long")
    guarded.assert_survived(table)
    # with a filter ratio the short row loads and the long one is filtered
    resp = guarded.load(table, f"2,{long}\n3,ok\n", {**CSV, "max_filter_ratio": "0.5"})
    assert_doris_result(resp, loaded=1, filtered=1)
    assert guarded.doris.rows(guarded.db, f"select k, v from {table} order by k") == [[1, "keep"], [3, "ok"]]


# ---------------------------------------------------------------------------------------------------------------
# body timeouts


def trickle(base_url: str, path: str, headers: dict[str, str], *, every: float, first: bytes) -> tuple[dict, float]:
    """A chunked body sending `first`, then (when `every` > 0) one byte chunk every `every` s until the reply
    comes; returns the reply and how long it took."""
    url = urlparse(base_url)
    started = time.monotonic()
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        head = [f"PUT {path} HTTP/1.1", f"Host: {url.netloc}", "Authorization: Basic cm9vdDo=", "Expect: 100-continue"]
        head += [f"{k}: {v}" for k, v in headers.items()] + ["Transfer-Encoding: chunked", "", ""]
        sock.sendall("\r\n".join(head).encode() + b"%x\r\n%s\r\n" % (len(first), first))
        reply = b""
        while b"\r\n\r\n{" not in reply or not reply.rstrip().endswith(b"}"):
            sock.settimeout(every if every > 0 else 30)
            try:
                data = sock.recv(65536)
                if not data:
                    break
                reply += data
            except TimeoutError:
                sock.sendall(b"1\r\n,\r\n")  # a byte, and then another: never idle, never done
            assert time.monotonic() - started < 20, "the body was never cut off"
    elapsed = time.monotonic() - started
    body = reply[reply.index(b"\r\n\r\n{") + 4 :]
    return json.loads(body), elapsed


def test_a_body_that_goes_quiet_fails_after_the_idle_limit_and_frees_its_label(guarded: Guarded, tight) -> None:  # type: ignore[no-untyped-def]
    table = guarded.table("quiet")
    label = f"quiet_{uuid.uuid4().hex[:8]}"
    path = f"/api/{guarded.db}/{table}/_stream_load"
    reply, elapsed = trickle(tight.base_url, path, {**CSV, "label": label}, every=0, first=b"2,a\n")
    refused(reply, "[TIMEOUT]no body data received for 1 s (SL_BODY_IDLE_TIMEOUT_SECONDS)", before_txn=False)
    assert 1 <= elapsed < 10
    guarded.assert_survived(table, label=label)


def test_a_trickling_body_fails_at_the_load_timeout_and_frees_its_label(guarded: Guarded, tight) -> None:  # type: ignore[no-untyped-def]
    table = guarded.table("trickle")
    label = f"trickle_{uuid.uuid4().hex[:8]}"
    path = f"/api/{guarded.db}/{table}/_stream_load"
    headers = {**CSV, "label": label, "timeout": "2"}
    reply, elapsed = trickle(tight.base_url, path, headers, every=0.3, first=b"2,a\n3,")
    refused(reply, "[TIMEOUT]load timed out after 2 s (timeout header)", before_txn=False)
    assert 2 <= elapsed < 10
    guarded.assert_survived(table, label=label)


# ---------------------------------------------------------------------------------------------------------------
# headers


def test_header_values_are_read_as_utf8(guarded: Guarded) -> None:
    table = guarded.table("utf8")
    headers = {**CSV, "where": "v = 'café'".encode()}
    resp = guarded.load(table, "2,café\n3,cafe\n", headers)  # type: ignore[arg-type]
    assert_doris_result(resp, loaded=1, unselected=1)
    assert guarded.doris.rows(guarded.db, f"select k, v from {table} order by k") == [[1, "keep"], [2, "café"]]


@pytest.mark.parametrize(
    "headers, message",
    [
        pytest.param({"where": b"v = '\xff'"}, "[INVALID_ARGUMENT]header where is not valid UTF-8", id="invalid-utf8"),
        pytest.param({"label": b"l\xc3"}, "header label is not valid UTF-8", id="invalid-utf8-in-the-label"),
        pytest.param({"timeout": "9" * 40}, "Invalid timeout", id="a-huge-timeout"),
        pytest.param({"skip_lines": "9" * 40}, "skip_lines must be at most", id="a-huge-skip-lines"),
        pytest.param({"max_filter_ratio": "nan"}, "max_filter_ratio must be between 0 and 1", id="a-nan-filter-ratio"),
        pytest.param(
            {"where": "k = " + "(" * 500 + "1" + ")" * 500},
            "Exceeded the maximum depth of an expression tree",
            id="deeply-nested-parentheses",
        ),
    ],
)
def test_odd_headers_get_a_doris_reply(guarded: Guarded, headers: dict[str, Any], message: str) -> None:
    table = guarded.table("odd")
    resp = guarded.load(table, "2,a\n", {**CSV, **headers})
    body = assert_doris_result(resp, status="Fail", message_contains=message, loaded=0)
    assert "INTERNAL_ERROR" not in body["Message"], body
    guarded.assert_survived(table)


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(b"where: a\x00b", id="a-nul-byte"),
        pytest.param(b"columns: " + b"k," * 40000, id="a-header-past-the-http-servers-limit"),
        pytest.param(b"Content-Length: -5", id="a-negative-content-length"),
    ],
)
def test_headers_the_http_server_refuses_never_get_a_500(guarded: Guarded, tight, header: bytes) -> None:  # type: ignore[no-untyped-def]
    table = guarded.table("raw")
    url = urlparse(tight.base_url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        head = f"PUT /api/{guarded.db}/{table}/_stream_load HTTP/1.1\r\nHost: x\r\nAuthorization: Basic cm9vdDo=\r\n"
        sock.sendall(head.encode() + header + b"\r\nContent-Length: 4\r\n\r\n2,a\n")
        status = sock.recv(4096).split(b"\r\n", 1)[0]
    assert re.match(rb"HTTP/1.1 (200|4\d\d) ", status), status
    guarded.assert_survived(table)


# ---------------------------------------------------------------------------------------------------------------
# error logs


def test_error_logs_have_unguessable_names_and_never_read_outside_their_dir(guarded: Guarded, tight_dir: Path) -> None:
    table = guarded.table("logs")
    label = f"logged_{uuid.uuid4().hex[:8]}"
    body = refused(guarded.load(table, "2\n", {**CSV, "label": label}), "too many filtered rows", before_txn=False)
    name = body["ErrorURL"].split("file=", 1)[1]
    # a random token, not the old `error_log_<txn id>_<label>` (the token's hex digits may contain the txn id's)
    assert re.fullmatch(r"error_log_[0-9a-f]{32}", name) and label not in name
    marker = tight_dir / "marker.txt"
    marker.write_text("MARKER-8d41c0")
    (tight_dir / "error_log" / "error_log_link").symlink_to(marker)
    client = guarded.doris.http
    for attempt in [
        "../marker.txt",
        str(marker),
        "error_log_/../../marker.txt",
        "..%2Fmarker.txt",
        "error_log_link",
        f"error_log_{body['TxnId']}_{label}",
    ]:
        resp = client.get("/api/_load_error_log", params={"file": attempt})
        assert resp.status_code == 404 and "MARKER" not in resp.text, (attempt, resp.text)
    assert marker.read_text() == "MARKER-8d41c0"
    assert "actual column number" in client.get("/api/_load_error_log", params={"file": name}).text
    guarded.assert_survived(table)


def test_error_logs_expire_with_their_label(guarded: Guarded, tight_app) -> None:  # type: ignore[no-untyped-def]
    from tables.maintenance import run_maintenance

    table = guarded.table("expiry")
    body = refused(guarded.load(table, "2\n", CSV), "too many filtered rows", before_txn=False)
    assert httpx.get(body["ErrorURL"], auth=AUTH).status_code == 200
    services = tight_app.state.services
    keep = services.txns.label_keep_seconds
    run_maintenance(
        services.catalog,
        services.txns,
        staging=services.settings.resolved_data_dir / "staging",
        grace_seconds=services.settings.orphan_grace_seconds,
        snapshot_keep_seconds=services.settings.snapshot_keep_seconds,
        now=time.time() + keep + 1,
    )
    assert httpx.get(body["ErrorURL"], auth=AUTH).status_code == 404
    guarded.assert_survived(table)
