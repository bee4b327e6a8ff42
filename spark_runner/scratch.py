"""The Spark JVM's scratch disk: where its shuffles and spills go, in a folder of the data dir that the server
owns, cleared before each JVM starts and watched while it runs.

Spark writes a shuffle's and a spilling sort's data under `spark.local.dir` (`/tmp` by default), and removes it
when the JVM stops normally; a JVM that was killed (out of memory, wedged, a crash) left it behind for good: after
the test suite's replaced JVMs, `/tmp` held 231 such folders. And a user's query decides how much it writes: rows
of 640 KB of generated text, shuffled, write at the disk's speed until `query_timeout` (900 s), filling the disk
that the WAL and the warehouse share. So the server gives Spark a folder of its own (`scratch_conf`), empties it
before each JVM it starts (`clear`: no other JVM uses it), and a watch (`ScratchWatch`) cancels the running SQL
statements while the folder holds more than `SL_SPARK_SCRATCH_MAX_BYTES` (loads are left to run: their size is
bounded by their bodies).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

LOCAL_DIR = "spark.local.dir"
WATCH_INTERVAL_S = 1.0
COLLECT_EVERY_S = 30.0  # a JVM-wide collection at most this often (a bulk load over the bound pays none a second)


def scratch_conf(folder: Path, conf: dict[str, str]) -> dict[str, str]:
    """`conf` with Spark's scratch in `folder`, unless the operator named a folder of their own."""
    if LOCAL_DIR in conf:
        return conf
    return {**conf, LOCAL_DIR: str(folder)}


def clear(folder: Path) -> None:
    """Empty `folder` (made if missing): what JVMs before this one left."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass


def used_bytes(folder: Path) -> int:
    """The bytes of the files under `folder` (a shuffle's files come and go while it is read: missing ones count 0)."""
    total = 0
    pending = [str(folder)]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
    return total


class ScratchWatch:
    """Cancels the running SQL statements (`cancel(reason)`) while `folder` holds more than `max_bytes`, and once
    none is left running asks the JVM to collect (`collect()`), which lets Spark remove the files of the cancelled
    queries' shuffles (they go once nothing refers to them)."""

    def __init__(
        self,
        folder: Path,
        max_bytes: int,
        *,
        cancel: Callable[[str], int],
        collect: Callable[[], None],
        interval: float = WATCH_INTERVAL_S,
    ) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self._cancel = cancel
        self._collect = collect
        self._interval = interval
        self._stop = threading.Event()
        self._collected_at = -COLLECT_EVERY_S
        self._thread = threading.Thread(target=self._run, name="scratch-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def check(self) -> bool:
        """One look; returns whether the folder was over its bound."""
        used = used_bytes(self.folder)
        if used <= self.max_bytes:
            return False
        reason = (
            f"The query was cancelled: Spark's scratch disk holds {used} bytes, more than {self.max_bytes} "
            "(SL_SPARK_SCRATCH_MAX_BYTES); a query that shuffles or sorts this much must read fewer or smaller rows"
        )
        cancelled = self._cancel(reason)
        if cancelled:
            log.warning("scratch disk at %d bytes (bound %d): cancelled %d statements", used, self.max_bytes, cancelled)
        elif time.monotonic() - self._collected_at >= COLLECT_EVERY_S:
            # no statement is running: let the JVM drop the shuffles nobody holds any more (a cancelled query's)
            self._collected_at = time.monotonic()
            self._collect()
        return True

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.check()
            except Exception:  # a JVM being replaced: the next look finds the new one
                log.debug("scratch watch: look failed", exc_info=True)
