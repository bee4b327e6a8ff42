"""The statement table: every Doris statement this server runs, as kind → parser → handler.

    text ──Cursor──► the first kind whose words match ──parse──► a typed statement ──run──► StatementResult

Parsers are pure (the statement's tokens and the session's database in, a typed statement or a `SqlError`
out: they are tested as tables of cases in `tests/sql/test_parsers.py`); handlers run a parsed statement
against the `SqlContext` (catalog, writer, loads, Spark through `spark_runner`) and the `Session`. The order
of the table is the order kinds are tried in: the routine load statements come first, since they begin with
CREATE, SHOW, PAUSE, RESUME or STOP.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sql import admin, catalog_statements, show
from sql.context import SqlContext
from sql.delete import parse_delete, run_delete
from sql.insert import parse_insert, run_insert
from sql.results import ExecStatus, StatementResult
from sql.routine_load import is_routine_load
from sql.routine_load_commands import run_routine_load_statement
from sql.select import parse_query, run_select
from sql.session import Session, parse_set, run_set
from sql.tokens import Cursor
from sql.update import parse_update, run_update
from tables.errors import SqlError

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


def text_of(cur: Cursor, current_db: str) -> str:
    """The statement as it is: its handler parses it (the load statements' own modules)."""
    return cur.text


# -- handlers of the load statements, whose modules parse and run them --------------------------------------------
def routine_load(ctx: SqlContext, text: str, session: Session) -> StatementResult:
    return run_routine_load_statement(text, session.db, manager=ctx.routine_loads, catalog=ctx.catalog)


def broker_load(ctx: SqlContext, text: str, session: Session) -> ExecStatus:
    if ctx.broker_loads is None:
        raise SqlError(not_supported("LOAD"))
    return ctx.broker_loads.submit(text, session.db)


def cancel_load(ctx: SqlContext, text: str, session: Session) -> ExecStatus:
    if ctx.broker_loads is None:
        raise SqlError(not_supported("CANCEL"))
    return ctx.broker_loads.cancel(text, session.db)


def not_supported(first: str) -> str:
    return f"{first} statements are not supported by this server yet"


def _statement(
    name: str, matches: Callable[[Cursor], bool], parse: Callable[[Cursor, str], S], run: Callable[..., Any]
) -> StatementKind[Any]:
    return StatementKind(name, matches, parse, run)


STATEMENTS: tuple[StatementKind[Any], ...] = (
    _statement("ROUTINE LOAD", is_routine_load, text_of, routine_load),
    _statement(
        "CREATE DATABASE",
        starts("CREATE", ("DATABASE", "SCHEMA")),
        catalog_statements.parse_create_database,
        catalog_statements.create_database,
    ),
    _statement(
        "CREATE TABLE",
        starts("CREATE", ("TABLE", "EXTERNAL")),
        catalog_statements.parse_create,
        catalog_statements.create_table,
    ),
    _statement(
        "DROP DATABASE",
        starts("DROP", ("DATABASE", "SCHEMA")),
        catalog_statements.parse_drop_database,
        catalog_statements.drop_database,
    ),
    _statement(
        "DROP TABLE", starts("DROP", "TABLE"), catalog_statements.parse_drop_table, catalog_statements.drop_table
    ),
    _statement("TRUNCATE", starts("TRUNCATE"), catalog_statements.parse_truncate, catalog_statements.truncate),
    _statement("SHOW DATABASES", starts("SHOW", ("DATABASES", "SCHEMAS")), show.parse_nothing, show.show_databases),
    _statement("SHOW CREATE TABLE", starts("SHOW", "CREATE", "TABLE"), show.parse_show_create, show.show_create),
    _statement(
        "SHOW ALTER TABLE COLUMN", starts("SHOW", "ALTER", "TABLE", "COLUMN"), show.parse_show_alter, show.show_alter
    ),
    _statement("SHOW DELETE", starts("SHOW", "DELETE"), show.parse_show_in, show.show_delete),
    _statement(
        "SHOW TABLETS", starts("SHOW", ("TABLETS", "TABLET"), "FROM"), admin.parse_show_tablets, admin.show_tablets
    ),
    _statement(
        "SHOW TABLES",
        either(starts("SHOW", "TABLES"), starts("SHOW", "FULL", "TABLES")),
        show.parse_show_in,
        show.show_tables,
    ),
    _statement(
        "SHOW LOAD",
        either(starts("SHOW", "LOAD"), starts("SHOW", "FULL", "LOAD")),
        show.parse_show_jobs,
        show.show_load,
    ),
    _statement(
        "SHOW TRANSACTION",
        either(starts("SHOW", "TRANSACTION"), starts("SHOW", "FULL", "TRANSACTION")),
        show.parse_show_jobs,
        show.show_transaction,
    ),
    _statement("DESCRIBE", starts(("DESC", "DESCRIBE")), show.parse_describe, show.describe),
    _statement("USE", starts("USE"), catalog_statements.parse_use, catalog_statements.use),
    _statement("SET", starts("SET"), of_text(parse_set), run_set),
    _statement("INSERT", starts("INSERT"), of_text(parse_insert), run_insert),
    _statement("SELECT", starts(("SELECT", "WITH", "(")), of_text(parse_query), run_select),
    _statement("UPDATE", starts("UPDATE"), of_text(parse_update), run_update),
    _statement(
        "ALTER TABLE", starts("ALTER", "TABLE"), catalog_statements.parse_alter_table, catalog_statements.alter_table
    ),
    _statement("DELETE", starts("DELETE"), of_text(parse_delete), run_delete),
    _statement("LOAD", starts("LOAD"), text_of, broker_load),
    _statement("CANCEL LOAD", starts("CANCEL", "LOAD"), text_of, cancel_load),
    _statement("ADMIN COMPACT", starts("ADMIN", "COMPACT"), admin.parse_admin_compact, admin.admin_compact),
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
        raise SqlError(show.SHOW_NOT_SUPPORTED)
    if first in ("ALTER", "LOAD", "ADMIN", "CANCEL"):
        raise SqlError(not_supported(first))
    words = cur.text.split()
    raise SqlError(f"Unsupported statement: {words[0] if words else cur.text}")
