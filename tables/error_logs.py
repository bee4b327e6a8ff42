"""Error logs on disk: the rejected rows a load's ErrorURL points at, named unguessably, kept as long as the label."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

PREFIX = "error_log_"
# new names are a random token; names written before it (`error_log_<txn>_<label>`) stay readable until they expire
NAME = re.compile(r"^error_log_[-_A-Za-z0-9:]{1,200}$")


def new_error_log_name() -> str:
    """A name nobody can guess: the error-log route needs no credentials, as Doris's does not."""
    return f"{PREFIX}{secrets.token_hex(16)}"


def error_log_path(directory: Path, name: str) -> Path | None:
    """The file of an error log, or None for a name that is not one (never a path outside `directory`)."""
    if not NAME.match(name):
        return None
    path = directory / name
    return path if path.is_file() and not path.is_symlink() else None


def expire_error_logs(directory: Path, *, keep_seconds: float, now: float) -> int:
    """Remove error logs older than `keep_seconds` (their label is forgotten then too); returns how many."""
    if not directory.is_dir():
        return 0
    removed = 0
    for path in directory.iterdir():
        if NAME.match(path.name) and path.is_file() and now - path.stat().st_mtime >= keep_seconds:
            path.unlink(missing_ok=True)
            removed += 1
    return removed
