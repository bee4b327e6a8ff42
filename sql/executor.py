"""Runs Doris SQL statements: each is looked up in the statement table (`sql.statements`), parsed, then run
under a job guard that cancels its Spark jobs past the session's timeout or when the client goes away."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from spark_runner.compaction import Compactor
from spark_runner.queries import JobGuard, statement_error
from sql.context import QueryLimits, SqlContext
from sql.results import ExecStatus, ResultSet, StatementResult
from sql.session import Session, check_statement_count
from sql.statements import statement_kind
from sql.tokens import Cursor, split_statements
from tables.errors import SqlError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_runner.routine_load import RoutineLoadManager
    from spark_runner.service import LoadService
    from sql.broker_load import BrokerLoads
    from tables.accounts import AccountStore
    from tables.catalog import Catalog
    from tables.commit import TableWriter


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
        broker_loads: BrokerLoads | None = None,
        accounts: AccountStore | None = None,
        compactor: Compactor | None = None,
        address: str = "127.0.0.1:8030",
        limits: QueryLimits | None = None,
        max_statements: int = 100,
    ) -> None:
        self.max_statements = max_statements
        self.context = SqlContext(
            spark=spark,
            catalog=catalog,
            writer=writer,
            loads=loads,
            compactor=compactor or Compactor(spark=spark, catalog=catalog, writer=writer),
            routine_loads=routine_loads,
            broker_loads=broker_loads,
            accounts=accounts,
            limits=limits or QueryLimits(),
            row_limit=row_limit,
            address=address,
        )

    @property
    def compactor(self) -> Compactor:
        """The compactor ADMIN COMPACT and SHOW TABLETS use (the app's own is `Services.compactor`)."""
        return self.context.compactor

    def runs(self, text: str) -> bool:
        """True when the statement table has a kind for this statement (the MySQL listener leaves the rest of the
        SHOW statements to mysql-mimic)."""
        try:
            statement_kind(Cursor(text))
        except SqlError:
            return False
        return True

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
        """Run one statement; its Spark jobs are cancelled past the session's query_timeout or on interrupt.

        Raises:
            SqlError: every failure, worded by `spark_runner.queries.statement_error`.
        """
        if session.interrupted is not None:
            raise SqlError(session.interrupted)
        started = time.monotonic()
        # as in Doris, statements that write (INSERT, UPDATE, DELETE) have their own, longer timeout
        writes = text.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE")
        guard = JobGuard(
            self.context.spark,
            timeout_seconds=session.timeout_seconds("insert_timeout" if writes else "query_timeout"),
        )
        try:
            with guard:  # entering touches the JVM: a stopped one is an error like any other
                session.running = guard
                result = self._run(text, session, limit)
        except Exception as exc:
            raise statement_error(exc, guard, text) from None
        finally:
            session.running = None
        ms = int((time.monotonic() - started) * 1000)
        if isinstance(result, ExecStatus):
            return ExecStatus(affected_rows=result.affected_rows, time_ms=ms, info=result.info)
        return ResultSet(columns=result.columns, rows=result.rows, time_ms=ms)

    def _run(self, text: str, session: Session, limit: int | None) -> StatementResult:
        """Parse, then run: the statement table decides which parser and handler."""
        cur = Cursor(text)
        kind = statement_kind(cur)
        statement = kind.parse(cur, session.db)
        ctx = self.context if limit is None else dataclasses.replace(self.context, row_limit=limit)
        return kind.run(ctx, statement, session)
