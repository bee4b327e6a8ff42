"""The account model: users, roles, grants and the checks Doris makes, on a real SQLite store (no Spark)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from tables.accounts import (
    AccountStore,
    Identity,
    Priv,
    Scope,
    db_denied,
    native_password_hash,
    parse_privileges,
    parse_scope,
    table_denied,
)
from tables.errors import AlreadyExists, DorisError
from tables.store import Tx

LOADER = Identity("loader")
ANALYST = Identity("analyst", "10.0.0.%")


@pytest.fixture
def store(tmp_path: Path) -> AccountStore:
    accounts = AccountStore(tmp_path / "accounts.db")
    accounts.bootstrap("secret")
    return accounts


def test_the_native_hash_is_mysqls_password_function() -> None:
    # MySQL: SELECT PASSWORD('secret') = '*14E65567ABDB5135D0CFD9A70B3032C179A49EE7'
    assert native_password_hash("secret") == "*14E65567ABDB5135D0CFD9A70B3032C179A49EE7"
    assert native_password_hash("") == ""
    # the form mysql_native_password's scramble check uses: the stored hash without `*`, lower case
    double = hashlib.sha1(hashlib.sha1(b"secret").digest()).hexdigest()
    assert native_password_hash("secret")[1:].lower() == double


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["SELECT_PRIV"], Priv.SELECT),
        (["select_priv", "Load_Priv"], Priv.SELECT | Priv.LOAD),
        (["ALL"], Priv.SELECT | Priv.LOAD | Priv.ALTER | Priv.CREATE | Priv.DROP),
        (["ADMIN_PRIV"], Priv.ADMIN),
    ],
)
def test_privilege_names_parse_as_doris_spells_them(names: list[str], expected: Priv) -> None:
    assert parse_privileges(names) == expected


def test_an_unknown_privilege_is_refused_by_name() -> None:
    with pytest.raises(DorisError, match="Unknown privilege type WRITE_PRIV"):
        parse_privileges(["WRITE_PRIV"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("*.*", Scope()),
        ("db1.*", Scope("db1")),
        ("db1.t", Scope("db1", "t")),
        ("`db1`.`t`", Scope("db1", "t")),
        ("internal.db1.t", Scope("db1", "t")),
        ("*.*.*", Scope()),
    ],
)
def test_scopes_parse(text: str, expected: Scope) -> None:
    assert parse_scope(text) == expected


@pytest.mark.parametrize("text", ["*.t", "db", "a.b.c.d", ".t"])
def test_malformed_scopes_are_refused(text: str) -> None:
    with pytest.raises(DorisError, match="Invalid privilege level"):
        parse_scope(text)


def test_root_and_admin_exist_from_the_first_start_and_roots_password_is_set_once(tmp_path: Path) -> None:
    store = AccountStore(tmp_path / "accounts.db")
    store.bootstrap("first")
    assert store.authenticate("root", "first", "127.0.0.1") == Identity("root")
    assert store.privileges(Identity("root")).is_super and store.privileges(Identity("admin")).is_super
    assert store.privileges(Identity("root")).allows(Priv.NODE)
    assert not store.privileges(Identity("admin")).on(None) & Priv.NODE  # admin: everything but NODE_PRIV
    store.set_password(Identity("root"), native_password_hash("changed"))
    store.close()
    again = AccountStore(tmp_path / "accounts.db")
    again.bootstrap("first")  # a restart with the same setting: the changed password is kept
    assert again.authenticate("root", "changed", "127.0.0.1") == Identity("root")
    with pytest.raises(DorisError, match=r"Access denied for user 'root' \(using password: YES\)"):
        again.authenticate("root", "first", "127.0.0.1")


def test_unknown_users_and_wrong_passwords_get_the_same_refusal(store: AccountStore) -> None:
    store.create_user(LOADER, native_password_hash("p"))
    refusals = []
    for user, password in (("loader", "wrong"), ("nobody", "wrong")):
        with pytest.raises(DorisError) as caught:
            store.authenticate(user, password, "1.2.3.4")
        refusals.append(str(caught.value).replace(user, "U"))
    assert refusals[0] == refusals[1]
    with pytest.raises(DorisError, match=r"using password: NO"):
        store.authenticate("loader", "", "1.2.3.4")


def test_a_host_pattern_limits_where_a_user_logs_in_from(store: AccountStore) -> None:
    store.create_user(ANALYST, native_password_hash("p"))
    assert store.authenticate("analyst", "p", "10.0.0.7") == ANALYST
    with pytest.raises(DorisError, match="Access denied"):
        store.authenticate("analyst", "p", "10.0.1.7")
    store.create_user(Identity("analyst"), native_password_hash("q"))
    assert store.match("analyst", "10.0.0.7") == ANALYST  # the more specific host wins
    assert store.match("analyst", "192.168.0.1") == Identity("analyst")


def test_creating_a_user_twice_and_dropping_one_that_is_not_there(store: AccountStore) -> None:
    store.create_user(LOADER, "")
    with pytest.raises(AlreadyExists, match=r"CREATE USER failed for 'loader'@'%' : user already exists"):
        store.create_user(LOADER, "")
    store.create_user(LOADER, "", if_not_exists=True)
    store.drop_user(LOADER)
    with pytest.raises(DorisError, match="DROP USER failed for 'loader'@'%' : user not exists"):
        store.drop_user(LOADER)
    store.drop_user(LOADER, if_exists=True)
    with pytest.raises(DorisError, match="Can not drop user root"):
        store.drop_user(Identity("root"))


# (grant, scope, asked privilege, asked db, asked table, allowed)
CHECKS = [
    ("LOAD_PRIV", "db1.t1", Priv.LOAD, "db1", "t1", True),
    ("LOAD_PRIV", "db1.t1", Priv.LOAD, "db1", "t2", False),
    ("LOAD_PRIV", "db1.t1", Priv.SELECT, "db1", "t1", False),
    ("LOAD_PRIV", "db1.t1", Priv.LOAD, "db2", "t1", False),
    ("LOAD_PRIV", "db1.*", Priv.LOAD, "db1", "t9", True),
    ("LOAD_PRIV", "db1.*", Priv.LOAD, "db1", None, True),
    ("LOAD_PRIV", "db1.t1", Priv.LOAD, "db1", None, False),  # a table grant is not the database
    ("SELECT_PRIV", "*.*", Priv.SELECT, "any", "t", True),
    ("ADMIN_PRIV", "*.*", Priv.DROP, "any", "t", True),
    ("SELECT_PRIV,LOAD_PRIV", "db1.t1", Priv.ALTER | Priv.LOAD, "db1", "t1", True),  # one of the asked privileges
]


@pytest.mark.parametrize(("privs", "scope", "wanted", "db", "table", "allowed"), CHECKS)
def test_a_grant_covers_its_scope_and_nothing_else(
    store: AccountStore, privs: str, scope: str, wanted: Priv, db: str, table: str | None, allowed: bool
) -> None:
    store.create_user(LOADER, "")
    store.grant(parse_privileges(privs.split(",")), parse_scope(scope), user=LOADER)
    assert store.privileges(LOADER).allows(wanted, db, table) is allowed


def test_revoke_removes_only_what_it_names(store: AccountStore) -> None:
    store.create_user(LOADER, "")
    store.grant(Priv.SELECT | Priv.LOAD, Scope("db1"), user=LOADER)
    store.revoke(Priv.SELECT, Scope("db1"), user=LOADER)
    held = store.privileges(LOADER)
    assert held.allows(Priv.LOAD, "db1", "t") and not held.allows(Priv.SELECT, "db1", "t")
    store.revoke(Priv.LOAD, Scope("db1"), user=LOADER)
    assert store.own_grants(user=LOADER) == []


def test_admin_priv_is_granted_on_the_global_scope_only(store: AccountStore) -> None:
    store.create_user(LOADER, "")
    with pytest.raises(DorisError, match=r"ADMIN_PRIV and NODE_PRIV can only be granted/revoke on/from \*\.\*\.\*"):
        store.grant(Priv.ADMIN, Scope("db1"), user=LOADER)


def test_a_role_lends_its_grants_until_it_is_revoked_or_dropped(store: AccountStore) -> None:
    store.create_user(LOADER, "")
    store.create_role("writers")
    with pytest.raises(AlreadyExists, match="Role writers already exists"):
        store.create_role("writers")
    store.grant(Priv.LOAD, Scope("db1"), role="writers")
    store.grant_role("writers", LOADER)
    assert store.privileges(LOADER).allows(Priv.LOAD, "db1", "t")
    assert store.privileges(LOADER).roles == ("writers",)
    store.revoke_role("writers", LOADER)
    assert not store.privileges(LOADER).allows(Priv.LOAD, "db1", "t")
    store.grant_role("writers", LOADER)
    store.drop_role("writers")
    assert not store.privileges(LOADER).allows(Priv.LOAD, "db1", "t")
    with pytest.raises(DorisError, match="role: writers does not exist"):
        store.grant_role("writers", LOADER)


def test_a_dropped_user_holds_nothing_even_if_recreated(store: AccountStore) -> None:
    store.create_user(LOADER, "")
    store.grant(Priv.LOAD, Scope("db1"), user=LOADER)
    store.drop_user(LOADER)
    assert not store.privileges(LOADER).allows(Priv.LOAD, "db1", "t")
    store.create_user(LOADER, "")
    assert store.own_grants(user=LOADER) == []


def test_databases_and_tables_are_visible_with_any_privilege_on_them(store: AccountStore) -> None:
    store.create_user(LOADER, "")
    store.grant(Priv.LOAD, Scope("db1", "t1"), user=LOADER)
    held = store.privileges(LOADER)
    assert held.sees_db("db1") and not held.sees_db("db2")
    assert held.sees_table("db1", "t1") and not held.sees_table("db1", "t2")
    assert store.privileges(Identity("root")).sees_db("db2")


def test_refusals_are_worded_as_doris_words_them() -> None:
    assert (
        str(table_denied("LOAD", LOADER, "db1", "t1")) == "LOAD command denied to user 'loader'@'%' for table 'db1.t1'"
    )
    assert str(db_denied(LOADER, "db1")) == "Access denied for user 'loader' to database 'db1'"


def test_a_password_given_later_replaces_an_empty_one_but_never_a_set_one(tmp_path: Path) -> None:
    store = AccountStore(tmp_path / "accounts.db")
    store.bootstrap("")  # first used on loopback with no password
    assert store.authenticate("root", "", "127.0.0.1") == Identity("root")
    store.bootstrap("now-exposed")  # restarted on a network address with SL_ROOT_PASSWORD
    with pytest.raises(DorisError, match="Access denied"):
        store.authenticate("admin", "", "10.1.1.1")
    assert store.authenticate("admin", "now-exposed", "10.1.1.1") == Identity("admin")


@pytest.mark.parametrize(
    ("host", "client", "matches"),
    [
        ("10.0.0.%", "10.0.0.7", True),
        ("10.0.0.%", "10.0.1.7", False),
        ("10.0.0._", "10.0.0.7", True),
        ("10.0.0._", "10.0.0.17", False),
        ("%.example.com", "db.EXAMPLE.com", True),
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "127.0.0.10", False),
        ("%%", "", True),
    ],
)
def test_host_patterns_match_as_sql_like(host: str, client: str, matches: bool) -> None:
    assert Identity("u", host).host_matches(client) is matches


def test_a_host_pattern_of_many_wildcards_is_matched_in_linear_time() -> None:
    import time

    started = time.monotonic()
    assert not Identity("u", "%a" * 40 + "%b").host_matches("a" * 200)
    assert time.monotonic() - started < 1.0  # a regular expression of these backtracks for hours


def test_a_repeated_login_costs_no_statement_and_sees_every_change_made_through_another_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A login takes the accounts' version as read within `VERSION_FRESH_S` (what a request costs: no statement at
    all); a change made through another server sharing the store counts within that time, one made through this
    server on the next login."""
    from tables.accounts import VERSION_FRESH_S

    path = tmp_path / "accounts.db"
    here, there = AccountStore(path), AccountStore(path)  # two servers on one store
    here.bootstrap("secret")
    there.create_user(LOADER, native_password_hash("pw"))
    there.grant(Priv.LOAD, Scope("db1"), user=LOADER)
    assert here.login("loader", "pw", "10.0.0.1").allows(Priv.LOAD, "db1", "t")
    statements = [0]
    run = Tx.run

    def counted(self: Tx, *args: Any, **kwargs: Any) -> Any:
        statements[0] += 1
        return run(self, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(Tx, "run", counted)
        for _ in range(20):
            assert here.login("loader", "pw", "10.0.0.1").allows(Priv.LOAD, "db1", "t")
    assert statements[0] <= 1  # the accounts' version at most once; the rest is what the previous login read
    with pytest.raises(DorisError, match="Access denied for user 'loader'"):
        here.login("loader", "wrong", "10.0.0.1")  # a cached login is for its own password only

    def later() -> None:  # another server's change: counted here once the version read is that old
        time.sleep(VERSION_FRESH_S * 1.2)

    there.revoke(Priv.LOAD, Scope("db1"), user=LOADER)
    later()
    assert not here.login("loader", "pw", "10.0.0.1").allows(Priv.LOAD, "db1", "t")
    there.grant(Priv.SELECT, Scope("db1"), user=LOADER)
    later()
    assert here.login("loader", "pw", "10.0.0.1").allows(Priv.SELECT, "db1", "t")
    there.set_password(LOADER, native_password_hash("new"))
    later()
    with pytest.raises(DorisError, match="Access denied for user 'loader'"):
        here.login("loader", "pw", "10.0.0.1")
    assert here.login("loader", "new", "10.0.0.1").allows(Priv.SELECT, "db1", "t")
    here.revoke(Priv.SELECT, Scope("db1"), user=LOADER)  # through this server: at once, no wait
    assert not here.login("loader", "new", "10.0.0.1").allows(Priv.SELECT, "db1", "t")
    there.drop_user(LOADER)
    later()
    with pytest.raises(DorisError, match="Access denied for user 'loader'"):
        here.login("loader", "new", "10.0.0.1")
