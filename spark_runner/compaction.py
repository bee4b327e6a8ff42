"""Compaction: merge rowsets with the one merge function, so a query answers the same before and after.

    pick        which rowsets: cumulative takes the run of small rowsets after the cumulative point
                (the last rowset at least `promotion_bytes` big), base takes every rowset
    rewrite     one Spark job: read the files (`read_rowsets`), `merge_rows` with the version as
                tie-breaker, keep delete markers (base compaction of a unique table without any
                sequence column drops them), write sorted by key with Iceberg field ids
    commit      `TableWriter.rewrite`: one overwrite snapshot between load commits, giving way when a
                replaced file left the snapshot (another compaction, TRUNCATE) or the schema changed

Only a contiguous run of rowsets is merged: a merged row carries the largest version of its run, which
must not jump over a rowset left out (aggregate REPLACE and sequence-mapping groups order by version).
Replaced files stay referenced by older snapshots until housekeeping expires those and removes orphans.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from pyiceberg.table import Transaction
from pyiceberg.types import IntegerType
from pyspark.sql import DataFrame, SparkSession

from spark_runner.buckets import stored_field_ids, stored_values, with_bucket, with_partition, write_rows
from spark_runner.errors import spark_errors
from spark_runner.load_job import with_field_ids
from spark_runner.merge import merge_rows
from spark_runner.queries import FILE, ROW, lookup_rows, read_rowsets
from spark_runner.service import write_partitions
from spark_runner.sqltext import q
from tables.catalog import Catalog, TableHandle
from tables.commit import TableWriter
from tables.errors import DorisError, SchemaChanged
from tables.model import BUCKET_COL, DELETE_SIGN, SEQUENCE_COL, STORAGE_FORMAT, VERSION_COL, TableDef
from tables.rowsets import Rowset, RowsetsChanged, has_delete_markers, range_file_name, sign_field_id
from tables.schema_change import SchemaOp
from tables.warehouse import Location, child_of, list_files, move, name_of

log = logging.getLogger(__name__)


class CompactionType(StrEnum):
    BASE = "base"
    CUMULATIVE = "cumulative"


class NothingToCompact(DorisError):
    """No suitable rowsets for the asked compaction (Doris: no suitable version)."""


@dataclass(frozen=True)
class CompactionPolicy:
    """When background compaction runs (the `SL_COMPACTION_*` settings)."""

    min_rowsets: int = 5  # cumulative once this many rowsets follow the cumulative point
    promotion_bytes: int = 64 * 1024 * 1024  # ... or they hold this much; bigger rowsets are base level
    base_min_rowsets: int = 5  # base once this many base-level rowsets accumulated


@dataclass(frozen=True)
class CompactionResult:
    db: str
    table: str
    kind: CompactionType
    input_rowsets: int
    input_rows: int
    output_rows: int
    start_version: int
    end_version: int
    seconds: float


@dataclass
class CompactionStats:
    """Counters for metrics: finished compactions by type, compactions that gave way, failures."""

    cumulative: int = 0
    base: int = 0
    gave_way: int = 0
    failed: int = 0


@dataclass
class TabletHistory:
    """Last success and failure times of a table's compactions (milliseconds, 0 = never)."""

    last: dict[str, int] = field(default_factory=dict)

    def note(self, kind: CompactionType, outcome: str) -> None:
        self.last[f"{kind.value}_{outcome}"] = int(time.time() * 1000)

    def get(self, kind: CompactionType, outcome: str) -> int:
        return self.last.get(f"{kind.value}_{outcome}", 0)


# -- picking ---------------------------------------------------------------------------------
def cumulative_point(rowsets: Sequence[Rowset], policy: CompactionPolicy) -> int:
    """Index of the first rowset after the last big one: rowsets from here are cumulative level."""
    point = 0
    for i, rowset in enumerate(rowsets):
        if rowset.data_size >= policy.promotion_bytes:
            point = i + 1
    return point


def pick_rowsets(
    rowsets: Sequence[Rowset], kind: CompactionType, policy: CompactionPolicy, *, manual: bool
) -> list[Rowset]:
    """The contiguous run a compaction merges, or [] when there is nothing worth merging.

    Background: cumulative needs `min_rowsets` small rowsets (or two holding `promotion_bytes`), base
    `base_min_rowsets` base-level rowsets. On demand any two rowsets of the level are enough.
    """
    point = cumulative_point(rowsets, policy)
    if kind is CompactionType.CUMULATIVE:
        run = list(rowsets[point:])
        if len(run) < 2:
            return []
        if manual or len(run) >= policy.min_rowsets or sum(r.data_size for r in run) >= policy.promotion_bytes:
            return run
        return []
    if manual or (len(rowsets) >= 2 and point >= policy.base_min_rowsets):
        return list(rowsets)  # on demand a single rowset may still have delete markers to drop
    return []


def drops_delete_markers(table: TableDef) -> bool:
    """Base compaction may drop delete-marked rows only where no later row can lose to a marker:
    a unique table without a sequence column or sequence mapping."""
    return table.is_unique and table.delete_sign and not table.has_sequence and not table.sequence_mapping


# -- the Spark job ---------------------------------------------------------------------------
def merged_rowsets(spark: SparkSession, handle: TableHandle, rowsets: Sequence[Rowset], *, base: bool) -> DataFrame:
    """The rows that replace `rowsets`: merged per key (duplicate tables: unchanged), in storage order."""
    table = handle.definition
    files = [p for r in rowsets for p in r.paths]
    if table.positional:  # superseded rows stay out; tombstones stay in (hidden again by the commit)
        df = lookup_rows(spark, handle, files).drop(FILE, ROW)
    else:
        df = read_rowsets(spark, handle, files=files)
    seq = q(SEQUENCE_COL) if table.has_sequence else None
    df = merge_rows(df, table, q(VERSION_COL), sequence=seq)
    if base and drops_delete_markers(table):
        df = df.where(f"{q(DELETE_SIGN)} = 0")
    return df


def write_rowset(
    df: DataFrame,
    handle: TableHandle,
    *,
    directory: Location,
    partitions: int,
    start: int,
    end: int,
    table: TableDef | None = None,
) -> list[str]:
    """Write rows sorted by key with Iceberg field ids, one bucket per file (`spark_runner.buckets`); the file
    names carry the version range. `table`: the definition the files are written for, when it is not the
    handle's (a conversion's)."""
    table = table or handle.definition
    spread = list(table.distribution_columns)
    df = df.repartition(partitions, *stored_values(table, spread)) if partitions > 1 and spread else df.coalesce(1)
    ids = stored_field_ids(handle, table)
    out = with_field_ids(df, ids)
    if BUCKET_COL in ids:
        out = with_bucket(out, table, ids[BUCKET_COL], per_bucket=True)
    out = with_partition(out, table, ids)
    write_rows(out, directory, sort=table.key_columns)
    files = []
    for path in list_files(directory, "*.parquet"):
        target = child_of(directory, range_file_name(start, end, name_of(path)))
        move(path, target)
        if isinstance(path, Path) and isinstance(target, Path):  # a URI warehouse's files have no `.crc` beside
            crc = path.with_name(f".{path.name}.crc")
            if crc.exists():
                crc.rename(target.with_name(f".{target.name}.crc"))
        files.append(str(target))
    return files


def add_bucket_field(tx: Transaction, version: int = 0) -> None:
    """Iceberg schema and spec evolution: `BUCKET_COL` and the identity partition field on it (the change's version
    is not needed)."""
    with tx.update_schema() as update:
        update.add_column(BUCKET_COL, IntegerType())
    with tx.update_spec() as spec:
        spec.add_identity(BUCKET_COL)


def _unchanged(current: TableDef, _version: int) -> tuple[TableDef, list[SchemaOp]]:
    return current, []


def _formatted(current: TableDef, _version: int) -> tuple[TableDef, list[SchemaOp]]:
    return current.model_copy(update={"storage_format": STORAGE_FORMAT}), []


class Compactor:
    """Runs compactions of tables, on demand and in the background; at most one at a time per table."""

    def __init__(
        self,
        *,
        spark: SparkSession,
        catalog: Catalog,
        writer: TableWriter,
        policy: CompactionPolicy | None = None,
        on_compaction: Callable[[CompactionResult], None] | None = None,
    ) -> None:
        self.spark = spark
        self.catalog = catalog
        self.writer = writer
        self.policy = policy or CompactionPolicy()
        self.on_compaction = on_compaction
        self.stats = CompactionStats()
        self._locks: dict[str, threading.Lock] = {}
        self._histories: dict[str, TabletHistory] = {}
        self._guard = threading.Lock()

    def _lock(self, handle: TableHandle) -> threading.Lock:
        key = str(handle.iceberg.metadata.table_uuid)
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def history(self, handle: TableHandle) -> TabletHistory:
        key = str(handle.iceberg.metadata.table_uuid)
        with self._guard:
            return self._histories.setdefault(key, TabletHistory())

    def compact(
        self, db: str, table: str, kind: CompactionType, *, rowsets: Sequence[Rowset] | None = None
    ) -> CompactionResult:
        """Run one compaction now (waiting for one in progress on the table); `rowsets` overrides the pick
        and must be a contiguous run of the current rowsets.

        Raises:
            NothingToCompact: no suitable rowsets. RowsetsChanged, SchemaChanged: it gave way.
        """
        handle = self.catalog.load(db, table)
        with self._lock(handle):
            return self._compact(handle, kind, rowsets, manual=True)

    def compact_if_needed(self, db: str, table: str) -> CompactionResult | None:
        """The background rule for one table: cumulative, else base, when the policy says so; skips a
        table already being compacted."""
        handle = self.catalog.load(db, table)
        lock = self._lock(handle)
        if not lock.acquire(blocking=False):
            return None
        try:
            current = handle.rowsets()
            for kind in (CompactionType.CUMULATIVE, CompactionType.BASE):
                picked = pick_rowsets(current, kind, self.policy, manual=False)
                if picked:
                    return self._compact(handle, kind, picked, manual=False)
            return None
        finally:
            lock.release()

    def run_background_pass(self) -> list[CompactionResult]:
        """One pass over every table; a table that fails is logged and left for the next pass."""
        done: list[CompactionResult] = []
        for db in self.catalog.list_databases():
            for name in self.catalog.list_tables(db):
                try:
                    result = self.compact_if_needed(db, name)
                except (RowsetsChanged, SchemaChanged):
                    continue
                except Exception:  # one table's failure must not stop the others' compaction
                    log.exception("background compaction of %s.%s failed", db, name)
                    continue
                if result is not None:
                    done.append(result)
        return done

    def convert_storage(self) -> int:
        """Bring every merge-on-write table an earlier release wrote to the current storage format; returns how
        many were converted. A table that cannot be converted is logged and keeps answering as before.

        - format 1 (rowsets merged on read) → one live row per key in Iceberg's terms: one base compaction
          under the old rules, committed with the new definition in one snapshot;
        - format 2 → the bucket in the partition spec: `BUCKET_COL` and the identity field on it, a metadata
          commit (Iceberg spec evolution: the files already written keep the unpartitioned spec, read as
          files of any bucket, until a compaction rewrites them).
        """
        converted = 0
        for db in self.catalog.list_databases():
            for name in self.catalog.list_tables(db):
                try:
                    handle = self.catalog.load(db, name)
                    table = handle.definition
                    if table.storage_format >= STORAGE_FORMAT or not table.is_unique or not table.merge_on_write:
                        continue
                    if table.sequence_mapping:
                        continue
                    with self._lock(handle):
                        self._convert(handle)
                    converted += 1
                except Exception:
                    log.exception("table %s.%s could not be converted to storage format %d", db, name, STORAGE_FORMAT)
        return converted

    def _convert(self, handle: TableHandle) -> None:
        table = handle.definition
        unbucketed = BUCKET_COL not in {f.name for f in handle.iceberg.schema().fields}
        if table.positional:  # one metadata commit
            self.writer.alter(table.db, table.name, _formatted, schema=False, iceberg=add_bucket_field)
            log.info("table %s.%s converted to storage format %d", table.db, table.name, STORAGE_FORMAT)
            return
        if unbucketed:  # the field first; a crash before the rewrite leaves a format-1 table with it
            self.writer.alter(table.db, table.name, _unchanged, schema=False, iceberg=add_bucket_field)
            handle = self.catalog.load(table.db, table.name)
        new = table.model_copy(update={"storage_format": STORAGE_FORMAT})
        rowsets = handle.rowsets()
        label = f"convert_storage_{uuid.uuid4().hex}"
        with self.writer.rewrite(table.db, table.name, label=label, planned=table) as pending:
            pending.definition = new
            pending.replaced = [p for r in rowsets for p in r.paths]
            if rowsets:
                # delete markers stay (unlike a base compaction's): `show_hidden_columns` answers as before
                df = merged_rowsets(self.spark, pending.handle, rowsets, base=False)
                partitions = write_partitions(table.buckets, sum(r.data_size for r in rowsets))
                with spark_errors():
                    pending.files = write_rowset(
                        df,
                        pending.handle,
                        directory=pending.directory,
                        partitions=partitions,
                        start=rowsets[0].start_version,
                        end=rowsets[-1].end_version,
                        table=new,
                    )
        log.info("table %s.%s converted to storage format %d", table.db, table.name, STORAGE_FORMAT)

    def _compact(
        self, handle: TableHandle, kind: CompactionType, rowsets: Sequence[Rowset] | None, *, manual: bool
    ) -> CompactionResult:
        table = handle.definition
        history = self.history(handle)
        picked = (
            list(rowsets) if rowsets is not None else pick_rowsets(handle.rowsets(), kind, self.policy, manual=manual)
        )
        droppable = kind is CompactionType.BASE and drops_delete_markers(table)
        sign_field = sign_field_id(handle.iceberg)
        # one rowset still merits a base compaction when it has delete markers to drop
        markers = len(picked) == 1 and droppable and any(has_delete_markers(f, sign_field) for f in picked[0].files)
        if len(picked) < 2 and not markers:
            history.note(kind, "failure")
            raise NothingToCompact(f"no suitable versions for {kind.value} compaction of table {table.name}")
        started = time.monotonic()
        start, end = picked[0].start_version, picked[-1].end_version
        label = f"compaction_{kind.value}_{uuid.uuid4().hex}"
        try:
            with self.writer.rewrite(table.db, table.name, label=label, planned=table) as pending:
                pending.replaced = [p for r in picked for p in r.paths]
                with spark_errors():
                    self.spark.sparkContext.setJobGroup(label, f"{kind.value} compaction of {table.name}")
                    try:
                        df = merged_rowsets(self.spark, pending.handle, picked, base=kind is CompactionType.BASE)
                        partitions = write_partitions(table.buckets, sum(r.data_size for r in picked))
                        pending.files = write_rowset(
                            df, pending.handle, directory=pending.directory, partitions=partitions, start=start, end=end
                        )
                    finally:
                        self.spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        except (RowsetsChanged, SchemaChanged):
            self.stats.gave_way += 1
            history.note(kind, "failure")
            raise
        except Exception:
            self.stats.failed += 1
            history.note(kind, "failure")
            raise
        history.note(kind, "success")
        if kind is CompactionType.BASE:
            self.stats.base += 1
        else:
            self.stats.cumulative += 1
        result = CompactionResult(
            db=table.db,
            table=table.name,
            kind=kind,
            input_rowsets=len(picked),
            input_rows=sum(r.rows for r in picked),
            output_rows=pending.output_rows,
            start_version=start,
            end_version=end,
            seconds=time.monotonic() - started,
        )
        log.info("compaction: %s", result)
        if self.on_compaction is not None:
            self.on_compaction(result)
        return result
