"""The statement checks of `sql/privileges.py` as tables of cases (no Spark): who is refused, in which words,
with which MySQL code."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sql.privileges import (
    StatementDenied,
    denied_statement,
    require_admin,
    require_db,
    require_table,
    require_visible_db,
    require_visible_table,
)
from tables.accounts import Grant, Identity, Priv, Privileges, Scope, db_denied, specific_denied, table_denied

LOADER = Privileges(Identity("loader"), (Grant(Scope("d", "t"), Priv.LOAD),))
READER_OF_D = Privileges(Identity("reader"), (Grant(Scope("d", "*"), Priv.SELECT),))
ADMIN = Privileges(Identity("boss"), (Grant(Scope(), Priv.ADMIN),))
NOBODY = Privileges(Identity("nobody"))


@pytest.mark.parametrize(
    ("check", "refusal", "code"),
    [
        pytest.param(
            lambda: require_table(LOADER, Priv.SELECT, "SELECT", "d", "t"),
            "SELECT command denied to user 'loader'@'%' for table 'd.t'",
            1142,
            id="load-is-not-select",
        ),
        pytest.param(
            lambda: require_table(LOADER, Priv.LOAD, "LOAD", "d", "u"),
            "LOAD command denied to user 'loader'@'%' for table 'd.u'",
            1142,
            id="a-grant-on-another-table",
        ),
        pytest.param(
            lambda: require_db(READER_OF_D, Priv.CREATE, "d"),
            "Access denied for user 'reader' to database 'd'",
            1044,
            id="select-on-the-database-is-not-create",
        ),
        pytest.param(
            lambda: require_visible_db(LOADER, "e"),
            "Access denied for user 'loader' to database 'e'",
            1044,
            id="another-database-is-invisible",
        ),
        pytest.param(
            lambda: require_visible_table(NOBODY, "DESCRIBE", "d", "t"),
            "DESCRIBE command denied to user 'nobody'@'%' for table 'd.t'",
            1142,
            id="nobody-sees-no-table",
        ),
        pytest.param(
            lambda: require_admin(READER_OF_D),
            "Access denied; you need (at least one of) the ADMIN privilege(s) for this operation",
            1227,
            id="admin-statements",
        ),
    ],
)
def test_checks_refuse_in_doris_words(check: Callable[[], None], refusal: str, code: int) -> None:
    with pytest.raises(StatementDenied) as caught:
        check()
    assert caught.value.detail == refusal
    assert caught.value.doris_message == f"errCode = 2, detailMessage = {refusal}"
    assert caught.value.mysql_code == code


@pytest.mark.parametrize(
    "check",
    [
        pytest.param(lambda: require_table(LOADER, Priv.LOAD, "LOAD", "d", "t"), id="the-grant-itself"),
        pytest.param(lambda: require_table(READER_OF_D, Priv.SELECT, "SELECT", "d", "x"), id="db-grant-covers-all"),
        pytest.param(lambda: require_visible_db(LOADER, "d"), id="a-table-grant-makes-its-database-visible"),
        pytest.param(lambda: require_visible_db(NOBODY, "information_schema"), id="built-in-databases"),
        pytest.param(lambda: require_visible_table(LOADER, "SHOW CREATE TABLE", "d", "t"), id="any-privilege-shows"),
        pytest.param(lambda: require_db(ADMIN, Priv.DROP, "d"), id="admin-holds-everything"),
        pytest.param(lambda: require_admin(ADMIN), id="admin"),
    ],
)
def test_checks_let_holders_through(check: Callable[[], None]) -> None:
    check()


@pytest.mark.parametrize(
    ("refusal", "code"),
    [
        pytest.param(table_denied("LOAD", Identity("u"), "d", "t"), 1142, id="table"),
        pytest.param(db_denied(Identity("u"), "d"), 1044, id="database"),
        pytest.param(specific_denied("GRANT/ROLE"), 1227, id="specific"),
    ],
)
def test_the_account_stores_refusals_keep_their_mysql_code(refusal: object, code: int) -> None:
    from tables.errors import AccessDenied

    assert isinstance(refusal, AccessDenied)
    assert denied_statement(refusal).mysql_code == code
