"""The warehouse's storage: the server's own file operations on warehouse files, on a local folder or a URI.

    WarehouseStorage.of(root)            today's local code path (a plain path or a `file:` URI's folder)
    WarehouseStorage.of(root, via_arrow=True)
                                         the same folder through `pyarrow.fs` with `file://` URIs (what a remote
                                         root uses; how that code path is tested here)
    WarehouseStorage.of(remote_root)     `s3a://`, `s3://`, `hdfs://` through `pyarrow.fs` (not served yet: the
                                         settings refuse such a warehouse at start, see README "Run on a Spark
                                         cluster")

Every operation takes a location as the server holds it: a `Path` for a local warehouse, a URI (`str`) for one
through pyarrow; `uri(location)` is what Spark is given and Iceberg records (`file:///abs` for a local one, as
before; the URI as written, `s3a://bucket/wh/...`, for a remote one), and `location(uri)` maps a recorded path
back.

A local warehouse keeps today's calls exactly (`os.fsync`, `shutil.rmtree` through the guard of
`tables.paths`): no per-load cost. Through pyarrow a file is durable when its write completes (an object store's
PUT, HDFS's close), so `sync` does nothing there, and deletes are guarded the same way on the URI: strictly
inside the root, not the root, overlapping no other table's location.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from tables.paths import UnsafePath, remove_file, remove_tree
from tables.storage import StorageRoot, parse_root

if TYPE_CHECKING:
    from pyarrow import NativeFile
    from pyarrow.fs import FileSystem

log = logging.getLogger(__name__)

Location = Path | str


@dataclass(frozen=True)
class Entry:
    """One entry of a directory (`WarehouseStorage.entries`)."""

    name: str
    location: Location
    is_dir: bool
    mtime: float  # seconds since the epoch; 0 when the store does not say (an object store's "directory")


@dataclass(frozen=True)
class WarehouseStorage:
    """The warehouse root and how the server reaches its files (local calls, or `fs` under `base`)."""

    root: StorageRoot
    fs: FileSystem | None = field(default=None, compare=False)
    base: str = ""  # the root's path inside `fs`

    @classmethod
    def of(cls, root: StorageRoot | str | Path, *, via_arrow: bool = False) -> WarehouseStorage:
        """The storage of a warehouse root; `via_arrow` routes a local one through pyarrow (tests)."""
        if not isinstance(root, StorageRoot):
            root = parse_root(root, setting="SL_WAREHOUSE")
        if root.local is not None and not via_arrow:
            return cls(root)
        if root.local is not None:  # a local folder through pyarrow, named by its file:// URI
            root = StorageRoot(root.local.as_uri(), "file", None)
        fs, base = root.filesystem()
        return cls(root, fs, base.rstrip("/"))

    # -- names ------------------------------------------------------------------------------------------
    @property
    def is_local(self) -> bool:
        """Whether the server reaches the warehouse with local file calls (today's code path)."""
        return self.fs is None

    @property
    def top(self) -> Location:
        """The warehouse root as a location."""
        if self.root.local is not None:
            return self.root.local
        return self.root.text.rstrip("/")

    def child(self, location: Location, *names: str) -> Location:
        """`location/name/...`."""
        if isinstance(location, Path):
            return location.joinpath(*names)
        return "/".join([location.rstrip("/"), *names])

    def uri(self, location: Location) -> str:
        """What Spark is given and Iceberg records: `file:///abs` for a local location, a URI as it is."""
        return f"file://{location}" if isinstance(location, Path) else location

    def location(self, uri: str) -> Location:
        """The location of a path Iceberg or Spark recorded (`file:` URIs of a local warehouse are paths)."""
        if self.is_local:
            return Path(uri.removeprefix("file://").removeprefix("file:")) if uri.startswith("file:") else Path(uri)
        if uri.startswith("file:") and self.root.scheme == "file" and not uri.startswith("file://"):
            return "file://" + uri.removeprefix("file:")  # Hadoop's file:/abs
        if uri.startswith("/") and self.root.scheme == "file":
            return "file://" + uri
        return uri

    def _local_top(self) -> list[Path]:
        return [self.root.local] if self.root.local is not None and self.is_local else []

    def _path(self, location: Location) -> str:
        """The path inside `fs` of a location under the root."""
        text = self.uri(location) if isinstance(location, Path) else location
        top = str(self.top)
        if text != top and not text.startswith(top + "/"):
            raise UnsafePath(f"{text} is not inside the warehouse {top}")
        rest = text[len(top) :].strip("/")
        return f"{self.base}/{rest}" if rest else self.base

    # -- reads ------------------------------------------------------------------------------------------
    def exists(self, location: Location) -> bool:
        if isinstance(location, Path):
            return location.exists()
        from pyarrow.fs import FileType

        assert self.fs is not None
        return bool(self.fs.get_file_info(self._path(location)).type != FileType.NotFound)

    def is_dir(self, location: Location) -> bool:
        if isinstance(location, Path):
            return location.is_dir()
        from pyarrow.fs import FileType

        assert self.fs is not None
        return bool(self.fs.get_file_info(self._path(location)).type == FileType.Directory)

    def files(self, directory: Location, *, suffix: str = "", recursive: bool = False) -> list[Location]:
        """The files in a directory (none when it is missing), sorted; with `suffix`, those whose name ends so."""
        if isinstance(directory, Path):
            if not directory.is_dir():
                return []
            found = directory.rglob("*") if recursive else directory.iterdir()
            return sorted(p for p in found if p.name.endswith(suffix) and p.is_file())
        from pyarrow.fs import FileSelector, FileType

        assert self.fs is not None
        infos = self.fs.get_file_info(FileSelector(self._path(directory), allow_not_found=True, recursive=recursive))
        rel = len(self._path(directory))
        return sorted(
            self.child(directory, *PurePosixPath(info.path[rel:].strip("/")).parts)
            for info in infos
            if info.type == FileType.File and info.base_name.endswith(suffix)
        )

    def entries(self, directory: Location) -> list[Entry]:
        """What a directory holds, one level (none when it is missing): name, location, whether a directory,
        modification time (seconds)."""
        if isinstance(directory, Path):
            if not directory.is_dir():
                return []
            return [Entry(p.name, p, p.is_dir(), p.stat().st_mtime) for p in sorted(directory.iterdir())]
        from pyarrow.fs import FileSelector, FileType

        assert self.fs is not None
        infos = self.fs.get_file_info(FileSelector(self._path(directory), allow_not_found=True))
        return [
            Entry(
                info.base_name,
                self.child(directory, info.base_name),
                info.type == FileType.Directory,
                info.mtime.timestamp() if info.mtime is not None else 0.0,
            )
            for info in sorted(infos, key=lambda i: i.base_name)
        ]

    def open_input(self, location: Location) -> NativeFile:
        """A readable, seekable file (what `pyarrow.parquet.ParquetFile` takes)."""
        if isinstance(location, Path):
            import pyarrow as pa

            return pa.OSFile(str(location), "rb")
        assert self.fs is not None
        return self.fs.open_input_file(self._path(location))

    # -- writes -----------------------------------------------------------------------------------------
    def makedirs(self, location: Location) -> None:
        if isinstance(location, Path):
            location.mkdir(parents=True, exist_ok=True)
            return
        assert self.fs is not None
        self.fs.create_dir(self._path(location), recursive=True)

    def open_output(self, location: Location) -> NativeFile:
        """A new file, written whole (its directory is made first)."""
        if isinstance(location, Path):
            import pyarrow as pa

            location.parent.mkdir(parents=True, exist_ok=True)
            return pa.OSFile(str(location), "wb")
        assert self.fs is not None
        path = self._path(location)
        self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        return self.fs.open_output_stream(path)

    def sync(self, files: Iterable[Location], directory: Location) -> None:
        """Make written files and their directory entries durable before they are referenced.

        Locally: fsync each file and the directory (Spark does not). Through pyarrow nothing: an object
        store's PUT is durable once it completes, and HDFS's close returns after the block is on its replicas.
        """
        sync_written(files, directory)

    # -- deletes, through the guard -----------------------------------------------------------------------
    def check_removable(self, location: str, *, others: Iterable[Location] = ()) -> str:
        """`location` when the guard lets it be deleted: strictly inside the warehouse, overlapping no table of
        `others`.

        Raises:
            UnsafePath: it does not.
        """
        top = str(self.top)
        parts = location[len(top) :].split("/") if location.startswith(top + "/") else []
        if not [p for p in parts if p] or any(p in (".", "..") for p in parts):
            raise UnsafePath(f"refusing to delete {location}: not strictly inside the warehouse {top}")
        for other in others:
            theirs = str(self.uri(other)).rstrip("/")
            mine = location.rstrip("/")
            if mine == theirs or mine.startswith(theirs + "/") or theirs.startswith(mine + "/"):
                raise UnsafePath(f"refusing to delete {location}: it overlaps the location of another table")
        return location

    def remove_tree(self, location: Location, *, others: Iterable[Location] = (), roots: Sequence[Path] = ()) -> bool:
        """Delete a directory tree inside the warehouse; False (logged) when the guard refused it."""
        if isinstance(location, Path):
            local = [p for p in others if isinstance(p, Path)]
            return remove_tree(location, [*roots, *self._local_top()], others=local)
        try:
            path = self._path(self.check_removable(location, others=others))
        except UnsafePath as exc:
            log.warning("%s; the files are left in place", exc.message)
            return False
        assert self.fs is not None
        try:
            self.fs.delete_dir(path)
        except FileNotFoundError:
            pass
        return True

    def remove_file(self, location: Location, *, others: Iterable[Location] = ()) -> bool:
        """Delete one file inside the warehouse (a missing one is fine); False (logged) when refused."""
        if isinstance(location, Path):
            local = [p for p in others if isinstance(p, Path)]
            return remove_file(location, self._local_top(), others=local)
        try:
            path = self._path(self.check_removable(location, others=others))
        except UnsafePath as exc:
            log.warning("%s; the file is left in place", exc.message)
            return False
        assert self.fs is not None
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            pass
        return True


def sync_written(files: Iterable[Location], directory: Location) -> None:
    """`WarehouseStorage.sync`: fsync local files and their directory; nothing for URIs (durable once written)."""
    if not isinstance(directory, Path):
        return
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
