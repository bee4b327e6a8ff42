"""HTTP Basic authentication against the account store, and the privilege checks of the routes.

Every route but `/`, `/api/health` and `/metrics` authenticates; a route that touches a database or a table
then checks the privilege Doris checks there (`tables/accounts.py` holds the model and the refusal texts).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from starlette.requests import Request

from tables.accounts import AccountStore, Priv, Privileges, db_denied, specific_denied, table_denied
from tables.errors import NotAuthorized


def basic_credentials(headers: Mapping[str, str]) -> tuple[str, str]:
    """The user and password of a Basic `Authorization` header (`user@cluster` as `user`).

    Raises:
        NotAuthorized: no Basic credentials.
    """
    header = headers.get("authorization", "")
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic" or not encoded:
        raise NotAuthorized("no valid Basic authorization")
    try:
        user, _, given = base64.b64decode(encoded.strip()).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise NotAuthorized("no valid Basic authorization") from None
    return user.split("@", 1)[0], given  # legacy user@cluster form


def authenticate(headers: Mapping[str, str], accounts: AccountStore, client: str) -> Privileges:
    """The privileges of the user the request logs in as, read now (a grant, a revoke or a dropped user
    takes effect on the next request).

    Raises:
        NotAuthorized: no Basic credentials, an unknown user or a wrong password (the same text for both).
    """
    user, given = basic_credentials(headers)
    return accounts.login(user, given, client)


def login(request: Request, accounts: AccountStore, headers: Mapping[str, str] | None = None) -> Privileges:
    """`authenticate` for a request, from its client's address (`headers`: already decoded ones).

    Raises:
        NotAuthorized.
    """
    client = request.client.host if request.client else ""
    return authenticate(request.headers if headers is None else headers, accounts, client)


def require_table(privileges: Privileges, wanted: Priv, command: str, db: str, table: str) -> None:
    """Raises: AccessDenied (Doris's `<command> command denied to user ... for table 'db.t'`)."""
    if not privileges.allows(wanted, db, table):
        raise table_denied(command, privileges.identity, db, table)


def require_db(privileges: Privileges, wanted: Priv, db: str) -> None:
    """Raises: AccessDenied (Doris's `Access denied for user 'u' to database 'db'`)."""
    if not privileges.allows(wanted, db):
        raise db_denied(privileges.identity, db)


def require_admin(privileges: Privileges) -> None:
    """Raises: AccessDenied (Doris's `you need (at least one of) the ADMIN privilege(s)`)."""
    if not privileges.allows(Priv.ADMIN):
        raise specific_denied("ADMIN")
