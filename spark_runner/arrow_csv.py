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

A large body whose dialect pyarrow's CSV reader parses as the split would (`_reader_fits`) is read by it first
(`read_fields`, about twice the split's speed); a body it gives up on (a line of another field count, a carriage
return, a byte-order mark, bytes that are not UTF-8) is split as above, from its first byte.

A large body with a Content-Length is split while it is received (`prestage`): the split follows the staged file
as the receiver writes it (`GrowingBody`), so that the job finds the fields written when the last byte is in.
Over a network the body takes longer to come than to split: at 100 MB/s, 171 MB loaded 0.6-0.9 s sooner.
"""

from __future__ import annotations

import io
import logging
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

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


class _Body(Protocol):
    def read(self, size: int, /) -> bytes: ...

    def close(self) -> None: ...


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


def body_lines(
    path: Path | bytes,
    dialect: CsvDialect,
    *,
    segment_bytes: int | None = None,
    growing: GrowingBody | None = None,
) -> Iterator[pa.Array]:
    """The body's lines as strings, about `segment_bytes` at a time, after `skip_lines` lines; `path` is the
    staged file, or the body itself when it was kept in memory; `growing`: read the body as it is received.

    Raises:
        GeneralPath: a byte-order mark, bytes that are not UTF-8, a body that was not received whole.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    segment_bytes = segment_bytes or SEGMENT_BYTES
    delimiter = dialect.line_delimiter.encode()
    to_skip = dialect.skip_lines
    carry = b""  # the line the last segment ended inside
    opened: _Body
    if isinstance(path, bytes):
        opened = io.BytesIO(path)
    else:
        opened = open(path, "rb") if growing is None else growing.reader()  # noqa: SIM115 (closed below)
    with closing(opened) as body:
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


def few_lines(data: bytes, dialect: CsvDialect) -> list[bytes]:
    """`body_lines` of a body held in memory that fits one segment, as Python bytes: each line as `body_lines`
    cuts it (after `skip_lines` lines, empty lines dropped), not yet checked for UTF-8 (`as_strings`). A group's
    loads are one line each: pyarrow's per-call cost, five calls a body, was 5% of the server's Python under
    small async loads.

    Raises:
        GeneralPath: a byte-order mark.
    """
    if len(data) > SEGMENT_BYTES:
        raise ValueError("a body past one segment goes through body_lines")
    if data.startswith(BOM):
        raise GeneralPath("a byte-order mark")
    pieces = data.split(dialect.line_delimiter.encode())
    if pieces[-1] == b"":  # the empty piece after a final delimiter (or of an empty body)
        pieces.pop()
    return [piece for piece in pieces[dialect.skip_lines :] if piece]


def as_strings(lines: list[bytes]) -> pa.Array:
    """Lines from `few_lines` as one string array, as `body_lines` yields them.

    Raises:
        GeneralPath: bytes that are not UTF-8.
    """
    import pyarrow as pa

    try:
        return pa.array(lines, pa.large_binary()).cast(pa.large_string()).cast(pa.string())
    except pa.ArrowInvalid as exc:  # not UTF-8
        raise GeneralPath(str(exc)) from None


def split_lines(lines: pa.Array, dialect: CsvDialect) -> pa.Table:
    """The lines' raw fields, the rest of longer lines and the field counts that are not the expected one."""
    import pyarrow as pa

    pieces = list(split_pieces(lines, dialect))
    if not pieces:
        return _schema(dialect).empty_table()
    return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)


CELLS = 1 << 20  # fields (present or NULL) of one piece of a split whose lines have different field counts


def split_pieces(lines: pa.Array, dialect: CsvDialect) -> Iterator[pa.Table]:
    """`split_lines`, as consecutive pieces of rows: the lines are split now, each piece's columns are built when
    it is taken. Lines of other field counts than the expected one give pieces of at most `CELLS` fields each,
    with one shared NULL column for every field past the piece's longest line: a body of one-field lines with
    600 `columns` once built 601 columns of every line at once (the server grew by 2.2 GB for a 1.1 MB body)."""
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
        return iter(
            [
                pa.Table.from_arrays(
                    [*columns, pa.nulls(len(lines), pa.string()), pa.nulls(len(lines), pa.int32())],
                    schema=_schema(dialect),
                )
            ]
        )
    return _ragged_pieces(parts, counts, dialect)


def _ragged_pieces(parts: pa.ListArray, counts: pa.Array, dialect: CsvDialect) -> Iterator[pa.Table]:
    import pyarrow as pa
    import pyarrow.compute as pc

    n = dialect.field_count
    sep = dialect.column_separator
    step = max(1, CELLS // (n + 1))
    taken: list[pa.Table] = []
    rows_taken = cells_taken = 0
    for start in range(0, len(parts), step):
        piece, piece_counts = parts.slice(start, step), counts.slice(start, step)
        rows = len(piece)
        longest = pc.max(piece_counts).as_py() or 0
        width = min(max(longest, 1), n + 1)
        fixed = pc.list_slice(piece, 0, width, return_fixed_size_list=True)  # NULL past the line's end
        absent = pa.nulls(rows, pa.string())  # every field past the piece's longest line
        columns = [pc.list_element(fixed, i) for i in range(width)] + [absent] * (n + 1 - width)
        rest = columns[n]
        # a longer line has n fields, the rest's first one and one more per separator in the rest
        whole = pc.add(pc.count_substring(rest, sep), n + 1)
        fields = pc.if_else(pc.is_null(rest), piece_counts, whole).cast(pa.int32())
        ncols = pc.if_else(pc.equal(fields, n), pa.scalar(None, pa.int32()), fields)
        taken.append(pa.Table.from_arrays([*columns, ncols], schema=_schema(dialect)))
        rows_taken += rows
        cells_taken += rows * width
        # pieces go out together up to a row group (or `CELLS` fields that are not the shared NULLs): one piece
        # a row group made the Parquet file's footer as large as the fields
        if rows_taken >= ROW_GROUP_ROWS or cells_taken >= 4 * CELLS:
            yield pa.concat_tables(taken)
            taken, rows_taken, cells_taken = [], 0, 0
    if taken:
        yield pa.concat_tables(taken)


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


def stage_fields(path: Path, dialect: CsvDialect, *, growing: GrowingBody | None = None) -> Path | None:
    """Split a large body and write its fields as Parquet, a segment at a time (`growing`: as it is received).

    The fields of a few segments are split on worker threads (pyarrow's kernels release the GIL) while
    this thread cuts the next segment's lines and writes finished ones, in order.
    Returns the Parquet file, or None when the body needs the general path.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = staging_path(path)
    if _reader_fits(dialect):
        try:
            if read_fields(path, dialect, out, growing=growing):
                return out
        except Exception as exc:  # anything the reader does not take as the split would: the split decides
            log.debug("the CSV reader leaves %s to the split: %s", path.name, exc)
        out.unlink(missing_ok=True)
    rows = 0
    try:
        with (
            ThreadPoolExecutor(max_workers=SPLIT_THREADS, thread_name_prefix="csv-split") as pool,
            pq.ParquetWriter(
                str(out), _schema(dialect), compression="none", use_dictionary=False, write_statistics=False
            ) as writer,
        ):
            pending: deque[Future[Iterator[pa.Table]]] = deque()
            for lines in body_lines(path, dialect, growing=growing):
                pending.append(pool.submit(split_pieces, lines, dialect))
                while pending and (len(pending) > SPLIT_THREADS or pending[0].done()):
                    rows += sum(_write(writer, piece) for piece in pending.popleft().result())
            while pending:
                rows += sum(_write(writer, piece) for piece in pending.popleft().result())
    except (GeneralPath, pa.ArrowException, OSError) as exc:
        log.debug("general path for %s: %s", path.name, exc)
        out.unlink(missing_ok=True)
        return None
    if not rows:  # no line: left to the general path, as the split has nothing to hand over
        out.unlink(missing_ok=True)
        return None
    return out


def _reader_fits(dialect: CsvDialect) -> bool:
    """Whether pyarrow's CSV reader splits this dialect's bodies as `split_lines` does, when it succeeds: lines end
    at `\n` only, one byte separates fields, nothing is quoted, no line is skipped."""
    return (
        dialect.line_delimiter == "\n"
        and len(dialect.column_separator.encode()) == 1
        and dialect.column_separator not in "\r\n"
        and not dialect.quoted
        and dialect.skip_lines == 0
    )


class _Checked(io.RawIOBase):
    """A body for pyarrow's CSV reader, refused at a byte-order mark or a carriage return (pyarrow ends lines at
    `\r` too; `split_lines` keeps it in the field)."""

    def __init__(self, body: _Body) -> None:
        super().__init__()
        self.body = body
        self.first = True

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.body.read(len(buffer))
        if (self.first and data.startswith(BOM)) or b"\r" in data:
            raise GeneralPath("a byte-order mark or a carriage return")
        self.first = False
        buffer[: len(data)] = data
        return len(data)


def read_fields(path: Path, dialect: CsvDialect, out: Path, *, growing: GrowingBody | None = None) -> int:
    """`stage_fields` by pyarrow's streaming CSV reader, for a body whose every line has `field_count` fields
    (`_reader_fits`): the lines' fields, no rest and no field count, written to `out`. About twice the split's
    speed (171 MB: 0.7 s against 1.3 s on 2 cores), the writing on a thread of its own beside the parsing.
    Returns the rows written.

    Raises:
        Exception: a line of another field count, bytes that are not UTF-8 (pyarrow's `ArrowInvalid`), a
            byte-order mark, a carriage return, a body not received whole (`GeneralPath`), a read error: the
            split (`stage_fields`) then decides, from the first byte.
    """
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    names = column_names(dialect)[: dialect.field_count]
    schema = _schema(dialect)
    body: _Body = open(path, "rb") if growing is None else growing.reader()  # noqa: SIM115 (closed below)
    with closing(body), closing(_Checked(body)) as checked:
        reader = pa_csv.open_csv(
            checked,
            read_options=pa_csv.ReadOptions(column_names=names, block_size=SEGMENT_BYTES, use_threads=False),
            parse_options=pa_csv.ParseOptions(
                delimiter=dialect.column_separator,
                quote_char=False,
                escape_char=False,
                double_quote=False,
                newlines_in_values=False,
                ignore_empty_lines=True,
            ),
            convert_options=pa_csv.ConvertOptions(
                column_types={name: pa.string() for name in names}, strings_can_be_null=False, check_utf8=True
            ),
        )
        with (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="csv-write") as pool,
            pq.ParquetWriter(
                str(out), schema, compression="none", use_dictionary=False, write_statistics=False
            ) as writer,
        ):

            def write(batch: pa.RecordBatch) -> int:
                n = batch.num_rows
                rest = [pa.nulls(n, pa.string()), pa.nulls(n, pa.int32())]
                writer.write_batch(pa.RecordBatch.from_arrays([*batch.columns, *rest], schema=schema))
                return int(n)

            written: deque[Future[int]] = deque()
            rows = 0
            for batch in reader:
                written.append(pool.submit(write, batch))
                while written and (len(written) > 2 or written[0].done()):
                    rows += written.popleft().result()
            while written:
                rows += written.popleft().result()
    return rows


def _write(writer: pq.ParquetWriter, table: pa.Table) -> int:
    writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
    return int(table.num_rows)


# -- the split of a large body while it is received ----------------------------------------------------------


class GrowingBody:
    """A body being staged, read by the split as the receiver writes it: the receiver says how far the file is
    written (`grew`) and when it ends (`end`); `reader()` reads up to there, waiting for more."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._written = 0
        self._ended = False
        self._whole = False
        self._cond = threading.Condition()

    def grew(self, written: int) -> None:
        """The receiver has written (and flushed) `written` bytes of the body."""
        with self._cond:
            self._written = written
            self._cond.notify_all()

    def end(self, whole: bool) -> None:
        """The body is all there (`whole`), or never will be: the split gives up."""
        with self._cond:
            self._ended, self._whole = True, whole
            self._cond.notify_all()

    def reader(self) -> _GrowingReader:
        return _GrowingReader(self)

    def wait(self, at: int, size: int) -> int:
        """How many bytes from `at` on may be read, up to `size`: waits until that many are written or the body
        ended. Raises: GeneralPath when it ended before it was whole."""
        with self._cond:
            self._cond.wait_for(lambda: self._ended or self._written - at >= size)
            if self._ended and not self._whole:
                raise GeneralPath("the body was not received whole")
            return max(0, min(size, self._written - at))


class _GrowingReader:
    """`read` of a `GrowingBody`: what is written, waiting for the rest (a read returns less only at the end).
    The file is opened at the first read that may read it: the receiver creates it."""

    def __init__(self, body: GrowingBody) -> None:
        self.body = body
        self.file: BinaryIO | None = None
        self.at = 0

    def read(self, size: int, /) -> bytes:
        ready = self.body.wait(self.at, size)
        if self.file is None:
            self.file = open(self.body.path, "rb")  # noqa: SIM115 (closed in `close`)
        data = self.file.read(ready)
        self.at += len(data)
        return data

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class Prestaged:
    """The split of one body started while it is received (`prestage`); its job takes the result (`take`)."""

    def __init__(self, path: Path, dialect: CsvDialect) -> None:
        self.dialect = dialect
        self.body = GrowingBody(path)
        self.result: Future[Path | None] = Future()
        threading.Thread(target=self._run, name="csv-prestage", daemon=True).start()

    def _run(self) -> None:
        try:
            self.result.set_result(stage_fields(self.body.path, self.dialect, growing=self.body))
        except BaseException as exc:  # stage_fields returns None for what it expects; anything else is a bug
            self.result.set_exception(exc)
        finally:
            _SPLITS.release()


class NotPrestaged:
    """`take_prestaged`: no split was started for this body (or one for another dialect)."""


NOT_PRESTAGED = NotPrestaged()
_PRESTAGED: dict[str, Prestaged] = {}
_PRESTAGED_LOCK = threading.Lock()
PRESTAGE_MAX = 4  # splits during receipt at once (3 threads each, waiting on a client's bytes): past it, after
_SPLITS = threading.BoundedSemaphore(PRESTAGE_MAX)


def prestage(path: Path, dialect: CsvDialect) -> GrowingBody | None:
    """Start splitting the body staged at `path` while it is received; the receiver feeds the returned body's
    progress. Every call is followed by `take_prestaged` or `drop_prestaged` for the same path. None when
    `PRESTAGE_MAX` splits are running already (a slow client holds its split's threads until its body is in):
    this body is split once it is in."""
    if not _SPLITS.acquire(blocking=False):
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # its fields go beside it: the receiver may not have made it
        started = Prestaged(path, dialect)
    except BaseException:
        _SPLITS.release()
        raise
    with _PRESTAGED_LOCK:
        _PRESTAGED[str(path)] = started
    return started.body


def take_prestaged(path: Path, dialect: CsvDialect) -> Path | NotPrestaged:
    """The fields the split during receipt wrote (waiting for its end), or `NOT_PRESTAGED`: none was started, one
    for another dialect (dropped), or it gave up (the caller's own split decides: a body that needs the general
    path is found so again)."""
    with _PRESTAGED_LOCK:
        found = _PRESTAGED.pop(str(path), None)
    if found is None:
        return NOT_PRESTAGED
    if found.dialect != dialect:
        _drop(path, found)
        return NOT_PRESTAGED
    staged = found.result.result()
    return staged if staged is not None else NOT_PRESTAGED


def drop_prestaged(path: Path) -> None:
    """Give up the split of a body whose load ended without taking it (its receipt failed, or its load did not
    read it): it stops at its next read, and its fields go once it has (whenever that is)."""
    with _PRESTAGED_LOCK:
        found = _PRESTAGED.pop(str(path), None)
    if found is not None:
        _drop(path, found)


def _drop(path: Path, found: Prestaged) -> None:
    found.body.end(False)
    found.result.add_done_callback(lambda _: staging_path(path).unlink(missing_ok=True))
