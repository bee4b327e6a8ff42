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
import mmap
from pathlib import Path

from spark_runner.planning import LoadPlan

log = logging.getLogger(__name__)

MIN_BYTES = 1 << 20  # below this the text path is as fast and the staging file is pure overhead
BLOCK_BYTES = 1 << 24  # pyarrow reads and parses this much at a time
ROW_GROUP_ROWS = 1 << 19  # several row groups, so Spark splits the file evenly over its cores
BOM = b"\xef\xbb\xbf"


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


def _body_start(path: Path, skip_lines: int) -> int | None:
    """Byte offset after the first `skip_lines` lines, or None when the body needs the text path
    (a `\\r` anywhere, a byte-order mark on the first line read, fewer lines than to skip)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as body:
        if body.find(b"\r") >= 0:
            return None
        offset = 0
        for _ in range(skip_lines):
            end = body.find(b"\n", offset)
            if end < 0:
                return None
            offset = end + 1
        if body[offset : offset + len(BOM)] == BOM:
            return None
        return offset


def stage_fields(path: Path, plan: LoadPlan) -> Path | None:
    """Split the staged body into string fields with pyarrow and write them as Parquet.

    Returns the Parquet file, or None when the body must take the text path.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    size = path.stat().st_size
    if not eligible(plan, size):
        return None
    start = _body_start(path, plan.request.skip_lines)
    if start is None:
        return None
    names = [field_name(i) for i in range(len(plan.source_fields))]
    out = staging_path(path)
    try:
        with pa.OSFile(str(path)) as raw:
            raw.seek(start)
            reader = pacsv.open_csv(
                raw,
                read_options=pacsv.ReadOptions(column_names=names, block_size=BLOCK_BYTES),
                parse_options=pacsv.ParseOptions(
                    delimiter=plan.request.column_separator,
                    quote_char=False,
                    escape_char=False,
                    newlines_in_values=False,
                    ignore_empty_lines=True,
                    invalid_row_handler=lambda row: "error",  # a wrong field count: the text path reports it
                ),
                convert_options=pacsv.ConvertOptions(
                    column_types={n: pa.string() for n in names},
                    null_values=[],
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
            with pq.ParquetWriter(
                str(out), reader.schema, compression="none", use_dictionary=False, write_statistics=False
            ) as writer:
                for batch in reader:
                    writer.write_batch(batch, row_group_size=ROW_GROUP_ROWS)
    except (pa.ArrowException, OSError) as exc:  # invalid UTF-8, a wrong field count, an empty body
        log.debug("text path for %s: %s", path.name, exc)
        out.unlink(missing_ok=True)
        return None
    return out
