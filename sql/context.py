"""What a statement runs against: the server's catalog, writer, load service and Spark, and its SQL bounds.

One `SqlContext` is built with the `SqlExecutor` (by `app.main.build_services`) and handed to every statement
handler of `sql.statements.STATEMENTS`; the per-connection state lives in `sql.session.Session` instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_runner.compaction import Compactor
    from spark_runner.routine_load import RoutineLoadManager
    from spark_runner.service import LoadService
    from sql.broker_load import BrokerLoads
    from tables.accounts import AccountStore
    from tables.catalog import Catalog
    from tables.commit import TableWriter


@dataclass(frozen=True)
class QueryLimits:
    """What one value, one generated relation or one result set of a query may grow to."""

    max_string_bytes: int = 10 * 1024 * 1024
    max_generated_rows: int = 10_000_000
    max_result_bytes: int = 256 * 1024 * 1024  # one result set (SL_SQL_MAX_RESULT_BYTES)


@dataclass(frozen=True)
class SqlContext:
    spark: SparkSession
    catalog: Catalog
    writer: TableWriter
    loads: LoadService
    compactor: Compactor  # ADMIN COMPACT, SHOW TABLETS
    routine_loads: RoutineLoadManager | None = None  # CREATE / PAUSE / RESUME / STOP / SHOW ROUTINE LOAD
    broker_loads: BrokerLoads | None = None  # LOAD LABEL, SHOW LOAD, CANCEL LOAD, SHOW TRANSACTION
    accounts: AccountStore | None = None  # CREATE USER, GRANT, SHOW GRANTS, ... (`sql.accounts`)
    limits: QueryLimits = field(default_factory=QueryLimits)
    row_limit: int = 1000  # rows a SELECT returns (the request's `limit`, or the server's default)
    address: str = "127.0.0.1:8030"  # host:port the tablet views link to
