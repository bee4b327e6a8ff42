"""Routine load jobs: their definition, state and statistics, kept in the store beside the transactions.

A job keeps the `LoadRequest` its batches run (store format 2); a store written by an earlier release holds
raw stream-load headers instead (format 1) and is migrated when the manager opens it (`migrate`).

A job's committed Kafka offsets are never stored on their own. Each batch writes its offsets (and row
counts) keyed by its transaction id *before* its load runs; they take effect exactly when that transaction
is VISIBLE, which the Iceberg snapshot decides atomically (a crash in between is resolved by
`recover_prepared` from the snapshot summary). So committed data and committed offsets cannot diverge:
a restart folds in the batches that became visible and resumes after them, exactly once.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tables.errors import AlreadyExists, DorisError, KafkaPropertyError, LoadError
from tables.load_spec import LoadRequest
from tables.source_paths import check_cert_file
from tables.store import ROUTINE_LOAD_FORMAT, ROUTINE_LOAD_JOBS, ROUTINE_LOAD_TXNS, Store


class JobState(StrEnum):
    NEED_SCHEDULE = "NEED_SCHEDULE"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"
    CANCELLED = "CANCELLED"

    @property
    def is_final(self) -> bool:
        return self in (JobState.STOPPED, JobState.CANCELLED)


# Doris's InternalErrorCode values shown in ReasonOfStateChanged
MANUAL_PAUSE_ERR = 100
MANUAL_STOP_ERR = 101
TOO_MANY_FAILURE_ROWS_ERR = 102
CREATE_TASKS_ERR = 103
TASKS_ABORT_ERR = 104
TABLE_ERR = 6

# Kafka start positions before a partition has a committed offset (Doris's KafkaProgress values)
OFFSET_BEGINNING = -2
OFFSET_END = -1


def error_reason(code: int, msg: str) -> str:
    """Doris's `ErrorReason.toString()`."""
    return f"ErrorReason{{code=errCode = {code}, msg='{msg}'}}"


TOO_MANY_ERRORS = "current error rows is more than max_error_number or the max_filter_ratio is more than the value set"


def _one_of(*allowed: str) -> Callable[[str], bool]:
    return lambda value: value.strip().lower() in {a.lower() for a in allowed}


def _pattern(regex: str) -> Callable[[str], bool]:
    return lambda value: re.fullmatch(regex, value.strip()) is not None


def _printable(value: str) -> bool:
    return len(value) <= 1024 and value.isprintable()


_BOOL = _one_of("true", "false")
_COUNT = _pattern(r"\d{1,10}")
# Kerberos names reach librdkafka's kinit command line: plain principal syntax only
_KERBEROS_NAME = _pattern(r"[A-Za-z0-9._/@-]{1,255}")

# The `property.*` keys of FROM KAFKA a Doris user sets (Doris's routine load manual: ids, SSL, SASL, Kerberos,
# fetch sizes, the broker version fallback), each with a check of its value. Any other librdkafka property is
# refused: some load native code (plugin.library.paths, ssl.engine.location), run commands
# (sasl.kerberos.kinit.cmd), call out (sasl.oauthbearer.*) or write files (debug, log settings).
KAFKA_CLIENT_PROPERTIES: dict[str, Callable[[str], bool]] = {
    "group.id": _printable,
    "client.id": _printable,
    "security.protocol": _one_of("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"),
    "sasl.mechanism": _one_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI"),
    "sasl.mechanisms": _one_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI"),
    "sasl.username": _printable,
    "sasl.password": _printable,
    "sasl.kerberos.service.name": _KERBEROS_NAME,
    "sasl.kerberos.principal": _KERBEROS_NAME,
    "ssl.key.password": _printable,
    "ssl.keystore.password": _printable,
    "ssl.endpoint.identification.algorithm": _one_of("none", "https"),
    "enable.ssl.certificate.verification": _BOOL,
    "fetch.message.max.bytes": _COUNT,
    "max.partition.fetch.bytes": _COUNT,
    "fetch.max.bytes": _COUNT,
    "fetch.min.bytes": _COUNT,
    "fetch.wait.max.ms": _COUNT,
    "receive.message.max.bytes": _COUNT,
    "socket.timeout.ms": _COUNT,
    "session.timeout.ms": _COUNT,
    "api.version.request": _BOOL,
    "broker.version.fallback": _pattern(r"\d+(\.\d+){1,3}"),
    "isolation.level": _one_of("read_committed", "read_uncommitted"),
}
# properties naming a file: read only from the certificate folder (SL_KAFKA_CERT_DIR), after resolving links
KAFKA_FILE_PROPERTIES = (
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.crl.location",
    "ssl.keystore.location",
    "sasl.kerberos.keytab",
)
KAFKA_DEFAULT_OFFSETS = "kafka_default_offsets"  # Doris's own key, never passed to the client


def kafka_client_config(properties: Mapping[str, str], cert_dir: Path | None) -> dict[str, str]:
    """The librdkafka settings of a job's `property.*` keys (without the prefix), files resolved.

    Raises:
        KafkaPropertyError: a key not on the allow-list, a value its check refuses, or a file outside `cert_dir`.
    """
    config: dict[str, str] = {}
    for key, value in properties.items():
        if key == KAFKA_DEFAULT_OFFSETS:
            continue
        if key in KAFKA_FILE_PROPERTIES:
            if key == "ssl.ca.location" and value.strip() == "probe":  # librdkafka's system CA lookup
                config[key] = "probe"
                continue
            try:
                config[key] = check_cert_file(value.strip(), cert_dir, f"property.{key}")
            except DorisError as exc:
                raise KafkaPropertyError(exc.message) from None
            continue
        check = KAFKA_CLIENT_PROPERTIES.get(key)
        if check is None:
            raise KafkaPropertyError(f"property.{key} is invalid kafka property or can not be set")
        if not check(value):
            raise KafkaPropertyError(f"property.{key} has an invalid value")  # never echoed: it may be a secret
        config[key] = value.strip()
    return config


class RoutineLoadSpec(BaseModel):
    """What CREATE ROUTINE LOAD asked for, validated; `request` is the load each batch runs (with a label of its
    own), by default a plain CSV load labelled with the job's name."""

    model_config = ConfigDict(frozen=True)

    name: str
    db: str
    table: str
    merge_type: str = "APPEND"
    request: LoadRequest
    strip_outer_array: bool = False  # JSON: a message holding an array is staged as one row per element
    job_properties: dict[str, str] = Field(default_factory=dict)  # JobProperties as SHOW prints them
    desired_concurrent_number: int = 256
    max_error_number: int = 0
    max_filter_ratio: float = 1.0
    max_batch_interval_s: int = 60
    max_batch_rows: int = 20000000
    max_batch_size: int = 1024 * 1024 * 1024
    broker_list: str
    topic: str
    partitions: tuple[int, ...] = ()  # empty: every partition of the topic
    start_offsets: tuple[int, ...] = ()  # per listed partition: an offset, OFFSET_BEGINNING or OFFSET_END
    default_offset: int = OFFSET_END
    custom_properties: dict[str, str] = Field(default_factory=dict)  # `property.x` without the prefix
    comment: str = ""

    @model_validator(mode="before")
    @classmethod
    def _default_request(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "request" in data:
            return data
        if "headers" in data:  # never read silently as a default load
            raise ValueError("a routine load spec of store format 1 (raw headers): RoutineLoadStore.migrate first")
        return {**data, "request": LoadRequest(db=data["db"], table=data["table"], label=data["name"])}


class JobStatistic(BaseModel):
    """Doris's RoutineLoadStatistic (cumulative counts plus the error-check window)."""

    total_rows: int = 0
    error_rows: int = 0
    unselected_rows: int = 0
    received_bytes: int = 0
    committed_task_num: int = 0
    aborted_task_num: int = 0
    current_total_rows: int = 0
    current_error_rows: int = 0
    error_rows_after_resumed: int = 0
    task_execute_time_ms: int = 0

    def summary(self, running_txns: list[int], elapsed_ms: int) -> dict[str, object]:
        """The `Statistic` column, with Doris's key names and rates."""
        elapsed = max(elapsed_ms, 1)
        loaded = self.total_rows - self.error_rows - self.unselected_rows
        return {
            "receivedBytes": self.received_bytes,
            "runningTxns": running_txns,
            "errorRows": self.error_rows,
            "committedTaskNum": self.committed_task_num,
            "loadedRows": loaded,
            "loadRowsRate": loaded * 1000 // elapsed,
            "abortedTaskNum": self.aborted_task_num,
            "errorRowsAfterResumed": self.error_rows_after_resumed,
            "totalRows": self.total_rows,
            "unselectedRows": self.unselected_rows,
            "receivedBytesRate": self.received_bytes * 1000 // elapsed,
            "taskExecuteTimeMs": elapsed,
        }


class BatchCounts(BaseModel):
    """What one committed batch adds to its job."""

    model_config = ConfigDict(frozen=True)

    total: int = 0
    filtered: int = 0
    unselected: int = 0
    received_bytes: int = 0
    error_url: str | None = None


def add_batch(stat: JobStatistic, batch: BatchCounts, spec: RoutineLoadSpec) -> tuple[JobStatistic, bool]:
    """Fold a committed batch into the statistic; True when the job must pause for too many errors.

    Doris's `RoutineLoadJob.updateNumOfData`: errors are judged over a window of `max_batch_rows * 10`
    rows; past the window the check uses the whole window and the window restarts, inside it the job
    pauses as soon as the errors pass `max_error_number` or the error ratio passes `max_filter_ratio`.
    """
    s = stat.model_copy()
    s.total_rows += batch.total
    s.error_rows += batch.filtered
    s.unselected_rows += batch.unselected
    s.received_bytes += batch.received_bytes
    s.committed_task_num += 1
    s.current_error_rows += batch.filtered
    s.current_total_rows += batch.total
    s.error_rows_after_resumed = s.current_error_rows
    over = s.current_error_rows > spec.max_error_number or (
        s.current_total_rows > 0 and s.current_error_rows / s.current_total_rows > spec.max_filter_ratio
    )
    if s.current_total_rows > spec.max_batch_rows * 10:
        s.current_error_rows = s.current_total_rows = 0
        return s, over
    if over:
        s.current_error_rows = s.current_total_rows = 0
    return s, over


class RoutineLoadJob(BaseModel):
    """A job's persisted state."""

    id: int
    spec: RoutineLoadSpec
    state: JobState = JobState.NEED_SCHEDULE
    create_time: float = Field(default_factory=time.time)
    pause_time: float | None = None
    end_time: float | None = None
    reason: str = ""
    other_msg: str = ""
    statistic: JobStatistic = Field(default_factory=JobStatistic)
    progress: dict[int, int] = Field(default_factory=dict)  # partition → next offset to consume
    error_log_urls: list[str] = Field(default_factory=list)  # the latest three
    last_txn: int = 0  # the newest batch transaction folded into progress and statistic
    user: str = "root"
    owner: str | None = None  # several servers: the one that created it runs it (None: one server)
    revision: int = 0  # bumped by every `RoutineLoadStore.update`: a copy older than the stored one is stale


# 1: a job's spec holds the stream-load headers of its batches (no routine_load_format row); 2: their LoadRequest
STORE_FORMAT = 2
HeaderParser = Callable[[str, str, Mapping[str, str]], LoadRequest]  # (db, table, headers) → the load


class RoutineLoadStore:
    """Jobs and per-batch offsets in a `Store` (the transactions' database), or a SQLite file at the path given."""

    def __init__(self, store: Store | Path) -> None:
        self.store = Store.of(store)
        self._owns_store = not isinstance(store, Store)
        self.store.ensure(ROUTINE_LOAD_JOBS, ROUTINE_LOAD_TXNS, ROUTINE_LOAD_FORMAT)
        sql, j, b = self.store.sql, ROUTINE_LOAD_JOBS.c, ROUTINE_LOAD_TXNS.c
        self._version = sql("rl format", lambda: sa.select(ROUTINE_LOAD_FORMAT.c.version))
        self._set_version = sql(
            "rl format set", lambda: sa.update(ROUTINE_LOAD_FORMAT).values(version=sa.bindparam("p_version"))
        )
        self._add_version = sql(
            "rl format add", lambda: sa.insert(ROUTINE_LOAD_FORMAT).values(version=sa.bindparam("p_version"))
        )
        self._any_job = sql("rl any", lambda: sa.select(j.job_id).limit(1))
        self._bodies = sql("rl bodies", lambda: sa.select(j.job_id, j.body).order_by(j.job_id))
        self._body = sql("rl body", lambda: sa.select(j.body).where(j.job_id == sa.bindparam("p_id")))
        self._named = sql(
            "rl named",
            lambda: sa.select(j.body).where(j.db == sa.bindparam("p_db"), j.name == sa.bindparam("p_name")),
        )
        self._add = sql(
            "rl add",
            lambda: (
                sa.insert(ROUTINE_LOAD_JOBS)
                .values(db=sa.bindparam("p_db"), name=sa.bindparam("p_name"), body="")
                .returning(j.job_id)
            ),
        )
        self._save = sql(
            "rl save",
            lambda: (
                sa.update(ROUTINE_LOAD_JOBS)
                .where(j.job_id == sa.bindparam("p_id"))
                .values(body=sa.bindparam("p_body", type_=sa.Text))
            ),
        )
        self._record = sql(
            "rl record",
            lambda: sa.insert(ROUTINE_LOAD_TXNS).values(
                txn_id=sa.bindparam("p_txn"),
                job_id=sa.bindparam("p_job"),
                progress=sa.bindparam("p_progress", type_=sa.Text),
                counts=sa.bindparam("p_counts", type_=sa.Text),
            ),
        )
        self._recount = sql(
            "rl recount",
            lambda: (
                sa.update(ROUTINE_LOAD_TXNS)
                .where(b.txn_id == sa.bindparam("p_txn"))
                .values(counts=sa.bindparam("p_counts", type_=sa.Text))
            ),
        )
        self._after = sql(
            "rl after",
            lambda: (
                sa.select(b.txn_id, b.progress, b.counts)
                .where(b.job_id == sa.bindparam("p_job"), b.txn_id > sa.bindparam("p_txn"))
                .order_by(b.txn_id)
            ),
        )
        with self.store.write() as tx:
            tx.lock("routine load")  # servers starting together: one format row
            if tx.run(self._version).first() is None:
                older = tx.run(self._any_job).first() is not None
                tx.run(self._add_version, p_version=1 if older else STORE_FORMAT)

    @property
    def format(self) -> int:
        with self.store.read() as tx:
            return int(tx.run(self._version).scalar())

    def migrate(self, parse_headers: HeaderParser) -> int:
        """Bring a store of an earlier format to `STORE_FORMAT`, in one transaction; returns the jobs rewritten.

        `parse_headers` is the stream-load header parser (`loaders.headers.parse_load_request`, a layer above).
        """
        with self.store.write() as tx:
            tx.lock("routine load")
            version = int(tx.run(self._version).scalar())
            rows = tx.run(self._bodies).rows if version < STORE_FORMAT else []
            for job_id, body in rows:
                job = RoutineLoadJob.model_validate(_upgrade_v1(json.loads(body), parse_headers))
                tx.run(self._save, p_id=job_id, p_body=job.model_dump_json())
            tx.run(self._set_version, p_version=STORE_FORMAT)
        return len(rows)

    def create(self, spec: RoutineLoadSpec, *, owner: str | None = None) -> RoutineLoadJob:
        """Register a job in NEED_SCHEDULE.

        Raises:
            AlreadyExists: a job of that name in that database is not STOPPED or CANCELLED.
        """
        with self.store.write() as tx:
            tx.lock(f"routine load\0{spec.db}\0{spec.name}")  # one name, one live job, across servers
            for (body,) in tx.run(self._named, p_db=spec.db, p_name=spec.name).rows:
                if not RoutineLoadJob.model_validate_json(body).state.is_final:
                    raise AlreadyExists(f"Name {spec.name} already used in db {spec.db}")
            job_id = int(tx.run(self._add, p_db=spec.db, p_name=spec.name).scalar())
            job = RoutineLoadJob(id=job_id, spec=spec, owner=owner)
            tx.run(self._save, p_id=job.id, p_body=job.model_dump_json())
        return job

    def save(self, job: RoutineLoadJob) -> None:
        self.store.write_one(self._save, p_id=job.id, p_body=job.model_dump_json())

    def update(self, job_id: int, change: Callable[[RoutineLoadJob], bool]) -> RoutineLoadJob:
        """Change the stored job in one transaction, under the job's lock (several servers change one job: the
        one running it folds in its batches, any one runs PAUSE / RESUME / STOP); `change` edits the job it is
        given and returns whether to write it. Returns the job as stored.

        Raises:
            JobNotFound: no job of that id; whatever `change` raises (nothing is written).
        """
        with self.store.write() as tx:
            tx.lock(f"routine load job\0{job_id}")
            row = tx.run(self._body, p_id=job_id).first()
            if row is None:
                raise JobNotFound(str(job_id))
            job = RoutineLoadJob.model_validate_json(row[0])
            if change(job):
                job.revision += 1
                tx.run(self._save, p_id=job_id, p_body=job.model_dump_json())
        return job

    def all(self) -> list[RoutineLoadJob]:
        with self.store.read() as tx:
            rows = tx.run(self._bodies).rows
        return [RoutineLoadJob.model_validate_json(body) for (_, body) in rows]

    def record_batch(self, txn_id: int, job_id: int, progress: dict[int, int], counts: BatchCounts) -> None:
        """The offsets and counts a batch commits, keyed by its (PREPARE) transaction."""
        self.store.write_one(
            self._record, p_txn=txn_id, p_job=job_id, p_progress=json.dumps(progress), p_counts=counts.model_dump_json()
        )

    def update_batch_counts(self, txn_id: int, counts: BatchCounts) -> None:
        self.store.write_one(self._recount, p_txn=txn_id, p_counts=counts.model_dump_json())

    def batches_after(self, job_id: int, txn_id: int) -> list[tuple[int, dict[int, int], BatchCounts]]:
        """Batches of a job newer than `txn_id`, oldest first."""
        with self.store.read() as tx:
            rows = tx.run(self._after, p_job=job_id, p_txn=txn_id).rows
        return [
            (t, {int(k): int(v) for k, v in json.loads(p).items()}, BatchCounts.model_validate_json(c))
            for t, p, c in rows
        ]

    def close(self) -> None:
        if self._owns_store:
            self.store.close()


def _upgrade_v1(job: dict[str, Any], parse_headers: HeaderParser) -> dict[str, Any]:
    """A format-1 job: the raw stream-load headers of its batches become the `LoadRequest` they stood for, read
    as that release read them for each batch. A job whose headers no longer parse (every batch of it would fail)
    is kept for SHOW, cancelled with the reason."""
    spec = dict(job["spec"])
    headers = dict(spec.pop("headers", {}))
    strip_outer_array = headers.pop("strip_outer_array", None) == "true"
    try:
        request = parse_headers(spec["db"], spec["table"], {**headers, "label": spec["name"]})
    except LoadError as exc:
        if JobState(job.get("state", JobState.NEED_SCHEDULE)).is_final:
            return {**job, "spec": spec}
        reason = error_reason(CREATE_TASKS_ERR, exc.text)
        return {**job, "spec": spec, "state": JobState.CANCELLED, "end_time": time.time(), "reason": reason}
    spec |= {"request": request.model_dump(mode="json"), "strip_outer_array": strip_outer_array}
    return {**job, "spec": spec}


class JobNotFound(DorisError):
    def __init__(self, name: str) -> None:
        super().__init__(f"There is not operable routine load job with name {name}")
