"""Test-only pause points: `SL_PAUSE_AT=point[:table][:once|:<seconds>],...` makes a load log `paused at <point>`
and block there.

Crash tests kill the server at that exact moment; a point armed `once` pauses only the first load that
reaches it (the next loads of the table pass); one armed with a number of seconds pauses only the first load too,
for that long, and lets it go on (a test kills the JVM alone meanwhile). Points, in load order:
    staging        the body is being received (its first chunk is in: on disk, or in memory for a small grouped body)
    job            the transaction is PREPARE and the Spark job is about to run
    before_commit  the rowset files are written, the Iceberg commit has not happened
    after_commit   the Iceberg commit happened, the label is not marked VISIBLE yet
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading

POINTS = ("staging", "job", "before_commit", "after_commit")

log = logging.getLogger(__name__)


class PausePoints:
    """Parsed pause settings; a point with a table pauses only loads into that table."""

    def __init__(self, spec: str | None = None) -> None:
        self._rules: list[tuple[str, str | None, bool, float | None]] = []
        self._lock = threading.Lock()
        for item in (spec or "").split(","):
            item = item.strip()
            if not item:
                continue
            point, _, rest = item.partition(":")
            table, _, once = rest.partition(":")
            seconds = float(once) if once.replace(".", "", 1).isdigit() else None
            if point not in POINTS or (once not in ("", "once") and seconds is None):
                raise ValueError(
                    f"unknown pause point {item!r}; known: {', '.join(POINTS)}, each [:table][:once|:<seconds>]"
                )
            self._rules.append((point, table or None, once != "", seconds))

    def _matches(self, point: str, table: str) -> tuple[bool, float | None]:
        """Whether the point pauses this load, and for how long (None: for ever)."""
        with self._lock:
            for rule in self._rules:
                p, t, once, seconds = rule
                if p == point and (t is None or t.lower() == table.lower()):
                    if once:
                        self._rules.remove(rule)
                    return True, seconds
            return False, None

    def _announce(self, point: str, table: str) -> None:
        message = f"paused at {point} (table {table})"
        log.warning(message)
        print(message, file=sys.stderr, flush=True)

    def hit(self, point: str, table: str) -> None:
        """Block the calling thread forever when the point is armed for this table."""
        paused, seconds = self._matches(point, table)
        if paused:
            self._announce(point, table)
            threading.Event().wait(seconds)

    async def ahit(self, point: str, table: str) -> None:
        """The same for code on the event loop (other requests keep being served)."""
        paused, seconds = self._matches(point, table)
        if paused:
            self._announce(point, table)
            if seconds is None:
                await asyncio.Event().wait()
            else:
                await asyncio.sleep(seconds)
