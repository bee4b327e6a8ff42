"""Session variables of one SQL request (or one MySQL connection): `SET` lasts for the rest of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import sqlglot
from sqlglot import exp

from sql.results import ExecStatus
from tables.accounts import Identity, Privileges
from tables.errors import SqlError

NOBODY = Privileges(Identity(""))  # a session nobody logged in to: it may do nothing

if TYPE_CHECKING:
    from sql.context import SqlContext

_DEFAULTS: dict[str, str] = {
    "show_hidden_columns": "false",
    "enable_unique_key_partial_update": "false",
    "enable_insert_strict": "true",
    "partial_update_new_key_behavior": "APPEND",
    "require_sequence_in_insert": "true",
    "time_zone": "Asia/Shanghai",
    "query_timeout": "900",  # seconds, as Doris's session variables
    "insert_timeout": "14400",
}


class Cancellable(Protocol):
    def cancel(self, reason: str) -> None: ...


@dataclass
class Session:
    db: str
    variables: dict[str, str] = field(default_factory=lambda: dict(_DEFAULTS))
    privileges: Privileges = NOBODY  # of the user logged in; read again for each request (MySQL: each statement)
    running: Cancellable | None = None  # the statement in progress, for `interrupt`
    interrupted: str | None = None  # why the client's statements stop (it went away)

    def set(self, name: str, value: str) -> None:
        """Set a variable; `default` restores its default.

        Raises:
            SqlError: a value Doris refuses.
        """
        key = name.lower().lstrip("@")
        for prefix in ("session.", "global.", "local."):
            if key.startswith(prefix):
                key = key[len(prefix) :]
        if value.lower() == "default":
            self.variables[key] = _DEFAULTS.get(key, "")
            return
        if key == "partial_update_new_key_behavior":
            if value.upper() not in ("APPEND", "ERROR"):
                raise SqlError(
                    f"partial_update_new_key_behavior should be one of {{'APPEND', 'ERROR'}}, but found {value}"
                )
            value = value.upper()
        if key in ("query_timeout", "insert_timeout") and not (value.isdigit() and int(value) > 0):
            raise SqlError(f"Incorrect argument type to variable '{key}'")
        self.variables[key] = value

    def timeout_seconds(self, name: str) -> int:
        """`query_timeout` or `insert_timeout`: seconds a statement's Spark jobs may run (`SET ... = n`)."""
        return int(self.variables.get(name) or _DEFAULTS[name])

    def interrupt(self, reason: str) -> None:
        """Stop the statement in progress and refuse the ones after it."""
        self.interrupted = reason
        if self.running is not None:
            self.running.cancel(reason)

    def flag(self, name: str) -> bool:
        return self.variables.get(name, "false").lower() in ("true", "1", "on")


def check_statement_count(count: int, cap: int) -> None:
    """Raises: SqlError when one request carries more statements than SL_SQL_MAX_STATEMENTS (nothing runs)."""
    if count > cap:
        raise SqlError(f"Too many statements in one request: {count}, at most {cap} (SL_SQL_MAX_STATEMENTS)")


def parse_set(text: str) -> list[tuple[str, str]]:
    """`SET a = 1, @@session.b = 'x'`: the (name, value) pairs in order, values as text.

    Raises:
        SqlError: not a SET of variables.
        sqlglot.errors.ParseError: the statement does not parse (the executor words it).
    """
    tree = sqlglot.parse_one(text, dialect="doris")
    if not isinstance(tree, exp.Set):
        raise SqlError("Syntax error in SET")
    pairs: list[tuple[str, str]] = []
    for item in tree.expressions:
        assignment = item.this
        if not isinstance(assignment, exp.EQ):
            raise SqlError(f"Syntax error in SET: {item.sql(dialect='doris')}")
        value = assignment.expression
        if isinstance(value, exp.Literal):
            text_value = str(value.this)
        elif isinstance(value, exp.Boolean):
            text_value = "true" if value.this else "false"
        else:
            text_value = value.sql(dialect="doris").strip("'\"`")
        pairs.append((assignment.this.sql(dialect="doris").strip("`"), text_value))
    return pairs


def run_set(ctx: SqlContext, pairs: list[tuple[str, str]], session: Session) -> ExecStatus:
    """Raises: SqlError: a value Doris refuses (the variables before it stay set)."""
    for name, value in pairs:
        session.set(name, value)
    return ExecStatus()
