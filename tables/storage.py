"""Where the shared dir and the warehouse live: each setting is a plain path or a URI.

    parse_root(text, setting=...)   a `StorageRoot`, or `StorageError` naming the setting and what is wrong
    local_root(text, setting=...)   the local folder a path or a `file:` URI names (what the server runs on)

A plain path and a `file:` URI (`file:///abs/path`, Hadoop's `file:/abs/path`, `file://localhost/abs/path`) name
a local folder: the server reads and writes it with the same local-file code as before (same speed), and Spark,
whose default filesystem is the local one, reads and writes the same files. On a cluster every node mounts it at
the same path.

`hdfs://`, `s3a://` and `s3://` roots are parsed here (`StorageRoot.spark_uri` is what Spark is given, as
written; `StorageRoot.arrow_uri` what `pyarrow.fs.FileSystem.from_uri` is given: pyarrow names S3 `s3`, so
`s3a://` maps to `s3://`; `hdfs://` stays). A warehouse may be such a root: the server reaches its files through
`tables/warehouse.py` (untested here: no S3 or HDFS; its code path is tested on `file:` through pyarrow). The
shared dir may not (`local_root`): the server stages bodies there and keeps the group-commit write-ahead log
there, which appends, syncs, hard-links and renames files, which an object store cannot; mount such storage on
every node as a POSIX filesystem (NFS, EFS, a cluster filesystem) and give its path. Any other scheme is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from tables.errors import DorisError

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

LOCAL_SCHEMES = frozenset({"file"})
# a warehouse's, through pyarrow.fs (see the module docstring)
REMOTE_SCHEMES = frozenset({"hdfs", "s3a", "s3"})
# pyarrow's name of a scheme where it differs from Hadoop's (Spark's)
ARROW_SCHEMES = {"s3a": "s3"}
# `scheme:/...`: a URI; anything else (a relative `a:b` included) is a path
URI_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/")


class StorageError(DorisError):
    """A shared dir or warehouse setting that names no storage the server can use."""


@dataclass(frozen=True)
class StorageRoot:
    """One storage root as configured: `local` for a path or `file:` URI, None for a remote root."""

    text: str
    scheme: str  # "" for a plain path
    local: Path | None

    @property
    def spark_uri(self) -> str:
        """What Spark reads and writes: the URI as written (Hadoop filesystems), or the local folder."""
        return str(self.local) if self.local is not None else self.text

    @property
    def arrow_uri(self) -> str:
        """What `pyarrow.fs.FileSystem.from_uri` takes: `s3a://` becomes `s3://`, `hdfs://` and paths stay."""
        if self.local is not None:
            return str(self.local)
        return ARROW_SCHEMES.get(self.scheme, self.scheme) + self.text[len(self.scheme) :]

    def filesystem(self) -> tuple[FileSystem, str]:
        """pyarrow's filesystem of this root and the root's path in it (a client: `hdfs:` needs libhdfs)."""
        from pyarrow.fs import FileSystem

        fs, path = FileSystem.from_uri(self.arrow_uri)
        return fs, path


def parse_root(text: str | PurePath, *, setting: str) -> StorageRoot:
    """The storage root a setting names.

    Raises:
        StorageError: an unknown scheme, a `file:` URI of another host or a relative one, a URI without a host.
    """
    if isinstance(text, PurePath):
        return StorageRoot(str(text), "", Path(text).expanduser().resolve())
    match = URI_PREFIX.match(text)
    if match is None:
        if text[:5].lower() == "file:":
            raise StorageError(f"{setting} {text!r}: a file: URI names an absolute path (file:///abs/path)")
        return StorageRoot(text, "", Path(text).expanduser().resolve())
    scheme = match.group(1).lower()
    parts = urlsplit(text)
    if scheme in LOCAL_SCHEMES:
        if parts.netloc not in ("", "localhost"):
            raise StorageError(
                f"{setting} {text!r}: a file: URI names a folder of this machine (file:///abs/path), "
                f"not of host {parts.netloc!r}"
            )
        if parts.query or parts.fragment:
            raise StorageError(f"{setting} {text!r}: a file: URI has no query or fragment")
        return StorageRoot(text, scheme, Path(unquote(parts.path)).resolve())
    if scheme in REMOTE_SCHEMES:
        if not parts.netloc:
            raise StorageError(f"{setting} {text!r}: a {scheme}: URI names its host or bucket ({scheme}://name/path)")
        return StorageRoot(text, scheme, None)
    raise StorageError(
        f"{setting} {text!r}: unsupported scheme {scheme!r}; give a path, a file: URI "
        "(or, for the warehouse, hdfs:, s3a:, s3:)"
    )


def local_root(text: str | PurePath, *, setting: str) -> Path:
    """The local folder a path or `file:` URI names, for a root the server reads and writes with local-file calls
    (the shared dir).

    Raises:
        StorageError: as `parse_root`; and for an `hdfs:`, `s3a:` or `s3:` root.
    """
    root = parse_root(text, setting=setting)
    if root.local is None:
        raise StorageError(
            f"{setting} {root.text!r}: {root.scheme}: storage cannot hold it: the server stages bodies there "
            "and keeps its group-commit write-ahead log there, which appends, syncs, hard-links and renames files; "
            "mount the storage on every node as a POSIX filesystem (NFS, EFS, a cluster filesystem) and give its "
            "path or a file: URI"
        )
    return root.local
