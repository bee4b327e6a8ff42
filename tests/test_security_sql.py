"""Issue 15, SQL: attacks through the HTTP SQL endpoint and the MySQL protocol, each refused with a Doris-shaped
error while its target survives (a marker file whose contents never appear in a reply, a directory never
written, the table still readable) and the server keeps answering."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pymysql
import pytest

from tests.helpers import DorisClient

MARKER = f"marker-{uuid.uuid4().hex}"
# minutes of CPU on one row stream: no broadcast or shuffle, so a cancelled job stops at once
SLOW = "SELECT sum(length(repeat(CAST(id AS STRING), 2000))) FROM range(10000000)"


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file outside the data dir holding a marker no reply may ever contain."""
    path = tmp_path_factory.mktemp("outside") / "secret.txt"
    path.write_text(MARKER + "\n")
    return path


@pytest.fixture(scope="module")
def db(doris: DorisClient) -> str:
    """One database for the module, with a table `t` of two rows that every attack must leave as it is."""
    name = f"db_{uuid.uuid4().hex[:12]}"
    doris.sql(name, f"CREATE DATABASE {name}")
    doris.sql(name, "CREATE TABLE t (k INT, v VARCHAR(64)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(name, "INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    return name


def mysql(port: int, db: str | None = None, **kwargs: Any) -> pymysql.connections.Connection:  # type: ignore[type-arg]
    return pymysql.connect(
        host="127.0.0.1", port=port, user="root", password="", database=db, autocommit=True, **kwargs
    )  # type: ignore[arg-type]


def mysql_error(port: int, db: str, stmt: str) -> str:
    with mysql(port, db) as conn, conn.cursor() as cur:
        with pytest.raises(pymysql.err.MySQLError) as caught:
            for piece in stmt.split(";;"):
                cur.execute(piece)
        return str(caught.value)


def assert_survived(doris: DorisClient, db: str, target: Path, reply: str) -> None:
    assert MARKER not in reply
    assert target.read_text() == MARKER + "\n"
    assert doris.rows(db, "SELECT k, v FROM t ORDER BY k") == [[1, "a"], [2, "b"]]


ATTACKS = [
    pytest.param("SELECT * FROM text.`{path}`", "Unknown", id="a-text-path-read-is-not-a-table"),
    pytest.param("SELECT * FROM parquet.`{dir}`", "Unknown", id="a-parquet-directory-read-is-not-a-table"),
    pytest.param("SELECT * FROM spark_catalog.text.`{path}`", "Unknown catalog", id="another-catalog-is-unknown"),
    pytest.param(
        "SELECT * FROM IDENTIFIER('text.`{path}`')", "table function identifier is not allowed", id="identifier-tvf"
    ),
    pytest.param("SELECT IDENTIFIER('v') FROM t", "function identifier is not allowed", id="identifier-in-a-column"),
    pytest.param("SELECT * FROM read_files('{path}')", "table function read_files is not allowed", id="read-files"),
    pytest.param(
        "SELECT * FROM t WHERE v IN (SELECT value FROM text.`{path}`)", "Unknown", id="a-path-inside-a-subquery"
    ),
    pytest.param(
        "SELECT * FROM (WITH nosuch AS (SELECT 1 AS a) SELECT * FROM nosuch) x, nosuch",
        "nosuch",
        id="a-cte-name-outside-its-scope-is-bound-to-the-catalog",
    ),
    pytest.param(
        "WITH a AS (SELECT 1 AS x) INSERT OVERWRITE DIRECTORY '{out}' SELECT * FROM a",
        "Only a query is allowed here, not INSERT",
        id="insert-overwrite-directory-through-a-cte",
    ),
    pytest.param(
        "SELECT * FROM t UNION ALL SELECT * FROM (WITH a AS (SET spark.sql.runSQLOnFiles = true) SELECT 1, 2) x",
        "Syntax error",
        id="set-of-a-spark-setting-inside-a-wrapper",
    ),
    pytest.param(
        "SET spark.sql.runSQLOnFiles = true;; SELECT * FROM text.`{path}`",
        "Unknown",
        id="set-of-a-spark-setting-stays-a-session-variable",
    ),
    pytest.param("SELECT /*+ REPARTITION(100000) */ * FROM t", "HINT is not allowed", id="spark-hints"),
    pytest.param("SELECT * FROM t INTO OUTFILE '{out}'", "Syntax error", id="select-into-outfile"),
    pytest.param("ADD JAR '{path}'", "Unsupported statement", id="add-jar"),
    pytest.param("CACHE TABLE c AS SELECT * FROM text.`{path}`", "Unsupported statement", id="cache-table"),
    pytest.param(
        "INSERT INTO t WITH a AS (SELECT 9 AS k, 'x' AS v) SELECT * FROM (SELECT * FROM a) x, nosuch",
        "nosuch",
        id="insert-select-with-a-table-outside-the-cte",
    ),
    pytest.param(
        "SELECT reflect('java.lang.System', 'getenv', 'SL_ROOT_PASSWORD')",
        "function reflect is not allowed",
        id="reflect",
    ),
    pytest.param("SELECT java_method('java.lang.System', 'exit', 1)", "function java_method", id="java-method"),
    pytest.param("SELECT builtin.reflect('java.lang.System', 'exit', 1)", "is not allowed", id="qualified-reflect"),
    pytest.param("SELECT input_file_name() FROM t", "function input_file_name is not allowed", id="input-file-name"),
    pytest.param(
        "INSERT INTO t VALUES (3, (SELECT max(value) FROM text.`{path}`))", "Unknown", id="values-with-a-subquery"
    ),
    pytest.param(
        "INSERT INTO t VALUES (3, reflect('java.lang.System', 'getenv', 'HOME'))",
        "function reflect is not allowed",
        id="values-with-reflect",
    ),
    pytest.param(
        "UPDATE t SET v = (SELECT max(value) FROM text.`{path}`) WHERE k = 1", "Unknown", id="update-with-a-path"
    ),
    pytest.param("DELETE FROM t WHERE v IN (SELECT value FROM text.`{path}`)", "Unknown", id="delete-with-a-path"),
    pytest.param(
        "SELECT repeat('x', 2000000000)", "repeat would produce more than 10485760 bytes", id="repeat-two-gigabytes"
    ),
    pytest.param(
        "SELECT length(concat(repeat(v, 6000000), repeat(v, 6000000))) FROM t",
        "concat would produce more than",
        id="concat-of-capped-halves",
    ),
    pytest.param("SELECT lpad('x', 2000000000, 'y')", "lpad would produce more than", id="lpad"),
    pytest.param("SELECT space(2000000000)", "space would produce more than", id="space"),
    pytest.param("SELECT size(array_repeat(1, 2000000000))", "array_repeat would produce more than", id="array-repeat"),
    pytest.param("SELECT explode(sequence(1, 2000000000))", "sequence would produce more than", id="sequence"),
    pytest.param("SELECT count(*) FROM range(2000000000)", "range produces more than", id="range-tvf-over-the-cap"),
    pytest.param("SELECT format_string('%2000000000s', 'x')", "format_string would produce", id="format-width"),
    pytest.param(";".join(["SELECT 1"] * 101), "Too many statements in one request: 101", id="statement-cap"),
]


@pytest.mark.parametrize("stmt, message", ATTACKS)
def test_sql_attack_is_refused_and_its_target_survives(  # type: ignore[no-untyped-def]
    doris: DorisClient, db: str, target: Path, mysql_port: int, stmt: str, message: str
) -> None:
    out = target.parent / f"out-{uuid.uuid4().hex}"
    text = stmt.format(path=target, dir=target.parent, out=out)
    over_http = doris.sql_error(db, text.replace(";;", ";"))
    assert message in over_http and "errCode = 2, detailMessage = " in over_http, over_http
    over_mysql = mysql_error(mysql_port, db, text)
    assert message in over_mysql and "1105" in over_mysql, over_mysql
    assert_survived(doris, db, target, over_http + over_mysql)
    assert not out.exists()


ALLOWED = [
    pytest.param(
        "SELECT '${{env:HOME}}${{system:user.home}}' AS v", [["${env:HOME}${system:user.home}"]], id="no-vars"
    ),
    pytest.param("SELECT count(*) AS n FROM range(10)", [[10]], id="a-small-range-tvf"),
    pytest.param(
        "WITH a AS (SELECT k FROM t), b AS (SELECT * FROM a) SELECT count(*) AS n FROM b", [[2]], id="chained-ctes"
    ),
    pytest.param("SELECT concat(v, repeat('-', 2)) AS c FROM t ORDER BY k", [["a--"], ["b--"]], id="capped-calls-work"),
    pytest.param("SELECT k FROM internal.{db}.t ORDER BY k", [[1], [2]], id="the-internal-catalog"),
    pytest.param("SELECT size(array_concat(array(1), array(2))) AS n", [[2]], id="array-concat-is-not-a-string"),
]


@pytest.mark.parametrize("stmt, rows", ALLOWED)
def test_ordinary_queries_still_work(doris: DorisClient, db: str, stmt: str, rows: list[Any]) -> None:
    assert doris.rows(db, stmt.format(db=db)) == rows


def test_capped_call_keeps_the_column_name(doris: DorisClient, db: str) -> None:
    meta = doris.sql(db, "SELECT concat(v, 'x') FROM t")["meta"]
    assert [m["name"] for m in meta] == ["concat(v, x)"]


def test_values_expressions_are_bound_like_a_query(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE w (k INT, v VARCHAR(64)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(db, "INSERT INTO w VALUES (3, (SELECT max(v) FROM t)), (4, upper('d'))")
    assert doris.rows(db, "SELECT k, v FROM w ORDER BY k") == [[3, "b"], [4, "D"]]


def wait_no_active_jobs(spark: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not spark.sparkContext.statusTracker().getActiveJobsIds():
            return True
        time.sleep(0.1)
    return False


def test_query_timeout_cancels_the_statement(  # type: ignore[no-untyped-def]
    doris: DorisClient, db: str, mysql_port: int, spark
) -> None:
    started = time.monotonic()
    error = doris.sql_error(db, f"SET query_timeout = 1; {SLOW}")
    assert "query timeout, query id = " in error and time.monotonic() - started < 10, error
    assert wait_no_active_jobs(spark, 5)
    with mysql(mysql_port, db) as conn, conn.cursor() as cur:
        cur.execute("SET query_timeout = 1")
        with pytest.raises(pymysql.err.OperationalError, match="query timeout"):
            cur.execute(SLOW)
        cur.execute("SET query_timeout = 900")
        cur.execute("SELECT k FROM t ORDER BY k")
        assert cur.fetchall() == ((1,), (2,))
    assert "Incorrect argument type to variable 'query_timeout'" in doris.sql_error(db, "SET query_timeout = -1")


def test_client_disconnect_cancels_its_jobs(  # type: ignore[no-untyped-def]
    doris: DorisClient, db: str, mysql_port: int, spark, base_url: str
) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{base_url}/api/query/default_cluster/{db}", json={"stmt": SLOW}, auth=("root", ""), timeout=1.5)
    assert wait_no_active_jobs(spark, 5)
    conn = mysql(mysql_port, db, read_timeout=1.5)
    with pytest.raises(pymysql.err.OperationalError):
        conn.cursor().execute(SLOW)  # pymysql closes the socket on its read timeout
    assert wait_no_active_jobs(spark, 5)
    assert doris.rows(db, "SELECT k FROM t ORDER BY k") == [[1], [2]]


@pytest.fixture(scope="module")
def small_listener(served_app, base_url: str) -> Iterator[int]:  # type: ignore[no-untyped-def]
    """A second MySQL listener on the test server's executor, with tiny row, connection and handshake bounds."""
    from app.mysql_server import bound_port, start_mysql_server

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    start = start_mysql_server(
        served_app.state.services.sql,
        host="127.0.0.1",
        port=0,
        accounts=served_app.state.services.accounts,
        max_rows=3,
        max_connections=2,
        handshake_timeout=1.0,
    )
    server = asyncio.run_coroutine_threadsafe(start, loop).result(30)
    yield bound_port(server)

    async def stop() -> None:  # connection handlers end inside the loop, not at garbage collection
        server.close()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_mysql_result_rows_are_capped(small_listener: int, db: str) -> None:
    with mysql(small_listener, db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM range(3)")
        assert len(cur.fetchall()) == 3
        with pytest.raises(pymysql.err.OperationalError, match="more than 3 rows"):
            cur.execute("SELECT id FROM range(4)")
        cur.execute("SELECT k FROM t ORDER BY k")
        assert cur.fetchall() == ((1,), (2,))


def test_mysql_connections_and_handshakes_are_bounded(small_listener: int, db: str) -> None:
    first, second = mysql(small_listener, db), mysql(small_listener, db)
    with pytest.raises(pymysql.err.OperationalError) as refused:
        mysql(small_listener, db)
    assert refused.value.args[0] == 1040 and "Too many connections" in str(refused.value)
    second.close()
    time.sleep(0.2)
    # a client that opens a socket and never logs in is dropped after the handshake timeout
    idle = socket.create_connection(("127.0.0.1", small_listener))
    idle.settimeout(5)
    started = time.monotonic()
    while idle.recv(4096):
        pass
    assert time.monotonic() - started < 4
    idle.close()
    time.sleep(0.2)
    with first.cursor() as cur, mysql(small_listener, db) as third, third.cursor() as cur3:
        cur.execute("SELECT k FROM t ORDER BY k")
        cur3.execute("SELECT k FROM t ORDER BY k")
        assert cur.fetchall() == cur3.fetchall() == ((1,), (2,))
    first.close()


# sqlglot's Python executor (which mysql-mimic runs FROM-less SELECTs with) compiles a JSON path key into Python
# source unescaped: this key would run `os.getpid()` in the server and put its value in the error text
PYTHON_IN_A_PATH = "JSON_EXTRACT('{}', '$[\"x''+str(__import__(''os'').getpid())+''\"]')"


@pytest.mark.parametrize(
    "stmt",
    [
        pytest.param(f"SELECT @@version_comment AS v, {PYTHON_IN_A_PATH} AS p", id="json-path-key"),
        pytest.param(f"SELECT DATABASE(), {PYTHON_IN_A_PATH}", id="beside-database"),
        pytest.param("SELECT @@version_comment, POW(7, 3000000) % 10", id="python-arithmetic"),
    ],
)
def test_a_client_bookkeeping_query_runs_nothing_else_in_the_server(
    mysql_port: int, db: str, doris: DorisClient, stmt: str
) -> None:
    """Issue 19 audit: only `@@variables` and argument-less client functions are answered by mysql-mimic; any other
    expression beside them goes to the Doris executor, which refuses `@@`, and nothing runs as Python."""
    user = f"u_{uuid.uuid4().hex[:8]}"
    doris.sql(db, f"CREATE USER '{user}'@'%' IDENTIFIED BY 'p'")  # no privilege at all
    with pymysql.connect(host="127.0.0.1", port=mysql_port, user=user, password="p", autocommit=True) as conn:
        with conn.cursor() as cur:
            started = time.monotonic()
            try:  # Spark may answer it (a JSON path is a JSON path there) or the executor refuse it
                cur.execute(stmt)
                reply = repr(cur.fetchall())
            except pymysql.err.MySQLError as exc:
                reply = str(exc)
            assert time.monotonic() - started < 10  # not a Python computation on the event loop
            assert f"x{__import__('os').getpid()}" not in reply  # the server runs in this process
            assert "Step 'Scan" not in reply  # sqlglot's executor never saw it
            cur.execute("SELECT @@version_comment LIMIT 1")  # what the mysql client sends still works
            assert "Doris" in cur.fetchone()[0]
            cur.execute("SELECT DATABASE(), CURRENT_USER(), CONNECTION_ID()")
            assert cur.fetchone()[0] is None
