"""The statement table: every Doris statement this server runs, as kind → parser → handler.

    text ──Cursor──► the first kind whose words match ──parse──► a typed statement ──run──► StatementResult

Parsers are pure (the statement's tokens and the session's database in, a typed statement or a `SqlError`
out: they are tested as tables of cases in `tests/sql/test_parsers.py`); handlers run a parsed statement
against the `SqlContext` (catalog, writer, loads, Spark through `spark_runner`) and the `Session`, and checks the
privilege Doris requires first (`sql.privileges`; the map is in `docs/security.md`). The order
of the table is the order kinds are tried in: the routine load statements come first, since they begin with
CREATE, SHOW, PAUSE, RESUME or STOP.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sql.accounts import AccountStatement, is_account_statement, parse_account_statement, run_account_statement
from sql.admin import admin_compact, parse_admin_compact, parse_show_tablets, show_tablets
from sql.broker_load import parse_load
from sql.catalog_statements import (
    alter_table,
    create_database,
    create_table,
    drop_database,
    drop_table,
    parse_alter_table,
    parse_create,
    parse_create_database,
    parse_drop_database,
    parse_drop_table,
    parse_truncate,
    parse_use,
    truncate,
    use,
)
from sql.context import SqlContext
from sql.delete import parse_delete, run_delete
from sql.insert import parse_insert, run_insert
from sql.privileges import denied_statement, require_db, require_table, require_visible_db
from sql.results import ExecStatus, StatementResult
from sql.routine_load import (
    CreateRoutineLoad,
    JobCommand,
    RoutineLoadStatement,
    is_routine_load,
    parse_routine_load,
)
from sql.routine_load_commands import run_routine_load_statement
from sql.select import parse_query, run_select
from sql.session import Session, parse_set, run_set
from sql.show import (
    SHOW_NOT_SUPPORTED,
    describe,
    parse_describe,
    parse_nothing,
    parse_show_alter,
    parse_show_create,
    parse_show_in,
    parse_show_jobs,
    show_alter,
    show_create,
    show_databases,
    show_delete,
    show_load,
    show_tables,
    show_transaction,
)
from sql.show_partitions import parse_show_dynamic, parse_show_partitions, show_dynamic, show_partitions
from sql.tokens import Cursor
from sql.update import parse_update, run_update
from tables.accounts import Priv
from tables.errors import AccessDenied, DorisError, SqlError

if TYPE_CHECKING:
    from spark_runner.routine_load import RoutineLoadManager

S = TypeVar("S")


@dataclass(frozen=True)
class StatementKind(Generic[S]):
    name: str
    matches: Callable[[Cursor], bool]  # looks at the first words only; the cursor is not moved
    parse: Callable[[Cursor, str], S]  # (tokens, the session's database) → the statement; pure
    run: Callable[[SqlContext, S, Session], StatementResult]


def starts(*words: str | tuple[str, ...]) -> Callable[[Cursor], bool]:
    """Matches statements whose first words are these (a tuple: any one of its words)."""
    options = [(w,) if isinstance(w, str) else w for w in words]
    return lambda cur: all(cur.word(i) in choice for i, choice in enumerate(options))


def either(*matchers: Callable[[Cursor], bool]) -> Callable[[Cursor], bool]:
    return lambda cur: any(match(cur) for match in matchers)


def of_text(parse: Callable[[str], S]) -> Callable[[Cursor, str], S]:
    """A parser of the whole statement text (sqlglot's, or one that reads its own tokens)."""
    return lambda cur, current_db: parse(cur.text)


def unparsed(cur: Cursor, current_db: str) -> str:
    """The statement as it is: its handler parses it (the load statements' own modules)."""
    return cur.text


# -- handlers of the load statements, whose modules parse and run them --------------------------------------------
def routine_load(ctx: SqlContext, text: str, session: Session) -> StatementResult:
    if ctx.routine_loads is not None:
        check_routine_load(ctx.routine_loads, parse_routine_load(text), session)
    # SHOW ROUTINE LOAD [TASK] lists only the jobs of tables the user may load, as Doris's `checkAuth` skips others
    privileges = session.privileges
    return run_routine_load_statement(
        text,
        session.db,
        manager=ctx.routine_loads,
        catalog=ctx.catalog,
        can_load=lambda db, table: privileges.allows(Priv.LOAD, db, table),
    )


def check_routine_load(manager: RoutineLoadManager, stmt: RoutineLoadStatement, session: Session) -> None:
    """CREATE / PAUSE / RESUME / STOP need LOAD_PRIV on the job's table (on the database for ALL jobs of it);
    SHOW needs the database to be visible.

    Raises:
        StatementDenied: the user lacks it.
    """
    privileges = session.privileges
    db = stmt.db or session.db
    if isinstance(stmt, CreateRoutineLoad):
        if stmt.table is None:
            require_db(privileges, Priv.LOAD, db)
        else:
            require_table(privileges, Priv.LOAD, "LOAD", db, stmt.table)
    elif isinstance(stmt, JobCommand):
        if stmt.name is None:
            require_db(privileges, Priv.LOAD, db)
            return
        try:
            table = manager.find(db, stmt.name).spec.table
        except DorisError:  # no such job: the statement says so, to a user who may load into the database
            require_db(privileges, Priv.LOAD, db)
            return
        require_table(privileges, Priv.LOAD, "LOAD", db, table)
    else:
        require_visible_db(privileges, db)


def broker_load(ctx: SqlContext, text: str, session: Session) -> ExecStatus:
    if ctx.broker_loads is None:
        raise SqlError(not_supported("LOAD"))
    load = parse_load(text, session.db)
    require_table(session.privileges, Priv.LOAD, "LOAD", load.db, load.table)
    return ctx.broker_loads.submit(text, session.db)


def cancel_load(ctx: SqlContext, text: str, session: Session) -> ExecStatus:
    if ctx.broker_loads is None:
        raise SqlError(not_supported("CANCEL"))
    cur = Cursor(text)
    cur.expect("CANCEL", "LOAD")
    require_db(session.privileges, Priv.LOAD, cur.name() if cur.accept("FROM") or cur.accept("IN") else session.db)
    return ctx.broker_loads.cancel(text, session.db)


# -- the account statements ---------------------------------------------------------------------------------------
def is_account(cur: Cursor) -> bool:
    return is_account_statement(cur.word(), cur.word(1), cur.word(2))


def account_statement(ctx: SqlContext, stmt: AccountStatement, session: Session) -> StatementResult:
    """Raises: StatementDenied when the user lacks GRANT_PRIV (`run_account_statement` checks what Doris does)."""
    if ctx.accounts is None:
        raise SqlError("account statements are not available on this server")
    try:
        return run_account_statement(stmt, ctx.accounts, session.privileges)
    except AccessDenied as exc:
        raise denied_statement(exc) from None


def not_supported(first: str) -> str:
    return f"{first} statements are not supported by this server yet"


def show_maybe_full(word: str) -> Callable[[Cursor], bool]:
    """`SHOW [FULL] <word>`."""
    return either(starts("SHOW", word), starts("SHOW", "FULL", word))


STATEMENTS: tuple[StatementKind[Any], ...] = (
    StatementKind("ROUTINE LOAD", is_routine_load, unparsed, routine_load),
    StatementKind("ACCOUNT", is_account, of_text(parse_account_statement), account_statement),
    StatementKind("CREATE DATABASE", starts("CREATE", ("DATABASE", "SCHEMA")), parse_create_database, create_database),
    StatementKind("CREATE TABLE", starts("CREATE", ("TABLE", "EXTERNAL")), parse_create, create_table),
    StatementKind("DROP DATABASE", starts("DROP", ("DATABASE", "SCHEMA")), parse_drop_database, drop_database),
    StatementKind("DROP TABLE", starts("DROP", "TABLE"), parse_drop_table, drop_table),
    StatementKind("TRUNCATE", starts("TRUNCATE"), parse_truncate, truncate),
    StatementKind("SHOW DATABASES", starts("SHOW", ("DATABASES", "SCHEMAS")), parse_nothing, show_databases),
    StatementKind("SHOW CREATE TABLE", starts("SHOW", "CREATE", "TABLE"), parse_show_create, show_create),
    StatementKind("SHOW ALTER TABLE COLUMN", starts("SHOW", "ALTER", "TABLE", "COLUMN"), parse_show_alter, show_alter),
    StatementKind("SHOW DELETE", starts("SHOW", "DELETE"), parse_show_in, show_delete),
    StatementKind("SHOW TABLETS", starts("SHOW", ("TABLETS", "TABLET"), "FROM"), parse_show_tablets, show_tablets),
    StatementKind("SHOW TABLES", show_maybe_full("TABLES"), parse_show_in, show_tables),
    StatementKind(
        "SHOW PARTITIONS",
        either(starts("SHOW", "PARTITIONS"), starts("SHOW", "TEMPORARY", "PARTITIONS")),
        parse_show_partitions,
        show_partitions,
    ),
    StatementKind(
        "SHOW DYNAMIC PARTITION TABLES",
        starts("SHOW", "DYNAMIC", "PARTITION", "TABLES"),
        parse_show_dynamic,
        show_dynamic,
    ),
    StatementKind("SHOW LOAD", show_maybe_full("LOAD"), parse_show_jobs, show_load),
    StatementKind("SHOW TRANSACTION", show_maybe_full("TRANSACTION"), parse_show_jobs, show_transaction),
    StatementKind("DESCRIBE", starts(("DESC", "DESCRIBE")), parse_describe, describe),
    StatementKind("USE", starts("USE"), parse_use, use),
    StatementKind("SET", starts("SET"), of_text(parse_set), run_set),
    StatementKind("INSERT", starts("INSERT"), of_text(parse_insert), run_insert),
    StatementKind("SELECT", starts(("SELECT", "WITH", "(")), of_text(parse_query), run_select),
    StatementKind("UPDATE", starts("UPDATE"), of_text(parse_update), run_update),
    StatementKind("ALTER TABLE", starts("ALTER", "TABLE"), parse_alter_table, alter_table),
    StatementKind("DELETE", starts("DELETE"), of_text(parse_delete), run_delete),
    StatementKind("LOAD", starts("LOAD"), unparsed, broker_load),
    StatementKind("CANCEL LOAD", starts("CANCEL", "LOAD"), unparsed, cancel_load),
    StatementKind("ADMIN COMPACT", starts("ADMIN", "COMPACT"), parse_admin_compact, admin_compact),
)


def statement_kind(cur: Cursor) -> StatementKind[Any]:
    """The kind of the statement under the cursor.

    Raises:
        SqlError: a statement this server does not run, worded as before the table existed.
    """
    for kind in STATEMENTS:
        if kind.matches(cur):
            return kind
    first = cur.word()
    if first == "SHOW":
        raise SqlError(SHOW_NOT_SUPPORTED)
    if first in ("ALTER", "LOAD", "ADMIN", "CANCEL"):
        raise SqlError(not_supported(first))
    words = cur.text.split()
    raise SqlError(f"Unsupported statement: {words[0] if words else cur.text}")
