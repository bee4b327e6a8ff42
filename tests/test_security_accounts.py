"""Accounts and what a logged-in user may see or change through them (red-team audit of the account statements,
the SHOW statements and the HTTP routes beside stream load).

- GRANT_PRIV manages users, roles and grants, not ADMIN_PRIV or NODE_PRIV: it cannot grant them (to itself or
  anyone, directly or through a role holding them), take over an account holding them (its password), drop one,
  or change the built-in roles; root's password is root's own; `root` and `admin` cannot be re-created at another
  host (such an identity is what root's logins from there take, and it could not be dropped).
- SHOW LOAD lists the broker loads of the tables the user may load (a job's row carries its error-log URL, whose
  rejected rows are table data), and SHOW DELETE the delete predicates of those tables, as Doris filters both.

Every statement goes to the real server, as the users the account statements made.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import DorisClient

PASSWORD = "pw"
DUP = "(k INT, v VARCHAR(32)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"


def denied(what: str) -> str:
    return f"Access denied; you need (at least one of) the {what} privilege(s) for this operation"


def new_user(doris: DorisClient, *grants: str) -> str:
    """A fresh user (password `pw`) holding `grants` (`SELECT_PRIV ON d.t`, ...), made by root."""
    name = f"u_{uuid.uuid4().hex[:8]}"
    doris.sql("information_schema", f"CREATE USER '{name}' IDENTIFIED BY '{PASSWORD}'")
    for grant in grants:
        doris.sql("information_schema", f"GRANT {grant} TO '{name}'")
    return name


class UserClient(DorisClient):
    """A client logged in as `name`."""

    def __init__(self, base_url: str, name: str, password: str = PASSWORD) -> None:
        super().__init__(base_url, auth=(name, password))
        self.name = name


def as_user(base_url: str, name: str, password: str = PASSWORD) -> UserClient:
    return UserClient(base_url, name, password)


def error(client: DorisClient, stmt: str, db: str = "information_schema") -> str:
    """The statement's refusal text (it must fail)."""
    reply = client.sql_raw(db, stmt)
    assert reply["code"] != 0, reply
    return str(reply["data"])


def global_privs(client: DorisClient) -> str:
    """The caller's own SHOW GRANTS: its global privileges cell."""
    return str(client.rows("information_schema", "SHOW GRANTS")[0][4] or "")


def logs_in(base_url: str, user: str, password: str) -> bool:
    reply = httpx.post(
        f"{base_url}/api/query/default_cluster/information_schema",
        json={"stmt": "SELECT 1"},
        auth=(user, password),
        timeout=60,
    ).json()
    return bool(reply["code"] == 0)


@pytest.fixture
def granter(doris: DorisClient, base_url: str) -> UserClient:
    """A user holding GRANT_PRIV on *.* and nothing else."""
    return as_user(base_url, new_user(doris, "GRANT_PRIV ON *.*"))


# -- privilege escalation through GRANT_PRIV ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("privilege", "refusal"),
    [
        ("ADMIN_PRIV", denied("ADMIN")),
        ("NODE_PRIV", "Only user with NODE_PRIV can grant/revoke NODE_PRIV to other user"),
        ("ADMIN_PRIV, SELECT_PRIV", denied("ADMIN")),
    ],
)
def test_grant_priv_cannot_grant_admin_or_node_priv_to_itself(
    granter: UserClient, privilege: str, refusal: str
) -> None:
    me = granter.name
    assert refusal in error(granter, f"GRANT {privilege} ON *.* TO '{me}'")
    assert global_privs(granter) == "Grant_priv"  # nothing changed, not even the SELECT_PRIV beside it
    assert denied("ADMIN") in error(granter, f"SHOW TABLETS FROM {me}.t")


def test_grant_priv_still_grants_data_privileges_and_manages_users(
    doris: DorisClient, granter: UserClient, base_url: str
) -> None:
    other = f"u_{uuid.uuid4().hex[:8]}"
    granter.sql("information_schema", f"CREATE USER '{other}' IDENTIFIED BY 'x'")
    granter.sql("information_schema", f"GRANT SELECT_PRIV ON *.* TO '{other}'")
    granter.sql("information_schema", f"SET PASSWORD FOR '{other}' = PASSWORD('y')")
    assert logs_in(base_url, other, "y")
    granter.sql("information_schema", f"DROP USER '{other}'")
    # root (NODE_PRIV) and admin (ADMIN_PRIV) hand out what they hold
    target = new_user(doris)
    doris.sql("information_schema", f"GRANT ADMIN_PRIV ON *.* TO '{target}'")
    assert global_privs(as_user(base_url, target)) == "Admin_priv"
    as_user(base_url, "admin", "").sql("information_schema", f"REVOKE ADMIN_PRIV ON *.* FROM '{target}'")


@pytest.mark.parametrize(
    ("stmt", "refusal"),
    [
        ("GRANT 'operator' TO '{me}'", "Can not grant role: operator"),
        ("GRANT 'admin' TO '{me}'", denied("ADMIN")),
        ("CREATE USER '{new}' IDENTIFIED BY 'pw' DEFAULT ROLE 'operator'", "Can not grant role: operator"),
        ("CREATE USER '{new}' IDENTIFIED BY 'pw' DEFAULT ROLE 'admin'", denied("ADMIN")),
        ("CREATE USER '{new}' IDENTIFIED BY 'pw' DEFAULT ROLE 'no_such_role'", "role: no_such_role does not exist"),
    ],
)
def test_grant_priv_cannot_take_a_builtin_role(granter: UserClient, base_url: str, stmt: str, refusal: str) -> None:
    me, new = granter.name, f"u_{uuid.uuid4().hex[:8]}"
    assert refusal in error(granter, stmt.format(me=me, new=new))
    assert global_privs(granter) == "Grant_priv"
    assert not logs_in(base_url, new, "pw")  # a refused CREATE USER creates nothing


def test_a_role_holding_admin_priv_is_granted_and_dropped_only_by_an_admin(
    doris: DorisClient, granter: UserClient, base_url: str
) -> None:
    role = f"r_{uuid.uuid4().hex[:8]}"
    doris.sql("information_schema", f"CREATE ROLE {role}; GRANT ADMIN_PRIV ON *.* TO ROLE '{role}'")
    me = granter.name
    assert denied("ADMIN") in error(granter, f"GRANT '{role}' TO '{me}'")
    assert denied("ADMIN") in error(granter, f"DROP ROLE {role}")
    assert denied("ADMIN") in error(granter, f"REVOKE ADMIN_PRIV ON *.* FROM ROLE '{role}'")
    assert global_privs(granter) == "Grant_priv"
    holder = new_user(doris)
    doris.sql("information_schema", f"GRANT '{role}' TO '{holder}'")
    assert denied("ADMIN") in error(granter, f"REVOKE '{role}' FROM '{holder}'")
    assert denied("ADMIN") in error(granter, f"SET PASSWORD FOR '{holder}' = PASSWORD('taken')")
    assert denied("ADMIN") in error(granter, f"DROP USER '{holder}'")
    assert logs_in(base_url, holder, PASSWORD)
    assert "Admin_priv" in global_privs(as_user(base_url, holder))
    doris.sql("information_schema", f"DROP USER '{holder}'; DROP ROLE {role}")  # root may


@pytest.mark.parametrize(
    ("stmt", "refusal"),
    [
        ("SET PASSWORD FOR 'root' = PASSWORD('taken')", "Can not set password for root user, except root itself"),
        ("ALTER USER 'root'@'%' IDENTIFIED BY 'taken'", "Can not set password for root user, except root itself"),
        ("SET PASSWORD FOR 'admin'@'%' = PASSWORD('taken')", denied("ADMIN")),
        ("ALTER USER 'admin' IDENTIFIED BY 'taken'", denied("ADMIN")),
        ("CREATE USER 'root'@'127.0.0.1' IDENTIFIED BY 'taken'", "Can not create root user"),
        ("CREATE USER 'admin'@'127.0.0.1' IDENTIFIED BY 'taken'", "Can not create admin user"),
        ("CREATE USER 'root'@'%' IDENTIFIED BY 'taken'", "Can not create root user"),
        ("DROP USER 'admin'", "Can not drop user admin"),
        ("REVOKE 'operator' FROM 'root'", "Can not revoke role: operator"),
        ("REVOKE 'admin' FROM 'admin'", denied("ADMIN")),
        ("REVOKE ADMIN_PRIV ON *.* FROM ROLE 'admin'", denied("ADMIN")),
        ("REVOKE SELECT_PRIV ON *.* FROM ROLE 'operator'", "Can not revoke from role: operator"),
        ("GRANT SELECT_PRIV ON *.* TO ROLE 'admin'", "Can not grant to role: admin"),
    ],
)
def test_grant_priv_cannot_take_over_or_lock_out_root_and_admin(
    doris: DorisClient, granter: UserClient, base_url: str, stmt: str, refusal: str
) -> None:
    assert refusal in error(granter, stmt)
    # root and admin keep their password (the test server's is empty), their roles and what the roles hold
    for user, role in (("root", "operator"), ("admin", "admin")):
        assert logs_in(base_url, user, "")
        assert not logs_in(base_url, user, "taken")
        assert as_user(base_url, user, "").rows("information_schema", "SHOW GRANTS")[0][3] == role
    roles = {r[0]: r[3] for r in doris.rows("information_schema", "SHOW ROLES")}
    assert (
        roles["operator"]
        == "Node_priv,Admin_priv,Grant_priv,Select_priv,Load_priv,Alter_priv,Create_priv,Drop_priv,Usage_priv"
    )
    assert roles["admin"] == "Admin_priv,Grant_priv,Select_priv,Load_priv,Alter_priv,Create_priv,Drop_priv,Usage_priv"


def test_even_root_cannot_shadow_root_at_another_host(doris: DorisClient, base_url: str) -> None:
    assert "Can not create root user" in error(doris, "CREATE USER 'root'@'127.0.0.1' IDENTIFIED BY 'x'")
    assert "Can not create admin user" in error(doris, "CREATE USER 'admin'@'127.%' IDENTIFIED BY 'x'")
    assert logs_in(base_url, "root", "") and logs_in(base_url, "admin", "")


# -- SHOW LOAD and SHOW DELETE list what the user may load ------------------------------------------------------


@dataclass(frozen=True)
class Scene:
    db: str
    select_t1: DorisClient  # SELECT_PRIV on t1
    alter_db: DorisClient  # ALTER_PRIV, CREATE_PRIV on the database
    load_t2: DorisClient  # LOAD_PRIV on t2


@pytest.fixture
def scene(doris: DorisClient, db: str, base_url: str) -> Scene:
    doris.sql(db, f"CREATE TABLE t1 {DUP}; CREATE TABLE t2 {DUP}")
    return Scene(
        db,
        as_user(base_url, new_user(doris, f"SELECT_PRIV ON {db}.t1")),
        as_user(base_url, new_user(doris, f"ALTER_PRIV, CREATE_PRIV ON {db}.*")),
        as_user(base_url, new_user(doris, f"LOAD_PRIV ON {db}.t2")),
    )


def finished_job(doris: DorisClient, db: str, label: str, timeout: float = 60) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        rows = doris.rows(db, f"SHOW LOAD WHERE LABEL = '{label}'")
        if rows and rows[0][2] in ("FINISHED", "CANCELLED"):
            return rows[0]
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)


def test_show_load_lists_only_the_jobs_of_tables_the_user_may_load(
    doris: DorisClient, scene: Scene, server_settings: Any, base_url: str
) -> None:
    folder = Path(server_settings.broker_allowed_roots[0]) / uuid.uuid4().hex[:12]
    folder.mkdir()
    (folder / "a.csv").write_text("1,visible\nsecret-row-value,x\n")
    db = scene.db
    doris.sql(
        db,
        f'LOAD LABEL {db}.bl (DATA INFILE("{folder}/a.csv") INTO TABLE t2 COLUMNS TERMINATED BY ",") '
        'PROPERTIES ("max_filter_ratio" = "0.9", "strict_mode" = "true")',
    )
    job = finished_job(doris, db, "bl")
    url = job[13]
    assert url.startswith("/api/_load_error_log?file=")
    # users who may not load t2 see no job (they see the database: they hold something in it)
    for client in (scene.select_t1, scene.alter_db):
        assert client.rows(db, "SHOW LOAD") == []
        assert client.rows(db, f"SHOW LOAD FROM {db} WHERE LABEL = 'bl'") == []
    # the table's loader sees it, with the error log of its rejected rows
    assert [r[1] for r in scene.load_t2.rows(db, "SHOW LOAD")] == ["bl"]
    text = scene.load_t2.http.get(url).text
    assert "secret-row-value" in text


def test_show_delete_lists_only_the_tables_the_user_may_load(doris: DorisClient, scene: Scene) -> None:
    db = scene.db
    doris.sql(db, "INSERT INTO t2 VALUES (1, 'secret-ssn-123'), (2, 'kept')")
    doris.sql(db, "DELETE FROM t2 WHERE v = 'secret-ssn-123'")
    assert scene.alter_db.rows(db, f"SHOW DELETE FROM {db}") == []  # sees t2 (ALTER_PRIV), may not load it
    shown = scene.load_t2.rows(db, f"SHOW DELETE FROM {db}")
    assert [[r[0], r[3]] for r in shown] == [["t2", 'v EQ "secret-ssn-123"']]
    assert doris.rows(db, f"SHOW DELETE FROM {db}") == shown


# -- GRANT_PRIV and USAGE_PRIV show nothing -----------------------------------------------------------------------


@pytest.mark.parametrize("privilege", ["USAGE_PRIV", "GRANT_PRIV"])
def test_grant_and_usage_priv_do_not_show_databases_or_tables(
    doris: DorisClient, db: str, base_url: str, privilege: str
) -> None:
    """Doris's SHOW predicate is ADMIN, SELECT, LOAD, ALTER, CREATE or DROP: a user granted only USAGE_PRIV (which
    nothing here needs) or GRANT_PRIV sees no database, table or column."""
    doris.sql(db, f"CREATE TABLE t {DUP}")
    user = as_user(base_url, new_user(doris, f"{privilege} ON *.*"))
    assert user.rows(db, "SHOW DATABASES") == [["information_schema"], ["mysql"]]
    assert f"Access denied for user '{user.name}' to database '{db}'" in error(user, "SHOW TABLES", db)
    assert "SHOW CREATE TABLE command denied" in error(user, f"SHOW CREATE TABLE {db}.t")
    assert "DESCRIBE command denied" in error(user, f"DESC {db}.t")
    assert user.rows(db, f"SELECT COUNT(*) FROM information_schema.columns WHERE TABLE_SCHEMA = '{db}'") == [[0]]
    schema = user.http.get(f"/api/{db}/t/_schema").json()
    assert schema["code"] != 0 and "SHOW command denied" in schema["data"], schema


def test_a_root_left_at_another_host_by_an_older_release_can_be_dropped(tmp_path: Path) -> None:
    """An older release let GRANT_PRIV create `'root'@'127.0.0.1'` (root's logins from there took it, with none
    of root's privileges) and refused to drop it; now it can be dropped, the built-in identities still cannot."""
    from tables.accounts import AccountStore, Identity, native_password_hash
    from tables.errors import DorisError

    store = AccountStore(tmp_path / "accounts.db")
    store.bootstrap("")
    shadow = Identity("root", "127.0.0.1")
    with store._tx() as tx:  # as the older release stored it
        store._insert_user(tx, shadow, native_password_hash("taken"))
    assert store.match("root", "127.0.0.1") == shadow
    store.drop_user(shadow)
    assert store.match("root", "127.0.0.1") == Identity("root")
    for builtin in ("root", "admin"):
        with pytest.raises(DorisError, match=f"Can not drop user {builtin}"):
            store.drop_user(Identity(builtin))
    store.close()


# -- SHOW PARTITIONS ... LIKE runs in linear time ----------------------------------------------------------------


def test_show_partitions_like_cannot_wedge_the_server(doris: DorisClient, db: str, base_url: str) -> None:
    """`LIKE` in SHOW PARTITIONS was a Python regex of `.*` runs: 40 `%` before a missing character backtracked for
    ages while holding the GIL (every request of every user waited); a user with SELECT on one table could send it."""
    doris.sql(db, f"CREATE TABLE t {DUP}")
    reader = as_user(base_url, new_user(doris, f"SELECT_PRIV ON {db}.t"))
    reader.http.timeout = httpx.Timeout(20)
    started = time.monotonic()
    wedge = "%" * 40 + "X"
    assert reader.rows(db, f"SHOW PARTITIONS FROM t WHERE ReplicaAllocation LIKE '{wedge}'") == []
    assert time.monotonic() - started < 10
    rows = reader.rows(
        db, "SHOW PARTITIONS FROM t WHERE ReplicaAllocation LIKE 'TAG.location%' AND PartitionName LIKE 't'"
    )
    assert [r[1] for r in rows] == ["t"]  # LIKE stays case-insensitive, `%` and `_` as before
    assert reader.rows(db, "SHOW PARTITIONS FROM t WHERE PartitionName LIKE 't_'") == []
