"""Every statement checks the privilege Doris requires before it runs, over HTTP /api/query and the MySQL protocol
(issue 17): each statement kind × a user holding the privilege, a user without it (holding others on the same
object), and a user holding it on another table or database. Users and grants are made with the account
statements themselves, as root. The HTTP routes' own matrix is tests/test_http_privileges.py.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pymysql
import pytest

from tests.helpers import DorisClient

PASSWORD = "s3cret"
TABLE = "(k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"

# role in the test → the grants the account statements give it (`{db}`, `{db2}`: the module's databases)
GRANTS: dict[str, tuple[str, ...]] = {
    "select_t": ("SELECT_PRIV ON {db}.t",),
    "select_o": ("SELECT_PRIV ON {db}.other",),
    "load_t": ("LOAD_PRIV ON {db}.t",),
    "load_o": ("LOAD_PRIV ON {db}.other",),
    "load_db": ("LOAD_PRIV ON {db}.*",),
    "alter_t": ("ALTER_PRIV ON {db}.t",),
    "alter_o": ("ALTER_PRIV ON {db}.other",),
    "create_db": ("CREATE_PRIV ON {db}.*",),
    "create_db2": ("CREATE_PRIV ON {db2}.*",),
    "create_all": ("CREATE_PRIV ON *.*",),
    "drop_db": ("DROP_PRIV ON {db}.*",),
    "drop_o": ("DROP_PRIV ON {db}.other",),
    "drop_all": ("DROP_PRIV ON *.*",),
    "data_all": ("ALL ON {db}.*",),
    "reader_db2": ("SELECT_PRIV ON {db2}.*",),
    "admin": ("ADMIN_PRIV ON *.*",),
    "nobody": (),
}


@dataclass(frozen=True)
class World:
    base_url: str
    mysql_port: int
    db: str
    db2: str
    files: Path
    users: dict[str, str]  # role → user name

    def fill(self, text: str, u: str = "", user: str = "") -> str:
        return text.format(db=self.db, db2=self.db2, files=self.files, u=u, user=user)


@pytest.fixture(scope="module")
def world(base_url: str, mysql_port: int, doris: DorisClient, server_settings: Any) -> World:
    tag = uuid.uuid4().hex[:6]
    db, db2 = f"priv_{tag}", f"priv2_{tag}"
    files = Path(server_settings.broker_allowed_roots[0]) / f"priv_{tag}"
    files.mkdir()
    (files / "rows.csv").write_text("7,g\n")
    statements = [f"CREATE DATABASE {db}", f"CREATE DATABASE {db2}"]
    statements += [f"CREATE TABLE {db}.{t} {TABLE}" for t in ("t", "other")]
    statements += [f"INSERT INTO {db}.other VALUES (1, 'o')"]
    users = {role: f"{role}_{tag}" for role in GRANTS}
    for role, grants in GRANTS.items():
        statements.append(f"CREATE USER '{users[role]}'@'%' IDENTIFIED BY '{PASSWORD}'")
        statements += [f"GRANT {g.format(db=db, db2=db2)} TO '{users[role]}'@'%'" for g in grants]
    doris.sql(db, ";\n".join(statements))  # one request: the account statements as a script
    return World(base_url, mysql_port, db, db2, files, users)


# -- the two transports: (None, None) when the statement ran, else (MySQL code or None, Doris's detail text) -----
Outcome = tuple[int | None, str | None]


def over_http(world: World, user: str, stmt: str, password: str = PASSWORD) -> Outcome:
    resp = httpx.post(
        f"{world.base_url}/api/query/default_cluster/{world.db}",
        json={"stmt": stmt},
        auth=(user, password),
        timeout=120,
    )
    body = resp.json()
    if body.get("code") == 0:
        return None, None
    text = str(body.get("data") or body.get("msg"))
    marker = "detailMessage = "
    return None, text.split(marker, 1)[1] if marker in text else text


def connect(world: World, user: str, password: str = PASSWORD, **kwargs: Any) -> pymysql.connections.Connection:  # type: ignore[type-arg]
    return pymysql.connect(
        host="127.0.0.1", port=world.mysql_port, user=user, password=password, autocommit=True, **kwargs
    )


def over_mysql(world: World, user: str, stmt: str, password: str = PASSWORD) -> Outcome:
    try:
        conn = connect(world, user, password)  # no database: a user may not see it (the statements name theirs)
    except pymysql.err.MySQLError as exc:
        return exc.args[0], str(exc.args[1])
    try:
        conn.cursor().execute(stmt)
        return None, None
    except pymysql.err.MySQLError as exc:
        code, message = exc.args[0], str(exc.args[1])
        prefix = "errCode = 2, detailMessage = "
        return code, message[len(prefix) :] if message.startswith(prefix) else message
    finally:
        conn.close()


TRANSPORTS: dict[str, Callable[..., Outcome]] = {"http": over_http, "mysql": over_mysql}


@dataclass(frozen=True)
class Case:
    stmt: str  # `{u}`: a fresh suffix per run
    holder: str | None  # a role holding what the statement needs (None: not run, it would reach outside)
    lacker: str  # a role without it
    elsewhere: str | None  # a role holding it on another table or database
    refusal: str  # Doris's text; `{user}` the refused user
    code: int  # the MySQL error number Doris sends
    setup: str | None = None  # run by root before each attempt
    succeeds: bool = True  # False: the holder passes the check and meets another error (no such job)


def table_refusal(command: str, table: str = "t") -> str:
    return f"{command} command denied to user '{{user}}'@'%' for table '{{db}}.{table}'"


DB_REFUSAL = "Access denied for user '{user}' to database '{db}'"
ADMIN_REFUSAL = "Access denied; you need (at least one of) the ADMIN privilege(s) for this operation"
ROUTINE = (
    "CREATE ROUTINE LOAD {db}.j{u} ON t COLUMNS TERMINATED BY ',' "
    "FROM KAFKA ('kafka_broker_list' = '127.0.0.1:9', 'kafka_topic' = 'none')"
)

CASES: dict[str, Case] = {
    "select": Case("SELECT k FROM {db}.t", "select_t", "load_t", "select_o", table_refusal("SELECT"), 1142),
    "select-join-needs-both-tables": Case(
        "SELECT t.k FROM {db}.t JOIN {db}.other o ON t.k = o.k",
        "data_all",
        "select_t",
        None,
        table_refusal("SELECT", "other"),
        1142,
    ),
    "insert": Case(
        "INSERT INTO {db}.t (k, v) VALUES (1, 'a')", "load_t", "select_t", "load_o", table_refusal("LOAD"), 1142
    ),
    "insert-select-reads-with-select": Case(
        "INSERT INTO {db}.t (k, v) SELECT k, v FROM {db}.other",
        "data_all",
        "load_t",
        None,
        table_refusal("SELECT", "other"),
        1142,
    ),
    "update-needs-load-only": Case(
        "UPDATE {db}.t SET v = 'b' WHERE k = 1", "load_t", "select_t", "load_o", table_refusal("LOAD"), 1142
    ),
    "delete": Case("DELETE FROM {db}.t WHERE k = 2", "load_t", "select_t", "load_o", table_refusal("LOAD"), 1142),
    "truncate": Case("TRUNCATE TABLE {db}.t", "load_t", "select_t", "load_o", table_refusal("LOAD"), 1142),
    "broker-load": Case(
        "LOAD LABEL {db}.l{u} (DATA INFILE('{files}/rows.csv') INTO TABLE t COLUMNS TERMINATED BY ',' (k, v))",
        "load_t",
        "select_t",
        "load_o",
        table_refusal("LOAD"),
        1142,
    ),
    "create-routine-load": Case(ROUTINE, None, "select_t", "load_o", table_refusal("LOAD"), 1142),
    "pause-routine-load": Case(
        "PAUSE ROUTINE LOAD FOR {db}.nojob", "load_db", "select_t", None, DB_REFUSAL, 1044, succeeds=False
    ),
    "alter-table": Case(
        "ALTER TABLE {db}.t ADD COLUMN c{u} INT", "alter_t", "load_t", "alter_o", table_refusal("ALTER"), 1142
    ),
    "create-table": Case(
        f"CREATE TABLE {{db}}.n{{u}} {TABLE}",
        "create_db",
        "load_t",
        "create_db2",
        table_refusal("CREATE", "n{u}"),
        1142,
    ),
    "drop-table": Case(
        "DROP TABLE {db}.x{u}",
        "drop_db",
        "create_db",
        "drop_o",
        table_refusal("DROP", "x{u}"),
        1142,
        setup=f"CREATE TABLE x{{u}} {TABLE}",
    ),
    "create-database": Case(
        "CREATE DATABASE {db}_c{u}",
        "create_all",
        "data_all",
        "create_db",
        "Access denied for user '{user}' to database '{db}_c{u}'",
        1044,
    ),
    "drop-database": Case(
        "DROP DATABASE {db}_d{u}",
        "drop_all",
        "create_all",
        "drop_db",
        "Access denied for user '{user}' to database '{db}_d{u}'",
        1044,
        setup="CREATE DATABASE {db}_d{u}",
    ),
    "show-create-table-any-privilege": Case(
        "SHOW CREATE TABLE {db}.t", "load_t", "nobody", "select_o", table_refusal("SHOW CREATE TABLE"), 1142
    ),
    "describe-any-privilege": Case("DESC {db}.t", "alter_t", "nobody", "load_o", table_refusal("DESCRIBE"), 1142),
    "use-needs-a-privilege-in-the-database": Case("USE {db}", "select_o", "nobody", "reader_db2", DB_REFUSAL, 1044),
    "admin-compact": Case(
        "ADMIN COMPACT TABLE {db}.t WHERE TYPE = 'CUMULATIVE'", "admin", "data_all", None, ADMIN_REFUSAL, 1227
    ),
    "show-grants-of-another-user": Case(
        "SHOW GRANTS FOR root",
        "admin",
        "data_all",
        None,
        "Access denied; you need (at least one of) the GRANT/ROLE privilege(s) for this operation",
        1227,
    ),
}

ATTEMPTS = [
    pytest.param(name, who, transport, id=f"{name}-{who}-{transport}")
    for name, case in CASES.items()
    for who in ("holder", "lacker", "elsewhere")
    if getattr(case, who) is not None
    for transport in TRANSPORTS
]


@pytest.mark.parametrize(("name", "who", "transport"), ATTEMPTS)
def test_each_statement_needs_its_privilege(
    world: World, doris: DorisClient, name: str, who: str, transport: str
) -> None:
    case = CASES[name]
    u = uuid.uuid4().hex[:6]
    if case.setup is not None:
        doris.sql(world.db, world.fill(case.setup, u))
    user = world.users[getattr(case, who)]
    code, detail = TRANSPORTS[transport](world, user, world.fill(case.stmt, u))
    if who == "holder":
        if case.succeeds:
            assert detail is None, detail
        else:
            assert detail is not None and "denied" not in detail, detail
        return
    assert detail == world.fill(case.refusal, u, user)
    if transport == "mysql":
        assert code == case.code


def names(rows: list[list[Any]] | tuple[tuple[Any, ...], ...]) -> list[str]:
    return [str(r[0]) for r in rows]


def test_show_databases_and_tables_list_only_what_the_user_may_see(world: World) -> None:
    reader = world.users["select_t"]
    client = DorisClient(world.base_url, auth=(reader, PASSWORD))
    databases = names(client.rows(world.db, "SHOW DATABASES"))
    assert world.db in databases and world.db2 not in databases
    assert {"information_schema", "mysql"} <= set(databases)
    assert names(client.rows(world.db, "SHOW TABLES")) == ["t"]
    with connect(world, world.users["nobody"]) as conn, conn.cursor() as cur:
        cur.execute("SHOW DATABASES")
        assert sorted(names(cur.fetchall())) == ["information_schema", "mysql"]
    with connect(world, world.users["load_o"], database=world.db) as conn, conn.cursor() as cur:
        cur.execute("SHOW TABLES")
        assert names(cur.fetchall()) == ["other"]
        cur.execute("SHOW FULL TABLES")
        assert names(cur.fetchall()) == ["other"]


def test_information_schema_answers_per_user(world: World, doris: DorisClient) -> None:
    tables = f"SELECT TABLE_NAME FROM information_schema.tables WHERE TABLE_SCHEMA = '{world.db}' ORDER BY TABLE_NAME"
    columns = (
        "SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, DATA_TYPE, COLUMN_KEY FROM information_schema.columns "
        f"WHERE TABLE_SCHEMA = '{world.db}' ORDER BY TABLE_NAME, ORDINAL_POSITION"
    )
    schemata = "SELECT SCHEMA_NAME FROM information_schema.schemata"
    assert {"other", "t"} <= set(names(doris.rows(world.db, tables)))  # root sees everything
    reader = DorisClient(world.base_url, auth=(world.users["select_t"], PASSWORD))
    assert names(reader.rows(world.db, tables)) == ["t"]
    described = reader.rows(world.db, columns)  # the ALTER cases may have added columns after these two
    assert described[:2] == [["t", "k", 1, "int", "UNI"], ["t", "v", 2, "varchar", ""]]
    assert {r[0] for r in described} == {"t"}
    seen = names(reader.rows("information_schema", schemata))
    assert world.db in seen and world.db2 not in seen
    with connect(world, world.users["nobody"], database="information_schema") as conn, conn.cursor() as cur:
        cur.execute(tables.replace("information_schema.tables", "tables"))  # the session's database
        assert cur.fetchall() == ()
        cur.execute("SELECT count(*) FROM columns")
        assert cur.fetchall() == ((0,),)


def test_a_password_change_counts_for_new_connections_at_once(world: World, doris: DorisClient) -> None:
    user = f"pw_{uuid.uuid4().hex[:6]}"
    doris.sql(world.db, f"CREATE USER '{user}'@'%' IDENTIFIED BY 'one'; GRANT SELECT_PRIV ON {world.db}.t TO {user}")
    with connect(world, user, "one") as conn, conn.cursor() as cur:
        cur.execute("SET PASSWORD = PASSWORD('two')")  # a user changes its own password (over MySQL)
        cur.execute("SHOW GRANTS")
        assert cur.fetchall()[0][0] == f"'{user}'@'%'"
    with pytest.raises(pymysql.err.OperationalError) as refused:
        connect(world, user, "one")
    assert refused.value.args[0] == 1045
    assert over_http(world, user, "SELECT k FROM t", password="one")[1] == (
        f"Access denied for user '{user}' (using password: YES)"
    )
    assert over_http(world, user, "SELECT k FROM t", password="two") == (None, None)
    doris.sql(world.db, f"SET PASSWORD FOR '{user}'@'%' = PASSWORD('three')")  # root changes it (over HTTP)
    assert over_mysql(world, user, f"SELECT k FROM {world.db}.t", password="three") == (None, None)
    assert over_mysql(world, user, f"SELECT k FROM {world.db}.t", password="two")[0] == 1045


def test_drop_user_ends_its_access_on_the_next_statement(world: World, doris: DorisClient) -> None:
    user = f"gone_{uuid.uuid4().hex[:6]}"
    doris.sql(world.db, f"CREATE USER '{user}'@'%' IDENTIFIED BY 'p'; GRANT LOAD_PRIV ON {world.db}.* TO '{user}'")
    with connect(world, user, "p", database=world.db) as conn, conn.cursor() as cur:
        cur.execute("DESC t")
        doris.sql(world.db, f"DROP USER '{user}'@'%'")
        with pytest.raises(pymysql.err.MySQLError) as refused:
            cur.execute("DESC t")  # the open connection: the next statement has no privilege left
        assert refused.value.args[0] == 1142
    assert over_http(world, user, "DESC t", password="p")[1] == f"Access denied for user '{user}' (using password: YES)"


def test_root_does_everything_and_roles_carry_grants(world: World, doris: DorisClient) -> None:
    role, user = f"r_{uuid.uuid4().hex[:6]}", f"via_role_{uuid.uuid4().hex[:6]}"
    with connect(world, "root", "", database=world.db) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE ROLE {role}")
        cur.execute(f"GRANT LOAD_PRIV ON {world.db}.t TO ROLE '{role}'")
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'p' DEFAULT ROLE '{role}'")
        cur.execute("SHOW ROLES")
        assert role in names(cur.fetchall())
        cur.execute(f"SHOW GRANTS FOR '{user}'@'%'")
        assert cur.fetchall()[0][3] == role
        cur.execute("SHOW ALL GRANTS")
        assert f"'{user}'@'%'" in names(cur.fetchall())
        cur.execute("SHOW TABLETS FROM other")
        assert len(cur.fetchall()) == 1
    assert over_http(world, user, "INSERT INTO t (k, v) VALUES (5, 'r')", password="p") == (None, None)
    doris.sql(world.db, f"REVOKE '{role}' FROM '{user}'@'%'")
    assert over_mysql(world, user, f"INSERT INTO {world.db}.t (k, v) VALUES (6, 'r')", password="p")[0] == 1142


needs_mysql_cli = pytest.mark.skipif(shutil.which("mysql") is None, reason="the mysql client is not installed")


@needs_mysql_cli
def test_the_mysql_client_prints_doris_refusals(world: World) -> None:
    def run(user: str, stmt: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["mysql", "-h", "127.0.0.1", "-P", str(world.mysql_port), "-u", user, f"-p{PASSWORD}", "-D", world.db],
            input=stmt,
            capture_output=True,
            text=True,
            timeout=120,
        )

    loader = world.users["load_t"]
    denied = run(loader, "SELECT k FROM t;")
    assert denied.returncode == 1
    assert (
        f"ERROR 1142 (42000) at line 1: errCode = 2, detailMessage = SELECT command denied to user '{loader}'@'%' "
        f"for table '{world.db}.t'" in denied.stderr
    ), denied.stderr
    admin = run(world.users["load_t"], "ADMIN COMPACT TABLE t WHERE TYPE = 'BASE';")
    assert f"ERROR 1227 (42000) at line 1: errCode = 2, detailMessage = {ADMIN_REFUSAL}" in admin.stderr, admin.stderr
    shown = run(world.users["select_t"], "SHOW GRANTS;")
    assert shown.returncode == 0, shown.stderr
    assert f"'{world.users['select_t']}'@'%'" in shown.stdout
