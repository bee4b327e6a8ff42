"""CREATE / DROP DATABASE, CREATE / DROP / TRUNCATE / ALTER TABLE and USE: each parsed into what it names, then
run against the catalog and the single writer (`tables/commit.py`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlglot import TokenType

from sql.alter import PARTITION_CLAUSES, AlterTable, parse_alter, plan_alter
from sql.context import SqlContext
from sql.ddl import CreateTable, parse_create_table
from sql.dynamic_partition import check_table, plan, schedule_table
from sql.privileges import BUILTIN_DATABASES, require_db, require_table, require_visible_db
from sql.results import ExecStatus
from sql.session import Session
from sql.tokens import Cursor, Target
from tables.accounts import Priv
from tables.commit import partition_change
from tables.errors import SqlError
from tables.model import TableDef


# -- parse ------------------------------------------------------------------------------------------------------
def parse_create_database(cur: Cursor, current_db: str) -> Target:
    """`CREATE DATABASE | SCHEMA [IF NOT EXISTS] db`."""
    cur.i = 2
    if_not_exists = cur.accept("IF", "NOT", "EXISTS")
    return Target(db=cur.name(), if_exists=if_not_exists)


def parse_create(cur: Cursor, current_db: str) -> CreateTable:
    return parse_create_table(cur.text, current_db)


def parse_drop_database(cur: Cursor, current_db: str) -> Target:
    """`DROP DATABASE | SCHEMA [IF EXISTS] db [FORCE]`."""
    cur.i = 2
    if_exists = cur.accept("IF", "EXISTS")
    name = cur.name()
    return Target(db=name, if_exists=if_exists, force=cur.accept("FORCE"))


def parse_drop_table(cur: Cursor, current_db: str) -> Target:
    """`DROP TABLE [IF EXISTS] [db.]t [FORCE]`."""
    cur.i = 2
    if_exists = cur.accept("IF", "EXISTS")
    target = cur.table(current_db)
    return Target(db=target.db, table=target.table, if_exists=if_exists, force=cur.accept("FORCE"))


@dataclass(frozen=True)
class Truncate:
    target: Target
    partitions: tuple[str, ...] = ()  # `PARTITION (p1, p2)`: only these


def parse_truncate(cur: Cursor, current_db: str) -> Truncate:
    """`TRUNCATE [TABLE] [db.]t [PARTITION (p1, p2)]`."""
    cur.i = 1
    cur.accept("TABLE")
    target = cur.table(current_db)
    names: list[str] = []
    if cur.accept("PARTITION") or cur.accept("PARTITIONS"):
        if cur.accept_type(TokenType.L_PAREN):
            names.append(cur.name())
            while cur.accept_type(TokenType.COMMA):
                names.append(cur.name())
            cur.expect_type(TokenType.R_PAREN, ")")
        else:
            names.append(cur.name())
    if not cur.at_end():
        raise cur.error("end of statement")
    return Truncate(target=target, partitions=tuple(names))


def parse_use(cur: Cursor, current_db: str) -> Target:
    """`USE db`."""
    cur.i = 1
    return Target(db=cur.name())


def parse_alter_table(cur: Cursor, current_db: str) -> AlterTable:
    return parse_alter(cur.text)


# -- run --------------------------------------------------------------------------------------------------------
def create_database(ctx: SqlContext, target: Target, session: Session) -> ExecStatus:
    require_db(session.privileges, Priv.CREATE, target.db)
    ctx.catalog.create_database(target.db, if_not_exists=target.if_exists)
    return ExecStatus()


def create_table(ctx: SqlContext, create: CreateTable, session: Session) -> ExecStatus:
    table = create.definition
    require_table(session.privileges, Priv.CREATE, "CREATE", table.db, table.name)
    if check_table(table) is not None:  # dynamic partitions: the window is there when the table is
        now = dt.datetime.now(dt.UTC)
        table = plan(table, now, now.astimezone().strftime("%Y-%m-%d %H:%M:%S"))[0]
    ctx.catalog.create_table(table, if_not_exists=create.if_not_exists)
    return ExecStatus()


def drop_database(ctx: SqlContext, target: Target, session: Session) -> ExecStatus:
    require_db(session.privileges, Priv.DROP, target.db)
    ctx.writer.drop_database(target.db, if_exists=target.if_exists, force=target.force)
    return ExecStatus()


def drop_table(ctx: SqlContext, target: Target, session: Session) -> ExecStatus:
    require_table(session.privileges, Priv.DROP, "DROP", target.db, target.table)
    ctx.writer.drop_table(target.db, target.table, if_exists=target.if_exists, force=target.force)
    return ExecStatus()


def truncate(ctx: SqlContext, stmt: Truncate, session: Session) -> ExecStatus:
    target = stmt.target
    require_table(session.privileges, Priv.LOAD, "LOAD", target.db, target.table)
    table = ctx.catalog.load(target.db, target.table).definition
    ids = partition_ids(table, stmt.partitions) if stmt.partitions else None
    ctx.writer.truncate(table.db, table.name, ids)
    return ExecStatus()


def partition_ids(table: TableDef, names: tuple[str, ...]) -> frozenset[int] | None:
    """The ids of named partitions (None: the whole table, for an unpartitioned table named as itself).

    Raises: SqlError with Doris's text for a partition the table does not have.
    """
    if table.partitioning is None:
        for name in names:
            if name.lower() != table.name.lower():
                raise SqlError(f"Partition does not exist: {name}")
        return None
    return frozenset(p.id for p in table.partitioning.named(names))


def use(ctx: SqlContext, target: Target, session: Session) -> ExecStatus:
    """Doris checks the privilege before the database's existence: an unknown name tells a stranger nothing."""
    require_visible_db(session.privileges, target.db)
    if target.db.lower() not in BUILTIN_DATABASES:
        ctx.catalog.require_database(target.db)
    session.db = target.db
    return ExecStatus()


def alter_table(ctx: SqlContext, alter: AlterTable, session: Session) -> ExecStatus:
    """The change is planned against the table as it is when its version turn comes (`plan_alter`)."""
    require_table(session.privileges, Priv.ALTER, "ALTER", alter.db or session.db, alter.table)
    handle = ctx.catalog.load(alter.db or session.db, alter.table)
    table = handle.definition
    dropped: set[int] = set()
    moved: set[int] = set()
    planned = plan_alter(alter, dropped, moved)
    kinds = {c.kind for c in alter.clauses}
    temps = {p.id for p in table.partitioning.partitions if p.temporary} if table.partitioning is not None else set()
    if "ADD TEMPORARY PARTITION" in kinds and (not temps or ctx.catalog.temporary(handle) is None):
        ctx.catalog.create_temporary(handle)  # the first temporary partition gets a fresh companion table
    if "REPLACE PARTITION" in kinds:
        new = ctx.writer.replace_partitions(table.db, table.name, planned, dropped=dropped, moved=moved)
    else:
        change, iceberg = partition_change(planned, dropped)
        # a partition added changes no schema (loads planned before it just do not route to it); a partition
        # dropped does, so that no load planned before it writes into it afterwards
        schema = not kinds <= set(PARTITION_CLAUSES) or "DROP PARTITION" in kinds
        new = ctx.writer.alter(table.db, table.name, change, schema=schema, iceberg=iceberg)
    if "DROP TEMPORARY PARTITION" in kinds:
        ctx.writer.forget_temporary(table.db, table.name, dropped & temps)
    if "SET" in kinds and check_table(new) is not None:  # dynamic partitions turned on or changed: apply now
        schedule_table(ctx.writer, new, lambda: dt.datetime.now(dt.UTC))
    return ExecStatus()
