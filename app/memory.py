"""The server process's native heap, given back to the system every minute.

glibc's malloc keeps what a thread frees in that thread's arena (up to 8 arenas a core), resident, for the
thread's next allocations; a server whose request threads come and go (AnyIO's worker threads, load jobs,
group-commit workers) and whose parquet footers, Arrow tables and py4j buffers are freed in other threads than
allocated them accumulates free memory in its arenas: in issue 23's soak the arenas' free bytes grew from 19 MB
to 70 MB in six minutes (`mallinfo2().fordblks`) while the bytes in use grew by 17 MB. `malloc_trim(0)` returns
every arena's free pages (not only the top of the main heap), so the process's RSS follows what it uses.
Elsewhere than glibc (musl) there is no `malloc_trim`, and nothing is done.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

log = logging.getLogger(__name__)

TRIM_SECONDS = 60.0


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def trim_native_heap() -> bool:
    """Return the arenas' free pages to the system; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


async def trim_loop(interval: float = TRIM_SECONDS) -> None:
    """`trim_native_heap` every `interval` seconds, in a worker thread (it takes each arena's lock in turn)."""
    while True:
        await asyncio.sleep(interval)
        try:
            if not await run_in_threadpool(trim_native_heap):
                return
        except Exception:  # housekeeping must never take the server down
            log.exception("malloc_trim failed")
