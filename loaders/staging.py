"""Payload staging: the body is streamed to a file under the staging directory, never held whole."""

from __future__ import annotations

import bz2
import gzip
import os
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from loaders.errors import BadRequest


@dataclass(frozen=True)
class StagedPayload:
    path: Path
    size: int


async def stage_payload(
    chunks: AsyncIterator[bytes], path: Path, *, max_bytes: int, expected: int | None = None
) -> StagedPayload:
    """Write the body to `path` chunk by chunk.

    Raises:
        BadRequest: the body is larger than `max_bytes`, or shorter than its Content-Length.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    size = 0
    try:
        with open(path, "wb") as out:
            async for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise BadRequest(
                        f"The size of this load exceeds the limit: body exceed max size: {max_bytes} bytes"
                    )
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    if expected is not None and size != expected:
        path.unlink(missing_ok=True)
        raise BadRequest("receive body don't equal with body bytes")
    return StagedPayload(path=path, size=size)


CHUNK = 1 << 20


def _reader(kind: str, raw: BinaryIO) -> Any:
    if kind == "gz":
        return gzip.GzipFile(fileobj=raw)  # also reads concatenated members
    if kind == "bz2":
        return bz2.BZ2File(raw)
    if kind == "lz4":
        import lz4.frame

        return lz4.frame.LZ4FrameFile(raw)
    if kind == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    raise ValueError(kind)


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
            if kind == "deflate":
                decoder = zlib.decompressobj()
                while chunk := raw.read(CHUNK):
                    data = decoder.decompress(chunk)
                    size += len(data)
                    out.write(data)
                out.write(decoder.flush())
            else:
                with _reader(kind, raw) as reader:
                    while chunk := reader.read(CHUNK):
                        size += len(chunk)
                        if size > max_bytes:
                            raise BadRequest(f"decompressed body exceeds the limit of {max_bytes} bytes")
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
