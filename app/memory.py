"""The server process's native heap: few malloc arenas, and their free pages given back every minute.

glibc's malloc keeps what a thread frees in that thread's arena (up to 8 arenas a core), resident, for the
thread's next allocations; a server whose request threads come and go (AnyIO's worker threads, load jobs,
group-commit workers) and whose parquet footers, Arrow tables and py4j buffers are freed in other threads than
allocated them accumulates free memory in its arenas: in issue 23's soak the arenas' free bytes grew from 19 MB
to 70 MB in six minutes (`mallinfo2().fordblks`) while the bytes in use grew by 17 MB. `malloc_trim(0)` returns
every arena's free pages (not only the top of the main heap), so the process's RSS follows what it uses; a
page partly in use stays, so the arenas are also limited to `ARENAS` (set at start, before any thread, unless
the operator set `MALLOC_ARENA_MAX`): threads then reuse each other's freed memory. Elsewhere than glibc (musl)
there is neither, and nothing is done.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

log = logging.getLogger(__name__)

TRIM_SECONDS = 60.0
ARENAS = 2  # glibc's default is 8 a core; the server's Python work is one GIL's worth
_M_ARENA_MAX = -8  # mallopt's parameter (malloc.h)


def limit_arenas(arenas: int = ARENAS) -> bool:
    """At most `arenas` malloc arenas from now on (call before threads start); False where not done."""
    if os.environ.get("MALLOC_ARENA_MAX"):  # the operator's choice, read by glibc at start
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    return bool(mallopt(_M_ARENA_MAX, arenas))


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
