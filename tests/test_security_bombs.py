"""Bodies small on the wire that make the server or the JVM build far more (red-team audit, sections 3-5).

A Parquet / ORC body compresses its data inside the file: its footer and its pages are measured against the same
bound as a `compress_type` body before Spark reads it. Loads with thousands of `columns` entries, or a JSON array
of many elements, cost time and memory in proportion to their size, not to its square.

The cases run on a second server in this process with tight limits (sharing the test run's SparkSession):
small caps keep the bodies small.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest

from tests.helpers import AUTH, DorisClient, SeededTables, assert_doris_result, serving

CSV = {"column_separator": ","}
TABLE = "CREATE TABLE {name} (k INT NOT NULL, v STRING) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"
GOOD = [[1, "keep"]]
KIB = 1024
MIB = 1024 * KIB
LINE_LIMIT = 4 * MIB
FLOOR = 16 * MIB  # a body may always expand this far (loaders.staging.RATIO_FLOOR)


def _app(spark, tmp_path_factory: pytest.TempPathFactory, name: str, **settings: Any):  # type: ignore[no-untyped-def]
    """A server app of its own with these settings (the run's SparkSession, a fresh data dir)."""
    from app.main import create_app
    from app.settings import Settings

    data_dir = tmp_path_factory.mktemp(name)
    return create_app(Settings(data_dir=data_dir, mysql_port=0, compaction_interval_seconds=0, **settings), spark=spark)


@pytest.fixture(scope="module")
def bomb_app(spark, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return _app(spark, tmp_path_factory, "bomb-data", max_line_bytes=LINE_LIMIT, max_string_bytes=32 * MIB)


@pytest.fixture(scope="module")
def bombs(bomb_app) -> Iterator[Tables]:  # type: ignore[no-untyped-def]
    with serving(bomb_app) as (url,):
        yield Tables(DorisClient(url))


@pytest.fixture(scope="module")
def split_app(spark, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return _app(spark, tmp_path_factory, "split-data", csv_parquet_min_bytes=64 * KIB)


@pytest.fixture(scope="module")
def bombs_split(split_app) -> Iterator[Tables]:  # type: ignore[no-untyped-def]
    with serving(split_app) as (url,):
        yield Tables(DorisClient(url))


class Tables(SeededTables):
    """One database; each group of cases shares a table holding one good row, checked after every case."""

    def __init__(self, doris: DorisClient) -> None:
        super().__init__(doris, ddl=TABLE, good_line="1,keep\n", headers=CSV)

    def assert_survived(self, table: str) -> None:
        """The table is unchanged, and the JVM is alive: the table loads a good row."""
        assert self.doris.rows(self.db, f"select k, v from {table} order by k") == GOOD
        assert_doris_result(self.doris.stream_load(self.db, table, "1,keep\n", headers=CSV), loaded=1)


def refused(resp: httpx.Response, message: str) -> dict[str, Any]:
    return assert_doris_result(resp, status="Fail", message_contains=message, loaded=0)


# ---------------------------------------------------------------------------------------------------------------
# Parquet / ORC bodies: compressed inside the file


def _rows(values: list[str]) -> pa.Table:
    return pa.table({"k": pa.array(range(2, len(values) + 2), pa.int32()), "v": pa.array(values, pa.string())})


def _parquet(table: pa.Table, **options: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", use_dictionary=False, **options)
    return sink.getvalue()


def _orc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    orc.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def _zigzag_varint(value: int, length: int | None = None) -> bytes:
    """Thrift compact's i64: zigzag, then a varint (padded to `length` bytes with continuation bits)."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        out.append(z & 0x7F)
        z >>= 7
        if not z and (length is None or len(out) >= length):
            break
    for i in range(len(out) - 1):
        out[i] |= 0x80
    return bytes(out)


def _lying_footer(body: bytes) -> bytes:
    """The Parquet file with every column chunk's (and row group's) uncompressed size declared as 1,000 bytes in
    its footer; its pages are unchanged (readers take their sizes from the page headers)."""
    length = int.from_bytes(body[-8:-4], "little")
    start = len(body) - 8 - length
    footer = body[start:-8]
    meta = pq.read_metadata(io.BytesIO(body))
    sizes = {meta.row_group(g).total_byte_size for g in range(meta.num_row_groups)}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        sizes |= {group.column(c).total_uncompressed_size for c in range(group.num_columns)}
    for size in sizes:
        encoded = _zigzag_varint(size)
        footer = footer.replace(encoded, _zigzag_varint(1000, len(encoded)))
    lied = body[:start] + footer + body[-8:]
    meta = pq.read_metadata(io.BytesIO(lied))
    declared = sum(
        meta.row_group(g).column(c).total_uncompressed_size
        for g in range(meta.num_row_groups)
        for c in range(meta.num_columns)
    )
    assert declared < FLOOR, declared
    assert pq.read_table(io.BytesIO(lied)).num_rows == pq.read_metadata(io.BytesIO(body)).num_rows  # still readable
    return lied


MANY = ["a" * (3 * MIB)] * 7  # 21 MiB of values, pages under the line limit; a few KB zstd-compressed


@pytest.mark.parametrize(
    "body, headers, message",
    [
        pytest.param(_parquet(_rows(MANY)), {"format": "parquet"}, "footer declares", id="parquet-zstd"),
        pytest.param(_parquet(_rows(MANY), compression_level=19), {"format": "parquet"}, "footer", id="parquet-19"),
        pytest.param(_orc(_rows(MANY)), {"format": "orc"}, "compression chunks hold", id="orc-zstd"),
        pytest.param(
            _lying_footer(_parquet(_rows(MANY), data_page_size=MIB, write_batch_size=1)),
            {"format": "parquet"},
            "pages hold at least",
            id="parquet-whose-footer-lies",
        ),
    ],
)
def test_a_columnar_body_expanding_past_the_ratio_is_refused(
    bombs: Tables, body: bytes, headers: dict[str, str], message: str
) -> None:
    assert len(body) * 100 < FLOOR < 7 * 3 * MIB
    table = bombs.table("columnar")
    resp = bombs.load(table, body, headers)
    refused(resp, "[EXCEEDED_LIMIT]")
    assert message in resp.json()["Message"] and "SL_MAX_DECOMPRESSION_RATIO" in resp.json()["Message"]
    bombs.assert_survived(table)


def test_a_parquet_page_past_the_line_limit_is_refused(bombs: Tables) -> None:
    table = bombs.table("pages")
    body = _parquet(_rows(["b" * (LINE_LIMIT + 1)]))
    resp = bombs.load(table, body, {"format": "parquet"})
    refused(resp, "[EXCEEDED_LIMIT]the parquet body has a page of column v of 41943")
    assert "longer than 4194304 bytes (SL_MAX_LINE_BYTES)" in resp.json()["Message"]
    bombs.assert_survived(table)
    # a file within both bounds loads, Parquet and ORC
    small = _rows(["c" * (LINE_LIMIT // 2), "d"])
    assert_doris_result(bombs.load(table, _parquet(small), {"format": "parquet"}), loaded=2)
    assert_doris_result(bombs.load(table, _orc(small), {"format": "orc"}), loaded=2)


# ---------------------------------------------------------------------------------------------------------------
# thousands of `columns` entries: work in proportion to them, not to their square

WIDE = 2000


def _wide_columns(first: str = "k, v") -> str:
    return first + ", " + ", ".join(f"c{i}" for i in range(WIDE - 2))


@pytest.mark.parametrize(
    "body, headers, loaded",
    [
        pytest.param(
            '2,"t,wo"' + ",x" * (WIDE - 2) + "\n",
            {**CSV, "enclose": '"', "timeout": "35"},
            [[1, "keep"], [2, "t,wo"]],
            id="csv-enclose",
        ),
        # after the first wide load (the JVM's code for wide plans compiled): 6 s, where it took 23 s
        pytest.param(
            '{"k": 2, "v": "two"}\n', {"format": "json", "timeout": "15"}, [[1, "keep"], [2, "two"]], id="json"
        ),
    ],
)
def test_two_thousand_columns_plan_in_linear_time(
    bombs: Tables, body: str, headers: dict[str, str], loaded: list[list[Any]]
) -> None:
    """2,000 source fields: the JSON document or the quoted CSV line is parsed once, its fields taken from it (a
    parse per field, each with every field's schema, took 50 s and then the JVM's heap; the first wide load of a
    JVM takes up to ~20 s here, the next ~6 s)."""
    table = bombs.table(f"wide_{len(bombs.tables)}")
    resp = bombs.load(table, body, {**headers, "columns": _wide_columns()})
    assert_doris_result(resp, loaded=1)
    assert bombs.doris.rows(bombs.db, f"select k, v from {table} order by k") == loaded


def test_many_derived_columns_plan_in_few_projections(bombs: Tables) -> None:
    """250 constant entries are one projection; entries reading earlier ones still see the values before them
    (Doris: an entry may use the entries before it); past `MAX_DERIVED` (256) derived entries the header is refused
    before the load begins (1,500 of them once kept Spark's analyzer busy for minutes)."""
    table = bombs.table("derived")
    too_many = ", ".join(f"a{i} = {i}" for i in range(257))
    refused = bombs.load(table, "2,x\n", {**CSV, "columns": f"k, tmp, {too_many}"}).json()
    assert refused["Status"] == "Fail" and "at most 4096 (256 derived)" in refused["Message"], refused
    constants = ", ".join(f"a{i} = {i}" for i in range(250))
    chained = "b = concat(tmp, '-b'), c = concat(b, '-c'), d = concat(c, '-d'), v = concat(d, a7)"
    started = time.monotonic()
    resp = bombs.load(table, "2,x\n", {**CSV, "columns": f"k, tmp, {constants}, {chained}", "timeout": "20"})
    assert_doris_result(resp, loaded=1)
    assert time.monotonic() - started < 20
    assert bombs.doris.rows(bombs.db, f"select k, v from {table} order by k") == [[1, "keep"], [2, "x-b-c-d7"]]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_csv_body_of_short_lines_with_many_columns_is_split_in_bounded_memory(bombs_split: Tables) -> None:
    """The server splits a large CSV body itself (`arrow_csv`): its memory follows the fields the lines have, not
    lines x `columns` (a 1.1 MB body of one-field lines with 600 columns grew the server by 2.2 GB)."""
    table = bombs_split.table("short_lines")
    body = b"7\n" * 300_000  # 600 KB, past this server's csv_parquet_min_bytes: split while it is received
    columns = "k, v, " + ", ".join(f"c{i}" for i in range(198))
    peak = before = rss_mb()
    done = False

    def sample() -> None:
        nonlocal peak
        while not done:
            peak = max(peak, rss_mb())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        resp = bombs_split.load(table, body, {**CSV, "columns": columns, "max_filter_ratio": "1"})
    finally:
        done = True
        sampler.join()
    assert_doris_result(resp, total=300_000, filtered=300_000, loaded=0)
    assert peak - before < 200, f"the server grew by {peak - before:.0f} MB"


# ---------------------------------------------------------------------------------------------------------------
# a JSON array of many elements: each element's row carries its own text only


def test_a_json_array_of_many_elements_loads_in_linear_time(bombs: Tables) -> None:
    table = bombs.table("array")
    elements = [f'{{"k": {i}, "v": "e{i}"}}' for i in range(2, 12_002)]
    elements[5] = "1"  # not an object: filtered, its line is its own text
    elements[9] = "null"  # a JSON null: filtered, its line is its own text (it was the whole document)
    body = "[" + ", ".join(elements) + "]"
    headers = {"format": "json", "strip_outer_array": "true", "max_filter_ratio": "0.5", "timeout": "10"}
    started = time.monotonic()
    resp = bombs.load(table, body, headers)
    result = assert_doris_result(resp, total=12_000, loaded=11_998, filtered=2)
    assert time.monotonic() - started < 10
    log = httpx.get(result["ErrorURL"], auth=AUTH).text.splitlines()
    assert log[:2] == [
        "Reason: Parse json data failed. src line [1]; ",
        "Reason: Parse json data failed. src line [null]; ",
    ]
    # a body that is no array is one filtered row whose line is the document
    resp = bombs.load(table, '{"k": 5}', {**headers, "max_filter_ratio": "0"})
    result = assert_doris_result(resp, status="Fail", total=1, filtered=1)
    assert "JSON data is not an array-object" in httpx.get(result["ErrorURL"], auth=AUTH).text
