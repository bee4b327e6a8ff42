"""The warehouse's storage: the server's own file operations on warehouse files, on a local folder or a URI.

    WarehouseStorage.of(root)            a plain path or a `file:` URI's folder: today's local calls
    WarehouseStorage.of(root, via_arrow=True)
                                         the same folder through `pyarrow.fs`, named `file:/abs` as Hadoop (Spark)
                                         names it (`SL_WAREHOUSE_VIA_ARROW_FS`: how the URI code path is tested)
    WarehouseStorage.of(remote_root)     `s3a://`, `s3://`, `hdfs://` through `pyarrow.fs` (untested here)

A location is a `Path` for a local warehouse and a URI (`str`) for one through pyarrow. `uri(location)` is what
Iceberg records (`file:///abs` for a table of a local warehouse, as before; the URI as written otherwise) and
`location(uri)` maps a recorded path back. The storage object serves the catalog and housekeeping (existence,
listing, guarded deletes); the module-level functions below take a location alone (a URI names its filesystem)
and serve the rowset code, which hands a load's directory through Spark-side functions.

A local warehouse keeps today's calls exactly (`os.fsync`, `shutil.rmtree` through the guard of
`tables.paths`): no per-load cost. Through pyarrow a file is durable when its write completes (an object store's
PUT, HDFS's close), so `sync` does nothing there; a rename is a copy and a delete on an object store; deletes are
guarded the same way on the URI: strictly inside the root, not the root, no `..`, overlapping no other table.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from tables.paths import UnsafePath, remove_file, remove_tree
from tables.storage import ARROW_SCHEMES, URI_PREFIX, StorageError, StorageRoot, parse_root

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
        if root.local is not None:  # a local folder through pyarrow, named as Spark names it (Hadoop's `file:/abs`)
            root = StorageRoot(f"file:{root.local}", "file", None)
        try:
            fs, base = root.filesystem()
        except (OSError, ValueError) as exc:  # no libhdfs / JVM, no S3 region or credentials (pyarrow's errors)
            first = next(iter(str(exc).strip().splitlines()), type(exc).__name__)
            raise StorageError(
                f"SL_WAREHOUSE {root.text!r}: pyarrow cannot reach it ({first}); an hdfs: warehouse needs a Hadoop "
                "client with libhdfs on the server, an s3a:/s3: one the AWS environment (README 'Run on a Spark "
                "cluster')"
            ) from exc
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
        """What Iceberg records: `file:///abs` for a local location, a URI as it is."""
        return f"file://{location}" if isinstance(location, Path) else location

    def location(self, uri: str) -> Location:
        """The location of a path Iceberg or Spark recorded (`file:` URIs of a local warehouse are paths)."""
        if self.is_local:
            return Path(uri.removeprefix("file://").removeprefix("file:")) if uri.startswith("file:") else Path(uri)
        if self.root.scheme == "file" and (uri.startswith(("file:", "/"))):
            return hadoop_file_uri(uri)
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


# -- a location by itself: a `Path` is a local file, a `str` a URI (its filesystem named by its scheme) --------------
# What the rowset writers and readers call: a load's directory and files are locations of the table's storage,
# handed through Spark-side code without the storage object.


@functools.cache
def _filesystem(scheme: str, netloc: str) -> FileSystem:
    """pyarrow's filesystem of a URI's scheme and host or bucket (one client each; S3 credentials from the usual
    AWS environment, an `hdfs:` client through libhdfs)."""
    from pyarrow.fs import FileSystem

    fs, _ = FileSystem.from_uri(f"{ARROW_SCHEMES.get(scheme, scheme)}://{netloc}/")
    return fs


def _fs_path(location: str) -> tuple[FileSystem, str]:
    parts = urlsplit(location)
    if parts.scheme == "file":
        from pyarrow.fs import LocalFileSystem

        return LocalFileSystem(), unquote(parts.path)
    path = parts.path if parts.scheme == "hdfs" else f"{parts.netloc}{parts.path}"
    return _filesystem(parts.scheme, parts.netloc), path


def hadoop_file_uri(text: str) -> str:
    """A local path or any `file:` URI as Hadoop (Spark's `input_file_name()`) writes it: `file:/abs/path`."""
    path = unquote(urlsplit(text).path) if text.startswith("file:") else text
    return f"file:{path}"


def arrow_path(location: Location) -> str:
    """A location as `pyarrow.parquet`'s readers and writers take it (`s3a://` → `s3://`; a `file:` URI's path)."""
    if isinstance(location, Path):
        return str(location)
    if location.startswith("file:"):
        return unquote(urlsplit(location).path)
    scheme = location.split(":", 1)[0].lower()
    return ARROW_SCHEMES.get(scheme, scheme) + location[len(scheme) :]


def as_location(text: str) -> Location:
    """A path as a rowset's code holds it: a URI stays one (`file:/abs` included), anything else is a local path."""
    return text if URI_PREFIX.match(text) else Path(text)


def name_of(location: Location) -> str:
    return location.name if isinstance(location, Path) else location.rstrip("/").rsplit("/", 1)[-1]


def parent_of(location: Location) -> Location:
    return location.parent if isinstance(location, Path) else location.rstrip("/").rsplit("/", 1)[0]


def child_of(location: Location, *names: str) -> Location:
    if isinstance(location, Path):
        return location.joinpath(*names)
    return "/".join([location.rstrip("/"), *names])


def make_dirs(location: Location, *, exist_ok: bool = True) -> None:
    """Make a directory (and its parents); `exist_ok=False` refuses an existing local one (an object store has no
    directories to find)."""
    if isinstance(location, Path):
        location.mkdir(parents=True, exist_ok=exist_ok)
        return
    fs, path = _fs_path(location)
    fs.create_dir(path, recursive=True)


def list_files(directory: Location, pattern: str = "*") -> list[Location]:
    """The files directly in a directory whose names match `pattern` (a glob), sorted; none when it is missing."""
    return _listed(directory, pattern, dirs=False)


def list_dirs(directory: Location, pattern: str = "*") -> list[Location]:
    """The directories directly in a directory whose names match `pattern`, sorted."""
    return _listed(directory, pattern, dirs=True)


def _listed(directory: Location, pattern: str, *, dirs: bool) -> list[Location]:
    if isinstance(directory, Path):
        if not directory.is_dir():
            return []
        return sorted(p for p in directory.glob(pattern) if (p.is_dir() if dirs else p.is_file()))
    from pyarrow.fs import FileSelector, FileType

    fs, path = _fs_path(directory)
    wanted = FileType.Directory if dirs else FileType.File
    infos = fs.get_file_info(FileSelector(path, allow_not_found=True))
    names = sorted(i.base_name for i in infos if i.type == wanted and fnmatch.fnmatchcase(i.base_name, pattern))
    return [child_of(directory, n) for n in names]


def move(source: Location, target: Location) -> None:
    """Rename a file (an object store copies it and deletes the source)."""
    if isinstance(source, Path) and isinstance(target, Path):
        source.rename(target)
        return
    fs, path = _fs_path(str(source))
    fs.move(path, _fs_path(str(target))[1])


def file_size(location: Location) -> int:
    if isinstance(location, Path):
        return location.stat().st_size
    fs, path = _fs_path(location)
    return int(fs.get_file_info(path).size or 0)


def file_stamp(location: Location) -> tuple[int, int, int]:
    """What tells one version of a file from another (inode, modification time in ns, size): a two-phase commit
    stamps its files' version in place. A store without inodes says 0 for it."""
    if isinstance(location, Path):
        st = location.stat()
        return st.st_ino, st.st_mtime_ns, st.st_size
    fs, path = _fs_path(location)
    info = fs.get_file_info(path)
    return 0, int(info.mtime_ns or 0), int(info.size or 0)


def delete_file(location: Location) -> None:
    """Remove one file the caller wrote (a missing one is fine)."""
    if isinstance(location, Path):
        location.unlink(missing_ok=True)
        return
    fs, path = _fs_path(location)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


def delete_dir(location: Location) -> None:
    """Remove a directory the caller's own job wrote (Spark's partition folders), whatever it holds."""
    if isinstance(location, Path):
        shutil.rmtree(location, ignore_errors=True)
        return
    fs, path = _fs_path(location)
    try:
        fs.delete_dir(path)
    except FileNotFoundError:
        pass
