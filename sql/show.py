"""SHOW DATABASES / TABLES / CREATE TABLE / ALTER TABLE COLUMN / DELETE / LOAD / TRANSACTION and DESC: views of
the catalog (and of the broker load jobs), in Doris's columns."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import TokenType

from sql.context import SqlContext
from sql.information_schema import visible_databases, visible_tables
from sql.privileges import (
    BUILTIN_DATABASES,
    require_admin,
    require_visible_db,
    require_visible_table,
)
from sql.results import ResultSet
from sql.session import Session
from sql.show_create import show_create_table
from sql.tokens import Cursor, Target
from tables.accounts import Priv
from tables.errors import SqlError
from tables.model import DELETE_SIGN, SEQUENCE_COL, VERSION_COL, KeysType

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
SHOW_NOT_SUPPORTED = "This SHOW statement is not supported by this server yet"


@dataclass(frozen=True)
class ShowAlter:
    db: str
    table: str | None  # WHERE TableName = 't'


# -- parse ------------------------------------------------------------------------------------------------------
def parse_nothing(cur: Cursor, current_db: str) -> None:
    """SHOW DATABASES | SCHEMAS: nothing to read (the rest of the statement is ignored, as before)."""


def parse_show_create(cur: Cursor, current_db: str) -> Target:
    """`SHOW CREATE TABLE [db.]t`."""
    cur.i = 3
    return cur.table(current_db)


def parse_show_alter(cur: Cursor, current_db: str) -> ShowAlter:
    """`SHOW ALTER TABLE COLUMN [FROM | IN db] [WHERE TableName = 't']`."""
    cur.i = 4
    db = current_db
    if cur.accept("FROM") or cur.accept("IN"):
        db = cur.name()
    wanted: str | None = None
    if cur.accept("WHERE"):
        if cur.word() != "TABLENAME":
            raise SqlError("SHOW ALTER TABLE COLUMN supports WHERE TableName = '<table>' only")
        cur.next()
        cur.expect_type(TokenType.EQ, "=")
        wanted = cur.string()
    return ShowAlter(db=db, table=wanted)


def parse_show_in(cur: Cursor, current_db: str) -> Target:
    """`SHOW DELETE | [FULL] TABLES [FROM | IN db]`: the database."""
    cur.i = 1
    cur.accept("FULL")
    cur.next()
    if cur.accept("FROM") or cur.accept("IN"):
        return Target(db=cur.name())
    return Target(db=current_db)


def parse_show_jobs(cur: Cursor, current_db: str) -> Cursor:
    """`SHOW [FULL] LOAD | TRANSACTION ...`: the broker load jobs read the rest (`sql.broker_load`)."""
    cur.i = 1
    cur.accept("FULL")
    cur.next()
    return cur


def show_load_db(cur: Cursor, current_db: str) -> str:
    """The database `SHOW LOAD [FROM | IN db] ...` reads (the cursor is left where it was)."""
    start = cur.i
    db = cur.name() if cur.accept("FROM") or cur.accept("IN") else current_db
    cur.i = start
    return db


def parse_describe(cur: Cursor, current_db: str) -> Target:
    """`DESC | DESCRIBE [db.]t`."""
    cur.i = 1
    return cur.table(current_db)


# -- run --------------------------------------------------------------------------------------------------------
def show_databases(ctx: SqlContext, _: None, session: Session) -> ResultSet:
    """The databases the user holds any privilege on (or on one of their tables), and the built-in ones."""
    names = visible_databases(ctx.catalog, session.privileges)
    return ResultSet(columns=[("Database", "VARCHAR")], rows=[[n] for n in sorted(set(names))])


def show_tables(ctx: SqlContext, target: Target, session: Session) -> ResultSet:
    """The tables of the database the user holds any privilege on. A database the user cannot see answers 1044
    whether or not it exists (checked before existence, as `USE` does, so names do not leak); an unknown one
    the user could see is `Unknown database`."""
    require_visible_db(session.privileges, target.db)
    if target.db.lower() not in BUILTIN_DATABASES:
        ctx.catalog.require_database(target.db)
    names = visible_tables(ctx.catalog, session.privileges, target.db)
    return ResultSet(columns=[(f"Tables_in_{target.db}", "VARCHAR")], rows=[[n] for n in names])


def show_create(ctx: SqlContext, target: Target, session: Session) -> ResultSet:
    require_visible_table(session.privileges, "SHOW CREATE TABLE", target.db, target.table)
    table = ctx.catalog.load(target.db, target.table).definition
    return ResultSet(
        columns=[("Table", "VARCHAR"), ("Create Table", "VARCHAR")], rows=[[table.name, show_create_table(table)]]
    )


def show_delete(ctx: SqlContext, target: Target, session: Session) -> ResultSet:
    """The stored delete predicates (DELETE on duplicate and aggregate tables) of the database's tables the user
    holds LOAD_PRIV on, as Doris's `getDeleteInfosByDb` filters them: a predicate holds the values deleted, which
    a user who may only see the table (ALTER_PRIV, say) must not read."""
    require_visible_db(session.privileges, target.db)
    rows: list[list[object]] = []
    for name in visible_tables(ctx.catalog, session.privileges, target.db):
        if not session.privileges.allows(Priv.LOAD, target.db, name):
            continue
        table = ctx.catalog.load(target.db, name).definition
        for pred in table.delete_predicates:
            # Doris: the partition named, `*` for every partition of a partitioned table, else the table
            partition = ",".join(pred.partitions) or ("*" if table.partitioned else name)
            rows.append([name, partition, pred.create_time, pred.display, "FINISHED"])
    fields = ("TableName", "PartitionName", "CreateTime", "DeleteCondition", "State")
    return ResultSet(columns=[(n, "VARCHAR") for n in fields], rows=sorted(rows, key=lambda r: str(r[2])))


def show_alter(ctx: SqlContext, stmt: ShowAlter, session: Session) -> ResultSet:
    """Every schema change of the database's tables the user may see, FINISHED (they are metadata only)."""
    require_visible_db(session.privileges, stmt.db)
    rows: list[list[object]] = []
    for name in visible_tables(ctx.catalog, session.privileges, stmt.db):
        if stmt.table is not None and name != stmt.table:
            continue
        for job in ctx.catalog.load(stmt.db, name).definition.alter_jobs:
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
    return ResultSet(columns=[(n, "VARCHAR") for n in ALTER_JOB_COLUMNS], rows=rows)


def show_load(ctx: SqlContext, cur: Cursor, session: Session) -> ResultSet:
    if ctx.broker_loads is None:
        raise SqlError(SHOW_NOT_SUPPORTED)
    privileges = session.privileges
    require_visible_db(privileges, show_load_db(cur, session.db))
    # only the jobs of tables the user may load, as Doris's `getLoadJobInfosByDb` lists them: a job's row carries
    # its error-log URL (rejected rows: table data) and its figures
    return ctx.broker_loads.show_load(
        cur, session.db, can_load=lambda db, table: privileges.allows(Priv.LOAD, db, table)
    )


def show_transaction(ctx: SqlContext, cur: Cursor, session: Session) -> ResultSet:
    if ctx.broker_loads is None:
        raise SqlError(SHOW_NOT_SUPPORTED)
    require_admin(session.privileges)  # as Doris: transactions of every load, whoever ran it
    return ctx.broker_loads.show_transaction(cur, session.db)


def describe(ctx: SqlContext, target: Target, session: Session) -> ResultSet:
    """The table's columns (with the hidden ones under `show_hidden_columns`), as Doris's DESC lists them."""
    require_visible_table(session.privileges, "DESCRIBE", target.db, target.table)
    table = ctx.catalog.load(target.db, target.table).definition
    cols = list(table.columns)
    if session.flag("show_hidden_columns"):
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
        default = c.default if c.has_default else None
        rows.append(
            [c.name, c.type.sql(), "Yes" if c.nullable else "No", "true" if c.is_key else "false", default, extra]
        )
    names = ("Field", "Type", "Null", "Key", "Default", "Extra")
    return ResultSet(columns=[(n, "VARCHAR") for n in names], rows=rows)
