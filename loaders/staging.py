"""Payload staging: the body is streamed to a file under the staging directory, never held whole."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

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
