"""Runs Doris SQL statements: DDL and SHOW against the catalog, INSERT through loads, SELECT on Spark."""

from __future__ import annotations

import datetime as dt
import logging
import re
import time

import sqlglot
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from sqlglot import TokenType, exp

from spark_runner.compaction import Compactor
from spark_runner.queries import JobGuard, collect_result
from spark_runner.routine_load import RoutineLoadManager
from spark_runner.service import LoadService
from sql.admin import admin_compact, show_tablets
from sql.alter import parse_alter, plan_alter
from sql.broker_load import BrokerLoads
from sql.ddl import parse_create_table
from sql.delete import delete_predicate
from sql.insert import insert_request, insert_target, values_rows
from sql.results import ExecStatus, ResultSet, StatementResult
from sql.routine_load import is_routine_load
from sql.routine_load_commands import run_routine_load_statement
from sql.select import QueryLimits, drop_views, parse_query, run_query
from sql.session import Session, check_statement_count
from sql.show_create import show_create_table
from sql.tokens import Cursor, split_statements
from tables.catalog import Catalog
from tables.commit import TableWriter
from tables.errors import DorisError, LoadError, SqlError
from tables.model import DELETE_SIGN, SEQUENCE_COL, VERSION_COL, KeysType, TableDef
from tables.schema_change import SchemaOp

log = logging.getLogger(__name__)

BUILTIN_DATABASES = ("information_schema", "mysql")
ALTER_JOB_COLUMNS = (
    "JobId",
    "TableName",
    "CreateTime",
    "FinishTime",
    "IndexName",
    "IndexId",
    "OriginIndexId",
    "SchemaVersion",
    "TransactionId",
    "State",
    "Msg",
    "Progress",
    "Timeout",
)


class SqlExecutor:
    """One executor per server; a `Session` carries the per-request (or per-connection) state."""

    def __init__(
        self,
        *,
        spark: SparkSession,
        catalog: Catalog,
        loads: LoadService,
        writer: TableWriter,
        row_limit: int = 1000,
        routine_loads: RoutineLoadManager | None = None,
        compactor: Compactor | None = None,
        address: str = "127.0.0.1:8030",
        limits: QueryLimits | None = None,
        max_statements: int = 100,
    ) -> None:
        self.limits = limits or QueryLimits()
        self.max_statements = max_statements
        self.routine_loads = routine_loads
        self.spark = spark
        self.catalog = catalog
        self.loads = loads
        self.writer = writer
        self.row_limit = row_limit
        self.broker_loads: BrokerLoads | None = None  # set by the app: LOAD LABEL, SHOW/CANCEL LOAD
        self.compactor = compactor or Compactor(spark=spark, catalog=catalog, writer=writer)
        self.address = address  # host:port the tablet views link to

    def execute_script(self, text: str, session: Session, *, limit: int | None = None) -> StatementResult:
        """Run `;`-separated statements in order; the reply is the last statement's.

        Raises:
            SqlError: the first failing statement's error (earlier statements stay applied).
        """
        statements = split_statements(text)
        if not statements:
            raise SqlError("Missing statement")
        check_statement_count(len(statements), self.max_statements)
        result: StatementResult = ExecStatus()
        for stmt in statements:
            result = self.execute(stmt, session, limit=limit)
        return result

    def execute(self, text: str, session: Session, *, limit: int | None = None) -> StatementResult:
        """Run one statement; its Spark jobs are cancelled past the session's query_timeout or on interrupt."""
        if session.interrupted is not None:
            raise SqlError(session.interrupted)
        started = time.monotonic()
        # as in Doris, statements that write (INSERT, UPDATE, DELETE) have their own, longer timeout
        writes = text.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE")
        guard = JobGuard(
            self.spark, timeout_seconds=session.timeout_seconds("insert_timeout" if writes else "query_timeout")
        )
        try:
            with guard:  # entering touches the JVM: a stopped one is an error like any other
                session.running = guard
                result = self._dispatch(text, session, limit)
        except Exception as exc:
            raise _sql_error(exc, text, guard) from None
        finally:
            session.running = None
        ms = int((time.monotonic() - started) * 1000)
        if isinstance(result, ExecStatus):
            return ExecStatus(affected_rows=result.affected_rows, time_ms=ms, info=result.info)
        return ResultSet(columns=result.columns, rows=result.rows, time_ms=ms)

    # -- dispatch -------------------------------------------------------------------------
    def _dispatch(self, text: str, session: Session, limit: int | None) -> StatementResult:
        cur = Cursor(text)
        first, second = cur.word(), cur.word(1)
        if is_routine_load(cur):
            return run_routine_load_statement(text, session.db, manager=self.routine_loads, catalog=self.catalog)
        if first == "CREATE" and second in ("DATABASE", "SCHEMA"):
            cur.i = 2
            if_not_exists = cur.accept("IF", "NOT", "EXISTS")
            self.catalog.create_database(cur.name(), if_not_exists=if_not_exists)
            return ExecStatus()
        if first == "CREATE" and second in ("TABLE", "EXTERNAL"):
            create = parse_create_table(text, session.db)
            self.catalog.create_table(create.definition, if_not_exists=create.if_not_exists)
            return ExecStatus()
        if first == "DROP" and second in ("DATABASE", "SCHEMA"):
            cur.i = 2
            if_exists = cur.accept("IF", "EXISTS")
            name = cur.name()
            self.writer.drop_database(name, if_exists=if_exists, force=cur.accept("FORCE"))
            return ExecStatus()
        if first == "DROP" and second == "TABLE":
            cur.i = 2
            if_exists = cur.accept("IF", "EXISTS")
            db, name = cur.qualified_name()
            self.writer.drop_table(db or session.db, name, if_exists=if_exists, force=cur.accept("FORCE"))
            return ExecStatus()
        if first == "TRUNCATE":
            cur.i = 1
            cur.accept("TABLE")
            db, name = cur.qualified_name()
            handle = self.catalog.load(db or session.db, name)
            self.writer.truncate(handle.definition.db, handle.definition.name)
            return ExecStatus()
        if first == "SHOW":
            return self._show(cur, session)
        if first in ("DESC", "DESCRIBE"):
            cur.i = 1
            db, name = cur.qualified_name()
            return self._describe(self.catalog.load(db or session.db, name).definition, session)
        if first == "USE":
            cur.i = 1
            db = cur.name()
            self.catalog.require_database(db)
            session.db = db
            return ExecStatus()
        if first == "SET":
            return self._set(text, session)
        if first == "INSERT":
            return self._insert(text, session)
        if first in ("SELECT", "WITH", "(") or text.lstrip().startswith("("):
            return self._select(text, session, limit)
        if first == "UPDATE":
            return self._update(text, session)
        if first == "ALTER" and second == "TABLE":
            alter = parse_alter(text)
            handle = self.catalog.load(alter.db or session.db, alter.table)
            self.writer.alter(handle.definition.db, handle.definition.name, plan_alter(alter))
            return ExecStatus()
        if first == "DELETE":
            return self._delete(text, session)
        if self.broker_loads is not None and (first == "LOAD" or (first, second) == ("CANCEL", "LOAD")):
            run = self.broker_loads.submit if first == "LOAD" else self.broker_loads.cancel
            return run(text, session.db)
        if first == "ADMIN" and second == "COMPACT":
            return admin_compact(cur, session, self.compactor)
        if first in ("ALTER", "LOAD", "ADMIN", "CANCEL"):
            raise SqlError(f"{first} statements are not supported by this server yet")
        raise SqlError(f"Unsupported statement: {text.split()[0] if text.split() else text}")

    # -- statements -----------------------------------------------------------------------
    def _show(self, cur: Cursor, session: Session) -> StatementResult:
        cur.i = 1
        if cur.accept("DATABASES") or cur.accept("SCHEMAS"):
            names = list(BUILTIN_DATABASES) + self.catalog.list_databases()
            return ResultSet(columns=[("Database", "VARCHAR")], rows=[[n] for n in sorted(set(names))])
        if cur.accept("CREATE", "TABLE"):
            db, name = cur.qualified_name()
            table = self.catalog.load(db or session.db, name).definition
            return ResultSet(
                columns=[("Table", "VARCHAR"), ("Create Table", "VARCHAR")],
                rows=[[table.name, show_create_table(table)]],
            )
        if cur.accept("ALTER", "TABLE", "COLUMN"):
            return self._show_alter(cur, session)
        if cur.accept("DELETE"):
            db = session.db
            if cur.accept("FROM") or cur.accept("IN"):
                db = cur.name()
            rows: list[list[object]] = []
            for name in self.catalog.list_tables(db):
                for pred in self.catalog.load(db, name).definition.delete_predicates:
                    rows.append([name, name, pred.create_time, pred.display, "FINISHED"])
            fields = ("TableName", "PartitionName", "CreateTime", "DeleteCondition", "State")
            return ResultSet(columns=[(n, "VARCHAR") for n in fields], rows=sorted(rows, key=lambda r: str(r[2])))
        if cur.word() in ("TABLETS", "TABLET") and cur.word(1) == "FROM":
            return show_tablets(cur, session, self.compactor, address=self.address)
        cur.accept("FULL")
        if cur.accept("TABLES"):
            db = session.db
            if cur.accept("FROM") or cur.accept("IN"):
                db = cur.name()
            return ResultSet(columns=[(f"Tables_in_{db}", "VARCHAR")], rows=[[n] for n in self.catalog.list_tables(db)])
        if self.broker_loads is not None and cur.accept("LOAD"):
            return self.broker_loads.show_load(cur, session.db)
        if self.broker_loads is not None and cur.accept("TRANSACTION"):
            return self.broker_loads.show_transaction(cur, session.db)
        raise SqlError("This SHOW statement is not supported by this server yet")

    def _show_alter(self, cur: Cursor, session: Session) -> ResultSet:
        """`SHOW ALTER TABLE COLUMN [FROM db] [WHERE TableName = 't'] ...`: every schema change, FINISHED."""
        db = session.db
        if cur.accept("FROM") or cur.accept("IN"):
            db = cur.name()
        wanted: str | None = None
        if cur.accept("WHERE"):
            if cur.word() != "TABLENAME":
                raise SqlError("SHOW ALTER TABLE COLUMN supports WHERE TableName = '<table>' only")
            cur.next()
            cur.expect_type(TokenType.EQ, "=")
            wanted = cur.string()
        names = ALTER_JOB_COLUMNS
        rows: list[list[object]] = []
        for name in self.catalog.list_tables(db):
            if wanted is not None and name != wanted:
                continue
            table = self.catalog.load(db, name).definition
            for job in table.alter_jobs:
                rows.append(
                    [
                        job.job_id,
                        name,
                        job.create_time,
                        job.finish_time,
                        name,
                        job.job_id,
                        job.job_id,
                        f"{job.schema_version}:0",
                        -1,
                        "FINISHED",
                        "",
                        "",
                        2592000,
                    ]
                )
        rows.sort(key=lambda r: (str(r[2]), int(str(r[0]))))
        return ResultSet(columns=[(n, "VARCHAR") for n in names], rows=rows)

    def _describe(self, table: TableDef, session: Session) -> ResultSet:
        show_hidden = session.flag("show_hidden_columns")
        cols = list(table.columns)
        if show_hidden:
            hidden = {c.name: c for c in table.shown_hidden_columns()}
            # DESC lists hidden columns as delete sign, sequence, version (contract §6.1)
            cols += [hidden[n] for n in (DELETE_SIGN, SEQUENCE_COL, VERSION_COL) if n in hidden]
        rows = []
        for c in cols:
            if c.is_key:
                extra = ""
            elif table.keys_type is KeysType.UNIQUE:
                extra = "NONE" if table.merge_on_write else "REPLACE"
            elif table.keys_type is KeysType.AGGREGATE:
                extra = c.aggregation or ""
            else:
                extra = "NONE"
            rows.append(
                [
                    c.name,
                    c.type.sql(),
                    "Yes" if c.nullable else "No",
                    "true" if c.is_key else "false",
                    c.default if c.has_default else None,
                    extra,
                ]
            )
        names = ("Field", "Type", "Null", "Key", "Default", "Extra")
        return ResultSet(columns=[(n, "VARCHAR") for n in names], rows=rows)

    def _set(self, text: str, session: Session) -> StatementResult:
        tree = sqlglot.parse_one(text, dialect="doris")
        if not isinstance(tree, exp.Set):
            raise SqlError("Syntax error in SET")
        for item in tree.expressions:
            assignment = item.this
            if not isinstance(assignment, exp.EQ):
                raise SqlError(f"Syntax error in SET: {item.sql(dialect='doris')}")
            name = assignment.this.sql(dialect="doris").strip("`")
            value_node = assignment.expression
            if isinstance(value_node, exp.Literal):
                value = str(value_node.this)
            elif isinstance(value_node, exp.Boolean):
                value = "true" if value_node.this else "false"
            else:
                value = value_node.sql(dialect="doris").strip("'\"`")
            session.set(name, value)
        return ExecStatus()

    def _insert(self, text: str, session: Session) -> StatementResult:
        tree = parse_query(text)
        if not isinstance(tree, exp.Insert):
            raise SqlError("Syntax error in INSERT")
        table_node, columns = insert_target(tree)
        handle = self.catalog.load(table_node.db or session.db, table_node.name)
        table = handle.definition
        source = tree.expression
        if not isinstance(source, (exp.Values, exp.Query)):
            raise SqlError("INSERT takes VALUES or a query")
        rows = values_rows(tree, lambda node: self._evaluate(node, session))
        partial = session.flag("enable_unique_key_partial_update") and columns is not None
        request = insert_request(
            db=table.db, table=table.name, columns=columns, strict=session.flag("enable_insert_strict")
        ).model_copy(
            update={
                "partial_columns": partial and table.is_unique and table.merge_on_write,
                "partial_update_new_key_behavior": session.variables.get("partial_update_new_key_behavior", "APPEND"),
            }
        )
        width = len(columns) if columns is not None else len(table.columns)
        if rows is not None:
            if any(len(r) != width for r in rows):
                raise SqlError("Column count doesn't match value count")
            prepared = self.loads.prepare(request)
            result = self.loads.run_rows(prepared, rows)
        else:
            frame, views = run_query(
                self.spark,
                self.catalog,
                tree.expression,
                db=session.db,
                show_hidden=session.flag("show_hidden_columns"),
                limits=self.limits,
            )
            try:
                if len(frame.columns) != width:
                    raise SqlError("Column count doesn't match value count")
                prepared = self.loads.prepare(request)
                result = self.loads.run_frame(prepared, frame)
            finally:
                drop_views(self.spark, views)
        if result.status != "Success":
            if result.number_filtered_rows:
                raise SqlError(f"Insert has filtered data in strict mode. url: {result.error_url or ''}".strip())
            raise SqlError(_strip_code(result.message))
        return ExecStatus(affected_rows=result.number_loaded_rows, info={"label": result.label, "txnId": result.txn_id})

    def _evaluate(self, node: exp.Expression, session: Session) -> str | None:
        """A non-literal VALUES item, run as `SELECT CAST(item AS STRING)` with a query's checks and binding."""
        query = exp.select(exp.cast(node.copy(), "STRING").as_("v"))
        frame, views = run_query(self.spark, self.catalog, query, db=session.db, show_hidden=False, limits=self.limits)
        try:
            value = frame.collect()[0][0]
        except PySparkException as exc:
            raise SqlError(f"can not evaluate '{node.sql(dialect='doris')}': {str(exc).splitlines()[0]}") from None
        finally:
            drop_views(self.spark, views)
        return None if value is None else str(value)

    def _update(self, text: str, session: Session) -> StatementResult:
        """UPDATE t SET c = expr [, ...] [WHERE ...] on a unique table: the current rows that match, with the
        new values, loaded again through the load pipeline, so sequence rules apply (an update that lowers
        the sequence is ignored). A `sequence_type` table keeps each row's stored hidden sequence."""
        tree = parse_query(text)
        if not isinstance(tree, exp.Update) or not isinstance(tree.this, exp.Table):
            raise SqlError("Syntax error in UPDATE")
        table = self.catalog.load(tree.this.db or session.db, tree.this.name).definition
        if not table.is_unique:
            raise SqlError("Only unique table could be updated.")
        assignments: dict[str, str] = {}
        for item in tree.expressions:
            if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
                raise SqlError(f"Syntax error in UPDATE: {item.sql(dialect='doris')}")
            column = table.column(item.this.name)
            if column is None or column.hidden:
                raise SqlError(f"Unknown column '{item.this.name}' in table {table.name}")
            if column.is_key:
                raise SqlError("Only value columns of unique table could be updated")
            assignments[column.name] = item.expression.sql(dialect="doris")
        names = [c.name for c in table.columns]
        keep_sequence = table.sequence_type is not None and table.sequence_col is None
        if keep_sequence:
            names.append(SEQUENCE_COL)
        select = ", ".join(f"{assignments.get(n, f'`{n}`')} AS `{n}`" for n in names)
        where = tree.args.get("where")
        condition = f"`{DELETE_SIGN}` = 0" + (f" AND ({where.this.sql(dialect='doris')})" if where else "")
        query = parse_query(f"SELECT {select} FROM `{table.db}`.`{table.name}` WHERE {condition}")
        frame, views = run_query(self.spark, self.catalog, query, db=session.db, show_hidden=True, limits=self.limits)
        try:
            request = insert_request(
                db=table.db, table=table.name, columns=names, strict=session.flag("enable_insert_strict")
            )
            result = self.loads.run_frame(self.loads.prepare(request), frame)
        finally:
            drop_views(self.spark, views)
        if result.status != "Success":
            raise SqlError(_strip_code(result.message))
        return ExecStatus(affected_rows=result.number_loaded_rows)

    def _delete(self, text: str, session: Session) -> StatementResult:
        """DELETE FROM t [PARTITION p] WHERE ...: markers on unique tables, a stored predicate otherwise."""
        partition = _PARTITION.match(text)
        if partition is not None:
            names = [n.strip(" `") for n in (partition.group(3) or partition.group(4)).split(",")]
            table_name = partition.group(1).split(".")[-1].strip("`")
            for name in names:
                if name != table_name:  # an unpartitioned table is its own single partition, as in Doris
                    raise SqlError(f"Partition does not exist: {name} (this server has no partitioned tables)")
            text = text[: partition.start(2)] + text[partition.end() :]
        tree = parse_query(text)
        if not isinstance(tree, exp.Delete) or not isinstance(tree.this, exp.Table):
            raise SqlError("Syntax error in DELETE")
        where = tree.args.get("where")
        table = self.catalog.load(tree.this.db or session.db, tree.this.name).definition
        if where is None:
            raise SqlError("DELETE without a WHERE clause is not supported, use TRUNCATE TABLE")
        if table.is_unique and table.sequence_mapping:
            raise SqlError("DELETE is not supported on tables with sequence mapping: they have no delete sign")
        if table.is_unique:
            names = [c.name for c in table.columns]
            if table.sequence_type is not None and table.sequence_col is None:
                names.append(SEQUENCE_COL)  # each marker carries the row's current sequence
            select = ", ".join(f"`{n}`" for n in names)
            query = parse_query(
                f"SELECT {select}, 1 AS `{DELETE_SIGN}` FROM `{table.db}`.`{table.name}` "
                f"WHERE `{DELETE_SIGN}` = 0 AND ({where.this.sql(dialect='doris')})"
            )
            frame, views = run_query(
                self.spark, self.catalog, query, db=session.db, show_hidden=True, limits=self.limits
            )
            try:
                request = insert_request(db=table.db, table=table.name, columns=[*names, DELETE_SIGN], strict=False)
                result = self.loads.run_frame(self.loads.prepare(request), frame)
            finally:
                drop_views(self.spark, views)
            if result.status != "Success":
                raise SqlError(_strip_code(result.message))
            return ExecStatus(affected_rows=result.number_loaded_rows)
        created = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        delete_predicate(table, where.this, created, 0)  # check before taking a version

        def change(current: TableDef, version: int) -> tuple[TableDef, list[SchemaOp]]:
            pred = delete_predicate(current, where.this, created, version)
            return current.model_copy(update={"delete_predicates": (*current.delete_predicates, pred)}), []

        self.writer.alter(table.db, table.name, change, schema=False)
        return ExecStatus()

    def _select(self, text: str, session: Session, limit: int | None) -> StatementResult:
        tree = parse_query(text)
        frame, views = run_query(
            self.spark,
            self.catalog,
            tree,
            db=session.db,
            show_hidden=session.flag("show_hidden_columns"),
            limits=self.limits,
        )
        try:
            result = collect_result(frame, limit=limit if limit is not None else self.row_limit)
        except Exception as exc:
            raise SqlError(str(exc).strip().splitlines()[0]) from None
        finally:
            drop_views(self.spark, views)
        return ResultSet(columns=result.columns, rows=result.rows)


_PARTITION = re.compile(
    r"\s*DELETE\s+FROM\s+(\S+)\s+((?:TEMPORARY\s+)?PARTITIONS?\s*(?:\(([^)]*)\)|(`?\w+`?)))", re.IGNORECASE
)


_RAISED = re.compile(r"\[USER_RAISED_EXCEPTION\]\s*(.*?)\s*(?:SQLSTATE|$)", re.S)


def _sql_error(exc: Exception, text: str, guard: JobGuard) -> SqlError:
    """A failed statement's error: the cancellation reason first, then a cap's own text, then the cause's."""
    if guard.reason == "timeout":
        return SqlError(f"query timeout, query id = {guard.tag}")
    if guard.reason is not None:
        return SqlError(guard.reason)
    if (raised := _RAISED.search(str(exc))) is not None:
        return SqlError(raised[1].strip())  # a growth cap (`sql.select.cap_growth`) or the query's raise_error
    if isinstance(exc, SqlError):
        return exc
    if isinstance(exc, DorisError):
        return SqlError(exc.message)
    if isinstance(exc, LoadError):
        return SqlError(exc.text)
    if isinstance(exc, PySparkException):
        return SqlError(str(exc).strip().splitlines()[0])
    # anything unexpected still gets the FE's error shape; the trace goes to the log
    log.exception("statement failed: %s", text[:200])
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return SqlError(f"{type(exc).__name__}: {first}")


def _strip_code(message: str) -> str:
    """`[CODE]TStatus: errCode = 2, detailMessage = x` → `x`; `[CODE]x` → `x`."""
    if message.startswith("[") and "]" in message:
        message = message.split("]", 1)[1]
    marker = "detailMessage = "
    return message.split(marker, 1)[1] if marker in message else message
