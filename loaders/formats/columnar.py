"""Parquet and ORC bodies measured before Spark reads them: how far their data expands, from what the file itself
says (its footer) and from what the JVM's readers will allocate (its page headers, its compression chunks).

A Parquet or ORC body compresses its data inside the file, so the decompression caps of `compress_type` bodies
(`loaders.staging.decompression_limit`) do not see it: a 58 KB zstd Parquet file of six 300 MB values killed the
JVM (OutOfMemoryError). Every file is checked twice, both without decompressing a value in the server:

    footer      the sizes the writer declared: Parquet's column chunks' `total_uncompressed_size`
    structure   what the readers allocate, whatever the footer says: Parquet's page headers
                (`uncompressed_page_size`, the buffer parquet-mr decompresses a page into, and a Snappy page's own
                length), ORC's compression chunks (each expands to at most the file's block size; a chunk is
                decompressed here, bounded, to count it)

The sum must stay within the same bound as a compressed body's (`SL_MAX_DECOMPRESSION_RATIO` times the body,
`SL_MAX_DECOMPRESSED_BYTES`), and no single page or compression block may be larger than a line may be
(`SL_MAX_LINE_BYTES`): a page holds whole values, so no value the JVM builds is larger either.
"""

from __future__ import annotations

import io
import mmap
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tables.errors import BadRequest

_MAX_DEPTH = 16  # nested Thrift structs in a page header (a page header has 3 levels)


class Damaged(Exception):
    """The file's structure does not parse (Spark would fail on it too)."""


@dataclass(frozen=True)
class ExpansionLimit:
    """How far a columnar body may expand (`limit`, with the words for one past it) and the largest page or
    compression block (`max_block`, `SL_MAX_LINE_BYTES`)."""

    limit: int
    too_far: str
    max_block: int


def _refuse(fmt: str, size: int, bound: ExpansionLimit, what: str) -> BadRequest:
    return BadRequest(f"the {fmt} body's {what} {size} bytes uncompressed: {bound.too_far}", code="EXCEEDED_LIMIT")


def _block_too_large(fmt: str, size: int, bound: ExpansionLimit, what: str) -> BadRequest:
    return BadRequest(
        f"the {fmt} body has a {what} of {size} bytes, longer than {bound.max_block} bytes (SL_MAX_LINE_BYTES)",
        code="EXCEEDED_LIMIT",
    )


# -- Thrift compact protocol (Parquet's page headers) -------------------------------------------------------------


def _varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise Damaged("a varint runs past its end")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def _value(buf: Any, pos: int, end: int, kind: int, depth: int) -> tuple[Any, int]:
    if kind in (1, 2):  # a struct field's boolean is its type
        return kind == 1, pos
    if kind == 3:
        if pos >= end:
            raise Damaged("a byte past the end")
        return buf[pos], pos + 1
    if kind in (4, 5, 6):
        raw, pos = _varint(buf, pos, end)
        return _zigzag(raw), pos
    if kind == 7:
        if pos + 8 > end:
            raise Damaged("a double past the end")
        return None, pos + 8
    if kind == 8:
        length, pos = _varint(buf, pos, end)
        if pos + length > end:
            raise Damaged("a string past the end")
        return None, pos + length  # statistics' min / max: not needed, never copied
    if kind in (9, 10):
        if pos >= end:
            raise Damaged("a list header past the end")
        head = buf[pos]
        pos += 1
        count, element = head >> 4, head & 0x0F
        if count == 15:
            count, pos = _varint(buf, pos, end)
        if count > end - pos:  # every element takes a byte at least
            raise Damaged("a list longer than the header")
        for _ in range(count):
            pos = pos + 1 if element in (1, 2) else _value(buf, pos, end, element, depth)[1]
        return None, pos
    if kind == 11:
        count, pos = _varint(buf, pos, end)
        if count == 0:
            return None, pos
        if pos >= end or 2 * count > end - pos:
            raise Damaged("a map longer than the header")
        types = buf[pos]
        pos += 1
        for _ in range(count):
            for element in (types >> 4, types & 0x0F):
                pos = pos + 1 if element in (1, 2) else _value(buf, pos, end, element, depth)[1]
        return None, pos
    if kind == 12:
        return _struct(buf, pos, end, depth + 1)
    raise Damaged(f"unknown Thrift type {kind}")


def _struct(buf: Any, pos: int, end: int, depth: int = 0) -> tuple[dict[int, Any], int]:
    """One Thrift compact struct at `pos`: its fields by id (strings and doubles left out) and where it ends."""
    if depth > _MAX_DEPTH:
        raise Damaged("structs nested too deep")
    fields: dict[int, Any] = {}
    last = 0
    while True:
        if pos >= end:
            raise Damaged("a struct runs past its end")
        head = buf[pos]
        pos += 1
        kind = head & 0x0F
        if kind == 0:
            return fields, pos
        if head >> 4:
            last += head >> 4
        else:
            raw, pos = _varint(buf, pos, end)
            last = _zigzag(raw)
        fields[last], pos = _value(buf, pos, end, kind, depth)


# -- Parquet -------------------------------------------------------------------------------------------------------

_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
# parquet-mr holds every page of a row group's column chunk in memory, and the walk here costs ~8 us a page:
# a body of tiny pages (29 bytes each, written one value a page) is refused past one page per 512 bytes
MIN_PAGES = 100_000
BYTES_PER_PAGE = 512


def _snappy_length(buf: Any, pos: int, end: int) -> int:
    """The length a Snappy block says it decompresses to (its first varint): the buffer its reader allocates."""
    length, _ = _varint(buf, pos, min(end, pos + 5))
    return length


def _parquet_pages(buf: Any, start: int, end: int, values: int, codec: str) -> Iterator[tuple[int, int, bool]]:
    """Each page of one column chunk (bytes `start`..`end`): its uncompressed size, its value count and whether it
    holds values. Pages are read to the chunk's end; bytes past the pages holding the chunk's `values` that do
    not parse are left alone, as parquet-mr stops there."""
    pos, seen = start, 0
    while pos < end:
        try:
            header, data = _struct(buf, pos, end)
            kind, size, stored = header.get(1), header.get(2), header.get(3)
            if not isinstance(size, int) or not isinstance(stored, int) or size < 0 or stored < 0:
                raise Damaged("a page header without its sizes")
            if data + stored > end:
                raise Damaged("a page past its column chunk")
        except Damaged:
            if seen >= values > 0:
                return
            raise
        count = 0
        levels = 0
        compressed = True
        for field in (5, 7, 8):
            detail = header.get(field)
            if isinstance(detail, dict) and isinstance(detail.get(1), int):
                count = max(detail[1], 0)
                if field == 8:
                    levels = max(detail.get(5) or 0, 0) + max(detail.get(6) or 0, 0)
                    compressed = detail.get(7, True) is not False
        if codec == "SNAPPY" and compressed and stored > levels:
            # parquet-mr's Snappy reader allocates what the block says, not what the page header says
            if _snappy_length(buf, data + levels, data + stored) > size - levels:
                raise Damaged("a Snappy page longer than its header says")
        pos = data + stored
        if kind in (_DATA_PAGE, _DATA_PAGE_V2):
            seen += count
        yield size, count, kind in (_DATA_PAGE, _DATA_PAGE_V2)


def check_parquet(buf: Any, source: Any, bound: ExpansionLimit) -> None:
    """Raises: BadRequest (EXCEEDED_LIMIT) past the bound; Damaged."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(source)
    declared = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            declared += max(group.column(c).total_uncompressed_size, 0)
    if declared > bound.limit:
        raise _refuse("parquet", declared, bound, "footer declares")
    total = pages = 0
    most_pages = max(MIN_PAGES, len(buf) // BYTES_PER_PAGE)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            dictionary, first = chunk.dictionary_page_offset, chunk.data_page_offset
            start = dictionary if dictionary is not None and 0 < dictionary < first else first
            end = start + chunk.total_compressed_size
            if start < 0 or end > len(buf):
                raise Damaged(f"column chunk {chunk.path_in_schema} lies outside the file")
            for size, _, _ in _parquet_pages(buf, start, end, chunk.num_values, chunk.compression):
                if size > bound.max_block:
                    raise _block_too_large("parquet", size, bound, f"page of column {chunk.path_in_schema}")
                total += size
                pages += 1
                if total > bound.limit:
                    raise _refuse("parquet", total, bound, "pages hold at least")
                if pages > most_pages:
                    raise BadRequest(
                        f"the parquet body has more than {most_pages} pages, one per {BYTES_PER_PAGE} bytes of "
                        f"the body at most (and {MIN_PAGES} in any body)",
                        code="EXCEEDED_LIMIT",
                    )


# -- Protocol buffers (ORC's file tail) --------------------------------------------------------------------------


def _proto(buf: bytes) -> Iterator[tuple[int, Any]]:
    """The fields of one protobuf message: (field number, an int or the bytes of a length-delimited field)."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield number, value
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            if pos + length > end:
                raise Damaged("a protobuf field past its end")
            yield number, buf[pos : pos + length]
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise Damaged(f"unknown protobuf wire type {wire}")


def _orc_stripes(tail: bytes) -> list[tuple[int, int]]:
    """Each stripe's (offset, length: index, data and footer) from ORC's FileTail (footer = field 2, its
    StripeInformation = field 3)."""
    stripes = []
    for number, footer in _proto(tail):
        if number != 2:
            continue
        for field, info in _proto(footer):
            if field != 3:
                continue
            parts = {n: v for n, v in _proto(info) if isinstance(v, int)}
            stripes.append((parts.get(1, 0), parts.get(2, 0) + parts.get(3, 0) + parts.get(4, 0)))
    return stripes


def _orc_chunk(codec: str, data: bytes, block: int) -> int:
    """The bytes one compressed ORC chunk decompresses to, decompressing at most `block` + 1 of them."""
    if codec == "ZLIB":
        return len(zlib.decompressobj(-15).decompress(data, block + 1))
    if codec == "ZSTD":
        import zstandard

        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
            return len(reader.read(block + 1))
    if codec == "SNAPPY":
        return _snappy_length(data, 0, len(data))
    if codec == "LZ4":
        import lz4.block

        return len(lz4.block.decompress(data, uncompressed_size=block))
    return block  # LZO and others: as much as a chunk may hold


def check_orc(buf: Any, source: Any, bound: ExpansionLimit) -> None:
    """Raises: BadRequest (EXCEEDED_LIMIT) past the bound; Damaged."""
    import pyarrow.orc as orc

    reader = orc.ORCFile(source)
    codec = str(reader.compression).upper()
    if codec == "UNCOMPRESSED":
        return  # its data is as large as the body
    block = int(reader.compression_size)
    if block > bound.max_block:
        raise _block_too_large("orc", block, bound, "compression block")
    total = 0
    for offset, length in _orc_stripes(reader.reader.serialized_file_tail()):
        pos, end = offset, offset + length
        if offset < 0 or end > len(buf):
            raise Damaged("a stripe lies outside the file")
        while pos < end:  # streams are laid back to back, each a run of chunks with a 3-byte header
            if pos + 3 > end:
                raise Damaged("a compression chunk header past its stripe")
            head = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
            stored, original = head >> 1, bool(head & 1)
            pos += 3
            if pos + stored > end:
                raise Damaged("a compression chunk past its stripe")
            try:
                size = stored if original else _orc_chunk(codec, bytes(buf[pos : pos + stored]), block)
            except Damaged:
                raise
            except Exception as exc:  # each codec raises its own error for corrupt input
                raise Damaged(f"a {codec} chunk does not decompress: {exc}") from None
            if size > block:
                raise Damaged(f"a compression chunk expands past the file's block size of {block} bytes")
            total += size
            if total > bound.limit:
                raise _refuse("orc", total, bound, "compression chunks hold at least")
            pos += stored


# -- entry ---------------------------------------------------------------------------------------------------------


@contextmanager
def _bytes_of(path: Path | None, data: bytes | None) -> Iterator[tuple[Any, Any]]:
    """The body as a buffer indexable without copying (a memory map of the file) and as pyarrow's source."""
    if data is not None:
        import pyarrow as pa

        yield data, pa.BufferReader(data)
        return
    assert path is not None
    with open(path, "rb") as f:
        if path.stat().st_size == 0:
            yield b"", str(path)
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            yield view, str(path)


def check_columnar_body(
    fmt: str, bound: ExpansionLimit, *, path: Path | None = None, data: bytes | None = None
) -> None:
    """Refuse a Parquet / ORC body whose data would expand past `bound`, as its footer says or as its pages or
    chunks would make the JVM's reader allocate. A body that is no such file is left to the load's own reader
    (its reason is worded there).

    Raises:
        BadRequest (EXCEEDED_LIMIT): the data expands too far, or a page / block is too large; or the file's
        structure is damaged past its footer.
    """
    with _bytes_of(path, data) as (buf, source):
        try:
            if fmt == "parquet":
                check_parquet(buf, source, bound)
            else:
                check_orc(buf, source, bound)
        except BadRequest:
            raise
        except Damaged as exc:
            raise BadRequest(f"the body is not a valid {fmt} file: {exc}") from None
        except Exception:  # no footer, or a damaged one: `load_job.check_columnar_file` words it for Spark's path
            return
