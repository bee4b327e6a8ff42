"""The MySQL-protocol listener, through pymysql as a Doris user connects to port 9030: same users, same SQL as
the HTTP endpoint, a session per connection, Doris's result metadata and error packets."""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest
from pymysql.constants import FIELD_TYPE

from tests.helpers import DorisClient

SEEDS = Path(__file__).resolve().parent / "data" / "seeds"


def connect(port: int, **kwargs: object) -> pymysql.connections.Connection:  # type: ignore[type-arg]
    return pymysql.connect(host="127.0.0.1", port=port, user="root", password="", autocommit=True, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def conn(mysql_port: int, db: str) -> Iterator[pymysql.connections.Connection]:  # type: ignore[type-arg]
    connection = connect(mysql_port, database=db)
    yield connection
    connection.close()


def test_create_insert_select_over_mysql_with_doris_metadata(conn, db: str, doris: DorisClient) -> None:  # type: ignore[no-untyped-def]
    cur = conn.cursor()
    cur.execute(
        "CREATE TABLE t (k BIGINT, v VARCHAR(16), d DATE, n INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"
    )
    assert cur.execute("INSERT INTO t VALUES (1, 'a', '2024-01-02', 7), (2, 'b', NULL, NULL)") == 2
    cur.execute("SELECT k, v, d, n FROM t ORDER BY k")
    assert [(d[0], d[1]) for d in cur.description] == [
        ("k", FIELD_TYPE.LONGLONG),
        ("v", FIELD_TYPE.VAR_STRING),
        ("d", FIELD_TYPE.DATE),
        ("n", FIELD_TYPE.LONG),
    ]
    import datetime as dt

    assert cur.fetchall() == ((1, "a", dt.date(2024, 1, 2), 7), (2, "b", None, None))
    # the HTTP endpoint sees the same table
    assert doris.rows(db, "SELECT v FROM t ORDER BY k") == [["a"], ["b"]]


def test_set_show_hidden_columns_lasts_for_the_connection_only(conn, mysql_port: int, db: str) -> None:  # type: ignore[no-untyped-def]
    cur = conn.cursor()
    cur.execute("CREATE TABLE h (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    cur.execute("DESC h")
    assert [r[0] for r in cur.fetchall()] == ["k", "v"]
    cur.execute("SET show_hidden_columns = true")
    cur.execute("DESC h")
    assert "__DORIS_DELETE_SIGN__" in [r[0] for r in cur.fetchall()]
    cur.execute("SELECT * FROM h")
    assert "__DORIS_VERSION_COL__" in [d[0] for d in cur.description]
    other = connect(mysql_port, database=db)
    try:
        other_cur = other.cursor()
        other_cur.execute("DESC h")
        assert [r[0] for r in other_cur.fetchall()] == ["k", "v"]
    finally:
        other.close()


def test_use_and_client_bookkeeping(mysql_port: int, db: str) -> None:
    connection = connect(mysql_port)
    try:
        cur = connection.cursor()
        cur.execute("SELECT @@version_comment")
        assert "Doris" in cur.fetchone()[0]
        cur.execute(f"USE {db}")
        cur.execute("SELECT DATABASE()")
        assert cur.fetchone() == (db,)
        cur.execute("SHOW DATABASES")
        assert (db,) in cur.fetchall()
        cur.execute("SET NAMES utf8mb4")
        connection.commit()
    finally:
        connection.close()


def test_errors_are_doris_error_packets(conn) -> None:  # type: ignore[no-untyped-def]
    cur = conn.cursor()
    with pytest.raises(pymysql.err.OperationalError) as err:
        cur.execute("SELECT * FROM no_such_table")
    code, message = err.value.args
    assert code == 1105
    assert message.startswith("errCode = 2, detailMessage = ")
    assert "no_such_table" in message
    # the connection stays usable after an error
    cur.execute("SHOW TABLES")
    assert cur.fetchall() == ()


@pytest.mark.parametrize(
    "user, password",
    [pytest.param("root", "wrong", id="wrong-password"), pytest.param("nobody", "", id="unknown-user")],
)
def test_wrong_credentials_are_refused(mysql_port: int, user: str, password: str) -> None:
    with pytest.raises(pymysql.err.OperationalError) as err:
        pymysql.connect(host="127.0.0.1", port=mysql_port, user=user, password=password)
    assert err.value.args[0] == 1045
    assert f"Access denied for user '{user}'" in err.value.args[1]


def test_unknown_database_is_an_error_packet(mysql_port: int) -> None:
    missing = f"missing_{uuid.uuid4().hex[:8]}"
    connection = connect(mysql_port)
    try:
        with pytest.raises(pymysql.err.OperationalError) as err:
            connection.select_db(missing)  # COM_INIT_DB, as `mysql -D` and pymysql's select_db send it
        assert err.value.args == (1105, f"errCode = 2, detailMessage = Unknown database '{missing}'")
    finally:
        connection.close()


# -- the seed's worked sessions, as printed ------------------------------------------------------------------


def seed_000_sessions() -> list[tuple[str, str | None, int | None]]:
    """(statement, the table the seed prints after it, the rows it says were affected) for every CREATE and
    `MySQL >` line of seed 000."""
    text = (SEEDS / "000_0c520fff6485a702.txt").read_text()
    steps: list[tuple[str, str | None, int | None]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("CREATE TABLE"):
            stmt = []
            while not lines[i].rstrip().endswith(");"):
                stmt.append(lines[i])
                i += 1
            stmt.append(lines[i])
            steps.append(("\n".join(stmt).rstrip(";"), None, None))
        elif line.startswith("MySQL > "):
            stmt = line[len("MySQL > ") :].rstrip(";")
            table = []
            j = i + 1
            while j < len(lines) and (lines[j].startswith(("+", "|"))):
                table.append(lines[j])
                j += 1
            affected = re.match(r"Query OK, (\d+) rows? affected", lines[j]) if j < len(lines) else None
            steps.append((stmt, "\n".join(table) or None, int(affected.group(1)) if affected else None))
            i = j - 1
        i += 1
    return steps


def parse_table(printed: str) -> list[tuple[str, ...]]:
    rows = [line for line in printed.splitlines() if line.startswith("|")]
    return [tuple(cell.strip() for cell in row.strip("|").split("|")) for row in rows]


def render(cur: pymysql.cursors.Cursor) -> list[tuple[str, ...]]:
    header = tuple(d[0] for d in cur.description)
    return [header] + [tuple("NULL" if v is None else str(v) for v in row) for row in cur.fetchall()]


def test_seed_000_sessions_run_over_mysql(conn) -> None:  # type: ignore[no-untyped-def]
    steps = seed_000_sessions()
    assert sum(1 for s, _, _ in steps if s.startswith("CREATE TABLE")) == 2
    assert sum(1 for _, _, n in steps if n is not None) == 11
    cur = conn.cursor()
    creates = 0
    for stmt, printed, affected in steps:
        if stmt.startswith("CREATE TABLE"):
            if creates:
                cur.execute("DROP TABLE upsert_test")  # both parts create upsert_test
                stmt = re.sub(r",\s*\)\s*ENGINE", "\n) ENGINE", stmt)  # the trailing comma of the second CREATE
            creates += 1
        count = cur.execute(stmt)
        if affected is not None:
            assert count == affected, stmt
        if printed is None:
            continue
        expected = parse_table(printed)
        got = render(cur)
        if stmt.lower().startswith("desc"):
            # DESC's Type column: the seed prints Doris's short names (`int`, `bigint`)
            got = [got[0]] + [(r[0], r[1].lower().split("(")[0], *r[2:]) for r in got[1:]]
        assert got == expected, f"{stmt}\nexpected {expected}\ngot      {got}"


# -- the mysql command-line client (Debian's default-mysql-client-core), when installed ---------------------

needs_mysql_cli = pytest.mark.skipif(shutil.which("mysql") is None, reason="the mysql client is not installed")


def mysql_cli(port: int, db: str, script: str) -> subprocess.CompletedProcess[str]:
    """`mysql --table` reading the script on stdin: one connection, so one session, as a user types it."""
    return subprocess.run(
        ["mysql", "-h", "127.0.0.1", "-P", str(port), "-u", "root", "-D", db, "--table"],
        input=script,
        capture_output=True,
        text=True,
        timeout=300,
    )


def printed_tables(output: str) -> list[list[tuple[str, ...]]]:
    """The boxed tables `mysql --table` prints, in order."""
    tables: list[list[tuple[str, ...]]] = []
    current: list[str] = []
    for line in output.splitlines():
        if line.startswith(("+", "|")):
            current.append(line)
        # a table has three borders: above and below the header, and at the end
        if sum(1 for c in current if c.startswith("+")) == 3:
            tables.append(parse_table("\n".join(current)))
            current = []
    return tables


@needs_mysql_cli
def test_mysql_cli_session_keeps_show_hidden_columns(mysql_port: int, db: str) -> None:
    script = """
CREATE TABLE c (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1;
INSERT INTO c VALUES (1, 'x');
SELECT * FROM c;
SET show_hidden_columns = true;
SELECT k, v, __DORIS_DELETE_SIGN__ FROM c;
"""
    done = mysql_cli(mysql_port, db, script)
    assert done.returncode == 0, done.stderr
    assert printed_tables(done.stdout) == [
        [("k", "v"), ("1", "x")],
        [("k", "v", "__DORIS_DELETE_SIGN__"), ("1", "x", "0")],
    ]
    failed = mysql_cli(mysql_port, db, "SELECT * FROM missing_table;")
    assert failed.returncode == 1
    assert (
        "ERROR 1105 (HY000) at line 1: errCode = 2, detailMessage = Unknown table 'missing_table'" in failed.stderr
    ), failed.stderr


@needs_mysql_cli
def test_seed_000_sessions_run_through_the_mysql_client(mysql_port: int, db: str) -> None:
    steps = seed_000_sessions()
    statements, expected, creates = [], [], 0
    for stmt, printed, _ in steps:
        if stmt.startswith("CREATE TABLE"):
            if creates:
                statements.append("DROP TABLE upsert_test")
                stmt = re.sub(r",\s*\)\s*ENGINE", "\n) ENGINE", stmt)
            creates += 1
        statements.append(stmt)
        if printed is not None:
            expected.append(parse_table(printed))
    done = mysql_cli(mysql_port, db, ";\n".join(statements) + ";\n")
    assert done.returncode == 0, done.stderr
    got = printed_tables(done.stdout)
    # DESC's Type column: the seed prints Doris's short names (`int`, `bigint`)
    got = [
        [t[0]] + [(r[0], r[1].lower().split("(")[0], *r[2:]) for r in t[1:]] if t[0][0] == "Field" else t for t in got
    ]
    assert got == expected


def test_password_is_the_http_password(tmp_path: Path) -> None:
    """With SL_ROOT_PASSWORD set, MySQL clients log in with it, as HTTP Basic clients do."""
    import asyncio
    import threading

    from app.mysql_server import bound_port, start_mysql_server
    from tables.accounts import AccountStore

    accounts = AccountStore(tmp_path / "accounts.db")
    accounts.bootstrap("s3cret")  # as the server does at the first start with SL_ROOT_PASSWORD=s3cret

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    # no statement reaches the executor here: login and `SELECT @@...` are answered by the protocol layer
    server = asyncio.run_coroutine_threadsafe(
        start_mysql_server(None, host="127.0.0.1", port=0, accounts=accounts),  # type: ignore[arg-type]
        loop,
    ).result(timeout=30)
    port = bound_port(server)
    try:
        for user in ("root", "admin"):
            conn = pymysql.connect(host="127.0.0.1", port=port, user=user, password="s3cret")
            cur = conn.cursor()
            cur.execute("SELECT @@version")
            assert cur.fetchone() == ("5.7.99",)
            conn.close()
        with pytest.raises(pymysql.err.OperationalError) as err:
            pymysql.connect(host="127.0.0.1", port=port, user="root", password="")
        assert err.value.args == (1045, "Access denied for user 'root' (using password: NO)")
    finally:

        async def shutdown() -> None:
            # connection handlers end on the running loop, not when it is garbage-collected later
            server.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
