"""The privilege each statement needs, checked against the session's `Privileges` before the statement does anything.

    table    require_table(session, LOAD, "LOAD", db, t)   1142  LOAD command denied to user 'u'@'%' for table 'db.t'
    database require_db(session, CREATE, db)                1044  Access denied for user 'u' to database 'db'
    visible  require_visible_table / require_visible_db     any privilege on the table (database), as Doris's SHOW
    global   require_admin(session)                         1227  Access denied; you need (at least one of) the ADMIN
                                                                  privilege(s) for this operation

The refusals are `StatementDenied`: a statement's error (`errCode = 2, detailMessage = ...` over HTTP) that also
carries the MySQL error number Doris sends with it. `docs/security.md` maps every statement to its privilege.
"""

from __future__ import annotations

from tables.accounts import Priv, Privileges, db_denied, specific_denied, table_denied
from tables.errors import AccessDenied, SqlError

TABLE_ACCESS_DENIED = 1142  # ER_TABLEACCESS_DENIED_ERROR
DB_ACCESS_DENIED = 1044  # ER_DBACCESS_DENIED_ERROR
SPECIFIC_ACCESS_DENIED = 1227  # ER_SPECIFIC_ACCESS_DENIED_ERROR

# visible to every user, as in Doris
BUILTIN_DATABASES = ("information_schema", "mysql")


class StatementDenied(SqlError):
    """A statement refused for a privilege its user lacks; `mysql_code` is the MySQL error Doris answers with."""

    def __init__(self, refusal: AccessDenied, mysql_code: int) -> None:
        super().__init__(refusal.message)
        self.mysql_code = mysql_code


def denied_statement(refusal: AccessDenied) -> StatementDenied:
    """An `AccessDenied` raised below (the account store's checks) as a statement's refusal, by its wording."""
    text = refusal.message
    if " command denied to user " in text:
        return StatementDenied(refusal, TABLE_ACCESS_DENIED)
    if text.startswith("Access denied for user ") and " to database " in text:
        return StatementDenied(refusal, DB_ACCESS_DENIED)
    return StatementDenied(refusal, SPECIFIC_ACCESS_DENIED)


def require_table(privileges: Privileges, wanted: Priv, command: str, db: str, table: str) -> None:
    """Raises: StatementDenied (1142) unless the user holds `wanted` on `db.table` (or on the db, or globally)."""
    if not privileges.allows(wanted, db, table):
        raise StatementDenied(table_denied(command, privileges.identity, db, table), TABLE_ACCESS_DENIED)


def require_db(privileges: Privileges, wanted: Priv, db: str) -> None:
    """Raises: StatementDenied (1044) unless the user holds `wanted` on the database (or globally)."""
    if not privileges.allows(wanted, db):
        raise StatementDenied(db_denied(privileges.identity, db), DB_ACCESS_DENIED)


def require_visible_db(privileges: Privileges, db: str) -> None:
    """Raises: StatementDenied (1044) unless the user holds some privilege on the database or one of its tables."""
    if db.lower() not in BUILTIN_DATABASES and not privileges.sees_db(db):
        raise StatementDenied(db_denied(privileges.identity, db), DB_ACCESS_DENIED)


def require_visible_table(privileges: Privileges, command: str, db: str, table: str) -> None:
    """Raises: StatementDenied (1142) unless the user holds some privilege on the table (SHOW CREATE, DESC)."""
    if not privileges.sees_table(db, table):
        raise StatementDenied(table_denied(command, privileges.identity, db, table), TABLE_ACCESS_DENIED)


def require_admin(privileges: Privileges) -> None:
    """Raises: StatementDenied (1227) unless the user holds ADMIN_PRIV."""
    if not privileges.allows(Priv.ADMIN):
        raise StatementDenied(specific_denied("ADMIN"), SPECIFIC_ACCESS_DENIED)
