"""Payload staging: the body is streamed to a file under the staging directory, never held whole.

Every size and time a client controls is bounded here, before Spark reads a byte:
    body size          `max_bytes` (streaming_load_max_mb; JSON read whole: streaming_load_json_max_mb)
    line length        `LineGuard` (SL_MAX_LINE_BYTES), on the plain bytes: a body with no newline is refused
                       instead of becoming one row as large as the body in the JVM
    decompressed size  absolute, and as a ratio of the compressed size (`decompression_limit`); a Parquet / ORC
                       body's data too, from its footer and its pages / chunks (`check_columnar`)
    time               an idle limit between chunks and a total deadline (`timed_chunks`)
"""

from __future__ import annotations

import asyncio
import bz2
import gzip
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import anyio

from loaders.formats.columnar import ExpansionLimit, check_columnar_body
from tables.errors import BadRequest, LoadError, LoadTimeout
from tables.load_spec import LoadRequest


class LineGuard:
    """Follows the line lengths of a body fed in pieces; a line longer than `max_bytes` is an error."""

    def __init__(self, delimiter: str, max_bytes: int) -> None:
        self.delimiter = delimiter.encode()
        self.max_bytes = max_bytes
        self.run = 0  # bytes of the current (unfinished) line, including `carry`
        self.carry = b""  # the last bytes, which may begin a delimiter split across two pieces

    def _refuse(self) -> BadRequest:
        return BadRequest(
            f"a line of the body is longer than {self.max_bytes} bytes (SL_MAX_LINE_BYTES); "
            "check line_delimiter, or split the data into shorter lines",
            code="EXCEEDED_LIMIT",
        )

    def feed(self, chunk: bytes) -> None:
        """Raises: BadRequest (EXCEEDED_LIMIT) when the current or a finished line is too long."""
        d = len(self.delimiter)
        data = self.carry + chunk
        before = self.run - len(self.carry)  # bytes of the current line that came before `data`
        first = data.find(self.delimiter)
        if first < 0:
            self.run = before + len(data)
        else:
            if before + first > self.max_bytes:
                raise self._refuse()
            if len(data) > self.max_bytes:  # lines wholly inside this piece could be long too
                start = first + d
                while (end := data.find(self.delimiter, start)) >= 0:
                    if end - start > self.max_bytes:
                        raise self._refuse()
                    start = end + d
            self.run = len(data) - data.rfind(self.delimiter) - d
        if self.run - (d - 1) > self.max_bytes:  # its last bytes may begin a delimiter
            raise self._refuse()
        keep = min(self.run, d - 1)
        self.carry = data[len(data) - keep :] if keep else b""


async def timed_chunks(
    chunks: AsyncIterator[bytes], *, idle_seconds: float, deadline: float, deadline_text: str
) -> AsyncIterator[bytes]:
    """The body's chunks, as long as each arrives within `idle_seconds` and all before `deadline`
    (`time.monotonic()`): a body trickling in cannot hold its label, a thread and its transaction forever.

    Raises:
        LoadTimeout: with `deadline_text` past the deadline, or the idle limit's text.
    """
    iterator = chunks.__aiter__()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise LoadTimeout(deadline_text)
        wait = min(idle_seconds, left)
        try:
            async with asyncio.timeout(wait):  # a timer, not a task per chunk: bodies come in 64 KiB pieces
                chunk = await iterator.__anext__()
        except StopAsyncIteration:
            return
        except TimeoutError:
            if wait < idle_seconds:
                raise LoadTimeout(deadline_text) from None
            raise LoadTimeout(f"no body data received for {idle_seconds:g} s (SL_BODY_IDLE_TIMEOUT_SECONDS)") from None
        yield chunk


@dataclass(frozen=True)
class StagedPayload:
    """A received body: the file at `path`, or, for a small body kept in memory (`stage_payload`'s
    `in_memory`), `data` itself, with nothing at `path` until `materialize` writes it there."""

    path: Path
    size: int
    data: bytes | None = None

    def materialize(self) -> StagedPayload:
        """The payload as a file at `path` (written now when it was kept in memory)."""
        if self.data is None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_bytes(self.data)
        return StagedPayload(path=self.path, size=self.size)


IN_MEMORY_BYTES = 16 * 1024  # a grouped load's body up to this size is kept in memory, never a file of its own


async def stage_payload(
    chunks: AsyncIterator[bytes],
    path: Path,
    *,
    max_bytes: int,
    expected: int | None = None,
    too_large: Callable[[int, int | None], str] | None = None,
    lines: LineGuard | None = None,
    written: Callable[[int], None] | None = None,
    in_memory: bool = False,
) -> StagedPayload:
    """Write the body to `path` chunk by chunk; `lines` checks the line lengths of a plain body; `written` is told
    how many bytes are in the file (flushed) after each chunk. `in_memory`: keep the body as bytes and create no
    file (a small grouped body: a file created and removed per load costs more than the load's own work on a busy
    server; `StagedPayload.data`).

    Raises:
        BadRequest: the body is larger than `max_bytes` (`too_large` words it), shorter than its
        Content-Length, or has a line longer than `lines` allows.
    """
    kept: list[bytes] | None = [] if in_memory else None
    size = 0

    def take(chunk: bytes) -> None:
        nonlocal size
        size += len(chunk)
        if size > max_bytes:
            raise BadRequest((too_large or body_too_large)(max_bytes, None), code="EXCEEDED_LIMIT")
        if lines is not None:
            lines.feed(chunk)

    if kept is not None:
        async for chunk in chunks:
            take(chunk)
            kept.append(chunk)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "wb") as out:
                async for chunk in chunks:
                    take(chunk)
                    out.write(chunk)
                    if written is not None:
                        out.flush()
                        written(size)
                # no fsync: a staged body only feeds its own job; what a load acknowledges is durable through
                # its rowset files and commit (an async group-commit load fsyncs its write-ahead copy)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
    if expected is not None and size != expected:
        path.unlink(missing_ok=True)
        raise BadRequest("receive body don't equal with body bytes")
    return StagedPayload(path=path, size=size, data=b"".join(kept) if kept is not None else None)


CHUNK = 1 << 20
MIB = 1024 * 1024
ZSTD_READ = 8 * 1024


def body_too_large(max_bytes: int, size: int | None = None) -> str:
    """Doris's text for a body past `streaming_load_max_mb` (a chunked body's size is not known up front)."""
    got = f"body size {size} bytes ({size / MIB:.2f} MiB)" if size is not None else "body size"
    return (
        f"{got} exceeds the limit of {max_bytes} bytes ({max_bytes / MIB:g} MiB) set by BE's conf "
        "streaming_load_max_mb. Increase it if you are sure this load is reasonable"
    )


def json_body_too_large(max_bytes: int, size: int | None = None) -> str:
    """Doris's text for a JSON body read whole past `streaming_load_json_max_mb`."""
    got = f"json body size {size}" if size is not None else "json body size"
    return (
        f"{got} exceed BE's conf `streaming_load_json_max_mb` {max_bytes}. "
        "increase it if you are sure this load is reasonable"
    )


class _Truncated(Exception):
    """The compressed stream ended before its end marker."""


def _zstd_frames(raw: BinaryIO) -> Iterator[bytes]:
    """Every frame of a zstd body, in order; a body that stops inside a frame is an error."""
    import zstandard

    decoder = None
    # small reads bound what one call can expand to (a zstd block holds up to 128 KiB from a few bytes)
    while chunk := raw.read(ZSTD_READ):
        while chunk:
            if decoder is None:
                decoder = zstandard.ZstdDecompressor().decompressobj()
            yield decoder.decompress(chunk)
            chunk, decoder = (decoder.unused_data, None) if decoder.eof else (b"", decoder)
    if decoder is not None:
        raise _Truncated("the zstd frame is incomplete")


def _deflate(raw: BinaryIO) -> Iterator[bytes]:
    decoder = zlib.decompressobj()
    while chunk := raw.read(CHUNK):
        while chunk:
            yield decoder.decompress(chunk, CHUNK)  # at most CHUNK out per call; the rest stays in the tail
            chunk = decoder.unconsumed_tail
    yield decoder.flush()
    if not decoder.eof:
        raise _Truncated("the deflate stream is incomplete")


def _reader(kind: str, raw: BinaryIO) -> Any:
    if kind == "gz":
        return gzip.GzipFile(fileobj=raw)  # also reads concatenated members
    if kind == "bz2":
        return bz2.BZ2File(raw)
    if kind == "lz4":
        import lz4.frame

        return lz4.frame.LZ4FrameFile(raw)
    raise ValueError(kind)


def _read_all(reader: Any) -> Iterator[bytes]:
    with reader:
        while chunk := reader.read(CHUNK):
            yield chunk


RATIO_FLOOR = 16 * MIB  # a small body may always expand this far: short bodies compress very well


def decompression_limit(compressed: int, *, max_bytes: int, max_ratio: float) -> tuple[int, str]:
    """How far a body of `compressed` bytes may expand, and the words for one that goes further."""
    by_ratio = max(int(compressed * max_ratio), RATIO_FLOOR)
    if by_ratio < max_bytes:
        return by_ratio, (
            f"the body expands past {by_ratio} bytes, {max_ratio:g} times its compressed size of {compressed} bytes "
            "(SL_MAX_DECOMPRESSION_RATIO)"
        )
    return max_bytes, f"decompressed body exceeds the limit of {max_bytes} bytes"


def decompress_staged(
    staged: StagedPayload,
    kind: str | None,
    *,
    max_bytes: int,
    max_ratio: float = float("inf"),
    lines: LineGuard | None = None,
) -> StagedPayload:
    """Replace a compressed staged body by its plain bytes, streaming (LoadBytes stays the received size);
    the plain body may be at most `max_bytes`, and at most `max_ratio` times the compressed one.

    Raises:
        BadRequest: the body is not valid data of that compression, expands too far, or has a line longer
        than `lines` allows.
    """
    if kind is None:
        return staged
    limit, too_far = decompression_limit(staged.size, max_bytes=max_bytes, max_ratio=max_ratio)
    plain = staged.path.with_suffix(".plain")
    size = 0
    try:
        with open(staged.path, "rb") as raw, open(plain, "wb") as out:
            # zlib and zstd objects do not notice a stream cut short: these two check their end marker
            if kind in ("deflate", "zstd"):
                chunks: Iterator[bytes] = _deflate(raw) if kind == "deflate" else _zstd_frames(raw)
            else:
                chunks = _read_all(_reader(kind, raw))
            for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise BadRequest(too_far, code="EXCEEDED_LIMIT")
                if lines is not None:
                    lines.feed(chunk)
                out.write(chunk)
    except BadRequest:
        plain.unlink(missing_ok=True)
        raise
    except Exception as exc:  # every codec raises its own error type for corrupt input
        plain.unlink(missing_ok=True)
        raise BadRequest(f"failed to decompress the body as {kind}: {exc}") from None
    staged.path.unlink(missing_ok=True)
    plain.rename(staged.path)
    return StagedPayload(path=staged.path, size=staged.size)


# -- a stream-load body, from the first byte to the plain staged file ------------------------------------------


@dataclass(frozen=True)
class BodyLimits:
    """Every bound a stream-load body is received under (the `SL_` settings of the same names)."""

    max_body_bytes: int
    max_json_body_bytes: int
    max_line_bytes: int
    max_decompressed_bytes: int
    max_decompression_ratio: float
    body_idle_timeout_seconds: float
    body_total_timeout_seconds: float


def body_length(headers: Mapping[str, str], max_bytes: int) -> int | None:
    """Exactly one of Content-Length and chunked (contract §1.3), within the size limit; returns the length.

    Raises:
        BadRequest.
    """
    length = headers.get("content-length")
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    if length is not None and chunked:
        raise BadRequest("please do not set both content_length and transfer-encoding")
    if length is None and not chunked:
        raise BadRequest(
            "content_length is empty and transfer-encoding!=chunked, please set content_length or "
            "transfer-encoding=chunked"
        )
    if length is not None and not length.strip().isdigit():  # the HTTP server checks it too; not to rely on
        raise BadRequest(f"Invalid Content-Length: {length}")
    if length is not None and int(length) > max_bytes:  # refused from the header, before the transaction
        raise BadRequest(body_too_large(max_bytes, int(length)), code="EXCEEDED_LIMIT")
    return int(length) if length is not None else None


def body_limit(load: LoadRequest, limits: BodyLimits) -> tuple[int, Callable[[int, int | None], str]]:
    """The largest body of this load and the words for one past it: a JSON body read as one document
    (not line by line) has Doris's smaller `streaming_load_json_max_mb` limit."""
    if load.format == "json" and not load.read_json_by_line:
        return min(limits.max_json_body_bytes, limits.max_body_bytes), json_body_too_large
    return limits.max_body_bytes, body_too_large


def check_body_limit(load: LoadRequest, expected: int | None, limits: BodyLimits) -> None:
    """Raises: BadRequest (EXCEEDED_LIMIT) when the announced length is past this load's limit."""
    max_bytes, too_large = body_limit(load, limits)
    if expected is not None and expected > max_bytes:
        raise BadRequest(too_large(max_bytes, expected), code="EXCEEDED_LIMIT")


def line_guard(load: LoadRequest, limits: BodyLimits) -> LineGuard | None:
    """The line-length check of a body read line by line (CSV, JSON by line); a JSON body read whole is one
    document, bounded by its body limit, and Parquet / ORC have no lines."""
    if load.format == "csv" or (load.format == "json" and load.read_json_by_line and not load.strip_outer_array):
        return LineGuard(load.line_delimiter, limits.max_line_bytes)
    return None


def body_deadline(load: LoadRequest, started: float, limits: BodyLimits) -> tuple[float, str]:
    """When the body must have arrived (`time.monotonic()`), and the words for one that has not."""
    if load.timeout_s <= limits.body_total_timeout_seconds:
        return started + load.timeout_s, f"load timed out after {load.timeout_s} s (timeout header)"
    seconds = limits.body_total_timeout_seconds
    return started + seconds, f"the body was still arriving after {seconds:g} s (SL_BODY_TOTAL_TIMEOUT_SECONDS)"


async def receive_body(
    chunks: AsyncIterator[bytes],
    path: Path,
    load: LoadRequest,
    *,
    started: float,
    expected: int | None,
    limits: BodyLimits,
    first_chunk: Callable[[], Awaitable[None]] | None = None,
    written: Callable[[int], None] | None = None,
    in_memory: bool = False,
) -> StagedPayload:
    """Stage a stream-load body at `path` under every bound of `limits`, then decompress it (in a thread);
    `started` is when the load began (its `timeout` counts from there), `first_chunk` is awaited once the
    first chunk has arrived, `written` follows the staged file as it grows (`stage_payload`). `in_memory`: a
    body of at most `IN_MEMORY_BYTES` (announced by its Content-Length) that needs no decompression is kept in
    memory (`StagedPayload.data`).

    Raises:
        LoadError: the body broke a bound, is not what its headers say, or stopped arriving (a client that
        went away is `failed to receive body`).
    """
    max_bytes, too_large = body_limit(load, limits)
    deadline, too_slow = body_deadline(load, started, limits)
    lines = line_guard(load, limits)

    async def body() -> AsyncIterator[bytes]:
        first = True
        async for chunk in chunks:
            yield chunk
            if first and first_chunk is not None:
                first = False
                await first_chunk()

    try:
        timed = timed_chunks(
            body(), idle_seconds=limits.body_idle_timeout_seconds, deadline=deadline, deadline_text=too_slow
        )
        plain_lines = lines if load.compression is None else None  # else checked as it decompresses
        small = in_memory and load.compression is None and expected is not None and expected <= IN_MEMORY_BYTES
        staged = await stage_payload(
            timed,
            path,
            max_bytes=max_bytes,
            expected=expected,
            too_large=too_large,
            lines=plain_lines,
            written=written,
            in_memory=small,
        )
    except LoadError:
        raise
    except OSError as exc:
        if isinstance(exc, ConnectionError):  # the client's connection broke mid-body
            raise BadRequest(f"failed to receive body: {exc}") from exc
        raise LoadError(f"failed to stage the body: {exc}") from exc  # the server's disk (full, failing)
    except Exception as exc:  # the client went away mid-body: the load failed and its label is free
        raise BadRequest(f"failed to receive body: {exc}") from exc
    if load.compression is not None:
        staged = await anyio.to_thread.run_sync(
            lambda: decompress_staged(
                staged,
                load.compression,
                max_bytes=min(max_bytes, limits.max_decompressed_bytes),
                max_ratio=limits.max_decompression_ratio,
                lines=lines,
            )
        )
    if load.format in ("parquet", "orc"):  # compressed inside: its data is measured before Spark reads it
        await anyio.to_thread.run_sync(lambda: check_columnar(staged, load, limits))
    return staged


def columnar_limit(received: int, load: LoadRequest, limits: BodyLimits) -> ExpansionLimit:
    """How far the data of a Parquet / ORC body of `received` bytes may expand: as a compressed body may
    (`decompression_limit`), and no page or compression block past a line's limit."""
    max_bytes, _ = body_limit(load, limits)
    limit, too_far = decompression_limit(
        received, max_bytes=min(max_bytes, limits.max_decompressed_bytes), max_ratio=limits.max_decompression_ratio
    )
    return ExpansionLimit(limit=limit, too_far=too_far, max_block=limits.max_line_bytes)


def check_columnar(staged: StagedPayload, load: LoadRequest, limits: BodyLimits) -> None:
    """Raises: BadRequest (EXCEEDED_LIMIT) when the Parquet / ORC body's data expands too far
    (`loaders.formats.columnar`); the file is removed then."""
    bound = columnar_limit(staged.size, load, limits)
    try:
        check_columnar_body(load.format, bound, path=staged.path if staged.data is None else None, data=staged.data)
    except BadRequest:
        staged.path.unlink(missing_ok=True)
        raise
