"""The MySQL-protocol listener (Doris FE's query_port, 9030): the same SQL as the HTTP endpoint, over mysql-mimic.

One connection is one `sql.session.Session`, so `USE` and `SET show_hidden_columns = true` last until the client
disconnects. Statements go to the same `SqlExecutor` the HTTP SQL endpoint uses; what a MySQL client sends for
its own bookkeeping (`SET NAMES`, `SET autocommit`, `SELECT @@version_comment`, `SELECT DATABASE()`,
`SHOW VARIABLES`, `COMMIT`, ...) is answered by mysql-mimic's session. Failures become MySQL error packets
with Doris's wording: `ERROR 1105 (HY000): errCode = 2, detailMessage = ...` (a refused privilege: Doris's
1142, 1044 or 1227 with SQLSTATE 42000), all through one mapping
(`mysql_errors`, at the two entry points mysql-mimic calls: `handle_query` and `use`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import sqlglot
from mysql_mimic import MysqlServer, ResultColumn, ResultSet, utils
from mysql_mimic import Session as MimicSession
from mysql_mimic.auth import (
    AuthInfo,
    Decision,
    Forbidden,
    IdentityProvider,
    NativePasswordAuthPlugin,
    Success,
    User,
)
from mysql_mimic.connection import Connection
from mysql_mimic.errors import ErrorCode, MysqlError
from mysql_mimic.results import AllowedResult
from mysql_mimic.stream import MysqlStream
from mysql_mimic.types import ColumnType
from mysql_mimic.variables import SYSTEM_VARIABLES, GlobalVariables, SessionVariables
from sqlglot import exp

from sql.privileges import DB_ACCESS_DENIED, SPECIFIC_ACCESS_DENIED, TABLE_ACCESS_DENIED, StatementDenied
from sql.results import ExecStatus, StatementResult
from sql.results import ResultSet as SqlResultSet
from sql.session import Session as SqlSession
from sql.session import check_statement_count
from sql.tokens import Cursor, split_statements
from tables.accounts import AccountStore, Identity
from tables.errors import DorisError, SqlError

if TYPE_CHECKING:
    from sql.executor import SqlExecutor

log = logging.getLogger(__name__)

# Doris answers `SELECT @@version` with a MySQL 5.7 version and names itself in version_comment
DORIS_VARIABLES = {
    **SYSTEM_VARIABLES,
    "version": (str, "5.7.99", False),
    "version_comment": (str, "Doris version doris-2.1.0 (doris-stream-load-spark)", False),
    "default_storage_engine": (str, "olap", True),
    "default_tmp_storage_engine": (str, "olap", True),
    "sql_mode": (str, "ONLY_FULL_GROUP_BY", True),
    "query_timeout": (int, 900, True),
    "insert_timeout": (int, 14400, True),
}

# MySQL types of result columns, as Doris's FE reports them in the column definitions
COLUMN_TYPES: dict[str, ColumnType] = {
    "BOOLEAN": ColumnType.TINY,
    "TINYINT": ColumnType.TINY,
    "SMALLINT": ColumnType.SHORT,
    "INT": ColumnType.LONG,
    "BIGINT": ColumnType.LONGLONG,
    "LARGEINT": ColumnType.STRING,
    "FLOAT": ColumnType.FLOAT,
    "DOUBLE": ColumnType.DOUBLE,
    "DECIMAL": ColumnType.NEWDECIMAL,
    "DATE": ColumnType.DATE,
    "DATETIME": ColumnType.DATETIME,
    "CHAR": ColumnType.STRING,
    "VARCHAR": ColumnType.VAR_STRING,
    "STRING": ColumnType.VAR_STRING,
}

# how often a running statement looks whether its client is still connected
CLIENT_POLL_SECONDS = 0.25

# client bookkeeping that mysql-mimic answers: transactions, KILL, and the SHOW statements of server state that
# the statement table does not run (SHOW VARIABLES, STATUS, WARNINGS, COLUMNS, ...)
_MIMIC_FIRST_WORDS = frozenset({"BEGIN", "START", "COMMIT", "ROLLBACK", "KILL"})
# MySQL's SQLSTATE of the privilege refusals (mysql-mimic knows only its own codes' states)
_ACCESS_SQLSTATE = {TABLE_ACCESS_DENIED: b"42000", DB_ACCESS_DENIED: b"42000", SPECIFIC_ACCESS_DENIED: b"42000"}
_CLIENT_FUNCTIONS = re.compile(
    r"@@|\b(DATABASE|SCHEMA|USER|CURRENT_USER|SESSION_USER|SYSTEM_USER|VERSION|CONNECTION_ID)\s*\(", re.IGNORECASE
)


_CLIENT_VALUES = (exp.CurrentSchema, exp.CurrentUser, exp.CurrentVersion)
_CLIENT_ANONYMOUS = frozenset({"database", "schema", "user", "session_user", "system_user", "connection_id"})
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def client_query(stmt: str) -> bool:
    """Whether `stmt` is a client's bookkeeping query, the only SELECT mysql-mimic answers: a projection of
    `@@variables` and argument-less `DATABASE()`, `USER()`, `VERSION()`, `CONNECTION_ID()` and their kin, each
    with an optional alias, and an optional numeric LIMIT. mysql-mimic evaluates such a query with sqlglot's
    Python executor, which compiles what it is given into Python source: any other expression there (a JSON path,
    a string, arithmetic) would run as Python in the server. Everything else goes to the Doris executor."""
    try:
        tree = sqlglot.parse_one(stmt, dialect="doris")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, RecursionError):
        return False
    if not isinstance(tree, exp.Select) or not tree.expressions:
        return False
    if any(tree.args.get(a) for a in set(exp.Select.arg_types) - {"expressions", "limit"}):
        return False
    limit = tree.args.get("limit")
    if limit is not None and not (
        isinstance(limit, exp.Limit)
        and not any(v for k, v in limit.args.items() if k != "expression")
        and isinstance(limit.expression, exp.Literal)
        and limit.expression.is_int
    ):
        return False
    return all(_client_value(item) for item in tree.expressions)


def _client_value(item: exp.Expression) -> bool:
    if isinstance(item, exp.Alias):
        if not isinstance(item.args.get("alias"), exp.Identifier):
            return False
        item = item.this
    if isinstance(item, exp.SessionParameter):
        name, kind = item.this, item.args.get("kind")
        return (
            isinstance(name, exp.Identifier | exp.Var)
            and _VARIABLE_NAME.fullmatch(name.name) is not None
            and (kind is None or str(kind).upper() in ("SESSION", "GLOBAL", "LOCAL"))
        )
    if isinstance(item, _CLIENT_VALUES):
        return not any(item.iter_expressions())
    if isinstance(item, exp.Anonymous):
        return str(item.this).lower() in _CLIENT_ANONYMOUS and not item.expressions
    return False


def doris_error(exc: DorisError) -> MysqlError:
    """A failure as Doris's FE sends it: code 1105, SQLSTATE HY000, `errCode = 2, detailMessage = ...`; a refused
    privilege with Doris's MySQL code (1142, 1044, 1227; SQLSTATE 42000) and the same text."""
    detail = exc if isinstance(exc, SqlError) else SqlError(exc.message)
    if isinstance(exc, StatementDenied):
        return MysqlError(detail.doris_message, code=exc.mysql_code)
    return MysqlError(detail.doris_message, code=ErrorCode.UNKNOWN_ERROR)


@contextmanager
def mysql_errors() -> Iterator[None]:
    """The one MySQL error mapping: every `DorisError` raised inside becomes its error packet (`doris_error`);
    MysqlErrors (mysql-mimic's own answers) pass as they are."""
    try:
        yield
    except DorisError as exc:
        raise doris_error(exc) from None


def result_columns(columns: list[tuple[str, str]]) -> list[ResultColumn]:
    return [
        ResultColumn(name=name, type=COLUMN_TYPES.get(type_name.upper(), ColumnType.VAR_STRING))
        for name, type_name in columns
    ]


class DorisSession(MimicSession):  # type: ignore[misc]  # mysql-mimic ships no type information
    """One MySQL connection: a Doris SQL session on the shared executor, with mysql-mimic for client bookkeeping."""

    dialect = "doris"

    def __init__(
        self,
        executor: SqlExecutor,
        accounts: AccountStore,
        *,
        max_rows: int = 1_000_000,
        max_statements: int = 100,
    ) -> None:
        self.sql = SqlSession(db="")
        self.accounts = accounts
        super().__init__(SessionVariables(GlobalVariables(DORIS_VARIABLES)))
        self.executor = executor
        self.max_rows = max_rows
        self.max_statements = max_statements
        self.affected_rows = 0
        self.client_gone: Callable[[], bool] = lambda: False  # set by the server once the socket is known

    @property
    def database(self) -> str | None:
        """The Doris session's current database (set by the handshake, COM_INIT_DB or `USE`)."""
        return self.sql.db or None

    @database.setter
    def database(self, value: str | None) -> None:
        self.sql.db = value or ""

    def refresh_privileges(self) -> None:
        """Read the user's privileges for the next statement: a grant, a revoke or a DROP USER counts at once."""
        self.sql.privileges = self.accounts.privileges(mysql_identity(self.username or ""))

    async def handle_query(self, sql: str, attrs: dict[str, str]) -> AllowedResult:
        self.affected_rows = 0
        with mysql_errors():
            self.refresh_privileges()
            statements = split_statements(sql)
            if not statements:
                raise MysqlError("Query was empty", code=ErrorCode.EMPTY_QUERY)
            check_statement_count(len(statements), self.max_statements)
            result: AllowedResult = None
            for stmt in statements:
                result = await self._statement(stmt, attrs)
            return result

    async def use(self, database: str) -> None:
        """`USE db` and COM_INIT_DB (`mysql -D db`, pymysql's `database=`): the database must exist."""
        with mysql_errors():
            self.refresh_privileges()
            await self._doris(f"USE `{database}`")

    async def _statement(self, stmt: str, attrs: dict[str, str]) -> AllowedResult:
        cur = Cursor(stmt)
        first, second = cur.word(), cur.word(1)
        if first in _MIMIC_FIRST_WORDS or (first == "SHOW" and not self.executor.runs(stmt)):
            return await super().handle_query(stmt, attrs)
        if first == "SET" and second != "PASSWORD":
            return await self._set(stmt, attrs)
        if first == "SELECT" and _CLIENT_FUNCTIONS.search(stmt) and client_query(stmt):
            return await super().handle_query(stmt, attrs)
        return await self._doris(stmt)

    async def _set(self, stmt: str, attrs: dict[str, str]) -> AllowedResult:
        """Session variables go to the Doris session; character sets, transactions and the MySQL variables
        mysql-mimic knows (autocommit, sql_mode, time_zone, ...) also go to mysql-mimic's session."""
        try:
            tree = sqlglot.parse_one(stmt, dialect="doris")
        except sqlglot.errors.ParseError:
            return await self._doris(stmt)  # the executor words the syntax error
        if not isinstance(tree, exp.Set):
            return await self._doris(stmt)
        for item in tree.expressions:
            text = f"SET {item.sql(dialect='mysql')}"
            kind = (item.text("kind") or "VARIABLE").upper()
            if kind in ("NAMES", "CHARACTER SET", "TRANSACTION"):
                await super().handle_query(text, attrs)
                continue
            await self._doris(f"SET {item.sql(dialect='doris')}")
            assignment = item.this
            name = assignment.this.name.lower() if isinstance(assignment, exp.EQ) else ""
            if kind in ("VARIABLE", "SESSION", "LOCAL") and name in DORIS_VARIABLES:
                await super().handle_query(text, attrs)
        return None

    async def _doris(self, stmt: str) -> AllowedResult:
        result = await self._run(stmt)
        if isinstance(result, ExecStatus):
            self.affected_rows = result.affected_rows
            return None
        assert isinstance(result, SqlResultSet)
        if len(result.rows) > self.max_rows:
            raise SqlError(f"Result set has more than {self.max_rows} rows (SL_MYSQL_MAX_RESULT_ROWS): add a LIMIT")
        return ResultSet(rows=result.rows, columns=result_columns(result.columns))

    async def _run(self, stmt: str) -> StatementResult:
        """Run the statement in a thread; its Spark jobs are cancelled if the client disconnects meanwhile."""
        task = asyncio.ensure_future(asyncio.to_thread(self.executor.execute, stmt, self.sql, limit=self.max_rows + 1))
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=CLIENT_POLL_SECONDS)
                if not task.done() and self.client_gone():
                    self.sql.interrupt("the client closed the connection")
        except asyncio.CancelledError:  # KILL, or the server closing: the thread's jobs must stop too
            self.sql.interrupt("the statement was killed")
            raise
        return await task


class DorisPasswordPlugin(NativePasswordAuthPlugin):  # type: ignore[misc]  # mysql-mimic ships no type information
    """mysql_native_password (as mysql-mimic 3.0 implements it) with Doris's refusal text."""

    async def auth(self, auth_info: AuthInfo | None = None) -> AsyncGenerator[Decision, AuthInfo]:
        if auth_info and auth_info.handshake_plugin_name == self.name and auth_info.handshake_auth_data:
            nonce = auth_info.handshake_auth_data.rstrip(b"\x00")
        else:
            nonce = utils.nonce(20)
            auth_info = yield nonce + b"\x00"
        user = auth_info.user
        if self.password_matches(user=user, scramble=auth_info.data, nonce=nonce):
            yield Success(user.name)
        else:
            used = "YES" if auth_info.data else "NO"
            yield Forbidden(f"Access denied for user '{user.name}' (using password: {used})")


class DorisUsers(IdentityProvider):  # type: ignore[misc]  # mysql-mimic ships no type information
    """The users of the account store (`tables/accounts.py`), checked with their stored native hash.

    mysql-mimic asks for a user by name only, before the client's address is known here: a MySQL login takes the
    user's `'name'@'%'` identity (an identity limited to some hosts logs in over HTTP only).
    """

    def __init__(self, accounts: AccountStore) -> None:
        self.accounts = accounts

    def get_plugins(self) -> list[DorisPasswordPlugin]:
        return [DorisPasswordPlugin()]

    async def get_user(self, username: str) -> User | None:
        name = username.split("@", 1)[0]
        stored = self.accounts.password_hash(mysql_identity(name))
        if stored is None:
            # not a hex digest: no password matches, so an unknown user gets the same refusal as a wrong password
            return User(name=name, auth_string="-", auth_plugin=DorisPasswordPlugin.name)
        # mysql-mimic checks scrambles against hex SHA1(SHA1(password)): the stored hash without its `*`
        return User(name=name, auth_string=stored[1:].lower() or None, auth_plugin=DorisPasswordPlugin.name)


def mysql_identity(username: str) -> Identity:
    """The identity a MySQL login as `username` takes (see `DorisUsers`)."""
    return Identity(username.split("@", 1)[0])


class DorisConnection(Connection):  # type: ignore[misc]  # mysql-mimic ships no type information
    """A connection whose OK packet carries the statement's affected rows (`Query OK, 1 row affected`), and
    whose handshake (login) must finish within `handshake_timeout` seconds."""

    session: DorisSession
    handshake_timeout: float = 10.0

    async def connection_phase(self) -> None:
        await asyncio.wait_for(super().connection_phase(), self.handshake_timeout)

    async def authenticate(self, username: str, *args: Any, **kwargs: Any) -> None:
        """mysql-mimic's login, under the account store's failed-login backoff for the client's address."""
        peer = self.stream.writer.get_extra_info("peername")
        client = str(peer[0]) if peer else ""
        throttle = self.session.accounts.throttle
        try:
            throttle.check(username.split("@", 1)[0], client)
        except DorisError as exc:
            await self.stream.write(self.error(msg=exc.message, code=ErrorCode.ACCESS_DENIED_ERROR))
            return
        self.session.username = None  # COM_CHANGE_USER too: a failed change leaves no user logged in
        await super().authenticate(username, *args, **kwargs)
        if self.session.username is None:
            throttle.failed(client)
        else:
            throttle.succeeded(client)

    def error(self, **kwargs: Any) -> bytes:
        """mysql-mimic's error packet, with MySQL's SQLSTATE for the privilege refusals (`#42000`)."""
        packet: bytes = super().error(**kwargs)
        state = _ACCESS_SQLSTATE.get(int(kwargs.get("code", 0)))
        if state is not None and packet[3:9] == b"#HY000":
            packet = packet[:4] + state + packet[9:]
        return packet

    def ok(self, **kwargs: Any) -> bytes:
        if "affected_rows" not in kwargs and isinstance(self.session, DorisSession):
            kwargs["affected_rows"] = self.session.affected_rows
            self.session.affected_rows = 0
        ok: bytes = super().ok(**kwargs)
        return ok


class DorisMysqlServer(MysqlServer):  # type: ignore[misc]  # mysql-mimic ships no type information
    """mysql-mimic's server with `DorisConnection`; the accept callback follows mysql-mimic 3.0's, with a bound on
    concurrent connections (one more is told MySQL's error 1040 and closed) and a handshake timeout."""

    max_connections = 1024
    handshake_timeout = 10.0
    active = 0

    async def _client_connected_cb(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.active >= self.max_connections:
            await _refuse(writer, ErrorCode.CON_COUNT_ERROR, "Too many connections")
            return
        self.active += 1
        try:
            await self._serve(reader, writer)
        except TimeoutError:
            log.info("MySQL client did not finish its handshake within %.1f s", self.handshake_timeout)
        finally:
            self.active -= 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = MysqlStream(reader, writer)
        try:
            session = self.session_factory()
            if inspect.isawaitable(session):
                session = await session
            if isinstance(session, DorisSession):
                # `_eof` is set once the peer has closed, even while its last packets (a COM_QUIT) are unread
                # in the buffer, when `at_eof()` still says False
                session.client_gone = lambda: bool(getattr(reader, "_eof", False)) or writer.is_closing()
            connection = DorisConnection(
                stream=stream,
                session=session,
                control=self.control,
                server_capabilities=self.capabilities,
                identity_provider=self.identity_provider,
                ssl=self.ssl,
            )
            connection.handshake_timeout = self.handshake_timeout
            connection_id = await self.control.add(connection)
            connection.connection_id = connection_id
        except Exception:  # a client must get an error packet rather than a hung socket
            log.exception("MySQL connection setup failed")
            writer.close()
            return
        try:
            await connection.start()
        finally:
            writer.close()
            await self.control.remove(connection_id)


async def _refuse(writer: asyncio.StreamWriter, code: int, message: str) -> None:
    """An error packet in place of the handshake (sequence 0), as MySQL sends 1040, then close."""
    payload = b"\xff" + code.to_bytes(2, "little") + b"#08004" + message.encode()
    writer.write(len(payload).to_bytes(3, "little") + b"\x00" + payload)
    try:
        await writer.drain()
    except ConnectionError:
        pass  # the client left first: nothing to tell it
    writer.close()


async def start_mysql_server(
    executor: SqlExecutor,
    *,
    host: str,
    port: int,
    accounts: AccountStore,
    max_rows: int = 1_000_000,
    max_statements: int = 100,
    max_connections: int = 1024,
    handshake_timeout: float = 10.0,
) -> DorisMysqlServer:
    """Listen on `host:port` (0: a free port); the bound port is `server.sockets()[0].getsockname()[1]`.

    Raises:
        OSError: the port cannot be bound.
    """
    server = DorisMysqlServer(
        session_factory=lambda: DorisSession(executor, accounts, max_rows=max_rows, max_statements=max_statements),
        identity_provider=DorisUsers(accounts),
    )
    server.max_connections = max_connections
    server.handshake_timeout = handshake_timeout
    await server.start_server(host=host, port=port)
    return server


def bound_port(server: MysqlServer) -> int:
    return int(server.sockets()[0].getsockname()[1])
