"""Rowsets and tablets: how Doris's storage nouns map onto one Iceberg table.

rowset   the data files of the current snapshot that hold one contiguous range of load versions.
         A load's files hold one version: every row carries it in `__DORIS_VERSION_COL__`, and the
         Iceberg lower/upper bounds of that field (filled from the Parquet statistics by `add_files`)
         say which. A compaction's files cover a range, written into their names (`r<start>_<end>-...`),
         because a merged row keeps only the largest version of its run.
tablet   one bucket of the table. A rowset spans every bucket (a small load writes one file for
         several buckets), so the tablets of a table share its rowsets; tablet ids are derived from
         the Iceberg table uuid, stable for the table's life. From storage format 3 a file's bucket is its
         Iceberg partition (`file_bucket`): NULL for a file of several buckets.
"""

from __future__ import annotations

import io
import logging
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from pyiceberg import manifest as pyiceberg_manifest
from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import ValidationError
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntry, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table import snapshots as pyiceberg_snapshots
from pyiceberg.typedef import Record
from pyiceberg.types import IntegerType, LongType, StringType

from tables.errors import DorisError
from tables.model import BUCKET_COL, DELETE_SIGN, VERSION_COL
from tables.partitions import PARTITION_COL
from tables.sized_cache import SizedCache

if TYPE_CHECKING:
    from pyiceberg.avro.file import AvroOutputFile

    from tables.catalog import Catalog

log = logging.getLogger(__name__)

# what reading a table's metadata or manifests raises when a file is missing or damaged (pydantic's errors
# are ValueErrors; pyiceberg wraps a metadata file that does not parse in its own ValidationError)
UNREADABLE = (OSError, ValueError, KeyError, ValidationError)

RANGE_NAME = re.compile(r"^r(\d+)_(\d+)-")
TABLETS_PER_TABLE = 10_000  # tablet id = table base + bucket; Doris caps buckets far below this
BACKEND_ID = 10001


class RowsetsChanged(DorisError):
    """The rowsets a compaction read are no longer all in the current snapshot (another compaction or a
    TRUNCATE replaced them): the compaction gives way."""


@dataclass(frozen=True)
class Rowset:
    """Data files holding versions `start_version..end_version` of a table."""

    start_version: int
    end_version: int
    files: tuple[DataFile, ...]

    @property
    def rows(self) -> int:
        return sum(f.record_count for f in self.files)

    @property
    def data_size(self) -> int:
        return sum(f.file_size_in_bytes for f in self.files)

    @property
    def paths(self) -> list[str]:
        return [plain_path(f.file_path) for f in self.files]

    @property
    def version(self) -> str:
        return f"[{self.start_version}-{self.end_version}]"


def plain_path(uri: str) -> str:
    """A local path for a `file:` URI (pyiceberg keeps paths as given; Spark reports URIs). A warehouse reached
    through pyarrow (`tables/warehouse.py`, `keep_uris`) records URIs, as Spark reports them: they stay."""
    return urlparse(uri).path if uri.startswith("file:") and not _KEEP_URIS[0] else uri


_KEEP_URIS = [False]  # the server's warehouse is reached through pyarrow: one per process (`app/main.py`)


def keeps_uris() -> bool:
    return _KEEP_URIS[0]


def keep_uris(keep: bool) -> None:
    """Whether `plain_path` keeps `file:` URIs (a warehouse through pyarrow records Hadoop's `file:/abs`)."""
    _KEEP_URIS[0] = keep


def range_file_name(start: int, end: int, name: str) -> str:
    """The name a compaction gives a file it writes: the version range first."""
    return f"r{start}_{end}-{name}"


def _bound(raw: dict[int, bytes] | None, field_id: int, kind: IntegerType | LongType) -> int | None:
    if not raw or field_id not in raw:
        return None
    value = from_bytes(kind, raw[field_id])
    return int(value) if isinstance(value, int) else None


def file_versions(data_file: DataFile, version_field: int, fallback: int | None) -> tuple[int, int]:
    """The version range a data file holds: from its name (compaction output), else the bounds of the
    version column, else the version of the snapshot that added it."""
    match = RANGE_NAME.match(Path(data_file.file_path).name)
    if match:
        return int(match.group(1)), int(match.group(2))
    lower = _bound(data_file.lower_bounds, version_field, LongType())
    upper = _bound(data_file.upper_bounds, version_field, LongType())
    if lower is not None and upper is not None:
        return lower, upper
    if fallback is None:
        raise ValueError(f"the version range of data file {data_file.file_path} is unknown")
    return fallback, fallback


def has_delete_markers(data_file: DataFile, sign_field: int | None) -> bool:
    """Whether the file may hold delete-signed rows (upper bound of the delete sign is 1)."""
    if sign_field is None:
        return False
    upper = _bound(data_file.upper_bounds, sign_field, IntegerType())
    return upper is None or upper > 0


def table_rowsets(table: Table) -> list[Rowset]:
    """The rowsets of the table's current snapshot, oldest first."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    schema = table.schema()
    version_field = schema.find_field(VERSION_COL).field_id
    versions_of_snapshots: dict[int, int] = {}
    for snap in table.snapshots():
        props = snap.summary.additional_properties if snap.summary else {}
        if "doris.version" in props and "doris.label" in props:
            versions_of_snapshots[snap.snapshot_id] = int(props["doris.version"])
    groups: dict[tuple[int, int], list[DataFile]] = {}
    for manifest in data_manifests(table):
        for entry in manifest_entries(table, manifest):
            fallback = versions_of_snapshots.get(entry.snapshot_id) if entry.snapshot_id is not None else None
            groups.setdefault(file_versions(entry.data_file, version_field, fallback), []).append(entry.data_file)
    return [
        Rowset(start_version=lo, end_version=hi, files=tuple(sorted(files, key=lambda f: f.file_path)))
        for (lo, hi), files in sorted(groups.items())
    ]


def live_data_files(table: Table) -> list[DataFile]:
    """Every data file of the current snapshot, empty ones included (scan planning skips those)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    return [entry.data_file for manifest in data_manifests(table) for entry in manifest_entries(table, manifest)]


def _entries_bytes(entries: tuple[ManifestEntry, ...]) -> int:
    """What a manifest's parsed entries keep alive: about 3 KB an entry (its data file's statistics), measured
    over a soak's manifests (3.8 KB a manifest of 1.1 entries)."""
    return 1024 + 3072 * len(entries)


MANIFEST_CACHE_BYTES = 16 << 20  # manifests whose live entries are kept (a manifest file never changes once written)


def _no_load(path: str) -> tuple[ManifestEntry, ...]:
    raise AssertionError("manifest entries are kept with put")


_ENTRIES = SizedCache(_no_load, max_bytes=MANIFEST_CACHE_BYTES, cost=_entries_bytes)


def manifest_entries(table: Table, manifest: ManifestFile) -> tuple[ManifestEntry, ...]:
    """The live entries of a manifest, read once per process: every load adds a manifest, and reading them all
    again for each query and each commit grew with the table's history (400 manifests: about a second)."""
    path = manifest.manifest_path
    cached = _ENTRIES.get(path)
    if cached is not None:
        return cached
    entries = tuple(manifest.fetch_manifest_entry(table.io, discard_deleted=True))
    _ENTRIES.put(path, entries)
    return entries


def _list_bytes(manifests: tuple[ManifestFile, ...]) -> int:
    """What a manifest list's parsed entries keep alive (a `ManifestFile` with its partition summaries: ~1 KB)."""
    return 512 + 1024 * len(manifests)


MANIFEST_LIST_CACHE_BYTES = 8 << 20  # manifest lists kept parsed (a manifest list never changes once written)


def _no_list(path: str) -> tuple[ManifestFile, ...]:
    raise AssertionError("manifest lists are kept with put")


_LISTS = SizedCache(_no_list, max_bytes=MANIFEST_LIST_CACHE_BYTES, cost=_list_bytes)
_read_manifest_list = pyiceberg_manifest._manifests  # what `Snapshot.manifests` calls, through its module's name


def cached_manifest_list(io: FileIO, manifest_list: str) -> tuple[ManifestFile, ...]:
    """A snapshot's manifests, its manifest list read once per process: every `Snapshot.manifests` call comes here
    (`pyiceberg.table.snapshots._manifests` is this). pyiceberg 0.12 reads the list again on every call, and a
    small load asked three times for one snapshot's (its lookup, its commit's re-check, the append that names its
    parent's manifests): ~4 ms each on 2 cores, most of it opening the Avro file, however short the list."""
    cached = _LISTS.get(manifest_list)
    if cached is not None:
        return cached
    manifests = _read_manifest_list(io, manifest_list)  # a failure is raised, and not kept
    _LISTS.put(manifest_list, manifests)
    return manifests


pyiceberg_snapshots._manifests = cached_manifest_list  # type: ignore[attr-defined]


def _add_manifests_kept(
    self: pyiceberg_manifest.ManifestListWriter, manifest_files: list[ManifestFile]
) -> pyiceberg_manifest.ManifestListWriter:
    """`ManifestListWriter.add_manifests`, keeping the list it writes parsed (as `cached_manifest_list` would
    after reading it): the next load reads the snapshot committed with it (its lookup, its commit's re-check, the
    append that names its parent's manifests) and no longer opens the Avro file it was just written as (~4 ms a
    load on 2 cores). A list whose commit fails is never named by a snapshot (its path is unique)."""
    prepared = [self.prepare_manifest(manifest_file) for manifest_file in manifest_files]
    _write_block(self._writer, manifest_files, prepared)
    path = self._output_file.location
    _LISTS.put(path, (*(_LISTS.get(path) or ()), *prepared))
    return self


pyiceberg_manifest.ManifestListWriter.add_manifests = _add_manifests_kept  # type: ignore[method-assign]

_ENCODED = "_sl_avro"  # on a manifest of a written list: (the writer's Avro schema, its entry's bytes)


def _write_block(writer: AvroOutputFile[Any], given: list[ManifestFile], prepared: list[ManifestFile]) -> None:
    """`AvroOutputFile.write_block` of a manifest list's entries (`prepared` from `given`), each manifest encoded
    once per process: a list names every manifest of the table, all but the new ones as the parent's list did, and
    each commit encoded them all again (Python, field by field: ~3 ms of a one-row load's commit once a table had
    300 manifests). An entry's bytes are kept on the manifest once its sequence numbers are assigned, which is
    all that `prepare_manifest` changes; the block is compressed and framed as pyiceberg frames it."""
    from pyiceberg.avro.encoder import BinaryEncoder
    from pyiceberg.manifest import UNASSIGNED_SEQ

    parts = []
    for original, entry in zip(given, prepared, strict=True):
        kept = vars(original).get(_ENCODED)
        if kept is not None and kept[0] is writer.file_schema:
            parts.append(kept[1])
            continue
        out = io.BytesIO()
        writer.writer.write(BinaryEncoder(out), entry)
        encoded = (writer.file_schema, out.getvalue())
        parts.append(encoded[1])
        vars(entry)[_ENCODED] = encoded  # the next list names `entry` (`_LISTS`): its numbers are assigned now
        if UNASSIGNED_SEQ not in (original.sequence_number, original.min_sequence_number):
            vars(original)[_ENCODED] = encoded
    content = b"".join(parts)
    writer.encoder.write_int(len(prepared))
    codec = writer.compression_codec()
    if codec is not None:
        content, length = codec.compress(content)
        writer.encoder.write_int(length)
    else:
        writer.encoder.write_int(len(content))
    writer.encoder.write(content)
    writer.encoder.write(writer.sync_bytes)


def data_manifests(table: Table) -> list[ManifestFile]:
    """The manifests of the current snapshot that list data files (not position delete files)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    return [m for m in snapshot.manifests(table.io) if m.content == ManifestContent.DATA]


def partition_of(table: Table, data_file: DataFile) -> tuple[int, Record]:
    """A data file's partition as Iceberg matches position deletes to it: its spec id and partition tuple."""
    return data_file.spec_id or 0, data_file.partition if data_file.partition is not None else Record()


def file_bucket(table: Table, data_file: DataFile) -> int | None:
    """The bucket every row of the file is in, or None: a file of several buckets (a small load's), or one
    written before the table was bucketed (its spec has no bucket field)."""
    return partition_value(table, data_file, BUCKET_COL)


def file_partition(table: Table, data_file: DataFile) -> int | None:
    """The id of the Doris partition every row of the file is in (data and delete files alike: a delete file sits
    in the partition of the files it names); None in an unpartitioned table."""
    return partition_value(table, data_file, PARTITION_COL)


def partition_value(table: Table, data_file: DataFile, name: str) -> int | None:
    """The value of the file's identity partition field on the hidden column `name`, None when it has none."""
    spec = table.specs().get(data_file.spec_id or 0)
    if spec is None or data_file.partition is None:
        return None
    for index, field in enumerate(spec.fields):
        if field.name == name and index < len(data_file.partition):
            value = data_file.partition[index]
            return int(value) if value is not None else None
    return None


@dataclass(frozen=True)
class FileFilter:
    """Which data files a read of some keys needs: those of some buckets (None: any), and those whose Iceberg
    column bounds can hold one of the given values of each listed key column (integer and string columns; others
    are not compared). `by_bucket`: the first listed column's values per bucket, when the reader knows them (a
    small load's keys): a file of one bucket may hold only its bucket's values."""

    buckets: frozenset[int] | None = None
    values: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    partitions: frozenset[int] | None = None  # Doris partition ids (None: any)
    by_bucket: tuple[tuple[int, tuple[Any, ...]], ...] = ()

    def values_in(self, bucket: int | None) -> tuple[Any, ...] | None:
        """The first listed column's values a file of `bucket` (None: of several) may hold, or None (no column)."""
        if not self.values:
            return None
        if bucket is not None and self.by_bucket:
            return dict(self.by_bucket).get(bucket, ())
        return self.values[0][1]


def may_hold(table: Table, data_file: DataFile, wanted: FileFilter | None) -> bool:
    """Whether the file may hold rows `wanted` asks for (every file, when it is None)."""
    if wanted is None:
        return True
    if wanted.partitions is not None:
        partition = file_partition(table, data_file)
        if partition is not None and partition not in wanted.partitions:
            return False
    bucket = file_bucket(table, data_file) if wanted.buckets is not None or wanted.by_bucket else None
    if wanted.buckets is not None and bucket is not None and bucket not in wanted.buckets:
        return False
    schema = table.schema()
    for index, (column, listed) in enumerate(wanted.values):
        values = wanted.values_in(bucket) if index == 0 else listed
        assert values is not None, "a listed column has values"
        field = schema.find_field(column, case_sensitive=False)
        if not isinstance(field.field_type, (IntegerType, LongType, StringType)):
            continue
        lower = (data_file.lower_bounds or {}).get(field.field_id)
        upper = (data_file.upper_bounds or {}).get(field.field_id)
        if lower is None or upper is None:
            continue
        low, high = from_bytes(field.field_type, lower), from_bytes(field.field_type, upper)
        if any(v is not None and type(v) is not type(low) for v in values):
            continue  # values of another kind do not compare: the file may hold them
        if not any(v is not None and low <= v <= high for v in values) and None not in values:
            return False
    return True


def wanted_values(table: Table, wanted: FileFilter) -> dict[str, tuple[Any, ...]]:
    """Plain path → the values of `wanted`'s first column that each live data file of one bucket may hold."""
    if not wanted.by_bucket:
        return {}
    out: dict[str, tuple[Any, ...]] = {}
    for data_file in live_data_files(table):
        bucket = file_bucket(table, data_file)
        values = wanted.values_in(bucket)
        if bucket is not None and values is not None:
            out[plain_path(data_file.file_path)] = values
    return out


def sign_field_id(table: Table) -> int | None:
    try:
        return table.schema().find_field(DELETE_SIGN).field_id
    except ValueError:
        return None


# -- tablets -------------------------------------------------------------------------------
def tablet_base(table_uuid: uuid.UUID) -> int:
    """The first tablet id of a table; its buckets follow."""
    return TABLETS_PER_TABLE * (1 + table_uuid.int % 100_000_000)


def tablet_ids(table_uuid: uuid.UUID, buckets: int) -> list[int]:
    base = tablet_base(table_uuid)
    return [base + b for b in range(buckets)]


def schema_hash(table_uuid: uuid.UUID) -> int:
    """A stable positive 31-bit number standing in for Doris's schema hash."""
    return table_uuid.int % 2_000_000_000 + 1


def bucket_of_tablet(table_uuid: uuid.UUID, buckets: int, tablet_id: int) -> int | None:
    bucket = tablet_id - tablet_base(table_uuid)
    return bucket if 0 <= bucket < buckets else None


def rowsets_per_table(catalog: Catalog) -> dict[tuple[str, str], int]:
    """`(db, table) → live rowsets` for every readable table of the catalog (the `/metrics` gauge).

    A table dropped while the scrape runs is left out; so is one whose metadata or manifests cannot be
    read (logged): one broken table never takes the scrape down.
    """
    counts: dict[tuple[str, str], int] = {}
    for db, table in sorted(catalog.table_locations()):
        try:
            counts[(db, table)] = len(catalog.load(db, table).rowsets())
        except DorisError:  # dropped while the scrape ran, or unreadable (the catalog logged it)
            continue
        except UNREADABLE as exc:  # a manifest or data file entry is missing or damaged
            log.warning("rowsets of %s.%s cannot be read: %s", db, table, type(exc).__name__)
    return counts
