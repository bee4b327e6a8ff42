"""Which files a load may read: broker-load paths and Kafka certificate files, checked after resolving links
and globs, so that no statement reads a server file it was not meant to (`/etc/passwd`, `/proc/self/environ`,
the server's own data).

    DATA INFILE("p1", ...) ──brace expansion──► patterns ──refuse `..`, `\\`──► local: glob, realpath of every
        match, inside an allowed root and outside every forbidden root, regular files only (directories skipped,
        as Doris skips them) ──► the resolved files, which are what the load reads
                                                      URI (hdfs://, s3a://...): under an allowed URI prefix

An empty list of allowed roots refuses every path, as Doris's `local()` reads only under
`user_files_secure_path`. The texts follow Doris's `LocalFileSystem::safe_glob` and the broker load's
pending task.
"""

from __future__ import annotations

import fnmatch
import glob
import itertools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from tables.errors import SourcePathError

# never readable, whatever is configured: kernel and device views (environment, memory, other processes)
SYSTEM_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))
# characters Hadoop's glob (which Spark applies to every path it is given) reads as pattern syntax
GLOB_CHARS = frozenset("*?[]{}\\")
MAX_FILES = 1000  # files one LOAD may name after glob expansion: each is a Spark read of its own
MAX_PATTERNS = MAX_FILES  # paths one LOAD may name after `{a,b}` expansion, all DATA INFILE paths together
MAX_PATH_CHARS = 4096  # Linux's PATH_MAX: one path after `{a,b}` expansion
MAX_BRACE_DEPTH = 32  # `{...}` groups nested in one another (as deep as an expression may nest)
MAX_GLOB_MATCHES = 4 * MAX_FILES  # names one glob component may match (folders too) before the load is refused
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


@dataclass(frozen=True)
class SourcePolicy:
    """Where loads may read: local folders and URI prefixes allowed, and the server's own folders refused."""

    allowed: tuple[str, ...] = ()
    forbidden: tuple[Path, ...] = field(default_factory=tuple)

    @classmethod
    def build(cls, allowed: Iterable[str], server_roots: Iterable[Path]) -> SourcePolicy:
        """Local roots are resolved once (a root that is a link counts as its target)."""
        roots = tuple(_local_root(r) if _scheme(r) in (None, "file") else r for r in allowed)
        forbidden = tuple(dict.fromkeys([*SYSTEM_ROOTS, *(_real(p) for p in server_roots)]))
        return cls(allowed=roots, forbidden=forbidden)

    @property
    def local_roots(self) -> list[Path]:
        return [Path(r) for r in self.allowed if _scheme(r) is None]

    def check_local_file(self, path: Path) -> Path:
        """The real path of `path` when it may be read.

        Raises:
            SourcePathError: it resolves outside every allowed root, or into a forbidden one.
        """
        real = _real(path)
        if any(_within(real, f) for f in self.forbidden) or not any(_within(real, r) for r in self.local_roots):
            raise SourcePathError(f"file path is not allowed: {path}")
        return real


def _local_root(root: str) -> str:
    return str(_real(_strip_file_scheme(root) if _scheme(root) == "file" else root))


def _scheme(path: str) -> str | None:
    found = _SCHEME.match(path)
    # one letter before a colon is a Windows drive, never a scheme
    return found.group(1).lower() if found and len(found.group(1)) > 1 else None


def _strip_file_scheme(path: str) -> str:
    """`file:///a/b` and `file:/a/b` are the local path `/a/b`."""
    rest = path[len("file:") :]
    return "/" + rest.lstrip("/") if rest.startswith("/") else rest


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(os.path.abspath(path)))


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def expand_braces(pattern: str, limit: int = MAX_PATTERNS) -> list[str]:
    """Hadoop's `{a,b}` alternatives, expanded (nested groups too), so that each pattern is checked on its own.
    The alternatives multiply (`{a,b}` thirty times is 2^30 paths), so the expansion stops past `limit` paths,
    and groups nest at most `MAX_BRACE_DEPTH` deep.

    Raises:
        SourcePathError: more than `limit` paths, or groups nested too deep.
    """
    depth = deepest = 0
    for ch in pattern:
        if ch == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == "}" and depth > 0:
            depth -= 1
    if deepest > MAX_BRACE_DEPTH:
        raise SourcePathError(f"path has '{{...}}' groups nested more than {MAX_BRACE_DEPTH} deep")
    return _expand(pattern, limit)


def _expand(pattern: str, limit: int) -> list[str]:
    """The expansion: the pattern as a sequence of choices (a literal is one), whose number of paths and longest
    path are known before any path is built, so neither many groups nor long ones cost more than the paths."""
    segments: list[list[str]] = []
    depth, start, literal = 0, -1, 0
    count, longest = 1, 0
    for i, ch in enumerate(pattern):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                options: list[str] = []
                for option in _split_top_level(pattern[start + 1 : i]):
                    options.extend(_expand(option, limit))
                    _check_count(len(options), limit)
                segments += [[pattern[literal:start]], options]
                count *= len(options)
                _check_count(count, limit)
                longest += start - literal + max(map(len, options))
                _check_length(longest)
                literal = i + 1
    segments.append([pattern[literal:]])  # an unclosed `{` stays as it is written, as before
    _check_length(longest + len(pattern) - literal)
    return ["".join(parts) for parts in itertools.product(*segments)]


def _check_length(length: int) -> None:
    if length > MAX_PATH_CHARS:
        raise SourcePathError(f"path is longer than {MAX_PATH_CHARS} characters")


def _check_count(count: int, limit: int) -> None:
    if count > limit:
        raise SourcePathError(f"too many paths in one load: the {{a,b}} alternatives expand to more than {limit}")


def _split_top_level(body: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += (ch == "{") - (ch == "}")
        current += ch
    return [*parts, current]


def _check_pattern(pattern: str) -> None:
    """Raises: SourcePathError for `..` (Doris's text) or a backslash (Hadoop's glob escape)."""
    segments = unquote(pattern).replace("\\", "/").split("/")
    if ".." in segments:
        raise SourcePathError("can not contain '..' in path")
    if "\\" in pattern:
        raise SourcePathError(f"can not contain '\\' in path: {pattern}")


def resolve_sources(paths: Iterable[str], policy: SourcePolicy, table: str) -> list[str]:
    """The files a broker load reads, in the order given (each glob's matches sorted): real local paths, or
    URIs under an allowed prefix.

    Raises:
        SourcePathError: a path or match that may not be read, none at all, or more than `MAX_FILES`.
    """
    files: list[str] = []
    patterns = 0
    for path in paths:
        expanded = expand_braces(path, MAX_PATTERNS - patterns)
        patterns += len(expanded)
        for pattern in expanded:
            _check_pattern(pattern)
            files.extend(_resolve_pattern(pattern, policy))
            if len(files) > MAX_FILES:
                raise SourcePathError(f"too many files in one load: more than {MAX_FILES}")
    if not files:
        raise SourcePathError(f"No source file in this table({table}).")
    return list(dict.fromkeys(files))


def _resolve_pattern(pattern: str, policy: SourcePolicy) -> list[str]:
    scheme = _scheme(pattern)
    if scheme is not None and scheme != "file":
        return [_check_uri(pattern, scheme, policy)]
    local = _strip_file_scheme(pattern) if scheme == "file" else pattern
    if not policy.local_roots:  # before any file system access: nothing local is readable
        raise SourcePathError(f"file path is not allowed: {pattern}")
    files = []
    for match in _glob_inside(Path(os.path.abspath(local)), policy):
        real = policy.check_local_file(Path(match))
        if real.is_dir():
            continue  # Doris's broker load skips directories a path matches
        if not real.is_file():
            if real.exists():  # a FIFO or device would block the read, or never end
                raise SourcePathError(f"file path is not a regular file: {match}")
            continue
        if GLOB_CHARS & set(str(real)):  # Spark would read the name as a pattern again
            raise SourcePathError(f"file name contains a glob character: {match}")
        files.append(str(real))
    return files


def _glob_inside(pattern: Path, policy: SourcePolicy) -> list[Path]:
    """The matches of a local glob, sorted per component. Each folder is checked before it is listed, so a
    pattern never lists a folder outside the allowed roots (`/etc/*`, or a link out of a root): an error
    names only paths the roots hold or the pattern spelled out.

    Raises:
        SourcePathError: a folder to be listed resolves outside the allowed roots.
    """
    candidates = [Path(pattern.anchor)]
    for part in pattern.parts[1:]:
        if not glob.has_magic(part):
            candidates = [c / part for c in candidates]
            continue
        found: list[Path] = []
        for folder in candidates:
            real = policy.check_local_file(folder if folder != Path(pattern.anchor) else pattern)
            if real.is_dir():
                # hidden names match only a pattern that starts with a dot, as the shell and Python's glob do
                names = [n for n in sorted(os.listdir(real)) if not n.startswith(".") or part.startswith(".")]
                found.extend(folder / n for n in names if fnmatch.fnmatchcase(n, part))
                if len(found) > MAX_GLOB_MATCHES:  # links back up the tree multiply the matches per component
                    raise SourcePathError(f"too many files in one load: more than {MAX_FILES}")
        candidates = found
    return candidates


def _check_uri(pattern: str, scheme: str, policy: SourcePolicy) -> str:
    prefixes = [r.rstrip("/") + "/" for r in policy.allowed if _scheme(r) == scheme]
    if not any(pattern.startswith(p) and not GLOB_CHARS & set(p) for p in prefixes):
        raise SourcePathError(f"file path is not allowed: {pattern}")
    return pattern


def check_cert_file(value: str, cert_dir: Path | None, key: str) -> str:
    """The real path of a Kafka certificate or keytab file, which must lie in `cert_dir`. Doris's `FILE:name`
    (a file uploaded with CREATE FILE) names a file in that folder.

    Raises:
        SourcePathError: no folder configured, or the file is outside it, missing, or not a regular file.
    """
    if cert_dir is None:
        raise SourcePathError(f"{key} is not allowed: certificate files are read only from SL_KAFKA_CERT_DIR (unset)")
    name = value[len("FILE:") :] if value.startswith("FILE:") else value
    root = _real(cert_dir)
    real = _real(root / name)
    # the path reaches librdkafka's kinit command line for a keytab: plain names only
    if not _within(real, root) or real == root or not re.fullmatch(r"[A-Za-z0-9._/+-]+", str(real)):
        raise SourcePathError(f"{key} is not allowed: {value} is not a file in the certificate folder")
    if not real.is_file():
        raise SourcePathError(f"{key}: no such certificate file: {value}")
    return str(real)
