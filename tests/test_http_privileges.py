"""Every HTTP route checks the privilege Doris checks there, before it does anything (issue 17).

Users are made in the served app's account store (the SQL statements that make them are tested in
tests/test_privileges.py); each case is a route × a user with the privilege, without it, or with it elsewhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tables.accounts import AccountStore, Identity, Priv, Scope, native_password_hash
from tests.helpers import DorisClient, loopback_socket, serving

PASSWORD = "pw"


@dataclass(frozen=True)
class Setup:
    base_url: str
    db: str
    accounts: AccountStore
    users: dict[str, str]  # role in the test → user name


GRANTS: dict[str, tuple[Priv, str]] = {  # role → (privileges, scope: `{db}` is the test's database)
    "table_loader": (Priv.LOAD, "{db}.t"),
    "db_loader": (Priv.LOAD, "{db}.*"),
    "reader": (Priv.SELECT, "{db}.t"),
    "elsewhere": (Priv.LOAD, "{db}.other"),
    "admin": (Priv.ADMIN, "*.*"),
}


def make_users(accounts: AccountStore, db: str) -> dict[str, str]:
    users = {}
    for role, (privs, scope) in GRANTS.items():
        name = f"{role}_{uuid.uuid4().hex[:6]}"
        accounts.create_user(Identity(name), native_password_hash(PASSWORD))
        db_part, _, table = scope.format(db=db).partition(".")
        accounts.grant(privs, Scope(db_part, table), user=Identity(name))
        users[role] = name
    return users


@pytest.fixture(scope="module")
def setup(served_app: Any, base_url: str, doris: DorisClient) -> Setup:
    db = f"priv_{uuid.uuid4().hex[:8]}"
    doris.sql(db, f"CREATE DATABASE {db}")
    for table in ("t", "other"):
        doris.sql(db, f"CREATE TABLE {table} (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    accounts: AccountStore = served_app.state.services.accounts
    return Setup(base_url, db, accounts, make_users(accounts, db))


def load(setup: Setup, role: str, *, table: str = "t", password: str = PASSWORD, **headers: str) -> dict[str, Any]:
    resp = httpx.put(
        f"{setup.base_url}/api/{setup.db}/{table}/_stream_load",
        content=b"1,a\n",
        auth=(setup.users.get(role, role), password),
        headers={"column_separator": ",", "Expect": "100-continue", **headers},
        timeout=120,
    )
    body: dict[str, Any] = resp.json()
    return body


@pytest.mark.parametrize(
    ("role", "table", "allowed"),
    [
        ("table_loader", "t", True),
        ("db_loader", "other", True),
        ("admin", "t", True),
        ("table_loader", "other", False),  # a grant on another table of the database
        ("reader", "t", False),  # SELECT is not LOAD
        ("elsewhere", "t", False),
    ],
)
def test_a_stream_load_needs_load_priv_on_its_table(setup: Setup, role: str, table: str, allowed: bool) -> None:
    label = f"l_{uuid.uuid4().hex[:8]}"
    reply = load(setup, role, table=table, label=label)
    if allowed:
        assert reply["Status"] == "Success", reply
        return
    user = setup.users[role]
    assert reply["Status"] == "Fail"
    assert (
        reply["Message"] == f"[NOT_AUTHORIZED]LOAD command denied to user '{user}'@'%' for table '{setup.db}.{table}'"
    )
    assert reply["TxnId"] == -1  # refused before a transaction or a byte of the body
    root = load(setup, "root", table=table, password="", label=label)
    assert root["Status"] == "Success", root  # the label was never claimed


def test_a_wrong_password_and_an_unknown_user_get_the_same_refusal(setup: Setup) -> None:
    user = setup.users["table_loader"]
    assert load(setup, "table_loader", password="nope")["Message"] == (
        f"[NOT_AUTHORIZED]Access denied for user '{user}' (using password: YES)"
    )
    assert load(setup, "ghost")["Message"] == "[NOT_AUTHORIZED]Access denied for user 'ghost' (using password: YES)"


def fe_get(setup: Setup, role: str, path: str, method: str = "GET", **headers: str) -> dict[str, Any]:
    resp = httpx.request(
        method, f"{setup.base_url}{path}", auth=(setup.users.get(role, role), PASSWORD), headers=headers, timeout=60
    )
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


@pytest.mark.parametrize(
    ("role", "allowed"), [("db_loader", True), ("admin", True), ("table_loader", False), ("reader", False)]
)
def test_get_load_state_needs_load_priv_on_the_database(setup: Setup, role: str, allowed: bool) -> None:
    reply = fe_get(setup, role, f"/api/{setup.db}/get_load_state?label=nothing")
    if allowed:
        assert reply["code"] == 0 and reply["data"] == "UNKNOWN", reply
    else:
        assert reply["code"] == 401
        assert reply["data"] == f"Access denied for user '{setup.users[role]}' to database '{setup.db}'"


@pytest.mark.parametrize(
    ("role", "path", "allowed"),
    [
        ("db_loader", "/api/{db}/_stream_load_2pc", True),
        ("table_loader", "/api/{db}/t/_stream_load_2pc", True),  # the table form: a grant on the table
        ("table_loader", "/api/{db}/_stream_load_2pc", True),  # Doris: its transactions, by the database form too
        ("table_loader", "/api/{db}/other/_stream_load_2pc", False),
        ("reader", "/api/{db}/t/_stream_load_2pc", False),
    ],
)
def test_two_phase_commit_needs_load_priv(setup: Setup, role: str, path: str, allowed: bool) -> None:
    resp = httpx.put(
        setup.base_url + path.format(db=setup.db),
        auth=(setup.users[role], PASSWORD),
        headers={"txn_id": "999999", "txn_operation": "abort"},
        timeout=60,
    )
    body = resp.json()
    if allowed:  # past the check: the transaction is looked up
        assert body.get("status") != "FAILED" or "Access denied" not in body.get("msg", ""), body
        assert "code" not in body or body["code"] != 401, body
    else:
        assert body["code"] == 401 and "Access denied for user" in body["data"], body


@pytest.mark.parametrize(
    ("role", "allowed"), [("reader", True), ("table_loader", True), ("elsewhere", False), ("db_loader", True)]
)
def test_the_schema_route_needs_a_privilege_on_the_table(setup: Setup, role: str, allowed: bool) -> None:
    reply = fe_get(setup, role, f"/api/{setup.db}/t/_schema")
    if allowed:
        assert reply["code"] == 0 and [p["name"] for p in reply["data"]["properties"]] == ["k", "v"], reply
    else:
        user = setup.users[role]
        assert reply == {
            "msg": "Unauthorized",
            "code": 401,
            "data": f"SHOW command denied to user '{user}'@'%' for table '{setup.db}.t'",
            "count": 0,
        }


@pytest.mark.parametrize(("role", "allowed"), [("admin", True), ("db_loader", False)])
def test_the_compaction_api_needs_admin_priv(setup: Setup, role: str, allowed: bool) -> None:
    reply = fe_get(setup, role, "/api/compaction/show?tablet_id=1")
    if allowed:
        assert reply.get("code") != 401, reply
    else:
        assert reply["code"] == 401
        assert reply["data"] == "Access denied; you need (at least one of) the ADMIN privilege(s) for this operation"


def test_a_revoke_a_password_change_and_a_dropped_user_count_on_the_next_request(setup: Setup) -> None:
    name = f"short_{uuid.uuid4().hex[:6]}"
    identity = Identity(name)
    setup.accounts.create_user(identity, native_password_hash(PASSWORD))
    setup.accounts.grant(Priv.LOAD, Scope(setup.db, "t"), user=identity)
    assert load(setup, name)["Status"] == "Success"
    setup.accounts.revoke(Priv.LOAD, Scope(setup.db, "t"), user=identity)
    assert "LOAD command denied" in load(setup, name)["Message"]
    setup.accounts.grant(Priv.LOAD, Scope(setup.db, "t"), user=identity)
    setup.accounts.set_password(identity, native_password_hash("new"))
    assert "Access denied for user" in load(setup, name)["Message"]
    assert load(setup, name, password="new")["Status"] == "Success"
    setup.accounts.drop_user(identity)
    assert "Access denied for user" in load(setup, name, password="new")["Message"]


@pytest.fixture(scope="module")
def fe_be(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, AccountStore]]:
    """A server in front-end mode (FE and BE sockets), with its account store; 3 failed logins lock an address."""
    from app.main import create_app
    from app.settings import Settings

    fe, be = loopback_socket(), loopback_socket()
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("fe-priv"),
        fe_redirect=True,
        be_port=be.getsockname()[1],
        mysql_port=0,
        login_max_failures=3,
        login_lock_seconds=2,
    )
    app = create_app(settings, spark=spark)
    with serving(app, fe, be, settings=settings) as (fe_url, be_url):
        yield fe_url, be_url, app.state.services.accounts


def test_the_fe_redirect_checks_load_priv_and_forwards_the_clients_own_credentials(
    fe_be: tuple[str, str, AccountStore],
) -> None:
    fe, be, accounts = fe_be
    db = f"fe_{uuid.uuid4().hex[:8]}"
    DorisClient(fe).sql(db, f"CREATE DATABASE {db}")
    DorisClient(fe).sql(db, "CREATE TABLE t (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    users = make_users(accounts, db)
    url = f"{fe}/api/{db}/t/_stream_load"
    headers = {"Expect": "100-continue", "column_separator": ","}
    allowed = httpx.put(url, content=b"1,a\n", auth=(users["table_loader"], "p@ss:w"), headers=headers)
    assert allowed.status_code == 200 and "Access denied" in allowed.json()["Message"]  # wrong password: no 307
    accounts.set_password(Identity(users["table_loader"]), native_password_hash("p@ss:w"))
    redirected = httpx.put(url, content=b"1,a\n", auth=(users["table_loader"], "p@ss:w"), headers=headers)
    assert redirected.status_code == 307
    port = be.rsplit(":", 1)[1]
    assert (
        redirected.headers["location"]
        == f"http://{users['table_loader']}:p%40ss%3Aw@127.0.0.1:{port}/api/{db}/t/_stream_load"
    )
    denied = httpx.put(url, content=b"1,a\n", auth=(users["reader"], PASSWORD), headers=headers)
    assert denied.status_code == 200
    assert (
        denied.json()["Message"]
        == f"[NOT_AUTHORIZED]LOAD command denied to user '{users['reader']}'@'%' for table '{db}.t'"
    )


def test_failed_logins_lock_the_address_out_for_a_while(fe_be: tuple[str, str, AccountStore]) -> None:
    import time

    _, be, accounts = fe_be
    name = f"guessed_{uuid.uuid4().hex[:6]}"
    accounts.create_user(Identity(name), native_password_hash(PASSWORD))
    url = f"{be}/api/backends"
    for guess in ("a", "b", "c"):
        assert "Access denied for user" in httpx.get(url, auth=(name, guess)).json()["data"]
    locked = httpx.get(url, auth=(name, PASSWORD)).json()  # the right password, too late
    assert locked["code"] == 401 and "blocked" in locked["data"] and "3 consecutive failed logins" in locked["data"]
    time.sleep(2.1)
    assert httpx.get(url, auth=(name, PASSWORD)).json()["code"] == 0


def test_real_clients_load_as_a_user_holding_only_load_priv_on_one_table(fe_be: tuple[str, str, AccountStore]) -> None:
    """pydoris and the PyPI package DorisClient (which refuses an empty password), through the FE's 307."""
    from DorisClient import DorisSession
    from pydoris.doris_client import DorisClient as PyDorisClient

    fe, _, accounts = fe_be
    db = f"clients_{uuid.uuid4().hex[:8]}"
    root = DorisClient(fe)
    root.sql(db, f"CREATE DATABASE {db}")
    for table in ("t", "other"):
        root.sql(db, f"CREATE TABLE {table} (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    loader = make_users(accounts, db)["table_loader"]
    host, port = fe.removeprefix("http://").split(":")
    session = DorisSession([f"{host}:{port}"], db, loader, PASSWORD)
    assert session.streamload("t", [{"k": 1, "v": "a"}]) is True
    pydoris = PyDorisClient(host, port, loader, PASSWORD)
    pydoris.options.set_json_format()
    assert pydoris.write(db, "t", '{"k": 2, "v": "b"}') is True
    assert pydoris.write(db, "other", '{"k": 3, "v": "c"}') is False  # LOAD on t only
    assert root.rows(db, "SELECT * FROM t ORDER BY k") == [[1, "a"], [2, "b"]]
    assert root.rows(db, "SELECT count(*) FROM other") == [[0]]
