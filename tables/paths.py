"""The one guard in front of every delete of a table location or a server directory.

A path may be removed only when, after resolving links and `..`, it lies strictly inside one of the server's
own roots (data dir, shared dir, warehouse), is not a root itself, and neither holds nor lies inside the
location of another table (a table created before locations were chosen by the server may be named `.` and
sit on its whole database). A refused delete is logged and leaves the files; the caller goes on.

    removable_path(path, roots, others=...)   the resolved path, or UnsafePath
    remove_tree(path, roots, others=...)      rmtree through the guard; False when refused
    remove_file(path, roots, others=...)      unlink through the guard; False when refused
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from tables.errors import DorisError

log = logging.getLogger(__name__)


class UnsafePath(DorisError):
    """A delete the guard refused: the path is outside the roots, a root, or overlaps another table."""


def _resolved(path: Path) -> Path:
    return Path(path).expanduser().resolve()


def _overlap(a: Path, b: Path) -> bool:
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def _check(target: Path, roots: Sequence[Path], others: Iterable[Path]) -> Path:
    if not any(target != root and target.is_relative_to(root) for root in map(_resolved, roots)):
        raise UnsafePath(f"refusing to delete {target}: not strictly inside the server's roots")
    for other in others:
        if _overlap(target, _resolved(other)):
            raise UnsafePath(f"refusing to delete {target}: it overlaps the location of another table")
    return target


def removable_path(path: Path, roots: Sequence[Path], *, others: Iterable[Path] = ()) -> Path:
    """The resolved `path` when it may be deleted.

    Raises:
        UnsafePath: it is not strictly inside a root, or it equals, holds or lies inside one of `others`.
    """
    return _check(_resolved(path), roots, others)


def remove_tree(path: Path, roots: Sequence[Path], *, others: Iterable[Path] = ()) -> bool:
    """Delete a directory tree through the guard; False (logged) when the guard refused it."""
    try:
        target = removable_path(path, roots, others=others)
    except UnsafePath as exc:
        log.warning("%s; the files are left in place", exc.message)
        return False
    # rmtree never follows a link inside the tree, so resolving the top is enough
    shutil.rmtree(target, ignore_errors=True)
    return True


def remove_file(path: Path, roots: Sequence[Path], *, others: Iterable[Path] = ()) -> bool:
    """Delete one file, link or empty directory through the guard; False (logged) when refused."""
    # a link is removed itself, never what it points to: only its directory is resolved
    place = _resolved(Path(path).parent) / Path(path).name
    try:
        _check(place, roots, others)
    except UnsafePath as exc:
        log.warning("%s; the file is left in place", exc.message)
        return False
    if place.is_dir() and not place.is_symlink():
        place.rmdir()
    else:
        place.unlink(missing_ok=True)
    return True
