"""Routine load jobs at run time: one consumer thread per running job, each batch one load.

    job thread:  read a batch (rows / bytes / interval) → stage it as a stream-load body
                 → prepare (PREPARE txn) → record the batch's end offsets under that txn
                 → run it through LoadService (same pipeline and merge as stream load) → VISIBLE
                 → fold offsets and counts into the job → Doris's error-window check (may pause)

A batch's rows that fail to parse or convert are filtered, not fatal (the batch runs with
max_filter_ratio 1); the job-level `max_error_number` / `max_filter_ratio` window decides whether the job
pauses, as Doris's `RoutineLoadJob.updateNumOfData` does.

Several servers (one PostgreSQL store): a job runs on one server (its `owner`), and every server lists every job
and runs PAUSE / RESUME / STOP on any of them, as any Doris FE answers. A state change is one locked
read-modify-write of the stored job (`RoutineLoadStore.update`), whoever makes it; the owner folds its batches
into the job the same way, keeping the state as stored, and polls the store every `poll_seconds` for changes
made on other servers (a newer `revision`): it stops a job paused or stopped elsewhere and starts one resumed.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from spark_runner.kafka_source import Batch, KafkaBatches
from spark_runner.service import LoadService
from tables.errors import DorisError, KafkaConfigError, KafkaPropertyError, KafkaSourceError, LoadError, TableNotFound
from tables.routine_load import (
    CREATE_TASKS_ERR,
    MANUAL_PAUSE_ERR,
    TABLE_ERR,
    TASKS_ABORT_ERR,
    TOO_MANY_ERRORS,
    TOO_MANY_FAILURE_ROWS_ERR,
    BatchCounts,
    JobNotFound,
    JobState,
    JobStatistic,
    RoutineLoadJob,
    RoutineLoadSpec,
    RoutineLoadStore,
    add_batch,
    error_reason,
    kafka_client_config,
)
from tables.transactions import VISIBLE, TransactionStore

log = logging.getLogger(__name__)

MAX_CONSECUTIVE_ABORTS = 3
# Doris FE config max_routine_load_job_num: jobs not yet STOPPED or CANCELLED, all databases and servers together
# (each running job is a thread and a Kafka consumer of this process)
MAX_ROUTINE_LOAD_JOBS = 100
ACTIVE = (JobState.NEED_SCHEDULE, JobState.RUNNING)
# what running a job changes; the state (`_transition`) is changed by the statements too
RUN_FIELDS = ("progress", "statistic", "last_txn", "error_log_urls", "other_msg")
STATE_FIELDS = ("state", "pause_time", "end_time", "reason")


def _transition(job: RoutineLoadJob, state: JobState, reason: str) -> None:
    job.state = state
    if state is JobState.PAUSED:
        job.pause_time = time.time()
        job.reason = reason
    elif state is JobState.NEED_SCHEDULE:
        job.pause_time = None
        job.reason = ""
    elif state.is_final:
        job.end_time = time.time()
        job.reason = reason


@dataclass
class TaskInfo:
    """The job's current task, as SHOW ROUTINE LOAD TASK prints it."""

    task_id: str
    create_time: float
    offsets: dict[int, int]
    txn_id: int = -1
    txn_status: str = "NULL"
    execute_start: float | None = None


@dataclass
class _Runtime:
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    task: TaskInfo | None = None
    lag: dict[int, int] = field(default_factory=dict)


class RoutineLoadManager:
    """Owns the jobs: persists every change, runs the active ones, resumes them after a restart."""

    def __init__(
        self,
        *,
        loads: LoadService,
        store: RoutineLoadStore,
        txns: TransactionStore,
        staging_dir: Path,
        min_batch_rows: int = 200000,
        cert_dir: Path | None = None,
        owner: str | None = None,
        poll_seconds: float = 1.0,
    ) -> None:
        # several servers share the store: this server runs only the jobs created through it (and those of dead
        # servers it adopted), so no two consume one job's partitions; it shows and changes every job
        self.owner = owner
        self.poll_seconds = poll_seconds
        self.loads = loads
        self.store = store
        self.txns = txns
        self.staging_dir = staging_dir
        self.min_batch_rows = min_batch_rows
        self.max_jobs = MAX_ROUTINE_LOAD_JOBS
        self.cert_dir = cert_dir  # Kafka certificate and keytab files are read only from here
        self._lock = threading.RLock()
        self._jobs: dict[int, RoutineLoadJob] = {}
        self._runtime: dict[int, _Runtime] = {}
        self._closed = False
        self._closing = threading.Event()
        self._poller: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Load the jobs (their store is migrated when the services are built, `app.main.build_services`), fold in
        batches that became visible before a crash, run the active ones."""
        self._take(lambda job: self.owner is None or job.owner == self.owner)
        if self.owner is not None:  # other servers change this server's jobs through the store
            self._poller = threading.Thread(target=self._poll, name="routine-load-poll", daemon=True)
            self._poller.start()

    def adopt(self, server: str) -> int:
        """Several servers: run the jobs of a server that is gone; they become this server's. Returns how many."""
        return self._take(lambda job: job.owner == server, adopt=True)

    def _take(self, wanted: Callable[[RoutineLoadJob], bool], *, adopt: bool = False) -> int:
        taken = 0
        for job in self.store.all():
            with self._lock:
                held = self._jobs.get(job.id)  # one another server adopted (this one was taken for dead) is taken again
                if not wanted(job) or (held is not None and held.owner == self.owner):
                    continue
            if adopt:
                job = self.store.update(job.id, lambda stored: _set_owner(stored, self.owner))
            self._fold_committed(job)
            with self._lock:
                self._jobs[job.id] = job
            if not job.state.is_final and job.state is not JobState.PAUSED and self._allowed(job):
                self._launch(job.id)
            taken += 1
        return taken

    def _allowed(self, job: RoutineLoadJob) -> bool:
        """A job stored with a client property now refused is paused with the reason, never run."""
        try:
            kafka_client_config(job.spec.custom_properties, self.cert_dir)
        except KafkaPropertyError as exc:
            log.warning("routine load job %s paused: %s", job.spec.name, exc.message)
            with self._lock:
                self._set_state(job, JobState.PAUSED, error_reason(CREATE_TASKS_ERR, exc.message))
            return False
        return True

    def close(self) -> None:
        self._closing.set()
        if self._poller is not None:
            self._poller.join(timeout=30)
        with self._lock:
            self._closed = True
            runtimes = list(self._runtime.values())
        for runtime in runtimes:
            runtime.stop.set()
        for runtime in runtimes:
            if runtime.thread is not None:
                runtime.thread.join(timeout=30)
        self.store.close()

    def _fold_committed(self, job: RoutineLoadJob) -> None:
        for txn_id, progress, counts in self.store.batches_after(job.id, job.last_txn):
            txn = self.txns.get(txn_id)
            if txn is None or txn.state != VISIBLE:
                continue
            self._apply_batch(job, txn_id, progress, counts)
        self._save(job)

    # -- statements -----------------------------------------------------------------------
    def create(self, spec: RoutineLoadSpec) -> RoutineLoadJob:
        """Raises: AlreadyExists (name used by a job that is not final); DorisError past `max_jobs` unfinished jobs
        (Doris's check and text: more than the limit, counted before this one)."""
        with self._lock:
            if sum(not j.state.is_final for j in self.store.all()) > self.max_jobs:
                raise DorisError(f"There are more than {self.max_jobs} routine load jobs are running. exceed limit.")
            job = self.store.create(spec, owner=self.owner)
            self._jobs[job.id] = job
            self._launch(job.id)
        return job.model_copy(deep=True)

    def find(self, db: str, name: str) -> RoutineLoadJob:
        """The newest job of that name, whichever server runs it.

        Raises:
            JobNotFound.
        """
        found = [j for j in self.jobs(db) if j.spec.name == name]
        if not found:
            raise JobNotFound(name)
        return max(found, key=lambda j: j.id)

    def jobs(self, db: str) -> list[RoutineLoadJob]:
        """Every job of the database, as stored (every change is stored at once), whichever server runs it."""
        return [j for j in self.store.all() if j.spec.db == db]

    def runtime(self, job_id: int) -> tuple[TaskInfo | None, dict[int, int]]:
        """The job's current task and its partitions' lag (known on the server that runs it; elsewhere none)."""
        with self._lock:
            runtime = self._runtime.get(job_id)
            if runtime is None:
                return None, {}
            return runtime.task, dict(runtime.lag)

    def pause(self, db: str, name: str | None, user: str = "root") -> None:
        """Raises: JobNotFound; DorisError when the job cannot be paused."""
        reason = error_reason(MANUAL_PAUSE_ERR, f"User {user} pauses routine load job")

        def change(job: RoutineLoadJob) -> bool:
            if job.state not in ACTIVE:
                if name is None:
                    return False
                raise DorisError(f"Could not transform {job.state.value} to PAUSED")
            _transition(job, JobState.PAUSED, reason)
            return True

        for job in self._targets(db, name):
            self._changed(self.store.update(job.id, change))

    def resume(self, db: str, name: str | None) -> None:
        """Raises: JobNotFound; DorisError when the job is final."""

        def change(job: RoutineLoadJob) -> bool:
            if job.state.is_final:
                if name is None:
                    return False
                raise DorisError(f"Could not transform {job.state.value} to NEED_SCHEDULE")
            if job.state is not JobState.PAUSED:
                return False
            job.statistic.current_error_rows = job.statistic.current_total_rows = 0
            _transition(job, JobState.NEED_SCHEDULE, "")
            return True

        for job in self._targets(db, name):
            self._changed(self.store.update(job.id, change))

    def stop(self, db: str, name: str) -> None:
        """Raises: JobNotFound; DorisError when the job is already final."""

        def change(job: RoutineLoadJob) -> bool:
            if job.state.is_final:
                raise DorisError(f"Could not transform {job.state.value} to STOPPED")
            _transition(job, JobState.STOPPED, "")
            return True

        self._changed(self.store.update(self.find(db, name).id, change))

    def _targets(self, db: str, name: str | None) -> list[RoutineLoadJob]:
        if name is not None:
            return [self.find(db, name)]
        return [j for j in self.jobs(db) if not j.state.is_final]

    # -- the stored job and this server's copy ------------------------------------------------
    def _changed(self, stored: RoutineLoadJob) -> None:
        """A statement changed the stored job: a job this server runs follows at once (another server's follows
        on its next poll)."""
        with self._lock:
            job = self._jobs.get(stored.id)
            if job is not None:
                self._follow(job, stored)

    def _poll(self) -> None:
        """Several servers: follow the changes other servers' statements make to this server's jobs."""
        while not self._closing.wait(self.poll_seconds):
            try:
                stored = {j.id: j for j in self.store.all()}
            except LoadError as exc:  # the database is away: the next poll tries again
                log.warning("routine load: cannot read the jobs: %s", exc.text)
                continue
            with self._lock:
                for job_id, job in list(self._jobs.items()):
                    if (found := stored.get(job_id)) is not None:
                        self._follow(job, found)

    def _follow(self, job: RoutineLoadJob, stored: RoutineLoadJob) -> None:
        """Take the stored state into this server's copy (under the lock) and start or stop the job's thread."""
        if stored.revision <= job.revision:
            return
        resumed = job.state not in ACTIVE and stored.state in ACTIVE
        if stored.owner != job.owner:  # adopted by a server that took this one for dead: it runs there now
            job.owner = stored.owner
            resumed = False
        for name in STATE_FIELDS:
            setattr(job, name, getattr(stored, name))
        if resumed:  # the job was not running: its statistic is the stored one (RESUME resets its error window)
            job.statistic = stored.statistic.model_copy()
        job.revision = stored.revision
        if self._jobs.get(job.id) is not job:
            return
        if job.state not in ACTIVE or job.owner != self.owner:
            self._stop_runtime(job.id)
            return
        runtime = self._runtime.get(job.id)
        idle = runtime is None or runtime.stop.is_set() or runtime.thread is None or not runtime.thread.is_alive()
        if idle:
            self._launch(job.id)

    def _stop_runtime(self, job_id: int) -> None:
        runtime = self._runtime.get(job_id)
        if runtime is not None:
            runtime.stop.set()
            runtime.task = None

    def _save(self, job: RoutineLoadJob) -> None:
        """Store what running the job changed (progress, statistic, messages), keeping the stored state (a
        statement on another server may have paused or stopped the job since), which this copy then follows."""

        def merge(stored: RoutineLoadJob) -> bool:
            if stored.state is JobState.NEED_SCHEDULE and job.state is JobState.RUNNING:
                stored.state = JobState.RUNNING  # its first batch started
            for name in RUN_FIELDS:
                value = getattr(job, name)
                setattr(stored, name, value.model_copy() if isinstance(value, JobStatistic) else copy.copy(value))
            return True

        with self._lock:
            self._follow(job, self.store.update(job.id, merge))

    def _set_state(self, job: RoutineLoadJob, state: JobState, reason: str) -> None:
        """The job's run decides a state (too many errors, a Kafka error, its table gone): stored unless a
        statement has paused or ended the job meanwhile; a job leaving RUNNING stops its thread after its batch."""

        def change(stored: RoutineLoadJob) -> bool:
            if stored.state not in ACTIVE:
                return False
            _transition(stored, state, reason)
            return True

        with self._lock:
            self._follow(job, self.store.update(job.id, change))

    # -- running ----------------------------------------------------------------------------
    def _launch(self, job_id: int) -> None:
        with self._lock:
            if self._closed:
                return
            old = self._runtime.get(job_id)
            if old is not None and old.thread is not None and old.thread.is_alive():
                old.stop.set()
            runtime = _Runtime()
            previous = old.thread if old is not None else None
            runtime.thread = threading.Thread(
                target=self._run, args=(job_id, runtime, previous), name=f"routine-load-{job_id}", daemon=True
            )
            self._runtime[job_id] = runtime
            runtime.thread.start()

    def _active(self, job_id: int, runtime: _Runtime) -> RoutineLoadJob | None:
        with self._lock:
            job = self._jobs[job_id]
            if runtime.stop.is_set() or job.state not in ACTIVE or job.owner != self.owner:
                return None
            return job

    def _run(self, job_id: int, runtime: _Runtime, previous: threading.Thread | None) -> None:
        if previous is not None:
            previous.join()  # a resumed job waits for its old thread's last batch
        source: KafkaBatches | None = None
        aborts = 0
        try:
            while (job := self._active(job_id, runtime)) is not None:
                if source is None:
                    source = KafkaBatches(job.spec, job.progress, cert_dir=self.cert_dir)
                    with self._lock:
                        if runtime.stop.is_set():
                            break
                        job.progress = {**source.start, **job.progress}
                        if job.state is JobState.NEED_SCHEDULE:
                            job.state = JobState.RUNNING
                        self._save(job)
                runtime.task = TaskInfo(task_id=_task_id(), create_time=time.time(), offsets=dict(source.start))
                path = self.staging_dir / f"routine_load_{job_id}_{runtime.task.task_id}"
                try:  # the batch is staged as it is read, never held in memory whole
                    batch = source.read(
                        runtime.stop, path, fmt=job.spec.request.format, strip_outer_array=job.spec.strip_outer_array
                    )
                    if not batch.rows:
                        self._update_lag(runtime, source, job)
                        continue
                    loaded = self._load_batch(job_id, runtime, batch, path)
                finally:
                    self.loads.cleanup_staged(path)
                self._update_lag(runtime, source, self._jobs[job_id])
                if loaded:
                    aborts = 0
                else:
                    aborts += 1
                    source.rewind(self._jobs[job_id].progress)
                    if aborts >= MAX_CONSECUTIVE_ABORTS:
                        with self._lock:
                            current = self._jobs[job_id]
                            if current.state is JobState.RUNNING:
                                reason = error_reason(TASKS_ABORT_ERR, f"task aborted: {current.other_msg}")
                                self._set_state(current, JobState.PAUSED, reason)
                    else:
                        runtime.stop.wait(1.0)
        except KafkaSourceError as exc:
            code = CREATE_TASKS_ERR if isinstance(exc, KafkaConfigError) else TASKS_ABORT_ERR
            with self._lock:
                current = self._jobs[job_id]
                if not current.state.is_final and current.state is not JobState.PAUSED:
                    self._set_state(current, JobState.PAUSED, error_reason(code, str(exc)))
        except Exception as exc:  # a job thread must never die silently: pause the job with the cause
            log.exception("routine load job %s failed", job_id)
            with self._lock:
                current = self._jobs[job_id]
                if not current.state.is_final and current.state is not JobState.PAUSED:
                    reason = error_reason(TASKS_ABORT_ERR, f"{type(exc).__name__}: {exc}")
                    self._set_state(current, JobState.PAUSED, reason)
        finally:
            runtime.task = None
            if source is not None:
                source.close()

    def _update_lag(self, runtime: _Runtime, source: KafkaBatches, job: RoutineLoadJob) -> None:
        lag = {}
        for partition in source.partitions:
            try:
                _, high = source.watermarks(partition)
            except KafkaSourceError:
                continue
            lag[partition] = high - job.progress.get(partition, high)
        runtime.lag = lag

    def _load_batch(self, job_id: int, runtime: _Runtime, batch: Batch, path: Path) -> bool:
        """Load one batch, staged at `path`; True when it committed. Its offsets commit with its transaction."""
        job = self._jobs[job_id]
        spec = job.spec
        task = runtime.task
        assert task is not None
        label = f"{spec.name}-{task.task_id}"
        try:
            prepared = self.loads.prepare(spec.request.model_copy(update={"label": label, "table": spec.table}))
        except TableNotFound as exc:
            with self._lock:
                self._set_state(self._jobs[job_id], JobState.CANCELLED, error_reason(TABLE_ERR, exc.message))
            return True
        except (LoadError, DorisError) as exc:
            return self._aborted(job_id, exc.text if isinstance(exc, LoadError) else exc.message)
        progress = {**job.progress, **batch.next_offsets}
        self.store.record_batch(prepared.txn_id, job_id, progress, BatchCounts(received_bytes=batch.size))
        task.txn_id, task.txn_status, task.execute_start = prepared.txn_id, "PREPARE", time.time()
        result = self.loads.run_staged(prepared, path, load_bytes=batch.staged)
        if result.status != "Success":
            task.txn_status = "ABORTED"
            return self._aborted(job_id, result.message)
        task.txn_status = "VISIBLE"
        counts = BatchCounts(
            total=result.number_total_rows,
            filtered=result.number_filtered_rows,
            unselected=result.number_unselected_rows,
            received_bytes=batch.size,
            error_url=result.error_url,
        )
        self.store.update_batch_counts(prepared.txn_id, counts)
        with self._lock:
            current = self._jobs[job_id]
            self._apply_batch(current, prepared.txn_id, progress, counts)
            self._save(current)
        return True

    def _apply_batch(self, job: RoutineLoadJob, txn_id: int, progress: dict[int, int], counts: BatchCounts) -> None:
        """Fold a visible batch into the job (under the lock, or before the job runs)."""
        job.progress = dict(progress)
        job.last_txn = txn_id
        job.statistic, over = add_batch(job.statistic, counts, job.spec)
        job.statistic.task_execute_time_ms = int((time.time() - job.create_time) * 1000)
        if counts.error_url:
            job.error_log_urls = (job.error_log_urls + [counts.error_url])[-3:]
        if over and job.state in (JobState.RUNNING, JobState.NEED_SCHEDULE):
            # the batch's counts are stored before the pause they cause: SHOW ROUTINE LOAD never shows the job
            # PAUSED for too many error rows with a statistic that does not have them yet
            self._save(job)
            self._set_state(job, JobState.PAUSED, error_reason(TOO_MANY_FAILURE_ROWS_ERR, TOO_MANY_ERRORS))

    def _aborted(self, job_id: int, message: str) -> bool:
        with self._lock:
            job = self._jobs[job_id]
            job.statistic.aborted_task_num += 1
            job.other_msg = message
            self._save(job)
        log.warning("routine load job %s: batch aborted: %s", job_id, message)
        return False


def _set_owner(job: RoutineLoadJob, owner: str | None) -> bool:
    job.owner = owner
    return True


def _task_id() -> str:
    """A task id printed as Doris prints a TUniqueId: two 16-digit hex halves."""
    hexed = uuid.uuid4().hex
    return f"{hexed[:16]}-{hexed[16:]}"
