"""Broker load: `LOAD LABEL db.label (DATA INFILE(...) INTO TABLE t ...) [WITH BROKER ...] [PROPERTIES (...)]`,
`SHOW LOAD`, `CANCEL LOAD` and `SHOW TRANSACTION` (the Kafka connector's recovery query).

    LOAD LABEL ──parse──► the load options it sets ──► LoadRequest (read through the option table: the
        checks and allow-list of a stream load's headers) ──► plan, files, label, queue bound ──► a job row
        (PENDING) ──queue──► one of `concurrency` workers: files resolved again, PREPARE ──► LOADING: one
        Spark load job over the files, committed by the single writer ──► FINISHED with counts, or CANCELLED
        with a reason

Files are read only under the allowed roots (`tables/source_paths.py`: links and globs resolved, never the
server's own folders); the load reads the resolved files, not the patterns. URIs (hdfs://, s3a://) need an
allowed prefix of their own. The broker clause is accepted and ignored. A job PENDING or LOADING when the
server stopped is queued again at start-up (its transaction was resolved first: a committed one just
finishes the job).
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from sqlglot import TokenType

from loaders.headers import build_request
from loaders.options import OptionValues, statement_options
from spark_runner.load_job import POS
from spark_runner.planning import loaded_target, plan_load
from spark_runner.service import LoadService, PreparedLoad, format_reader
from sql.ddl import parse_properties
from sql.results import ExecStatus, ResultSet
from sql.tokens import Cursor
from tables.errors import DorisError, LoadError, SqlError, TxnStateError
from tables.load_jobs import CANCELLED, FINISHED, LOADING, UNFINISHED, LoadJob, LoadJobStore
from tables.load_spec import LoadRequest, MergeType, render_load
from tables.source_paths import SourcePolicy, resolve_sources
from tables.store import Store
from tables.transactions import VISIBLE, Txn

log = logging.getLogger(__name__)

FILE_SHIFT = 47  # rows of the n-th file come after those of earlier files: (file << FILE_SHIFT) + position
PROPERTY_OPTIONS = frozenset(statement_options("broker"))  # PROPERTIES keys that set a load option; others are ignored
CLAUSE_WORDS = ("SET", "WHERE", "DELETE", "ORDER", "ORDER BY", "PRECEDING", "PROPERTIES", "COLUMNS", "FORMAT", "LINES")


@dataclass
class BrokerLoad:
    """One parsed LOAD statement (a single data description): the load options its clauses and PROPERTIES set,
    as written (`options`), or typed by a keyword (`merge_type`, `negative`)."""

    db: str
    label: str
    table: str
    paths: list[str]
    options: dict[str, str] = field(default_factory=dict)
    merge_type: MergeType | None = None
    negative: bool = False

    def load_options(self) -> OptionValues:
        given: dict[str, object] = {"negative": self.negative}
        if self.merge_type is not None:
            given["merge_type"] = self.merge_type
        return OptionValues({**self.options, "label": self.label}, given)


def _raw_until(cur: Cursor, stops: tuple[str, ...]) -> str:
    """The source text of an expression: tokens up to a clause keyword or the closing paren, at depth 0."""
    start = cur.peek()
    if start is None:
        raise cur.error("an expression")
    depth = 0
    end = start
    while (tok := cur.peek()) is not None:
        if depth == 0 and (tok.token_type == TokenType.R_PAREN or cur.word() in stops):
            break
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
        end = tok
        cur.next()
    return cur.text[start.start : end.end + 1].strip()


def _string_list(cur: Cursor) -> list[str]:
    cur.expect_type(TokenType.L_PAREN, "(")
    items = [cur.string()]
    while cur.accept_type(TokenType.COMMA):
        items.append(cur.string())
    cur.expect_type(TokenType.R_PAREN, ")")
    return items


def _properties(cur: Cursor) -> dict[str, str]:
    """The PROPERTIES that set a load option (names in lower case); Doris's other job properties are ignored."""
    return {k.lower(): v for k, v in parse_properties(cur).items() if k.lower() in PROPERTY_OPTIONS}


def parse_load(text: str, current_db: str | None) -> BrokerLoad:
    """Parse `LOAD LABEL ...` into the load options it sets.

    Raises:
        SqlError: a syntax error, naming what was expected and where.
    """
    cur = Cursor(text)
    cur.expect("LOAD", "LABEL")
    db, label = cur.qualified_name()
    db = db or current_db
    if not db:
        raise SqlError("No database selected")
    cur.expect_type(TokenType.L_PAREN, "(")
    options: dict[str, str] = {}
    merge_type = None
    for merge in (MergeType.MERGE, MergeType.APPEND, MergeType.DELETE):
        if cur.accept(merge.value):
            merge_type = merge
    cur.expect("DATA", "INFILE")
    paths = _string_list(cur)
    negative = cur.accept("NEGATIVE")
    cur.expect("INTO", "TABLE")
    table = cur.name()
    temporary = cur.accept("TEMPORARY")
    if cur.accept("PARTITION"):  # rows of other partitions are filtered, as with the `partitions` header
        cur.expect_type(TokenType.L_PAREN, "(")
        names = [cur.name()]
        while cur.accept_type(TokenType.COMMA):
            names.append(cur.name())
        cur.expect_type(TokenType.R_PAREN, ")")
        options["temporary_partitions" if temporary else "partitions"] = ", ".join(names)
    elif temporary:
        raise cur.error("PARTITION")
    columns: list[str] = []
    while not cur.accept_type(TokenType.R_PAREN):
        if cur.accept("COLUMNS", "TERMINATED", "BY"):
            options["column_separator"] = cur.string()
        elif cur.accept("LINES", "TERMINATED", "BY"):
            options["line_delimiter"] = cur.string()
        elif cur.accept("FORMAT", "AS"):
            options["format"] = cur.string().lower()
        elif cur.at(TokenType.L_PAREN):
            cur.next()
            columns = [cur.name()]
            while cur.accept_type(TokenType.COMMA):
                columns.append(cur.name())
            cur.expect_type(TokenType.R_PAREN, ")")
        elif cur.accept("SET"):
            cur.expect_type(TokenType.L_PAREN, "(")
            while True:
                columns.append(_raw_until_comma(cur))
                if not cur.accept_type(TokenType.COMMA):
                    break
            cur.expect_type(TokenType.R_PAREN, ")")
        elif cur.accept("PRECEDING", "FILTER"):
            raise SqlError("PRECEDING FILTER in LOAD is not supported by this server yet")
        elif cur.accept("WHERE"):
            options["where"] = _raw_until(cur, CLAUSE_WORDS)
        elif cur.accept("DELETE", "ON"):
            options["delete"] = _raw_until(cur, CLAUSE_WORDS)
        elif cur.accept("ORDER BY") or cur.accept("ORDER", "BY"):  # sqlglot reads ORDER BY as one token
            options["function_column.sequence_col"] = cur.name()
        elif cur.accept("PROPERTIES"):
            options.update(_properties(cur))
        else:
            raise cur.error("a data description clause")
    if columns:
        options["columns"] = ", ".join(columns)
    if cur.accept("WITH"):
        cur.accept("BROKER") or cur.accept("S3") or cur.accept("HDFS") or cur.accept("RESOURCE")
        if not cur.at(TokenType.L_PAREN):
            cur.string() if not cur.at(TokenType.VAR) else cur.name()
        if cur.at(TokenType.L_PAREN):
            cur.skip_parens()
    if cur.accept("PROPERTIES"):
        options.update(_properties(cur))
    if not cur.at_end():
        raise cur.error("end of statement")
    return BrokerLoad(db, label, table, paths, options, merge_type, negative)


def _raw_until_comma(cur: Cursor) -> str:
    start = cur.peek()
    if start is None:
        raise cur.error("an assignment")
    depth, end = 0, start
    while (tok := cur.peek()) is not None:
        if depth == 0 and tok.token_type in (TokenType.COMMA, TokenType.R_PAREN):
            break
        depth += tok.token_type == TokenType.L_PAREN
        depth -= tok.token_type == TokenType.R_PAREN
        end = tok
        cur.next()
    return cur.text[start.start : end.end + 1].strip()


def _time(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "NULL"


class BrokerLoads:
    """Runs broker load jobs from a bounded queue and answers SHOW LOAD / CANCEL LOAD / SHOW TRANSACTION."""

    def __init__(
        self,
        *,
        loads: LoadService,
        data_dir: Path,
        store: Store | None = None,
        sources: SourcePolicy | None = None,
        max_waiting_jobs: int = 100,
        concurrency: int = 2,
        owner: str | None = None,
    ) -> None:
        self.owner = owner  # several servers share the store: a job runs, and resumes, on its own server
        self.loads = loads
        self.store = LoadJobStore(store or data_dir / "load_jobs.db")  # the shared store, or a file of its own
        self.sources = sources or SourcePolicy.build([], [data_dir])
        self.max_waiting_jobs = max_waiting_jobs
        self._running: dict[int, PreparedLoad] = {}
        self._cancelled: set[int] = set()
        self._guard = threading.Lock()
        self._submitting = threading.Lock()  # the bound check and the job row, one statement at a time
        self._queue: queue.SimpleQueue[tuple[int, BrokerLoad]] = queue.SimpleQueue()
        for n in range(concurrency):
            threading.Thread(target=self._work, name=f"broker-load-worker-{n}", daemon=True).start()

    # -- LOAD LABEL ---------------------------------------------------------------------------
    def submit(self, text: str, current_db: str | None) -> ExecStatus:
        """Check the statement now (Doris refuses a bad load before the job exists), run it later.

        Raises:
            SqlError, DorisError, LoadError: syntax, unknown table, bad columns, label in use, a file that may
                not be read, too many unfinished jobs.
        """
        load = parse_load(text, current_db)
        request = self._request(load)
        handle = loaded_target(self.loads.catalog, self.loads.catalog.load(load.db, load.table), request)
        plan_load(request.model_copy(update={"table": handle.definition.name}), handle.definition)
        self._resolve(load)
        task_info = f"cluster:N/A; timeout(s):{request.timeout_s}; max_filter_ratio:{request.max_filter_ratio}"
        with self._submitting:
            holder = self.loads.txns.find_label(load.db, load.label)
            if (
                holder is not None
                and holder.state != "ABORTED"
                or any(j.state != CANCELLED for j in self.store.in_database(load.db, label=load.label))
            ):
                raise SqlError(f"Label [{load.label}] has already been used.")
            if self.store.unfinished_count() >= self.max_waiting_jobs:
                raise SqlError(
                    f"There are more than {self.max_waiting_jobs} unfinished load jobs, please retry later. "
                    "You can use `SHOW LOAD` to view submitted jobs"
                )
            job_id = self.store.create(
                db=load.db,
                label=load.label,
                table=handle.definition.name,
                statement=text,
                task_info=task_info,
                owner=self.owner,
            )
        self._queue.put((job_id, load))
        return ExecStatus()

    def _request(self, load: BrokerLoad) -> LoadRequest:
        return build_request(load.db, load.table, load.load_options()).model_copy(update={"source": "broker_load"})

    def _resolve(self, load: BrokerLoad) -> list[str]:
        """The files the load reads. Raises: SourcePathError, worded as Doris's broker load and `local()`."""
        return resolve_sources(load.paths, self.sources, load.table)

    def _work(self) -> None:
        while True:
            job_id, load = self._queue.get()
            try:
                self._run_job(job_id, load)
            except Exception:  # a bug: the job is cancelled with the reason, the worker lives on
                log.exception("broker load %s failed", load.label)
                self._cancel_job(job_id, "type:ETL_RUN_FAIL; msg:internal error, see the server log")

    def _run_job(self, job_id: int, load: BrokerLoad) -> None:
        """Resolve the files again (they may have changed since LOAD), take the label, run, record the outcome."""
        job = self.store.get(job_id)
        if job is None or job.state not in UNFINISHED:
            return  # cancelled while it waited
        try:
            files = self._resolve(load)
            prepared = self.loads.prepare(self._request(load).model_copy(update={"table": job.table}))
        except (SqlError, DorisError, LoadError) as exc:
            self._cancel_job(job_id, f"type:ETL_RUN_FAIL; msg:{_text(exc)}")
            return
        with self._guard:
            if job_id in self._cancelled:
                self.loads.writer.abort_txn(prepared.txn_id, "user cancel")
                return
            self._running[job_id] = prepared
        self.store.update(job_id, state=LOADING, txn_id=prepared.txn_id, load_started=_now())
        self._run(job_id, load, files, prepared)

    def _cancel_job(self, job_id: int, reason: str) -> None:
        self.store.update(job_id, state=CANCELLED, finished=_now(), error_msg=reason)

    def _run(self, job_id: int, load: BrokerLoad, files: list[str], prepared: PreparedLoad) -> None:
        try:
            result = self.loads.run(prepared, lambda spark, load: _files_source(spark, files, load))
        except Exception as exc:  # a bug: the job is cancelled with the reason, never left LOADING
            log.exception("broker load %s failed", load.label)
            result = render_load(exc, txn_id=prepared.txn_id, label=load.label, message=str(exc))
        with self._guard:
            self._running.pop(job_id, None)
            cancelled = job_id in self._cancelled
        details = {
            "ScannedRows": result.number_total_rows,
            "TaskNumber": 1,
            "FileNumber": len(files),
            "LoadBytes": result.load_bytes,
            "Unfinished backends": {},
            "All backends": {},
            "LoadedRows": result.number_loaded_rows,
            "FilteredRows": result.number_filtered_rows,
            "UnselectedRows": result.number_unselected_rows,
        }
        if result.status == "Success":
            self.store.update(job_id, state=FINISHED, finished=_now(), details=details, url=result.error_url)
        else:
            reason = "type:USER_CANCEL; msg:user cancel" if cancelled else f"type:ETL_RUN_FAIL; msg:{result.message}"
            self.store.update(
                job_id, state=CANCELLED, finished=_now(), details=details, url=result.error_url, error_msg=reason
            )

    # -- start-up -------------------------------------------------------------------------------
    def recover(self) -> tuple[int, int]:
        """Jobs that were PENDING or LOADING at the stop: finished if their commit landed, else queued again
        (a new transaction, same label; the files are checked again when the job runs), or cancelled with the
        reason. Returns (resumed, cancelled)."""
        return self._resume(self.owner)

    def adopt(self, server: str) -> int:
        """Several servers: resume the unfinished jobs of a server that is gone (after its transactions were
        resolved); they become this server's. Returns how many were resumed or cancelled."""
        return sum(self._resume(server, adopt=True))

    def _resume(self, owner: str | None, *, adopt: bool = False) -> tuple[int, int]:
        resumed = cancelled = 0
        for job in self.store.unfinished():
            if (owner is not None or adopt) and job.owner != owner:
                continue
            if adopt:
                self.store.update(job.job_id, owner=self.owner)
            txn: Txn | None = self.loads.txns.get(job.txn_id) if job.txn_id else None
            if txn is not None and txn.state == VISIBLE:
                self.store.update(job.job_id, state=FINISHED, finished=_now())
                continue
            try:
                load = parse_load(job.statement, job.db)
            except SqlError as exc:
                self._cancel_job(
                    job.job_id,
                    f"type:ETL_RUN_FAIL; msg:job interrupted by a server restart and cannot resume: {_text(exc)}",
                )
                cancelled += 1
                continue
            self._queue.put((job.job_id, load))
            resumed += 1
        return resumed, cancelled

    # -- CANCEL LOAD ----------------------------------------------------------------------------
    def cancel(self, text: str, current_db: str | None) -> ExecStatus:
        """`CANCEL LOAD [FROM db] WHERE LABEL = "x"`.

        Raises:
            SqlError: no such job, or it has already finished.
        """
        cur = Cursor(text)
        cur.expect("CANCEL", "LOAD")
        db = cur.name() if cur.accept("FROM") or cur.accept("IN") else current_db
        cur.expect("WHERE", "LABEL")
        cur.expect_type(TokenType.EQ, "=")
        label = cur.string()
        if not db:
            raise SqlError("No database selected")
        jobs = [j for j in self.store.in_database(db, label=label) if j.state in UNFINISHED]
        if not jobs:
            raise SqlError(f"Load job does not exist or is already finished: label [{label}]")
        for job in jobs:
            with self._guard:
                prepared = self._running.get(job.job_id)
                self._cancelled.add(job.job_id)
                if prepared is None:  # still waiting: its worker will skip it
                    self._cancel_job(job.job_id, "type:USER_CANCEL; msg:user cancel")
                    continue
            try:
                self.loads.writer.abort_txn(prepared.txn_id, "user cancel")
            except TxnStateError:
                raise SqlError(f"Load job [{label}] is already committing and cannot be cancelled") from None
            self.loads.spark.sparkContext.cancelJobGroup(f"load_txn_{prepared.txn_id}")
        return ExecStatus()

    # -- SHOW LOAD / SHOW TRANSACTION -------------------------------------------------------------
    def show_load(
        self, cur: Cursor, current_db: str | None, can_load: Callable[[str, str], bool] | None = None
    ) -> ResultSet:
        """`SHOW LOAD [FROM db] [WHERE LABEL = "x"]` (after `SHOW LOAD` was consumed). `can_load(db, table)`: whether
        the user holds LOAD_PRIV on the table; only the jobs of such tables are listed, as Doris's
        `LoadManager.getLoadJobInfosByDb` skips a job whose `checkAuth` fails (None: every job)."""
        db = cur.name() if cur.accept("FROM") or cur.accept("IN") else current_db
        label = None
        if cur.accept("WHERE", "LABEL"):
            cur.expect_type(TokenType.EQ, "=")
            label = cur.string()
        if not db:
            raise SqlError("No database selected")
        self.loads.catalog.require_database(db)
        visible = can_load or (lambda db, table: True)
        rows = [_show_row(job) for job in self.store.in_database(db, label=label) if visible(db, job.table)]
        return ResultSet(columns=[(c, "VARCHAR") for c in SHOW_LOAD_COLUMNS], rows=rows)

    def show_transaction(self, cur: Cursor, current_db: str | None) -> ResultSet:
        """`SHOW TRANSACTION [FROM db] WHERE LABEL [= | LIKE] "x" | ID = n` (after `SHOW TRANSACTION`)."""
        db = cur.name() if cur.accept("FROM") or cur.accept("IN") else current_db
        if not db:
            raise SqlError("No database selected")
        self.loads.catalog.require_database(db)
        cur.expect("WHERE")
        txns = self.loads.txns.in_database(db)
        if cur.accept("LABEL"):
            if cur.accept("LIKE"):
                txns = self.loads.txns.in_database(db, label_like=cur.string())
            else:
                cur.expect_type(TokenType.EQ, "=")
                wanted = cur.string()
                txns = [t for t in txns if t.label == wanted]
        elif cur.accept("ID"):
            cur.expect_type(TokenType.EQ, "=")
            wanted_id = int(cur.string())
            txns = [t for t in txns if t.txn_id == wanted_id]
        else:
            raise cur.error("LABEL or ID")
        rows = [
            [
                t.txn_id,
                t.label,
                "BE: 127.0.0.1",
                t.state,
                "BACKEND_STREAMING",
                _time(t.created),
                _time(t.precommitted),
                _time(t.finished if t.state == VISIBLE else None),
                _time(t.finished if t.state == VISIBLE else None),
                _time(t.finished),
                t.reason or "",
                0,
                -1,
                259200000,
                "",
            ]
            for t in txns
        ]
        return ResultSet(columns=[(c, "VARCHAR") for c in SHOW_TRANSACTION_COLUMNS], rows=rows)


SHOW_LOAD_COLUMNS = (
    "JobId", "Label", "State", "Progress", "Type", "EtlInfo", "TaskInfo", "ErrorMsg", "CreateTime",
    "EtlStartTime", "EtlFinishTime", "LoadStartTime", "LoadFinishTime", "URL", "JobDetails",
    "TransactionId", "ErrorTablets", "User", "Comment",
)  # fmt: skip
SHOW_TRANSACTION_COLUMNS = (
    "TransactionId", "Label", "Coordinator", "TransactionStatus", "LoadJobSourceType", "PrepareTime",
    "PreCommitTime", "CommitTime", "PublishTime", "FinishTime", "Reason", "ErrorReplicasCount", "ListenerId",
    "TimeoutMs", "ErrMsg",
)  # fmt: skip


def _show_row(job: LoadJob) -> list[object]:
    import json

    d = job.details
    progress = "100.00% (1/1)" if job.state == FINISHED else "0.00% (0/1)"
    etl = (
        f"unselected.rows={d.get('UnselectedRows', 0)}; dpp.abnorm.ALL={d.get('FilteredRows', 0)}; "
        f"dpp.norm.ALL={d.get('LoadedRows', 0)}"
        if job.state == FINISHED
        else "NULL"
    )
    return [
        job.job_id,
        job.label,
        job.state,
        progress,
        "BROKER",
        etl,
        job.task_info,
        job.error_msg or "NULL",
        _time(job.created),
        _time(job.load_started),
        _time(job.load_started),
        _time(job.load_started),
        _time(job.finished),
        job.url or "NULL",
        json.dumps(d),
        job.txn_id if job.txn_id is not None else -1,
        "{}",
        "root",
        "",
    ]


def _text(exc: SqlError | DorisError | LoadError) -> str:
    if isinstance(exc, SqlError):
        return exc.detail
    return exc.message if isinstance(exc, DorisError) else exc.text


def _now() -> float:
    import time

    return time.time()


def _files_source(spark: SparkSession, paths: list[str], prepared: PreparedLoad) -> DataFrame:
    """The resolved files of a broker load, in order: a later file's row wins a tie over an earlier file's."""
    read = format_reader(prepared.request)
    frame: DataFrame | None = None
    for index, path in enumerate(paths):
        part = read(spark, path, prepared.plan)  # type: ignore[arg-type]  # a real local path or an allowed URI
        part = part.selectExpr(f"({index} << {FILE_SHIFT}) + {POS} AS {POS}", *[c for c in part.columns if c != POS])
        frame = part if frame is None else frame.unionByName(part)
    assert frame is not None
    return frame
