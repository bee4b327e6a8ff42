"""Runs the routine load statements against the job manager, and prints SHOW as Doris does."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime

from spark_runner.planning import loaded_target, plan_load
from spark_runner.routine_load import RoutineLoadManager
from sql.results import ExecStatus, ResultSet, StatementResult
from sql.routine_load import (
    CreateRoutineLoad,
    JobCommand,
    ShowRoutineLoad,
    ShowRoutineLoadTask,
    batch_request,
    build_spec,
    parse_routine_load,
)
from tables.accounts import like
from tables.catalog import Catalog
from tables.errors import LoadError, SqlError
from tables.routine_load import OFFSET_BEGINNING, OFFSET_END, JobNotFound, RoutineLoadJob

SHOW_COLUMNS = (
    "Id",
    "Name",
    "CreateTime",
    "PauseTime",
    "EndTime",
    "DbName",
    "TableName",
    "IsMultiTable",
    "State",
    "DataSourceType",
    "CurrentTaskNum",
    "JobProperties",
    "DataSourceProperties",
    "CustomProperties",
    "Statistic",
    "Progress",
    "Lag",
    "ReasonOfStateChanged",
    "ErrorLogUrls",
    "OtherMsg",
    "User",
    "Comment",
)
SECRET_MASK = "******"
TASK_COLUMNS = (
    "TaskId",
    "TxnId",
    "TxnStatus",
    "JobId",
    "CreateTime",
    "ExecuteStartTime",
    "Timeout",
    "BeId",
    "DataSourceProperties",
)


def run_routine_load_statement(
    text: str,
    current_db: str,
    *,
    manager: RoutineLoadManager | None,
    catalog: Catalog,
    can_load: Callable[[str, str], bool] | None = None,
) -> StatementResult:
    """`can_load(db, table)`: whether the user holds LOAD_PRIV on the table; SHOW ROUTINE LOAD [TASK] lists only
    the jobs of such tables, as Doris's ShowExecutor skips the others (None: every job, for the server's own use).

    Raises: SqlError; DorisError from the catalog or the manager (the executor words both)."""
    if manager is None:
        raise SqlError("routine load is not available on this server")
    stmt = parse_routine_load(text)
    if isinstance(stmt, CreateRoutineLoad):
        _create(stmt, current_db, manager, catalog)
        return ExecStatus()
    if isinstance(stmt, JobCommand):
        db = stmt.db or current_db
        catalog.require_database(db)
        if stmt.verb == "PAUSE":
            manager.pause(db, stmt.name)
        elif stmt.verb == "RESUME":
            manager.resume(db, stmt.name)
        else:
            assert stmt.name is not None
            manager.stop(db, stmt.name)
        return ExecStatus()
    visible = can_load or (lambda db, table: True)
    if isinstance(stmt, ShowRoutineLoad):
        return _show(stmt, current_db, manager, visible)
    return _show_tasks(stmt, current_db, manager, visible)


def _create(stmt: CreateRoutineLoad, current_db: str, manager: RoutineLoadManager, catalog: Catalog) -> None:
    spec = build_spec(stmt, current_db, min_batch_rows=manager.min_batch_rows, cert_dir=manager.cert_dir)
    handle = catalog.load(spec.db, spec.table)
    table = handle.definition
    if spec.merge_type != "APPEND" and not table.is_unique:
        raise SqlError("load by MERGE or DELETE is only supported in unique tables.")
    try:  # the batches' load must plan against the table: refuse a job whose every batch would fail
        request = batch_request(stmt, spec, table.name)
        plan_load(request, loaded_target(catalog, handle, request).definition)
    except LoadError as exc:
        raise SqlError(exc.text) from None
    manager.create(spec.model_copy(update={"table": table.name, "request": request}))


def _time(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _offset_text(next_offset: int) -> str:
    """Doris's KafkaProgress display: the last consumed offset, or where consumption will start."""
    if next_offset == OFFSET_BEGINNING:
        return "OFFSET_BEGINNING"
    if next_offset == OFFSET_END:
        return "OFFSET_END"
    return "OFFSET_ZERO" if next_offset == 0 else str(next_offset - 1)


def _progress(job: RoutineLoadJob) -> dict[str, str]:
    spec = job.spec
    start = dict(zip(spec.partitions, spec.start_offsets, strict=True))
    start.update(job.progress)
    return {str(p): _offset_text(o) for p, o in sorted(start.items())}


def _show_row(job: RoutineLoadJob, manager: RoutineLoadManager) -> list[object]:
    spec = job.spec
    task, lag = manager.runtime(job.id)
    running = task is not None and job.state.value == "RUNNING"
    properties = {**spec.job_properties, "current_concurrent_number": "1" if running else "0"}
    partitions = sorted(job.progress) or list(spec.partitions)
    source = {
        "topic": spec.topic,
        "currentKafkaPartitions": ",".join(map(str, partitions)),
        "brokerList": spec.broker_list,
    }
    end = job.end_time or time.time()
    statistic = job.statistic.summary(
        [task.txn_id] if task and task.txn_id > 0 else [], int((end - job.create_time) * 1000)
    )
    return [
        str(job.id),
        spec.name,
        _time(job.create_time),
        _time(job.pause_time),
        _time(job.end_time),
        spec.db,
        spec.table,
        "false",
        job.state.value,
        "KAFKA",
        "1" if running else "0",
        _json(properties),
        _json(source),
        _json(_masked(spec.custom_properties)),
        _json(statistic),
        _json(_progress(job)),
        _json({str(p): v for p, v in sorted(lag.items())}),
        job.reason,
        ", ".join(job.error_log_urls),
        job.other_msg,
        job.user,
        spec.comment,
    ]


def _masked(properties: dict[str, str]) -> dict[str, str]:
    """The client properties as SHOW prints them: secrets (`sasl.password`, `ssl.key.password`,
    `ssl.keystore.password`) as `******`, as Doris masks a routine load's secret keys."""
    return {k: SECRET_MASK if "password" in k.lower() else v for k, v in properties.items()}


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _show(
    stmt: ShowRoutineLoad, current_db: str, manager: RoutineLoadManager, visible: Callable[[str, str], bool]
) -> ResultSet:
    db = stmt.db or current_db
    jobs = [j for j in manager.jobs(db) if (stmt.include_history or not j.state.is_final) and visible(db, j.spec.table)]
    if stmt.name is not None:
        jobs = [j for j in jobs if j.spec.name == stmt.name]
        if not jobs:
            raise SqlError(
                f"There is no job named {stmt.name} in db {db}. Include history? {str(stmt.include_history).lower()}"
            )
    if stmt.pattern is not None:  # linear: a regex of `.*` runs backtracked on `LIKE '%%%...%X'` holding the GIL
        pattern = stmt.pattern.lower()
        jobs = [j for j in jobs if like(pattern, j.spec.name.lower())]
    jobs.sort(key=lambda j: j.create_time)
    return ResultSet(columns=[(c, "VARCHAR") for c in SHOW_COLUMNS], rows=[_show_row(j, manager) for j in jobs])


def _show_tasks(
    stmt: ShowRoutineLoadTask, current_db: str, manager: RoutineLoadManager, visible: Callable[[str, str], bool]
) -> ResultSet:
    db = stmt.db or current_db
    job = manager.find(db, stmt.name)
    if not visible(db, job.spec.table):  # answered as a job that does not exist
        raise JobNotFound(stmt.name)
    task, _ = manager.runtime(job.id)
    rows: list[list[object]] = []
    if task is not None and not job.state.is_final:
        rows.append(
            [
                task.task_id,
                str(task.txn_id),
                task.txn_status,
                str(job.id),
                _time(task.create_time),
                _time(task.execute_start),
                str(job.spec.max_batch_interval_s),
                "-1" if task.execute_start is None else "1",
                _json({str(p): o for p, o in sorted(task.offsets.items())}),
            ]
        )
    return ResultSet(columns=[(c, "VARCHAR") for c in TASK_COLUMNS], rows=rows)
