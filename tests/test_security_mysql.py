"""The MySQL listener's defenses against its clients (docs/security.md): KILL checks its owner, prepared
statements bind escaped literals, COM_STMT_PREPARE counts placeholders in one pass, packets, long data and
prepared statements are bounded, an idle connection times out, a failed login ends the connection, and
mysql-mimic's SHOW path sees no WHERE. Driven as a client would, with pymysql or raw packets."""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator

import pymysql
import pytest

from app.mysql_server import DorisConnection
from tests.helpers import DorisClient

PASSWORD = "pw-1"
Conn = pymysql.connections.Connection  # type: ignore[type-arg]

COM_QUERY, COM_STMT_PREPARE, COM_STMT_SEND_LONG_DATA, COM_STMT_EXECUTE = 0x03, 0x16, 0x18, 0x17


def connect(port: int, user: str = "root", password: str = "", **kwargs: object) -> Conn:
    return pymysql.connect(  # type: ignore[call-overload,no-any-return]
        host="127.0.0.1", port=port, user=user, password=password, autocommit=True, **kwargs
    )


def rss_kib() -> int:
    """This process's resident memory: the in-process server's (tests/conftest.py `served_app`)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def error_code(exc: BaseException) -> int:
    return int(exc.args[0])


@pytest.fixture
def user(doris: DorisClient, db: str) -> str:
    """A user with SELECT on the test database only (no ADMIN_PRIV)."""
    name = f"u_{uuid.uuid4().hex[:10]}"
    doris.sql(db, f"CREATE USER '{name}'@'%' IDENTIFIED BY '{PASSWORD}'; GRANT SELECT_PRIV ON {db}.* TO '{name}'@'%'")
    return name


def connection_id(conn: Conn) -> int:
    cur = conn.cursor()
    cur.execute("SELECT CONNECTION_ID()")
    return int(cur.fetchone()[0])


# ---- KILL -------------------------------------------------------------------------------------------------------


def test_kill_of_another_users_connection_needs_admin(mysql_port: int, user: str) -> None:
    root = connect(mysql_port)
    other = connect(mysql_port, user, PASSWORD)
    try:
        root_id = connection_id(root)
        for stmt in (f"KILL {root_id}", f"KILL CONNECTION {root_id}", f"KILL QUERY {root_id}"):
            with pytest.raises(pymysql.err.MySQLError) as refused:
                other.cursor().execute(stmt)
            assert error_code(refused.value) == 1095
            assert f"You are not owner of thread {root_id}" in str(refused.value)
        root.ping(reconnect=False)  # root's connection is untouched
        with pytest.raises(pymysql.err.MySQLError) as unknown:
            other.cursor().execute("KILL 4294967295")
        assert error_code(unknown.value) == 1094
        assert "Unknown thread id: 4294967295" in str(unknown.value)
    finally:
        root.close()
        other.close()


def test_a_user_kills_its_own_connections_and_admin_kills_anyones(mysql_port: int, user: str) -> None:
    first, second, third = (connect(mysql_port, user, PASSWORD) for _ in range(3))
    root = connect(mysql_port)
    try:
        first.cursor().execute(f"KILL {connection_id(second)}")
        root.cursor().execute(f"KILL {connection_id(third)}")
        for killed in (second, third):
            with pytest.raises(pymysql.err.MySQLError):
                killed.ping(reconnect=False)
        first.ping(reconnect=False)
    finally:
        for conn in (first, second, third, root):
            conn.close()


# ---- prepared statements: raw COM_STMT_* through pymysql's socket ----------------------------------------------


def lenenc(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def prepare(conn: Conn, sql: str | bytes) -> tuple[int, int]:
    """COM_STMT_PREPARE: (statement id, number of parameters)."""
    conn._execute_command(COM_STMT_PREPARE, sql)
    ok = conn._read_packet().get_all_data()
    stmt_id, params = struct.unpack("<I", ok[1:5])[0], struct.unpack("<H", ok[7:9])[0]
    if params:
        for _ in range(params + 1):  # parameter definitions and their EOF
            conn._read_packet()
    return stmt_id, params


def execute(conn: Conn, stmt_id: int, *params: str | bytes) -> list[bytes]:
    """COM_STMT_EXECUTE with string parameters: the binary row packets of the result."""
    payload = struct.pack("<IBI", stmt_id, 0, 1)
    if params:
        payload += bytes((len(params) + 7) // 8) + b"\x01" + b"\xfe\x00" * len(params)
        for p in params:
            data = p.encode() if isinstance(p, str) else p
            payload += lenenc(len(data)) + data
    conn._execute_command(COM_STMT_EXECUTE, payload)
    first = conn._read_packet()
    if first.is_ok_packet():
        return []
    columns = first.read_length_encoded_integer()
    for _ in range(columns):
        conn._read_packet()
    assert conn._read_packet().is_eof_packet()
    rows = []
    while not (packet := conn._read_packet()).is_eof_packet():
        rows.append(packet.get_all_data())
    return rows


def count_of(rows: list[bytes]) -> int:
    """The BIGINT of a one-row, one-column binary result (0x00, null bitmap, 8 bytes)."""
    assert len(rows) == 1
    return int(struct.unpack("<q", rows[0][2:10])[0])


@pytest.fixture
def table(mysql_port: int, db: str) -> Iterator[Conn]:
    """A connection on `db` with table t: v = 'a', 'b', `a\\1` (a backslash) and `it's`."""
    conn = connect(mysql_port, database=db)
    cur = conn.cursor()
    cur.execute("CREATE TABLE t (k BIGINT, v VARCHAR(32)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    cur.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'a\\\\1'), (4, 'it''s')")
    yield conn
    conn.close()


def test_prepared_string_parameters_are_escaped_literals(table: Conn) -> None:
    stmt_id, params = prepare(table, "SELECT count(*) FROM t WHERE v = ?")
    assert params == 1
    assert count_of(execute(table, stmt_id, "nomatch' OR '1'='1")) == 0  # was: every row
    assert count_of(execute(table, stmt_id, "a")) == 1
    assert count_of(execute(table, stmt_id, "it's")) == 1
    assert count_of(execute(table, stmt_id, "a\\1")) == 1  # was: re.sub's "invalid group reference"
    assert count_of(execute(table, stmt_id, "x\\' OR 1=1 -- ")) == 0
    # a `;` in a parameter adds no statement: the literal holds it, and the table is still there
    assert count_of(execute(table, stmt_id, "x'; DROP TABLE t; SELECT '1")) == 0
    cur = table.cursor()
    cur.execute("SELECT count(*) FROM t")
    assert cur.fetchone() == (4,)


def test_prepare_counts_placeholders_as_the_tokenizer_sees_them(mysql_port: int) -> None:
    conn = connect(mysql_port)
    try:
        # `?` inside strings, quoted names and comments is no placeholder (mysql-mimic's regex counted the comments)
        assert prepare(conn, "SELECT '?', \"?\", `?`, ? /* ? */ -- ?\n")[1] == 1
        assert prepare(conn, "SELECT ? # ?\n, 'it''s ?', ?")[1] == 2
        # one linear pass: 40,000 placeholders took mysql-mimic ~10 s of the event loop (quadratic)
        started = time.monotonic()
        assert prepare(conn, "SELECT " + "?," * 39_999 + "?")[1] == 40_000
        assert time.monotonic() - started < 6
        with pytest.raises(pymysql.err.MySQLError) as many:
            prepare(conn, "SELECT " + "?," * 65_535 + "?")
        assert error_code(many.value) == 1390
        with pytest.raises(pymysql.err.MySQLError) as long:
            prepare(conn, "SELECT '" + "x" * (DorisConnection.max_prepared_sql_bytes + 1) + "'")
        assert "Prepared statement is longer than" in str(long.value)
        conn.ping(reconnect=False)
    finally:
        conn.close()


def test_prepared_statements_per_connection_are_bounded(mysql_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DorisConnection, "max_prepared_statements", 3)
    conn = connect(mysql_port)
    try:
        for _ in range(3):
            prepare(conn, "SELECT ?")
        with pytest.raises(pymysql.err.MySQLError) as refused:
            prepare(conn, "SELECT ?")
        assert error_code(refused.value) == 1461
        assert "max_prepared_stmt_count" in str(refused.value)
    finally:
        conn.close()


# ---- packet bounds ----------------------------------------------------------------------------------------------


def read_packet(sock: socket.socket) -> bytes:
    header = recv_exactly(sock, 4)
    return recv_exactly(sock, int.from_bytes(header[:3], "little"))


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def is_packet_too_large(packet: bytes) -> bool:
    return packet[:3] == b"\xff\x81\x04" and b"max_allowed_packet" in packet  # 1153 = 0x0481


def sender(sock: socket.socket, data: bytes) -> threading.Thread:
    def send() -> None:
        try:
            sock.sendall(data)
        except OSError:
            pass  # the server closed: expected

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_a_big_handshake_response_is_refused_before_it_is_buffered(mysql_port: int) -> None:
    payload = b"\xff\xff\xff\x01" + b"x" * 0xFFFFFF + b"\xff\xff\xff\x02" + b"y" * (8 << 20)  # 24 MB, no login
    before = rss_kib()
    with socket.create_connection(("127.0.0.1", mysql_port), timeout=5) as sock:
        read_packet(sock)  # the server's greeting
        thread = sender(sock, payload)
        assert is_packet_too_large(read_packet(sock))  # was: a 5 s timeout, the server buffering everything
        thread.join(5)
    assert rss_kib() - before < 12 * 1024  # KiB; the old server held the 24 MB (and copied it)


def test_a_packet_over_max_allowed_packet_is_refused_after_login(
    mysql_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(DorisConnection, "max_allowed_packet", 1 << 20)
    conn = connect(mysql_port)
    try:
        conn.cursor().execute("SELECT '" + "x" * ((1 << 20) - 100) + "' AS v LIMIT 0")  # under the cap: runs
        conn._write_bytes(b"\xff\xff\xff\x00" + bytes([COM_QUERY]) + b"x" * (2 << 20))  # a 16 MB fragment begins
        conn._next_seq_id = 1
        with pytest.raises(pymysql.err.MySQLError) as refused:
            conn._read_packet()
        assert error_code(refused.value) == 1153
        assert "Got a packet bigger than 'max_allowed_packet' bytes" in str(refused.value)
    finally:
        conn.close()
    big = connect(mysql_port)
    try:
        with pytest.raises(pymysql.err.MySQLError) as refused:
            big.cursor().execute("SELECT '" + "x" * (2 << 20) + "'")
        assert error_code(refused.value) in (1153, 2006, 2013)  # the error, or the closed connection
        with pytest.raises(pymysql.err.MySQLError):
            big.ping(reconnect=False)  # the connection is closed
    finally:
        big.close()


def test_long_data_of_one_statement_is_bounded(mysql_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DorisConnection, "max_allowed_packet", 1 << 20)
    conn = connect(mysql_port)
    try:
        stmt_id, _ = prepare(conn, "SELECT ?")
        chunk = struct.pack("<IH", stmt_id, 0) + b"z" * (400 << 10)
        before = rss_kib()
        conn._execute_command(COM_STMT_SEND_LONG_DATA, chunk)  # no answer: held
        conn._execute_command(COM_STMT_SEND_LONG_DATA, chunk)
        conn._execute_command(COM_STMT_SEND_LONG_DATA, chunk)  # over 1 MiB for the statement
        conn._sock.settimeout(5)
        with pytest.raises(pymysql.err.MySQLError) as refused:
            conn._read_packet()
        assert error_code(refused.value) == 1153
        assert rss_kib() - before < 8 * 1024
    finally:
        conn.close()


# ---- connections ------------------------------------------------------------------------------------------------


def test_an_idle_connection_is_closed_after_wait_timeout(mysql_port: int) -> None:
    conn = connect(mysql_port)
    try:
        conn.cursor().execute("SET wait_timeout = 1")
        conn.ping(reconnect=False)
        time.sleep(2.5)
        with pytest.raises(pymysql.err.MySQLError):
            conn.ping(reconnect=False)
    finally:
        conn.close()


def test_a_failed_login_ends_the_connection(mysql_port: int) -> None:
    with socket.create_connection(("127.0.0.1", mysql_port), timeout=5) as sock:
        read_packet(sock)
        capabilities = 0x00000200 | 0x00008000 | 0x00080000  # PROTOCOL_41, SECURE_CONNECTION, PLUGIN_AUTH
        response = (
            struct.pack("<IIB", capabilities, 1 << 24, 33)
            + bytes(23)
            + b"root\x00"
            + bytes([20])
            + b"w" * 20
            + b"mysql_native_password\x00"
        )
        sock.sendall(len(response).to_bytes(3, "little") + b"\x01" + response)
        refused = read_packet(sock)
        assert refused[0] == 0xFF and int.from_bytes(refused[1:3], "little") == 1045
        query = bytes([COM_QUERY]) + b"SELECT @@version_comment"
        try:
            sock.sendall(len(query).to_bytes(3, "little") + b"\x00" + query)
            answer = sock.recv(4096)
        except OSError:
            answer = b""
        assert answer == b""  # was: the query's result, without a login


# ---- mysql-mimic's SHOW path --------------------------------------------------------------------------------------


def test_show_on_the_mimic_path_takes_no_where_and_matches_like_as_like(mysql_port: int) -> None:
    conn = connect(mysql_port)
    try:
        cur = conn.cursor()
        with pytest.raises(pymysql.err.MySQLError) as refused:
            cur.execute("SHOW VARIABLES WHERE Variable_name = 'version'")
        assert "WHERE" in str(refused.value) and "errCode = 2" in str(refused.value)
        with pytest.raises(pymysql.err.MySQLError):
            cur.execute("SHOW COLUMNS FROM `x' OR '1'='1`")
        cur.execute("SHOW VARIABLES LIKE 'version\\_comment'")  # `\_` is a literal underscore
        assert [r[0] for r in cur.fetchall()] == ["version_comment"]
        cur.execute("SHOW VARIABLES LIKE 'VERSION%'")
        assert "version_comment" in [r[0] for r in cur.fetchall()]
        started = time.monotonic()
        cur.execute("SHOW VARIABLES LIKE '(.*)*(.*)*(.*)*(.*)*x%'")  # not a regex: no match, no backtracking
        assert cur.fetchall() == ()
        assert time.monotonic() - started < 2
    finally:
        conn.close()
