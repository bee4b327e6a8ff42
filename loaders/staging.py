"""Payload staging: the body is streamed to a file under the staging directory, never held whole."""

from __future__ import annotations

import bz2
import gzip
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from loaders.errors import BadRequest


@dataclass(frozen=True)
class StagedPayload:
    path: Path
    size: int


async def stage_payload(
    chunks: AsyncIterator[bytes],
    path: Path,
    *,
    max_bytes: int,
    expected: int | None = None,
    too_large: Callable[[int, int | None], str] | None = None,
) -> StagedPayload:
    """Write the body to `path` chunk by chunk.

    Raises:
        BadRequest: the body is larger than `max_bytes` (`too_large` words it), or shorter than its
        Content-Length.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    size = 0
    try:
        with open(path, "wb") as out:
            async for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise BadRequest((too_large or body_too_large)(max_bytes, None), code="EXCEEDED_LIMIT")
                out.write(chunk)
            # no fsync: a staged body only feeds its own job; what a load acknowledges is durable through
            # its rowset files and commit (an async group-commit load fsyncs its write-ahead copy)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    if expected is not None and size != expected:
        path.unlink(missing_ok=True)
        raise BadRequest("receive body don't equal with body bytes")
    return StagedPayload(path=path, size=size)


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


def decompress_staged(staged: StagedPayload, kind: str | None, *, max_bytes: int) -> StagedPayload:
    """Replace a compressed staged body by its plain bytes, streaming (LoadBytes stays the received size).

    Raises:
        BadRequest: the body is not valid data of that compression, or expands past `max_bytes`.
    """
    if kind is None:
        return staged
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
                if size > max_bytes:
                    raise BadRequest(f"decompressed body exceeds the limit of {max_bytes} bytes", code="EXCEEDED_LIMIT")
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
