"""Account statements: parsed without Spark (a case table), then applied to a real account store."""

from __future__ import annotations

from pathlib import Path

import pytest

from sql.accounts import (
    CreateUser,
    DropUser,
    GrantPrivs,
    GrantRoles,
    RoleDdl,
    SetPassword,
    ShowGrants,
    ShowRoles,
    is_account_statement,
    parse_account_statement,
    run_account_statement,
)
from sql.results import ResultSet
from tables.accounts import AccountStore, Identity, Priv, Scope, native_password_hash
from tables.errors import DorisError, SqlError

U = Identity("u")
P = native_password_hash("p")

PARSED = [
    ("CREATE USER 'u'@'%' IDENTIFIED BY 'p'", CreateUser(U, P, False, None)),
    ("CREATE USER IF NOT EXISTS u IDENTIFIED BY 'p' DEFAULT ROLE 'r'", CreateUser(U, P, True, "r")),
    ("create user 'u'@'10.0.%'", CreateUser(Identity("u", "10.0.%"), "", False, None)),
    (f"CREATE USER `u`@`%` IDENTIFIED BY PASSWORD '{P}'", CreateUser(U, P, False, None)),
    ("DROP USER IF EXISTS 'u'@'%'", DropUser(U, True)),
    ("SET PASSWORD = PASSWORD('p')", SetPassword(None, P)),
    ("SET PASSWORD FOR 'u'@'%' = PASSWORD('p')", SetPassword(U, P)),
    (f"SET PASSWORD FOR u = '{P}'", SetPassword(U, P)),
    ("ALTER USER 'u'@'%' IDENTIFIED BY 'p'", SetPassword(U, P)),
    ("CREATE ROLE r", RoleDdl(True, "r", False)),
    ("CREATE ROLE IF NOT EXISTS 'r'", RoleDdl(True, "r", True)),
    ("DROP ROLE IF EXISTS r", RoleDdl(False, "r", True)),
    ("GRANT LOAD_PRIV ON db1.t1 TO 'u'@'%'", GrantPrivs(True, Priv.LOAD, Scope("db1", "t1"), U, None)),
    (
        "GRANT SELECT_PRIV, LOAD_PRIV ON db1.* TO ROLE 'r'",
        GrantPrivs(True, Priv.SELECT | Priv.LOAD, Scope("db1"), None, "r"),
    ),
    ("GRANT ADMIN_PRIV ON *.*.* TO u", GrantPrivs(True, Priv.ADMIN, Scope(), U, None)),
    ("REVOKE LOAD_PRIV ON internal.db1.t1 FROM 'u'", GrantPrivs(False, Priv.LOAD, Scope("db1", "t1"), U, None)),
    ("GRANT 'r1', 'r2' TO 'u'@'%'", GrantRoles(True, ("r1", "r2"), U)),
    ("REVOKE 'r1' FROM u", GrantRoles(False, ("r1",), U)),
    ("SHOW GRANTS", ShowGrants(None, False)),
    ("SHOW GRANTS FOR 'u'@'%'", ShowGrants(U, False)),
    ("SHOW ALL GRANTS", ShowGrants(None, True)),
    ("SHOW ROLES", ShowRoles()),
]


@pytest.mark.parametrize(("text", "expected"), PARSED, ids=[t for t, _ in PARSED])
def test_account_statements_parse(text: str, expected: object) -> None:
    words = text.upper().split()
    assert is_account_statement(words[0], words[1], words[2] if len(words) > 2 else "")
    assert parse_account_statement(text) == expected


REFUSED = [
    ("GRANT WRITE_PRIV ON db1.* TO u", "Unknown privilege type WRITE_PRIV"),
    ("GRANT LOAD_PRIV ON *.t TO u", r"Invalid privilege level: \*\.t"),
    ("CREATE USER 'u'@'%' IDENTIFIED BY PASSWORD 'plain'", "Password hash should be a 41-digit hexadecimal number"),
    ("GRANT LOAD_PRIV ON db1.* u", "Syntax error at end of statement|expected TO"),
    ("CREATE USER 'u' IDENTIFIED 'p'", "expected IDENTIFIED BY"),
]


@pytest.mark.parametrize(("text", "error"), REFUSED, ids=[t for t, _ in REFUSED])
def test_malformed_account_statements_are_refused_with_a_reason(text: str, error: str) -> None:
    with pytest.raises(SqlError, match=error):
        parse_account_statement(text)


@pytest.fixture
def store(tmp_path: Path) -> AccountStore:
    accounts = AccountStore(tmp_path / "accounts.db")
    accounts.bootstrap("")
    return accounts


def run(store: AccountStore, caller: Identity, text: str) -> object:
    return run_account_statement(parse_account_statement(text), store, store.privileges(caller))


def test_root_creates_a_loader_that_sees_only_its_own_grants(store: AccountStore) -> None:
    root = Identity("root")
    run(store, root, "CREATE USER 'loader'@'%' IDENTIFIED BY 'p'")
    run(store, root, "GRANT LOAD_PRIV ON db1.t1 TO 'loader'@'%'")
    loader = Identity("loader")
    shown = run(store, loader, "SHOW GRANTS")
    assert isinstance(shown, ResultSet)
    row = dict(zip([c for c, _ in shown.columns], shown.rows[0], strict=True))
    assert row["UserIdentity"] == "'loader'@'%'" and row["Password"] == "Yes"
    assert row["TablePrivs"] == "internal.db1.t1: Load_priv" and row["GlobalPrivs"] is None
    for statement in (
        "SHOW ALL GRANTS",
        "CREATE USER x",
        "GRANT LOAD_PRIV ON db1.* TO 'loader'",
        "SHOW GRANTS FOR root",
    ):
        with pytest.raises(DorisError, match=r"you need \(at least one of\) the GRANT/ROLE privilege"):
            run(store, loader, statement)
    run(store, loader, "SET PASSWORD = PASSWORD('new')")  # its own password: no privilege needed
    assert store.authenticate("loader", "new", "127.0.0.1") == loader


def test_show_all_grants_and_show_roles_list_every_account(store: AccountStore) -> None:
    root = Identity("root")
    run(store, root, "CREATE ROLE writers")
    run(store, root, "GRANT LOAD_PRIV, SELECT_PRIV ON db1.* TO ROLE 'writers'")
    run(store, root, "CREATE USER w IDENTIFIED BY 'p' DEFAULT ROLE 'writers'")
    everyone = run(store, root, "SHOW ALL GRANTS")
    assert isinstance(everyone, ResultSet)
    by_user = {r[0]: r for r in everyone.rows}
    assert set(by_user) == {"'admin'@'%'", "'root'@'%'", "'w'@'%'"}
    assert by_user["'w'@'%'"][3] == "writers" and by_user["'w'@'%'"][6] == "internal.db1: Select_priv,Load_priv"
    assert by_user["'root'@'%'"][4].startswith("Node_priv,Admin_priv,Grant_priv")
    roles = run(store, root, "SHOW ROLES")
    assert isinstance(roles, ResultSet)
    writers = next(r for r in roles.rows if r[0] == "writers")
    assert writers[2] == "'w'@'%'" and writers[5] == "internal.db1: Select_priv,Load_priv"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("CREATE USER '1abc'", "Incorrect user name: '1abc'"),
        ("CREATE USER 'a b'", "Incorrect user name: 'a b'"),
        (f"CREATE USER '{'u' * 65}'", "Incorrect user name"),
        (f"CREATE USER 'u'@'{'h' * 256}'", "Incorrect host"),
        ("GRANT LOAD_PRIV ON db.t TO 'u'@''", "Incorrect host"),
    ],
)
def test_user_names_and_hosts_are_checked_as_doris_checks_them(text: str, error: str) -> None:
    with pytest.raises(SqlError, match=error):
        parse_account_statement(text)
