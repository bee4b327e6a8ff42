"""The load service: claim the label, run the load job under the table's writer, report Doris's counts."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import itertools
import logging
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.sql import Column, DataFrame, SparkSession

from spark_runner import arrow_csv, small_rowset
from spark_runner.arrow_csv import staging_path
from spark_runner.buckets import stored_field_ids
from spark_runner.errors import spark_errors
from spark_runner.load_job import (
    JobOutcome,
    StoredRows,
    clip_error_line,
    columnar_source,
    csv_source,
    frame_source,
    json_source,
    rows_source,
    run_load_job,
)
from spark_runner.mow import DRIVER_RECHECK_ROWS, KEYED_RECHECK_ROWS, can_pair, decision_columns, pair_rows, resolve
from spark_runner.planning import LoadPlan, loaded_target, plan_load
from spark_runner.queries import KeyValues, lookup_rows, merged_rows
from spark_runner.supervisor import NO_BACKEND_FOR_LOAD, backend_stopped, overdue
from tables.catalog import Catalog, TableHandle
from tables.commit import PendingRowset, TableWriter
from tables.csv_dialect import CsvDialect, CsvPath
from tables.error_logs import error_log_path, new_error_log_name
from tables.errors import DataQualityError, DorisError, LoadError, LoadTimeout, SchemaChanged, ServiceUnavailable
from tables.load_spec import LoadCounts, LoadRequest, LoadResult, render_load
from tables.rowsets import FileFilter, live_data_files, plain_path, wanted_values
from tables.transactions import Claim, TransactionStore

log = logging.getLogger(__name__)

T = TypeVar("T")

# After its deadline a load's Spark jobs are cancelled; this long more for it to wind down and answer
# `[TIMEOUT]` itself before it is abandoned (a Spark call that never returns).
ABANDON_GRACE_S = 1.0


@dataclass(frozen=True)
class PreparedLoad:
    """A load that passed planning and holds its label (PREPARE)."""

    plan: LoadPlan
    txn_id: int
    started: float
    begin_txn_ms: int
    plan_ms: int
    handle: TableHandle | None = None  # the table as planned: the writer refreshes it instead of loading it again

    @property
    def request(self) -> LoadRequest:
        return self.plan.request


@dataclass
class Planning:
    """A load whose label claim is queued (`LoadService.prepare_later`): `flush` writes the claim, `finish`
    plans the load, and a load whose plan fails gives its label back."""

    writer: TableWriter
    request: LoadRequest
    handle: TableHandle
    claim: Claim
    started: float
    txn_id: int = 0
    began: float = 0.0

    def flush(self) -> None:
        """Raises: LabelAlreadyExists, StoreUnavailable."""
        self.txn_id = self.writer.claimed(self.claim)
        self.began = time.monotonic()

    def finish(self) -> PreparedLoad:
        """Raises: LoadError (planning errors)."""
        try:
            plan = _plan(self.request, self.handle)
        except BaseException:
            self.writer.abort(self.txn_id)
            raise
        return PreparedLoad(
            plan=plan,
            txn_id=self.txn_id,
            started=self.started,
            begin_txn_ms=int((self.began - self.started) * 1000),
            plan_ms=int((time.monotonic() - self.began) * 1000),
            handle=self.handle,
        )

    def fail(self, error: BaseException) -> None:
        """The claim was not written (its error is the load's): nothing to give back."""


# A load's source frame, built for the load as (re)planned
Source = Callable[[SparkSession, PreparedLoad], DataFrame]

# How many times a load that meets a schema change committed while it ran is planned again and rerun
SCHEMA_REPLANS = 3


def _plan(request: LoadRequest, handle: TableHandle) -> LoadPlan:
    """The load's plan. A plan depends on the request but its label, and on the table's definition: a plan made
    for a request that differs only by its label, on the same definition, is taken again with this request in it
    (planning built every column mapping anew: ~10% of the server's Python under concurrent small loads; the key
    costs a copy and a hash, ~4 µs)."""
    definition = handle.definition
    request = request.model_copy(update={"table": definition.name})
    if not _keepable(request):  # a large request is planned each time: the kept plans stay small
        return plan_load(request, definition)
    key = (request.model_copy(update={"label": ""}), id(definition))
    kept = _PLANS.get(key)
    if kept is not None and kept.table is definition:  # (a kept plan holds its definition: its id is not reused)
        return dataclasses.replace(kept, request=request)
    plan = plan_load(request, definition)
    with _PLANS_LOCK:
        if len(_PLANS) >= MAX_PLANS:
            del _PLANS[next(iter(_PLANS))]  # the oldest
        _PLANS[key] = plan
    return plan


def _keepable(request: LoadRequest) -> bool:
    """A request small enough for its plan to be kept (at most `MAX_KEPT_COLUMNS` mappings, expressions of at most
    `MAX_KEPT_EXPRESSION` characters): 256 plans of a 4,096-entry `columns` each would hold ~0.6 GB."""
    expressions = [m.expr for m in request.columns or () if m.expr is not None] + [request.where, request.delete]
    return len(request.columns or ()) <= MAX_KEPT_COLUMNS and all(
        len(e.text) <= MAX_KEPT_EXPRESSION for e in expressions if e is not None
    )


MAX_KEPT_COLUMNS = 64
MAX_KEPT_EXPRESSION = 1024
MAX_PLANS = 256
_PLANS: dict[tuple[LoadRequest, int], LoadPlan] = {}
_PLANS_LOCK = threading.Lock()


PARTITION_BYTES = 32 * 1024 * 1024


def write_partitions(buckets: int, load_bytes: int) -> int:
    """Spark partitions of a rowset: one per bucket for a load of more than `PARTITION_BYTES`, else one.

    A one-row load spread over every bucket pays a task per bucket; a small load's one task writes a file per
    bucket it holds (`spark_runner.buckets`). A big load's task `i` holds bucket `i`, so it writes one file.
    """
    return buckets if load_bytes > PARTITION_BYTES else 1


class LoadService:
    """Runs loads end to end; shared by stream load and INSERT."""

    def __init__(
        self,
        *,
        spark: SparkSession,
        catalog: Catalog,
        txns: TransactionStore,
        writer: TableWriter,
        error_log_dir: Path,
        old_error_log_dirs: Sequence[Path] = (),
    ) -> None:
        self.spark = spark
        self.catalog = catalog
        self.txns = txns
        self.writer = writer
        self.error_log_dir = error_log_dir
        # read too: where an earlier release (or layout) wrote them, until they expire
        self.error_log_dirs = list(dict.fromkeys([error_log_dir, *old_error_log_dirs]))
        self._workers = DaemonWorkers("load-job")
        self._big = 0  # loads past `PARTITION_BYTES` whose job is running
        self._big_lock = threading.Lock()
        error_log_dir.mkdir(parents=True, exist_ok=True)
        # the merge-on-write re-check at a commit is a Spark job; the writer (below Spark) is handed it
        writer.resolver = lambda handle, mine, theirs, directory, later: resolve(
            spark, handle, mine, theirs, directory, mine_is_later=later
        )

    def prepare(self, request: LoadRequest) -> PreparedLoad:
        """Plan the load against the table and claim its label.

        Raises:
            DorisError (unknown db/table, label in use), LoadError (planning errors).
        """
        planning = self.prepare_later(request)
        planning.flush()
        return planning.finish()

    def prepare_later(self, request: LoadRequest) -> Planning:
        """`prepare` with its label claim queued: its `flush` writes the claim (with every claim queued before
        it), its `finish` plans the load (a step's `Deferred`, `loads.steps`).

        Raises:
            DorisError (unknown db/table).
        """
        started = time.monotonic()
        if backend_stopped(self.spark, wait=0.0):  # refused before the label is claimed, as Doris's FE does
            raise ServiceUnavailable(NO_BACKEND_FOR_LOAD)
        handle = self._target(request)
        if request.two_phase_commit:
            self._check_running_txns(request)
        # the label first, as Doris's FE begins the transaction before it plans the load
        claim = self.writer.claim(
            request.db, handle.definition.name, request.label, table_uuid=str(handle.iceberg.metadata.table_uuid)
        )
        return Planning(self.writer, request, handle, claim, started)

    def _check_running_txns(self, request: LoadRequest) -> None:
        """A two-phase load begins only while its database has fewer unfinished transactions than the bound, as
        Doris's FE begins any (`max_running_txn_num_per_db`): a precommitted load holds its files until it is
        committed, aborted or timed out, and one user could otherwise leave any number of them.

        Raises:
            LoadError: with Doris's text (the database's name where Doris prints its id).
        """
        limit = request.limits.max_running_txn_num_per_db
        running = len(self.txns.unfinished(request.db))
        if running >= limit:
            raise LoadError(
                f"current running txns on db {request.db} is {running}, larger than limit {limit}",
                code="ANALYSIS_ERROR",
            )

    def _target(self, request: LoadRequest) -> TableHandle:
        return loaded_target(self.catalog, self.catalog.load(request.db, request.table), request)

    def replanned(self, prepared: PreparedLoad) -> PreparedLoad | None:
        """The load planned again against the table's current schema, after a schema change committed while it
        ran: as if it had arrived after the change (an added column takes its default, a dropped one is not
        written, a `columns` name that is no column any more is a skipped field). None when it would read its
        input otherwise now (a load without `columns` maps its fields to the table's columns) or its planning
        fails now: its failure stands."""
        try:
            handle = self._target(prepared.request)
            plan = _plan(prepared.request, handle)
        except DorisError:
            return None
        if plan.source_fields != prepared.plan.source_fields:
            return None
        return dataclasses.replace(prepared, plan=plan, handle=handle)

    def abort(self, prepared: PreparedLoad) -> None:
        """Give up a prepared load that did not run (its label is free again)."""
        self.writer.abort(prepared.txn_id)

    def run_staged(self, prepared: PreparedLoad, path: Path, *, load_bytes: int, receive_ms: int = 0) -> LoadResult:
        """Run a staged body (CSV, JSON, Parquet or ORC, as its `format` says): a file, or a directory of them."""
        return self.run(prepared, lambda spark, load: staged_source(spark, path, load), load_bytes, receive_ms)

    def run_rows(self, prepared: PreparedLoad, rows: list[list[str | None]]) -> LoadResult:
        return self.run(prepared, lambda spark, load: rows_source(spark, rows, load.plan))

    def run_frame(self, prepared: PreparedLoad, frame: DataFrame) -> LoadResult:
        return self.run(prepared, lambda spark, load: frame_source(frame, load.plan))

    def run(
        self,
        prepared: PreparedLoad,
        source: Source,
        load_bytes: int = 0,
        receive_ms: int = 0,
    ) -> LoadResult:
        """Run a prepared load as one rowset (stream, routine, broker load and INSERT all come here); every
        outcome is a `LoadResult`.

        The job runs on a worker thread, waited for until the load's `timeout` has passed (plus a grace
        for its cancelled job to wind down); then the load is abandoned: it aborts, its table's version turn
        goes to the next load, and it answers `[TIMEOUT]`, whatever its Spark call is stuck in."""
        future = self._workers.submit(lambda: self._run_job(prepared, source, load_bytes, receive_ms))
        timeout = prepared.request.timeout_s
        wait = timeout - (time.monotonic() - prepared.started) + ABANDON_GRACE_S
        try:
            return future.result(timeout=max(wait, 0.0))
        except concurrent.futures.TimeoutError:
            if future.done():  # it answered just now
                return future.result()
        reason = f"load timed out after {timeout} s (timeout header)"
        if not self.writer.abandon(prepared.txn_id, reason):
            return future.result()  # it committed (or failed) in the meantime: its own outcome stands
        # its jobs were cancelled at the deadline (`_deadline`); no Py4J call here, the JVM may be wedged
        log.warning("load %s abandoned at its deadline; its job is still running", prepared.request.label)
        return self._failure(prepared, LoadTimeout(reason), None, load_bytes, receive_ms)

    @property
    def big_loads(self) -> int:
        """Loads past `PARTITION_BYTES` whose job is running (a bulk load's job takes every core): background
        compaction waits while there are any (`app.compaction.compaction_loop`)."""
        return self._big

    @contextmanager
    def _counted(self, load_bytes: int) -> Iterator[None]:
        big = load_bytes > PARTITION_BYTES
        if big:
            with self._big_lock:
                self._big += 1
        try:
            yield
        finally:
            if big:
                with self._big_lock:
                    self._big -= 1

    def _run_job(self, prepared: PreparedLoad, source: Source, load_bytes: int, receive_ms: int) -> LoadResult:
        with self._counted(load_bytes):
            return self._job(prepared, source, load_bytes, receive_ms)

    def _job(self, prepared: PreparedLoad, source: Source, load_bytes: int, receive_ms: int) -> LoadResult:
        """The load's job and commit; a schema change that commits meanwhile has the load planned again against
        it and run anew (`replanned`), up to `SCHEMA_REPLANS` times, in its transaction."""
        for replans in itertools.count():
            try:
                return self._attempt(prepared, source, load_bytes, receive_ms, replannable=replans < SCHEMA_REPLANS)
            except SchemaChanged as exc:
                again = self.replanned(prepared)
                if again is None:
                    self.writer.abort(prepared.txn_id, exc.message)
                    return self._failure(prepared, LoadError(exc.message), None, load_bytes, receive_ms)
                log.info("load %s planned again after a schema change of its table", prepared.request.label)
                prepared = again
        raise AssertionError("unreachable")

    def _attempt(
        self, prepared: PreparedLoad, source: Source, load_bytes: int, receive_ms: int, *, replannable: bool
    ) -> LoadResult:
        """Raises: SchemaChanged, when `replannable` (the transaction stays PREPARE)."""
        req = prepared.request
        outcome: JobOutcome | None = None
        write_started = time.monotonic()
        commit_ms = 0
        try:
            plan = prepared.plan
            with self.writer.write(
                req.db,
                req.table,
                txn_id=prepared.txn_id,
                label=req.label,
                exclusive=plan.reads_stored,
                planned=plan.table,
                two_phase=req.two_phase_commit,
                handle=prepared.handle,
                replannable=replannable,
            ) as rowset:
                self.writer.pauses.hit("job", req.table)
                with self._deadline(prepared), spark_errors():
                    spark = self.session_for(req)
                    frame: DataFrame = source(spark, prepared)
                    # a partial update reads the rows it updates; it runs in its commit turn, so
                    # nothing commits between this read and its own commit (a positional table's load reads
                    # its lookup rows in `run_rowset`)
                    reads = plan.reads_stored and not plan.table.positional
                    handle = rowset.handle
                    stored = (lambda _: merged_rows(spark, handle, show_hidden=True)) if reads else None
                    outcome = run_rowset(spark, frame, plan, rowset, load_bytes=load_bytes, stored=stored)
                self._check_quality(prepared, outcome)
                rowset.files = outcome.files
                commit_started = time.monotonic()
            commit_ms = int((time.monotonic() - commit_started) * 1000)
        except Exception as exc:
            if replannable and isinstance(exc, SchemaChanged):
                raise
            return self._failure(prepared, self._load_error(exc, req.label), outcome, load_bytes, receive_ms)
        assert outcome is not None
        counts = outcome.counts
        return render_load(
            **_base(prepared, load_bytes, receive_ms),
            number_total_rows=counts.total,
            number_loaded_rows=counts.loaded,
            number_filtered_rows=counts.filtered,
            number_unselected_rows=counts.unselected,
            load_time_ms=int((time.monotonic() - prepared.started) * 1000),
            write_data_time_ms=int((time.monotonic() - write_started) * 1000) - commit_ms,
            commit_and_publish_time_ms=commit_ms,
            error_url=self.write_error_log(prepared, outcome) if counts.filtered else None,
        )

    def _load_error(self, exc: Exception, label: str) -> LoadError:
        """The failure as the reply states it: a JVM that stopped under the load is SERVICE_UNAVAILABLE
        (not the Py4J connection error it caused), a bug is logged and stated in one line."""
        connection_lost = isinstance(exc, ConnectionError | Py4JError) and not isinstance(exc, Py4JJavaError)
        if backend_stopped(self.spark, wait=1.0 if connection_lost else 0.0):
            return ServiceUnavailable(NO_BACKEND_FOR_LOAD)
        if isinstance(exc, LoadError):
            return exc
        if isinstance(exc, DorisError):  # a stated outcome (the schema or the table changed meanwhile): no bug
            return LoadError(exc.message)
        log.exception("load %s failed", label)
        return LoadError(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)

    def _failure(
        self, prepared: PreparedLoad, exc: LoadError, outcome: JobOutcome | None, load_bytes: int, receive_ms: int
    ) -> LoadResult:
        counts = outcome.counts if outcome else LoadCounts()
        return render_load(
            exc,
            **_base(prepared, load_bytes, receive_ms),
            number_total_rows=counts.total,
            number_filtered_rows=counts.filtered,
            number_unselected_rows=counts.unselected,
            load_time_ms=int((time.monotonic() - prepared.started) * 1000),
            first_error_msg=outcome.errors[0] if outcome and outcome.errors else None,
        )

    def session_for(self, request: LoadRequest) -> SparkSession:
        """The shared session, or for a load with a `timezone` header a session of its own with that zone
        (same SparkContext, own SQL settings, so concurrent loads cannot race on it)."""
        if request.time_zone is None:
            return self.spark
        session = self.spark.newSession()
        session.conf.set("spark.sql.session.timeZone", request.time_zone)
        return session

    @contextmanager
    def _deadline(self, prepared: PreparedLoad) -> Iterator[None]:
        """The load's `timeout`, counted from its start: past it, its Spark jobs are cancelled.

        Raises:
            LoadTimeout: the deadline passed (the transaction then aborts and leaves nothing).
        """
        timeout = prepared.request.timeout_s
        remaining = timeout - (time.monotonic() - prepared.started)
        if remaining <= 0:
            raise LoadTimeout(f"load timed out after {timeout} s (timeout header)")
        context = self.spark.sparkContext
        group = f"load_txn_{prepared.txn_id}"
        context.setJobGroup(group, f"load {prepared.request.label}", interruptOnCancel=True)
        expired = threading.Event()

        def cancel() -> None:
            expired.set()
            overdue.cancelled(group, f"load {prepared.request.label} (txn {prepared.txn_id})")
            context.cancelJobGroup(group)

        timer = threading.Timer(remaining, cancel)
        timer.daemon = True
        timer.start()
        try:
            yield
        except Exception:
            if expired.is_set():  # whatever Spark raised for the cancelled job, the cause is the deadline
                raise LoadTimeout(f"load timed out after {timeout} s (timeout header)") from None
            raise
        finally:
            timer.cancel()
            overdue.returned(group)
            context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        if expired.is_set():
            raise LoadTimeout(f"load timed out after {timeout} s (timeout header)")

    def write_error_log(self, prepared: PreparedLoad, outcome: JobOutcome) -> str:
        """Write the first rejected rows, each line cut at the load's limit; returns the ErrorURL path."""
        name = new_error_log_name()
        limit = prepared.request.limits.error_log_line_bytes
        lines = [clip_error_line(line, limit) for line in outcome.errors]
        if outcome.counts.filtered > len(lines):
            lines.append(f"TOO MUCH ERROR! already reach {len(outcome.errors)}. show no more next error.")
        (self.error_log_dir / name).write_text("\n".join(lines) + "\n")
        return f"/api/_load_error_log?file={name}"

    def _check_quality(self, prepared: PreparedLoad, outcome: JobOutcome) -> None:
        """Doris's filter ratio: filtered / (total - unselected) > max_filter_ratio fails the load."""
        counts = outcome.counts
        selected = counts.total - counts.unselected
        if selected > 0 and counts.filtered / selected > prepared.request.max_filter_ratio:
            raise DataQualityError("too many filtered rows", error_url=self.write_error_log(prepared, outcome))

    def error_log(self, name: str) -> str | None:
        """The text of an error log by its name, or None (an unknown name, or anything that is not a name)."""
        for directory in self.error_log_dirs:
            path = error_log_path(directory, name)
            if path is not None:
                return path.read_text(errors="replace")
        return None

    def cleanup_staged(self, path: Path) -> None:
        """Remove a staged body (a file or a directory) and what its reading left beside it."""
        try:  # one syscall for the usual case, a file or nothing (a small body kept in memory)
            path.unlink(missing_ok=True)
        except (IsADirectoryError, PermissionError):  # a directory (EISDIR on Linux, EPERM elsewhere)
            shutil.rmtree(path, ignore_errors=True)
        arrow_csv.drop_prestaged(path)  # a split started while the body came in and no job took
        staging_path(path).unlink(missing_ok=True)  # the fields pyarrow split, if the load made them

    def prestage(self, prepared: PreparedLoad, path: Path, size: int | None) -> arrow_csv.GrowingBody | None:
        """Start splitting a CSV body, staged at `path`, while it is received when its job would split it into Parquet
        (`CsvDialect.path_for`: a body of `size` bytes, its Content-Length, plain and unquoted), else None. The
        split overlaps the receipt, so the job finds the fields written (or nearly): over a network the body
        takes longer to come than to split (171 MB: ~0.75 s of split)."""
        request = prepared.plan.request
        if request.format != "csv" or request.compression is not None or size is None:
            return None
        if size < request.limits.csv_parquet_min_bytes:  # the usual small load: no dialect to build
            return None
        dialect = CsvDialect.of(request, len(prepared.plan.source_fields))
        if dialect.path_for(size) is not CsvPath.PARQUET:
            return None
        return arrow_csv.prestage(path, dialect)


def format_reader(request: LoadRequest) -> Callable[[SparkSession, Path, LoadPlan], DataFrame]:
    """The reader of a load's `format`: CSV, JSON, Parquet or ORC."""
    readers = {"json": json_source, "parquet": columnar_source, "orc": columnar_source}
    return readers.get(request.format, csv_source)


def staged_source(spark: SparkSession, path: Path, prepared: PreparedLoad) -> DataFrame:
    """A staged body (a file, or a directory of payloads) read as its `format` says."""
    return format_reader(prepared.request)(spark, path, prepared.plan)


def run_rowset(
    spark: SparkSession,
    frame: DataFrame,
    plan: LoadPlan,
    rowset: PendingRowset,
    *,
    load_bytes: int,
    stored: StoredRows | None = None,
    extra_metrics: tuple[Column, ...] = (),
) -> JobOutcome:
    """Run one rowset's Spark job into the writer's pending rowset (plain and grouped loads alike): the
    table's Iceberg field ids, its rows sorted into buckets, Spark errors as load errors.

    Raises:
        LoadError: a Spark or data error.
    """
    lookup = False
    resolve_after: list[str] = []
    pair = None
    if plan.table.positional:
        # merge-on-write: a partial update compares with the stored rows of its keys in the job, which it reads
        # to fill its rows (only its winners are written), as does a small load of more rows than its keys'
        # stored rows may be read in the server's process for. A small load of up to `KEYED_RECHECK_ROWS` rows
        # is decided the same way once its job has computed its rows, in the server's process, against the
        # stored rows of its keys alone (`mow.pair_rows`): its job is the plain chain of any small load. A large
        # load writes its rows first and then pairs them with the stored rows by key (`resolve_after`: the
        # rowset's key and sequence columns against the stored ones), the loser of each pair position-deleted:
        # the same answer without carrying every incoming row through a join. What a two-phase load
        # supersedes is decided at its commit, against the table as it is then; so is a small load's into a
        # small table, where the commit's re-check in the server's process costs less than pairing it twice.
        stored_files = live_data_files(rowset.handle.iceberg)
        files = [plain_path(f.file_path) for f in stored_files]
        small = small_rowset.is_small(frame)
        few = sum(f.record_count for f in stored_files) <= DRIVER_RECHECK_ROWS and small
        compare = bool(files) and not rowset.precommit and (plan.reads_stored or not few)
        rows = small_rowset.known_rows(frame)
        # decided after the job, in the server's process
        paired = rows is not None and rows <= KEYED_RECHECK_ROWS and can_pair(plan.table)
        lookup = compare and (plan.reads_stored or (small and not paired))
        if compare and not lookup:
            resolve_after = files
            if paired:
                pair = functools.partial(pair_rows, rowset.handle, files)
        rowset.seen = frozenset(files) if compare else None
        if lookup or plan.reads_stored:
            # a full-row upsert needs the stored rows' keys, sequences and positions only (`decision_columns`)
            stored = _lookup(spark, rowset.handle, None if plan.reads_stored else decision_columns(plan.table))
    with spark_errors():
        outcome = run_load_job(
            spark,
            frame,
            plan,
            directory=rowset.directory,
            version=rowset.version,
            field_ids=stored_field_ids(rowset.handle),
            buckets=write_partitions(plan.table.buckets, load_bytes),
            stored=stored,
            lookup=lookup,
            extra_metrics=extra_metrics,
            pair=pair,
        )
        deletes = list(outcome.deletes)
        if resolve_after and not outcome.paired:
            deletes += resolve(spark, rowset.handle, outcome.files, resolve_after, rowset.directory)
    rowset.deletes = deletes
    return outcome


def _lookup(spark: SparkSession, handle: TableHandle, columns: list[str] | None = None) -> StoredRows:
    """A positional table's lookup rows, read from the files of the given buckets only (and, for the few values of
    a key column `wanted` lists, only their rows where they are read in the server's process, and of those rows
    only the `columns` given: the others are NULL)."""
    needed = tuple(columns) if columns is not None else None

    def rows(wanted: FileFilter | None) -> DataFrame:
        only = None
        if wanted is not None and len(wanted.values) == 1:
            column, values = wanted.values[0]
            only = KeyValues(column, values, per_file=wanted_values(handle.iceberg, wanted), columns=needed)
        return lookup_rows(spark, handle, handle.data_files(wanted), only=only)

    return rows


def _base(prepared: PreparedLoad, load_bytes: int, receive_ms: int) -> dict[str, Any]:
    """The reply fields every outcome of a load has."""
    req = prepared.request
    return dict(
        txn_id=prepared.txn_id,
        two_phase_commit="true" if req.two_phase_commit else "false",
        label=req.label,
        comment=req.comment,
        load_bytes=load_bytes,
        begin_txn_time_ms=prepared.begin_txn_ms,
        stream_load_put_time_ms=prepared.plan_ms,
        receive_data_time_ms=receive_ms,
    )


class DaemonWorkers:
    """Threads that run load jobs, reused when idle, one more started when none is.

    Daemon threads, unlike `ThreadPoolExecutor`'s (joined at interpreter exit): a job abandoned in a
    Spark call that never returns must not keep the process from exiting, nor take a slot from later loads.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def task() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the waiting caller, who re-raises it
                future.set_exception(exc)

        with self._lock:
            start = self._idle == 0
            self._idle -= 0 if start else 1
        self._tasks.put(task)
        if start:
            threading.Thread(target=self._work, name=self._name, daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            self._tasks.get()()
            with self._lock:
                self._idle += 1
