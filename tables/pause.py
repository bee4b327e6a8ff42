"""Test-only pause points: `SL_PAUSE_AT=point[:table][:once],...` makes a load log `paused at <point>` and block there.

Crash tests kill the server at that exact moment; a point armed `once` pauses only the first load that
reaches it (the next loads of the table pass). Points, in load order:
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
        self._rules: list[tuple[str, str | None, bool]] = []
        self._lock = threading.Lock()
        for item in (spec or "").split(","):
            item = item.strip()
            if not item:
                continue
            point, _, rest = item.partition(":")
            table, _, once = rest.partition(":")
            if point not in POINTS or once not in ("", "once"):
                raise ValueError(f"unknown pause point {item!r}; known: {', '.join(POINTS)}, each [:table][:once]")
            self._rules.append((point, table or None, once == "once"))

    def _matches(self, point: str, table: str) -> bool:
        with self._lock:
            for rule in self._rules:
                p, t, once = rule
                if p == point and (t is None or t.lower() == table.lower()):
                    if once:
                        self._rules.remove(rule)
                    return True
            return False

    def _announce(self, point: str, table: str) -> None:
        message = f"paused at {point} (table {table})"
        log.warning(message)
        print(message, file=sys.stderr, flush=True)

    def hit(self, point: str, table: str) -> None:
        """Block the calling thread forever when the point is armed for this table."""
        if self._matches(point, table):
            self._announce(point, table)
            threading.Event().wait()

    async def ahit(self, point: str, table: str) -> None:
        """The same for code on the event loop (other requests keep being served)."""
        if self._matches(point, table):
            self._announce(point, table)
            await asyncio.Event().wait()
