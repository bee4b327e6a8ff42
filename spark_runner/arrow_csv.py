"""Arrow ingestion of a staged CSV body: pyarrow splits the lines into fields, Spark does everything else.

Spark's text path (`load_job.csv_source`) reads lines and splits each one with a regular expression,
the costliest per-row step of a large load. When the body's framing is simple, pyarrow's C++ CSV
reader splits it instead and writes the raw fields, as strings, to an uncompressed Parquet file beside
the staged body; Spark reads that file with its vectorized reader and the job continues unchanged: the
same `\\N` / empty-field / quote-trimming expressions, the same conversions and strict-mode checks, the
same merge. Rejected rows still show their line: with no quoting, a line is its fields joined by the
separator, so `concat_ws` rebuilds it exactly.

The fast path is taken only when it cannot differ from the text path:
    format csv, no `enclose` / `escape`, `\\n` lines, a one-byte ASCII column separator,
    no `\\r` anywhere (pyarrow ends lines at `\\r` too), no UTF-8 byte-order mark, valid UTF-8,
    and every non-empty line with exactly the expected number of fields.
Anything else (found before or while parsing) returns None and the load takes the text path, which
also reports rows with the wrong field count.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from spark_runner.planning import LoadPlan

log = logging.getLogger(__name__)

MIN_BYTES = 1 << 20  # below this the text path is as fast and the staging file is pure overhead
SEGMENT_BYTES = 1 << 22  # whole lines parsed at a time: the split's memory is a few segments, whatever the body
ROW_GROUP_ROWS = 1 << 19  # several row groups, so Spark splits the file evenly over its cores
BOM = b"\xef\xbb\xbf"


class TextPath(Exception):
    """The body needs the text path (found while reading it)."""


def field_name(i: int) -> str:
    return f"__r{i}"


def staging_path(path: Path) -> Path:
    """The Parquet file of a staged body's fields (removed with the body: `LoadService.cleanup_staged`)."""
    return path.with_name(path.name + ".fields.parquet")


def eligible(plan: LoadPlan, size: int) -> bool:
    """The request's framing is one pyarrow splits exactly like the text path (the body is checked later)."""
    req = plan.request
    sep = req.column_separator
    return (
        req.format == "csv"
        and size >= MIN_BYTES
        and not req.enclose
        and not req.escape
        and req.line_delimiter == "\n"
        and len(sep) == 1
        and ord(sep) < 0x80
        and sep not in "\n\r"
        and len(plan.source_fields) > 0
    )


def _segments(path: Path, skip_lines: int) -> Iterator[bytes]:
    """The body after its first `skip_lines` lines, as runs of whole lines of about SEGMENT_BYTES each.

    Raises:
        TextPath: a `\\r` anywhere, a byte-order mark on the first line read, fewer lines than to skip.
    """
    with open(path, "rb") as body:
        for _ in range(skip_lines):
            if not body.readline().endswith(b"\n"):
                raise TextPath("fewer lines than skip_lines")
        rest = b""
        first = True
        while True:
            chunk = body.read(SEGMENT_BYTES)
            if b"\r" in chunk:
                raise TextPath("a carriage return")
            data = rest + chunk if rest else chunk
            if first and data.startswith(BOM):
                raise TextPath("a byte-order mark")
            first = False
            if not chunk:
                if data:
                    yield data
                return
            cut = data.rfind(b"\n") + 1
            if cut:
                yield data[:cut]
            rest = data[cut:]


def stage_fields(path: Path, plan: LoadPlan) -> Path | None:
    """Split the staged body into string fields with pyarrow and write them as Parquet, a segment at a time.

    Returns the Parquet file, or None when the body must take the text path.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if not eligible(plan, path.stat().st_size):
        return None
    names = [field_name(i) for i in range(len(plan.source_fields))]
    read = pacsv.ReadOptions(column_names=names)
    parse = pacsv.ParseOptions(
        delimiter=plan.request.column_separator,
        quote_char=False,
        escape_char=False,
        newlines_in_values=False,
        ignore_empty_lines=True,
        invalid_row_handler=lambda row: "error",  # a wrong field count: the text path reports it
    )
    convert = pacsv.ConvertOptions(
        column_types={n: pa.string() for n in names},
        null_values=[],
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    schema = pa.schema([(n, pa.string()) for n in names])
    out = staging_path(path)
    try:
        with pq.ParquetWriter(
            str(out), schema, compression="none", use_dictionary=False, write_statistics=False
        ) as writer:
            for segment in _segments(path, plan.request.skip_lines):
                table = pacsv.read_csv(
                    pa.py_buffer(segment), read_options=read, parse_options=parse, convert_options=convert
                )
                writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
    except (TextPath, pa.ArrowException, OSError) as exc:  # invalid UTF-8, a wrong field count, an empty body
        log.debug("text path for %s: %s", path.name, exc)
        out.unlink(missing_ok=True)
        return None
    return out
