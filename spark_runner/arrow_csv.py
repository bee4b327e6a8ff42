"""The fast CSV path: the server splits a staged body into raw fields with pyarrow, Spark does the rest.

Spark's text path (`load_job.csv_source`) reads lines and splits each one with a regular expression, the
costliest per-row step of a large load, and a one-row load spends a sizeable part of its time reading its
few bytes through Spark's file source. Here pyarrow's string kernels split the body exactly as the text
path does, step by step:
    lines     the body split at `line_delimiter`, the empty piece after a final delimiter dropped (Hadoop's
              line reader); the first `skip_lines` lines, then empty lines, skipped
    fields    the line split at `column_separator` with every empty field kept (Java's split, limit -1); the
              first `field_count` fields, NULL past the line's end, and the rest of a longer line in
              `REST`, so that the field count (`FIELD_COUNT`, NULL when it is the expected one) and the line
              (the fields joined by the separator: no quoting) are known to Spark as they were
The fields go to Spark inline (a `VALUES` list: no file listing, no scan) for a small body, as an
uncompressed Parquet file beside the staged body for a large one; the job continues unchanged either way:
the same `\\N` / empty-field / quote-trimming expressions, conversions, strict-mode checks and merge.
Which bodies come here is `CsvDialect.path_for`'s decision; a body that turns out to need the text path
(`GeneralPath`) is left to it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from tables.csv_dialect import BOM, CsvDialect

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

log = logging.getLogger(__name__)

SEGMENT_BYTES = 1 << 22  # the body is split this much at a time: the split's memory is a few segments
ROW_GROUP_ROWS = 1 << 19  # several row groups, so Spark splits the file evenly over its cores
SPLIT_THREADS = 2  # segments split at once, beside the thread that cuts lines and writes
REST = "__rest"  # what follows the expected fields on a longer line
FIELD_COUNT = "__nfields"  # the line's field count when it is not the expected one


class GeneralPath(Exception):
    """The body needs the general path (found while splitting it)."""


def field_name(i: int) -> str:
    return f"__r{i}"


def column_names(dialect: CsvDialect) -> list[str]:
    """The columns of a split body: the raw fields, the rest of a longer line, the field count."""
    return [*(field_name(i) for i in range(dialect.field_count)), REST, FIELD_COUNT]


def staging_path(path: Path) -> Path:
    """The Parquet file of a staged body's fields (removed with the body: `LoadService.cleanup_staged`)."""
    return path.with_name(path.name + ".fields.parquet")


def _schema(dialect: CsvDialect) -> pa.Schema:
    import pyarrow as pa

    names = column_names(dialect)
    return pa.schema([(n, pa.string()) for n in names[:-1]] + [(FIELD_COUNT, pa.int32())])


def _as_array(data: bytes) -> pa.Array:
    """`data` as a one-element binary array, without copying it."""
    import pyarrow as pa

    offsets = pa.array([0, len(data)], pa.int64()).buffers()[1]
    return pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(data)])


def body_lines(path: Path, dialect: CsvDialect, *, segment_bytes: int = SEGMENT_BYTES) -> Iterator[pa.Array]:
    """The body's lines as strings, about `segment_bytes` at a time, after `skip_lines` lines.

    Raises:
        GeneralPath: a byte-order mark, bytes that are not UTF-8.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    delimiter = dialect.line_delimiter.encode()
    to_skip = dialect.skip_lines
    carry = b""  # the line the last segment ended inside
    with open(path, "rb") as body:
        head = body.read(segment_bytes)
        if head.startswith(BOM):
            raise GeneralPath("a byte-order mark")
        chunk = head
        while chunk or carry:
            data = carry + chunk if carry else chunk
            pieces = pc.split_pattern(_as_array(data), delimiter).values
            chunk = body.read(segment_bytes)
            last = pieces[len(pieces) - 1].as_py()
            if chunk:  # the last piece is a line only at the end of the body
                carry = last
                pieces = pieces.slice(0, len(pieces) - 1)
            else:
                carry = b""
                if last == b"":  # the empty piece after a final delimiter
                    pieces = pieces.slice(0, len(pieces) - 1)
            if to_skip:
                skipped = min(to_skip, len(pieces))
                pieces, to_skip = pieces.slice(skipped), to_skip - skipped
            empty = pc.equal(pieces, b"")
            lines = pieces.filter(pc.invert(empty)) if empty.true_count else pieces
            if len(lines):
                try:
                    yield lines.cast(pa.large_string()).cast(pa.string())
                except pa.ArrowInvalid as exc:  # not UTF-8
                    raise GeneralPath(str(exc)) from None


def split_lines(lines: pa.Array, dialect: CsvDialect) -> pa.Table:
    """The lines' raw fields, the rest of longer lines and the field counts that are not the expected one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = dialect.field_count
    sep = dialect.column_separator
    parts = pc.split_pattern(lines, sep, max_splits=n)  # n fields and, on a longer line, the rest
    counts = pc.list_value_length(parts)
    bounds = pc.min_max(counts)
    fewest, most = bounds["min"].as_py(), bounds["max"].as_py()
    if fewest == n == most:  # the common case: every line has the expected fields
        columns = [pc.list_element(parts, i) for i in range(n)]
        return pa.Table.from_arrays(
            [*columns, pa.nulls(len(lines), pa.string()), pa.nulls(len(lines), pa.int32())], schema=_schema(dialect)
        )
    fixed = pc.list_slice(parts, 0, n + 1, return_fixed_size_list=True)  # NULL past the line's end
    columns = [pc.list_element(fixed, i) for i in range(n + 1)]
    rest = columns[n]
    # a longer line has n fields, the rest's first one and one more per separator in the rest
    whole = pc.add(pc.count_substring(rest, sep), n + 1)
    fields = pc.if_else(pc.is_null(rest), counts, whole).cast(pa.int32())
    ncols = pc.if_else(pc.equal(fields, n), pa.scalar(None, pa.int32()), fields)
    return pa.Table.from_arrays([*columns, ncols], schema=_schema(dialect))


def split_small(path: Path, dialect: CsvDialect) -> pa.Table | None:
    """A small body's fields, or None when it needs the general path (more lines than `inline_max_lines`,
    or no line at all: an inline table needs one)."""
    import pyarrow as pa

    try:
        segments = list(body_lines(path, dialect))
    except GeneralPath as exc:
        log.debug("general path for %s: %s", path.name, exc)
        return None
    lines = pa.concat_arrays(segments) if segments else None
    if lines is None or len(lines) > dialect.inline_max_lines:
        return None
    return split_lines(lines, dialect)


def stage_fields(path: Path, dialect: CsvDialect) -> Path | None:
    """Split a large body and write its fields as Parquet, a segment at a time.

    The fields of a few segments are split on worker threads (pyarrow's kernels release the GIL) while
    this thread cuts the next segment's lines and writes finished ones, in order.
    Returns the Parquet file, or None when the body needs the general path.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = staging_path(path)
    rows = 0
    try:
        with (
            ThreadPoolExecutor(max_workers=SPLIT_THREADS, thread_name_prefix="csv-split") as pool,
            pq.ParquetWriter(
                str(out), _schema(dialect), compression="none", use_dictionary=False, write_statistics=False
            ) as writer,
        ):
            pending: deque[Future[pa.Table]] = deque()
            for lines in body_lines(path, dialect):
                pending.append(pool.submit(split_lines, lines, dialect))
                while pending and (len(pending) > SPLIT_THREADS or pending[0].done()):
                    rows += _write(writer, pending.popleft().result())
            while pending:
                rows += _write(writer, pending.popleft().result())
    except (GeneralPath, pa.ArrowException, OSError) as exc:
        log.debug("general path for %s: %s", path.name, exc)
        out.unlink(missing_ok=True)
        return None
    if not rows:  # no line: left to the general path, as the split has nothing to hand over
        out.unlink(missing_ok=True)
        return None
    return out


def _write(writer: pq.ParquetWriter, table: pa.Table) -> int:
    writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
    return int(table.num_rows)
