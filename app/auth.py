"""HTTP Basic authentication: users root and admin, password from settings."""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping

from pydantic import SecretStr

from tables.errors import NotAuthorized

USERS = ("root", "admin")


def check_basic_auth(headers: Mapping[str, str], password: str) -> str:
    """Return the user name, or raise.

    Raises:
        NotAuthorized: no Basic credentials, an unknown user or a wrong password.
    """
    header = headers.get("authorization", "")
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic" or not encoded:
        raise NotAuthorized("no valid Basic authorization")
    try:
        user, _, given = base64.b64decode(encoded.strip()).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise NotAuthorized("no valid Basic authorization") from None
    user = user.split("@", 1)[0]  # legacy user@cluster form
    if user not in USERS or not hmac.compare_digest(given.encode(), password.encode()):
        raise NotAuthorized(f"Access denied for user '{user}' (using password: {'YES' if given else 'NO'})")
    return user


def require_auth(headers: Mapping[str, str], password: SecretStr) -> str:
    """`check_basic_auth` for a route: a refusal is raised and rendered by the app's error handler.

    Raises:
        NotAuthorized.
    """
    return check_basic_auth(headers, password.get_secret_value())


def fe_auth_failure(headers: Mapping[str, str], password: str) -> str | None:
    """The reason an FE endpoint refuses these credentials, or None when they are good."""
    try:
        check_basic_auth(headers, password)
    except NotAuthorized as exc:
        return exc.text
    return None
