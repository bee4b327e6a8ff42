"""Doris's CSV rules as one case table, run against each path a CSV body can take.

A body takes the fast path (the server splits it: handed to Spark inline when small, as Parquet when large)
or the general one (Spark splits it, line by line); `CsvDialect.path_for` decides, with the sizes of the
`SL_CSV_*` settings. Three servers on the test run's SparkSession force one path each through those
settings; every rule loads its body into each of them and must give the rows and counts it states, and
the same error log. A rule also states whether the fast path takes its body at all (the server's debug log
says which path a load took).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from spark_runner import arrow_csv
from tables.csv_dialect import CsvDialect, CsvPath
from tables.load_spec import LoadRequest
from tests.helpers import AUTH, DorisClient, serving

TABLE = """CREATE TABLE {name} (k INT NOT NULL, v VARCHAR(4), n INT, d DECIMAL(5,2), s INT)
UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2 PROPERTIES ("function_column.sequence_col" = "s")"""
CSV = {"column_separator": ",", "max_filter_ratio": "1"}

GOOD = "1,a,10,1.5,1\n2,b,20,2.25,1\n1,c,11,3,2\n2,z,21,9,1\n3,\\N,\\N,\\N,5\n"
MIXED = (
    "1,a,007,1.5,1\n\n2,b, 12 ,x,1\n3,toolong,+5,2,1\n\\N,a,1,1,1\n4,d,1.5,1,1\n5,e,12abc,1,1\n"
    "6,f,99999999999,1,1\n7,g,-0,123456,1\n8,,,,1\n9,h,-7,-1.25,1"
)
# the integer text rule: digits with an optional sign and surrounding blanks; anything else is NULL (or rejected)
MIXED_ROWS = [
    [1, "a", 7, 1.5, 1],
    [2, "b", 12, None, 1],
    [4, "d", None, 1.0, 1],
    [5, "e", None, 1.0, 1],
    [6, "f", None, 1.0, 1],
    [7, "g", 0, None, 1],
    [8, "", None, None, 1],
    [9, "h", -7, -1.25, 1],
]
ONE_TWO = [[1, "a", 1, 1.0, 1], [2, "b", 2, 2.0, 1]]


@dataclass(frozen=True)
class Rule:
    """One Doris CSV rule: a body and its headers, the table's rows after the load and the load's counts
    (total, loaded, filtered, unselected); `fast`: the fast path takes the body (when its size fits)."""

    body: str | bytes
    headers: dict[str, str]
    rows: list[list[Any]]
    counts: tuple[int, int, int, int]
    fast: bool = True
    status: str = "Success"


RULES: dict[str, Rule] = {
    "sequence merge and \\N": Rule(
        GOOD, CSV, [[1, "c", 11, 3.0, 2], [2, "z", 21, 9.0, 1], [3, None, None, None, 5]], (5, 5, 0, 0)
    ),
    "rejected rows and integer text": Rule(MIXED, CSV, MIXED_ROWS, (10, 8, 2, 0)),
    "strict mode": Rule(MIXED, {**CSV, "strict_mode": "true"}, [MIXED_ROWS[0], MIXED_ROWS[-1]], (10, 2, 8, 0)),
    "empty as null, quote trimming": Rule(
        '1,"q",1,1,1\n2,"",2,2,1\n3,,3,3,1\n',
        {**CSV, "trim_double_quotes": "true", "empty_field_as_null": "true"},
        [[1, "q", 1, 1.0, 1], [2, None, 2, 2.0, 1], [3, None, 3, 3.0, 1]],
        (3, 3, 0, 0),
    ),
    "skipped header lines": Rule(
        "k,v,n,d,s\n\n1,a,1,1,1\n2,b,2,2,1\n", {**CSV, "skip_lines": "2"}, ONE_TWO, (2, 2, 0, 0)
    ),
    "tab separator, columns and where": Rule(
        "1\ta\t5\n2\tb\t6\n3\tc\t7\n",
        {"columns": "k,v,x,n=x*2,d=x,s=x", "where": "x > 5", "max_filter_ratio": "1"},
        [[2, "b", 12, 6.0, 6], [3, "c", 14, 7.0, 7]],
        (3, 2, 0, 1),
    ),
    "filtered rows past max_filter_ratio fail the load": Rule(
        "1,a,1,1,1\n2,b\n", {"column_separator": ","}, [], (2, 0, 1, 0), status="Fail"
    ),
    "wrong field count": Rule("1,a,1,1,1\n2,b\n3,c,3,3,3,3\n,\n", CSV, ONE_TWO[:1], (4, 1, 3, 0)),
    "CR before LF: part of the last field": Rule("1,a,1,1,1\r\n2,b,2,2,1\r\n", CSV, ONE_TWO, (2, 2, 0, 0)),
    "CRLF line delimiter": Rule(
        "1,a,1,1,1\r\n2,b\r,2,2,1\r\n",
        {**CSV, "line_delimiter": "\\r\\n"},
        [[1, "a", 1, 1.0, 1], [2, "b\r", 2, 2.0, 1]],
        (2, 2, 0, 0),
    ),
    "byte-order mark": Rule("\ufeff1,a,1,1,1\n2,b,2,2,1\n", CSV, ONE_TWO, (2, 2, 0, 0), fast=False),
    "two-byte separator": Rule(
        "1||a||1||1||1\n2|||b||2||2||2\n",
        {**CSV, "column_separator": "||"},
        [[1, "a", 1, 1.0, 1], [2, "|b", 2, 2.0, 2]],
        (2, 2, 0, 0),
    ),
    "enclose": Rule('1,"a,b",1,1,1\n', {**CSV, "enclose": '"'}, [[1, "a,b", 1, 1.0, 1]], (1, 1, 0, 0), fast=False),
    "enclose and escape": Rule(
        '1,"a\\"b",1,1,1\n2,"x,y",2,2,2\n',
        {**CSV, "enclose": '"', "escape": "\\"},
        [[1, 'a"b', 1, 1.0, 1], [2, "x,y", 2, 2.0, 2]],
        (2, 2, 0, 0),
        fast=False,
    ),
    "no enclose: quotes are data": Rule('1,"a,b",1,1,1\n2,"b",2,2,1\n', CSV, [[2, '"b"', 2, 2.0, 1]], (2, 1, 1, 0)),
    "a trailing separator is one more field": Rule("1,a,1,1,1,\n2,b,2,2,1\n", CSV, ONE_TWO[1:], (2, 1, 1, 0)),
    "blank lines are no rows": Rule("\n\n1,a,1,1,1\n\n\n2,b,2,2,1\n\n", CSV, ONE_TWO, (2, 2, 0, 0)),
    "skip_lines counts blank lines": Rule(
        "\n1,a,1,1,1\n2,b,2,2,1\n", {**CSV, "skip_lines": "1"}, ONE_TWO, (2, 2, 0, 0)
    ),
    "skip_lines past the body": Rule("1,a,1,1,1\n", {**CSV, "skip_lines": "3"}, [], (0, 0, 0, 0), fast=False),
    "hex separator and line delimiter": Rule(
        "1\x01a\x011\x011\x011\x022\x01b\x012\x012\x011\x02",
        {**CSV, "column_separator": "\\x01", "line_delimiter": "\\x02"},
        ONE_TWO,
        (2, 2, 0, 0),
    ),
    "lengths are bytes": Rule("1,éé,1,1,1\n2,ééé,2,2,1\n", CSV, [[1, "éé", 1, 1.0, 1]], (2, 1, 1, 0)),
    "not UTF-8: left to Spark": Rule(
        b"1,\xff,1,1,1\n2,b,2,2,1\n", CSV, [[1, "\ufffd", 1, 1.0, 1], ONE_TWO[1]], (2, 2, 0, 0), fast=False
    ),
}

# the sizes (SL_CSV_INLINE_MAX_BYTES, SL_CSV_PARQUET_MIN_BYTES) that send every body one way
FORCED = {
    CsvPath.INLINE: {"csv_inline_max_bytes": 1 << 40, "csv_inline_max_lines": 1 << 20, "csv_parquet_min_bytes": 0},
    CsvPath.PARQUET: {"csv_inline_max_bytes": -1, "csv_parquet_min_bytes": 0},
    CsvPath.GENERAL: {"csv_inline_max_bytes": -1, "csv_parquet_min_bytes": 1 << 62},
}


@dataclass
class PathServer:
    client: DorisClient
    db: str
    data_dir: Path


@pytest.fixture(scope="module")
def path_servers(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[CsvPath, PathServer]]:
    """One server per path, on the test run's SparkSession, each with a database of its own."""
    from contextlib import ExitStack

    from app.main import create_app
    from app.settings import Settings

    servers: dict[CsvPath, PathServer] = {}
    with ExitStack() as stack:
        for path, sizes in FORCED.items():
            data_dir = tmp_path_factory.mktemp(f"csv-{path.name.lower()}")
            settings = Settings(data_dir=data_dir, mysql_port=0, compaction_interval_seconds=0, **sizes)
            (url,) = stack.enter_context(serving(create_app(settings, spark=spark), settings=settings))
            client = DorisClient(url)
            client.sql("paths", "CREATE DATABASE paths")
            servers[path] = PathServer(client, "paths", data_dir)
        yield servers


def load(server: PathServer, table: str, rule: Rule) -> dict[str, Any]:
    doris = server.client
    doris.sql(server.db, TABLE.format(name=table))
    reply = doris.stream_load(server.db, table, rule.body, headers={**rule.headers, "label": f"{table}_load"}).json()
    log = httpx.get(reply["ErrorURL"], auth=AUTH).text if "ErrorURL" in reply else None
    seen = {k: v for k, v in reply.items() if not k.endswith("TimeMs") and k not in ("TxnId", "Label", "ErrorURL")}
    return {"reply": seen, "error_log": log, "rows": doris.rows(server.db, f"select * from {table} order by k")}


@pytest.mark.parametrize("name", list(RULES))
def test_rule_on_each_path(
    path_servers: dict[CsvPath, PathServer], caplog: pytest.LogCaptureFixture, name: str
) -> None:
    rule = RULES[name]
    table = "t_" + "".join(ch if ch.isalnum() else "_" for ch in name)
    got: dict[CsvPath, dict[str, Any]] = {}
    for path, server in path_servers.items():
        with caplog.at_level(logging.DEBUG, logger="spark_runner.load_job"):
            caplog.clear()
            got[path] = load(server, table, rule)
            taken = [r.getMessage().rsplit(": ", 1)[1] for r in caplog.records if "CSV body" in r.getMessage()]
        forced = path if rule.fast else CsvPath.GENERAL
        assert taken == [f"{forced} path"], (path, taken)
        reply = got[path]["reply"]
        counts = tuple(reply[f"Number{c}Rows"] for c in ("Total", "Loaded", "Filtered", "Unselected"))
        assert (reply["Status"], counts, got[path]["rows"]) == (rule.status, rule.counts, rule.rows), path
    assert got[CsvPath.INLINE] == got[CsvPath.GENERAL]
    assert got[CsvPath.PARQUET] == got[CsvPath.GENERAL]
    # the fields the fast path wrote as Parquet are removed with the staged body
    assert not list(path_servers[CsvPath.PARQUET].data_dir.rglob("*.fields.parquet"))


def reference_split(text: str, dialect: CsvDialect) -> list[tuple[str, int, list[str | None]]]:
    """Spark's text path in plain Python: lines at the delimiter (the empty piece after the last one
    dropped), `skip_lines` lines and then blank ones skipped, fields by Java's split (limit -1)."""
    lines = text.split(dialect.line_delimiter)
    if lines and lines[-1] == "":
        lines.pop()
    n = dialect.field_count
    out: list[tuple[str, int, list[str | None]]] = []
    for pos, line in enumerate(lines):
        if pos >= dialect.skip_lines and line != "":
            parts: list[str | None] = list(line.split(dialect.column_separator))
            out.append((line, len(parts), (parts + [None] * n)[:n]))
    return out


def fast_split(path: Path, dialect: CsvDialect) -> list[tuple[str, int, list[str | None]]]:
    """The fast path's split of a body, with each line rebuilt as Spark rebuilds it."""
    out: list[tuple[str, int, list[str | None]]] = []
    for lines in arrow_csv.body_lines(path, dialect, segment_bytes=7):  # tiny segments: lines span several
        for row in arrow_csv.split_lines(lines, dialect).to_pylist():
            fields = [row[arrow_csv.field_name(i)] for i in range(dialect.field_count)]
            count = row[arrow_csv.FIELD_COUNT]
            line = dialect.column_separator.join(f for f in [*fields, row[arrow_csv.REST]] if f is not None)
            out.append((line, dialect.field_count if count is None else count, fields))
    return out


def test_fast_split_is_the_text_paths(tmp_path: Path) -> None:
    """Random bodies of separators, delimiters (some of several characters, some overlapping themselves),
    carriage returns, multi-byte characters and `\\N`: the fast split gives the text path's lines and fields."""
    rng = random.Random(7)
    body = tmp_path / "body"
    for _ in range(2000):
        delimiter = rng.choice(["\n", "\r\n", "||", "\n\n", "aa", "é"])
        separator = rng.choice([",", "|", "||", "ab", "é", "\t"])
        pieces = ["a", "b", ",", "|", "\n", "\r", "é", "x", "\\N", delimiter, separator]
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        skip = rng.choice([0, 0, 1, 2])
        request = LoadRequest(db="d", table="t", label="l", column_separator=separator, line_delimiter=delimiter)
        dialect = CsvDialect.of(request.model_copy(update={"skip_lines": skip}), rng.randint(0, 4))
        body.write_text(text, encoding="utf-8")
        assert fast_split(body, dialect) == reference_split(text, dialect), (text, dialect)


def lines_or_refusal(read: Any) -> list[str] | str:
    try:
        return read()
    except arrow_csv.GeneralPath:
        return "general path"


def test_a_small_bodys_lines_are_body_lines(tmp_path: Path) -> None:
    """A group's bodies held in memory are cut in Python (`few_lines`, `as_strings`): random bodies of delimiters
    (some of several characters, some overlapping themselves), empty lines, skipped lines, byte-order marks and
    bytes that are not UTF-8 give `body_lines`'s lines, or its refusal (the group then goes to Spark's scan)."""
    rng = random.Random(11)
    for _ in range(3000):
        delimiter = rng.choice(["\n", "\r\n", "||", "\n\n", "aa", "é"])
        pieces = [b"a", b"b", b",", b"\n", b"\r", "é".encode(), b"x", delimiter.encode(), delimiter.encode()]
        pieces += [b"\xff", b"\xed\xa0\x80", b"\xc3"] if rng.random() < 0.1 else []
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        if rng.random() < 0.05:
            data = "\ufeff".encode() + data
        request = LoadRequest(db="d", table="t", label="l", line_delimiter=delimiter)
        dialect = CsvDialect.of(request.model_copy(update={"skip_lines": rng.choice([0, 0, 1, 2])}), 2)

        def from_arrow(data: bytes = data, dialect: CsvDialect = dialect) -> list[str]:
            return [line for piece in arrow_csv.body_lines(data, dialect) for line in piece.to_pylist()]

        def in_python(data: bytes = data, dialect: CsvDialect = dialect) -> list[str]:
            return arrow_csv.as_strings(arrow_csv.few_lines(data, dialect)).to_pylist()

        assert lines_or_refusal(in_python) == lines_or_refusal(from_arrow), (data, delimiter, dialect.skip_lines)


def split_fields(path: Path, dialect: CsvDialect) -> list[dict[str, Any]]:
    """The split's fields of a body (`arrow_csv.split_lines` over `body_lines`), as `stage_fields` writes them."""
    rows: list[dict[str, Any]] = []
    for lines in arrow_csv.body_lines(path, dialect):
        rows += arrow_csv.split_lines(lines, dialect).to_pylist()
    return rows


def test_the_csv_reader_writes_the_splits_fields_or_leaves_the_body_to_it(tmp_path: Path) -> None:
    """pyarrow's CSV reader (`arrow_csv.read_fields`) stages a large body's fields in place of the split when every
    line has the expected fields. Random bodies of one-byte separators, blank lines, carriage returns, quotes,
    byte-order marks, bytes that are not UTF-8 and lines of other field counts: what the reader writes is what
    the split writes, and a body it refuses raises (the split then decides). Bodies of clean lines are taken."""
    import pyarrow.parquet as pq

    rng = random.Random(11)
    body, out = tmp_path / "body", tmp_path / "fields.parquet"
    taken = refused = 0
    for _ in range(1500):
        separator = rng.choice([",", "|", "\t", "\x01"])
        fields = rng.randint(1, 4)
        clean = rng.random() < 0.5
        pieces = ["a", "é", '"', "\\N", " ", ""] + ([] if clean else ["\r", "\n", separator, "\ufeff"])
        lines = [
            separator.join("".join(rng.choice(pieces) for _ in range(rng.randint(0, 3))) for _ in range(fields))
            for _ in range(rng.randint(1, 30))
        ]
        lines = [line for line in lines if line] or ["x" * fields]
        text = "\n".join(line if rng.random() < 0.9 else "\n" + line for line in lines) + rng.choice(["", "\n"])
        data = text.encode() if clean or rng.random() < 0.9 else text.encode() + b"\xff\n"
        body.write_bytes(data)
        request = LoadRequest(db="d", table="t", label="l", column_separator=separator)
        dialect = CsvDialect.of(request, fields)
        assert arrow_csv._reader_fits(dialect)
        out.unlink(missing_ok=True)
        try:
            rows = arrow_csv.read_fields(body, dialect, out)
        except Exception:
            refused += 1
            assert not clean, text
            continue
        taken += 1
        split = split_fields(body, dialect)
        assert rows == len(split)
        assert pq.read_table(out).to_pylist() == split, text
    assert taken > 700 and refused > 100, (taken, refused)
