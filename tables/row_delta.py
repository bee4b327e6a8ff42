"""Iceberg position deletes: the files, their manifest entries, and one snapshot that adds and removes both kinds.

A merge-on-write table (`TableDef.positional`) keeps one live row per key in Iceberg's own terms: a load adds its
rows and a position delete file naming the stored rows it supersedes, so any Iceberg v2 reader sees exactly the
live rows. pyiceberg 0.12 reads position deletes but has no public API to write them; `RowDelta` is a snapshot
producer built from its lower-level writers (`write_manifest`, `ManifestEntry`), writing a DATA manifest for the
added data files and a DELETES manifest for the added delete files, and rewriting the manifests that lose files.

A position delete file is Parquet with `file_path` (field id 2147483546) and `pos` (2147483545), sorted by both
(the Iceberg spec). Its `file_path` is the data file's path exactly as the manifest records it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    ManifestWriterV2,
)
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, StringType

from tables.rowsets import manifest_entries
from tables.sized_cache import sized_cache
from tables.warehouse import (
    Location,
    arrow_path,
    as_location,
    child_of,
    delete_file,
    file_size,
    make_dirs,
    parent_of,
)

FILE_PATH_ID = 2147483546
POS_ID = 2147483545
_FIELD_ID = b"PARQUET:field_id"

DELETE_FILE_PREFIX = "delete-"  # a load's position delete files, beside its data files

POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={_FIELD_ID: str(FILE_PATH_ID).encode()}),
        pa.field("pos", pa.int64(), nullable=False, metadata={_FIELD_ID: str(POS_ID).encode()}),
    ]
)


def write_position_deletes(directory: Location, positions: pa.Table) -> str | None:
    """Write `positions` (columns `file_path`, `pos`) as one sorted position delete file in `directory`;
    returns its path, or None when there is nothing to delete."""
    if positions.num_rows == 0:
        return None
    rows = positions.select(["file_path", "pos"]).cast(POSITION_DELETE_SCHEMA)
    rows = rows.sort_by([("file_path", "ascending"), ("pos", "ascending")])
    make_dirs(directory)
    path = child_of(directory, f"{DELETE_FILE_PREFIX}{uuid.uuid4()}.parquet")
    pq.write_table(rows, arrow_path(path), compression="zstd")
    return str(path)


def tombstone_positions(files: Sequence[str], sign_column: str) -> pa.Table:
    """The delete-signed rows of these data files, as position delete rows: a tombstone stays in the data files
    (a deleted key keeps its sequence for later loads to compare with) but no reader may see it as a row."""
    parts: list[pa.Table] = []
    for path in files:
        meta = pq.read_metadata(arrow_path(as_location(path)))
        index = meta.schema.to_arrow_schema().get_field_index(sign_column)
        if index < 0 or not _may_hold_ones(meta, index):
            continue
        signs = pq.read_table(arrow_path(as_location(path)), columns=[sign_column]).column(0)
        hits = pa.compute.indices_nonzero(pa.compute.equal(signs, 1).fill_null(False))
        if len(hits):
            parts.append(positions_table(path, hits.cast(pa.int64()).to_pylist()))
    return pa.concat_tables(parts) if parts else positions_table("", [])


def _may_hold_ones(meta: pq.FileMetaData, column: int) -> bool:
    for group in range(meta.num_row_groups):
        stats = meta.row_group(group).column(column).statistics
        if stats is None or not stats.has_min_max or stats.max > 0:
            return True
    return False


def positions_table(file_path: str, positions: Sequence[int]) -> pa.Table:
    """Positions of one data file as the rows of a position delete file."""
    return pa.table(
        {"file_path": pa.array([file_path] * len(positions), pa.string()), "pos": pa.array(positions, pa.int64())}
    )


Partition = tuple[int, Record]  # a file's partition as Iceberg matches deletes to data: spec id, partition tuple


def split_by_partition(
    paths: Sequence[str], partitions: Mapping[str, Partition], default: Partition
) -> list[tuple[str, Partition]]:
    """Position delete files, each with the partition of the data files it names (Iceberg readers apply a delete
    file to the data files of its own partition, unless it names one file only): a file naming data files of
    several partitions is split into one file per partition, beside it, and removed. `partitions` maps the data
    files' paths (as manifests record them) to theirs; a path not in it (a file no longer live) takes `default`."""
    out: list[tuple[str, Partition]] = []
    for path in paths:
        named = only_target(path)
        if named is not None:
            out.append((path, partitions.get(named, default)))
            continue
        rows = pq.read_table(arrow_path(as_location(path)), columns=["file_path", "pos"])
        groups: dict[Partition, list[str]] = {}
        for target in pa.compute.unique(rows.column("file_path")).to_pylist():
            groups.setdefault(partitions.get(target, default), []).append(target)
        if len(groups) <= 1:
            out.append((path, next(iter(groups), default)))
            continue
        for partition, targets in groups.items():
            part = rows.filter(pa.compute.is_in(rows.column("file_path"), value_set=pa.array(targets, pa.string())))
            written = write_position_deletes(parent_of(as_location(path)), part)
            assert written is not None, "a group names at least one row"
            out.append((written, partition))
        delete_file(as_location(path))
    return out


def only_target(path: str) -> str | None:
    """The one data file a position delete file names, as its Parquet statistics tell (a large load's re-check
    writes a file per data file it deletes from); None when it may name several, or has no statistics."""
    meta = pq.read_metadata(arrow_path(as_location(path)))
    index = meta.schema.to_arrow_schema().get_field_index("file_path")
    bounds: set[object] = set()
    for group in range(meta.num_row_groups):
        stats = meta.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max:
            return None
        bounds.update((stats.min, stats.max))
    named = next(iter(bounds)) if len(bounds) == 1 else None
    return named if isinstance(named, str) else None


def delete_file_entry(path: str, partition: Partition | None = None) -> DataFile:
    """The manifest entry of a position delete file, in `partition` (`split_by_partition`): its row count, size
    and (from the Parquet statistics) the bounds of the paths and positions it names, which readers prune with."""
    spec_id, values = partition if partition is not None else (0, Record())
    meta = pq.read_metadata(arrow_path(as_location(path)))
    lower: dict[int, bytes] = {}
    upper: dict[int, bytes] = {}
    for index, (field_id, kind) in enumerate(((FILE_PATH_ID, StringType()), (POS_ID, LongType()))):
        stats = [meta.row_group(g).column(index).statistics for g in range(meta.num_row_groups)]
        if stats and all(s is not None and s.has_min_max for s in stats):
            lower[field_id] = to_bytes(kind, min(s.min for s in stats))
            upper[field_id] = to_bytes(kind, max(s.max for s in stats))
    entry = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=values,
        record_count=meta.num_rows,
        file_size_in_bytes=file_size(as_location(path)),
        column_sizes={},
        value_counts={FILE_PATH_ID: meta.num_rows, POS_ID: meta.num_rows},
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
        nan_value_counts={},
        lower_bounds=lower,
        upper_bounds=upper,
        split_offsets=None,
        equality_ids=None,
        sort_order_id=None,
        spec_id=spec_id,
        key_metadata=None,
    )
    entry.spec_id = spec_id  # `from_args` leaves the inherited field unset
    return entry


class _DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 manifest writer, for delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class RowDelta(_SnapshotProducer["RowDelta"]):
    """One snapshot adding data files and position delete files and removing files of either kind.

    The caller serializes commits to the table (the writer's commit turn), so no concurrency validation runs
    here; a concurrent catalog commit fails it with `CommitFailedException` and the caller retries.
    """

    def __init__(self, transaction: Transaction, snapshot_properties: dict[str, str]) -> None:
        parent = transaction.table_metadata.current_snapshot()
        super().__init__(
            operation=Operation.APPEND if parent is None else Operation.OVERWRITE,
            transaction=transaction,
            io=transaction._table.io,
            snapshot_properties=snapshot_properties,
        )
        self._added_deletes: list[DataFile] = []
        self._removed_paths: set[str] = set()

    def add(self, data_file: DataFile) -> RowDelta:
        if data_file.content == DataFileContent.DATA:
            self._added_data_files.append(data_file)
        else:
            self._added_deletes.append(data_file)
        return self

    def remove(self, paths: Iterable[str]) -> RowDelta:
        self._removed_paths.update(paths)
        return self

    def only_appends(self) -> bool:
        return not self._added_deletes and not self._removed_paths

    def _validate_concurrency(self) -> None:
        """The writer's commit turn orders commits; nothing to validate against."""

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []  # `_existing` writes the removed entries into the manifests it rewrites

    def _existing_manifests(self) -> list[ManifestFile]:
        return []  # `_manifests` writes every manifest itself

    def _summary(self, snapshot_properties: dict[str, str] = {}) -> Summary:  # noqa: B006 (pyiceberg's signature)
        # the summary counts added and removed files of both kinds (pyiceberg's collector knows delete files)
        added, self._added_data_files = self._added_data_files, [*self._added_data_files, *self._added_deletes]
        try:
            return super()._summary(snapshot_properties)
        finally:
            self._added_data_files = added

    def _writer(self, content: ManifestContent, spec_id: int) -> ManifestWriter:
        """A manifest writer for one content and one partition spec (a manifest holds files of one spec)."""
        if content == ManifestContent.DATA:
            return self.new_manifest_writer(self.spec(spec_id))
        return _DeleteManifestWriter(
            self.spec(spec_id), self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression
        )

    def _manifests(self) -> list[ManifestFile]:
        out: list[ManifestFile] = []
        added: dict[tuple[ManifestContent, int], list[DataFile]] = {}
        for data_file in self._added_data_files:  # written for the default spec (`parquet_file_to_data_file`)
            added.setdefault((ManifestContent.DATA, self._transaction.table_metadata.default_spec_id), []).append(
                data_file
            )
        for data_file in self._added_deletes:  # in the partition of the files they name (`delete_file_entry`)
            added.setdefault((ManifestContent.DELETES, data_file.spec_id), []).append(data_file)
        for (content, spec_id), files in added.items():
            with self._writer(content, spec_id) as writer:
                for data_file in files:
                    writer.add_entry(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=self._snapshot_id,
                            sequence_number=None,
                            file_sequence_number=None,
                            data_file=data_file,
                        )
                    )
            out.append(writer.to_manifest_file())
        out.extend(self._existing())
        return out

    def _existing(self) -> list[ManifestFile]:
        """The parent's manifests: kept as they are, or rewritten without the removed files (a manifest left
        with nothing is dropped); the removed entries are recorded DELETED in one manifest per content and spec."""
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id or -1)
        if parent is None:
            return []
        out: list[ManifestFile] = []
        removed = self._removed_paths
        gone: dict[tuple[ManifestContent, int], list[ManifestEntry]] = {}
        for manifest in parent.manifests(self._io):
            if not removed:
                if manifest.has_added_files() or manifest.has_existing_files():
                    out.append(manifest)
                continue
            entries = manifest_entries(self._transaction._table, manifest)
            kept = [e for e in entries if e.data_file.file_path not in removed]
            if len(kept) == len(entries):
                if entries:
                    out.append(manifest)
                continue
            spec_id = manifest.partition_spec_id
            gone.setdefault((manifest.content, spec_id), []).extend(
                e for e in entries if e.data_file.file_path in removed
            )
            if not kept:
                continue
            with self._writer(manifest.content, spec_id) as writer:
                for entry in kept:
                    writer.existing(entry)
            out.append(writer.to_manifest_file())
        for (content, spec_id), dropped in gone.items():
            self._deleted_data_files.update(e.data_file for e in dropped)
            with self._writer(content, spec_id) as writer:
                for entry in dropped:
                    writer.delete(entry)
            out.append(writer.to_manifest_file())
        return out


def live_delete_files(table: Table) -> list[DataFile]:
    """Every position delete file of the table's current snapshot."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    return [
        entry.data_file
        for manifest in snapshot.manifests(table.io)
        if manifest.content == ManifestContent.DELETES
        for entry in manifest_entries(table, manifest)
    ]


def _paths_bytes(paths: frozenset[str]) -> int:
    return 256 + 256 * len(paths)


@sized_cache(max_bytes=4 << 20, cost=_paths_bytes)
def referenced_data_paths(delete_file: str) -> frozenset[str]:
    """The data files a position delete file names."""
    column = pq.read_table(arrow_path(as_location(delete_file)), columns=["file_path"]).column("file_path")
    return frozenset(pa.compute.unique(column).to_pylist())
