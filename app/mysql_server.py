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
import dataclasses
import datetime as dt
import decimal
import inspect
import io
import logging
import math
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import sqlglot
from mysql_mimic import MysqlServer, ResultColumn, ResultSet, packets, types, utils
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
from mysql_mimic.constants import KillKind
from mysql_mimic.errors import ErrorCode, MysqlError
from mysql_mimic.prepared import PreparedStatement
from mysql_mimic.results import AllowedResult, ensure_result_set
from mysql_mimic.stream import ConnectionClosed, MysqlStream
from mysql_mimic.types import Capabilities, ColumnType
from mysql_mimic.variables import SYSTEM_VARIABLES, GlobalVariables, SessionVariables
from sqlglot import TokenType, exp

from sql.privileges import DB_ACCESS_DENIED, SPECIFIC_ACCESS_DENIED, TABLE_ACCESS_DENIED, StatementDenied
from sql.results import ExecStatus, StatementResult
from sql.results import ResultSet as SqlResultSet
from sql.session import Session as SqlSession
from sql.session import check_statement_count
from sql.tokens import Cursor, split_statements, tokenize
from tables.accounts import AccountStore, Identity, Priv
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

# client bookkeeping that mysql-mimic answers: transactions, and the SHOW statements of server state that the
# statement table does not run (SHOW VARIABLES, STATUS, WARNINGS, COLUMNS, ...); KILL is answered here
_MIMIC_FIRST_WORDS = frozenset({"BEGIN", "START", "COMMIT", "ROLLBACK"})
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


# MySQL's error codes for the limits below (the texts are MySQL's; Doris answers the same)
NET_PACKET_TOO_LARGE = 1153  # ER_NET_PACKET_TOO_LARGE, SQLSTATE 08S01
NO_SUCH_THREAD = 1094  # ER_NO_SUCH_THREAD
KILL_DENIED = 1095  # ER_KILL_DENIED_ERROR
PS_MANY_PARAM = 1390  # ER_PS_MANY_PARAM
MAX_PREPARED_STMT_COUNT_REACHED = 1461  # ER_MAX_PREPARED_STMT_COUNT_REACHED

# the largest logical packet (all its 16 MB fragments together) of a logged-in client: the max_allowed_packet this
# server advertises (64 MB, Doris's and MySQL 8's default); before login, a handshake response fits in far less
MAX_ALLOWED_PACKET = 64 * 1024 * 1024
HANDSHAKE_MAX_PACKET = 64 * 1024
# prepared statements one connection may hold (MySQL's max_prepared_stmt_count is 16382 for the whole server)
MAX_PREPARED_STATEMENTS = 1024
# the text of one COM_STMT_PREPARE; a prepared statement's placeholders (a 2-byte count in the protocol)
MAX_PREPARED_SQL_BYTES = 1024 * 1024
MAX_PLACEHOLDERS = 65535
# text longer than this is tokenized and parsed in a worker thread rather than on the event loop that serves every
# client: sqlglot takes about 10 ms per KiB to tokenize and parse (at 64 KiB, one COM_QUERY of 100 such statements
# held the loop for about 100 s)
OFF_LOOP_CHARS = 4 * 1024
# the idle timeout of a logged-in connection is its `wait_timeout` session variable, within MySQL's range
WAIT_TIMEOUT_RANGE = (1, 31_536_000)

_T = TypeVar("_T")


async def off_loop(func: Callable[..., _T], text: str, *args: Any) -> _T:
    """`func(text, *args)`, in a worker thread when the text is long (sqlglot's tokenizer is pure Python)."""
    if len(text) > OFF_LOOP_CHARS:
        return await asyncio.to_thread(func, text, *args)
    return func(text, *args)


def _set_items(stmt: str) -> list[tuple[str, str, str, str]] | None:
    """A SET statement's assignments as (kind, MySQL text, Doris text, variable name), or None when the statement
    is not a SET. Parsed and rendered together: in a worker thread for a long statement (`off_loop`), rendering a
    long value's tree costs about as much as parsing it.

    Raises:
        ParseError, TokenError, RecursionError: the statement does not parse.
    """
    tree = sqlglot.parse_one(stmt, dialect="doris")
    if not isinstance(tree, exp.Set):
        return None
    items = []
    for item in tree.expressions:
        assignment = item.this
        items.append(
            (
                (item.text("kind") or "VARIABLE").upper(),
                f"SET {item.sql(dialect='mysql')}",
                f"SET {item.sql(dialect='doris')}",
                assignment.this.name.lower() if isinstance(assignment, exp.EQ) else "",
            )
        )
    return items


def mysql_error(detail: str, code: int) -> MysqlError:
    """An error packet with MySQL's code and Doris's wording (`errCode = 2, detailMessage = ...`)."""
    return MysqlError(SqlError(detail).doris_message, code=code)


def sql_literal(value: Any) -> str:
    """A prepared statement's parameter as a Doris literal: strings quoted and escaped by sqlglot (the same rules
    the executor's tokenizer reads them back with), so no value can end its literal or add a statement."""
    if value is None:
        return "NULL"
    if value is True or value is False:
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float | decimal.Decimal):
        if math.isfinite(value):
            return str(value) if isinstance(value, decimal.Decimal) else repr(value)
        return f"CAST('{value}' AS DOUBLE)"  # 'inf', 'nan': a bare word would be a column name
    if isinstance(value, bytes | bytearray | memoryview):
        value = bytes(value).decode("utf-8", errors="replace")
    elif isinstance(value, dt.datetime):
        value = value.isoformat(sep=" ")
    elif isinstance(value, dt.date | dt.time):
        value = value.isoformat()
    elif isinstance(value, dt.timedelta):
        value = str(value)
    if not isinstance(value, str):
        raise MysqlError(f"Unsupported parameter type: {type(value).__name__}", code=ErrorCode.NOT_SUPPORTED_YET)
    return exp.Literal.string(value).sql(dialect="doris")


def interpolate(sql: str, offsets: Sequence[int], values: Sequence[Any]) -> str:
    """The statement with each placeholder replaced by its value's literal, spliced at the placeholder's offset
    (no regex, so a backslash in a value is never a group reference)."""
    parts: list[str] = []
    last = 0
    for offset, value in zip(offsets, values, strict=True):
        parts.append(sql[last:offset])
        parts.append(sql_literal(value))
        last = offset + 1
    parts.append(sql[last:])
    return "".join(parts)


def like_matches(pattern: str, text: str) -> bool:
    """SQL LIKE (`%`, `_`, `\\` escapes; case-insensitive as MySQL's variable names), without a regex: one pass with
    one backtracking point, O(len(pattern) * len(text)) at worst."""
    tokens: list[str | None] = []  # None: `%`; "\0any": `_`; else a literal character
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            tokens.append(pattern[i + 1].lower())
            i += 2
            continue
        tokens.append(None if c == "%" else "\0any" if c == "_" else c.lower())
        i += 1
    text = text.lower()
    p = t = 0
    star, mark = -1, 0
    while t < len(text):
        if p < len(tokens) and tokens[p] is not None and (tokens[p] == "\0any" or tokens[p] == text[t]):
            p += 1
            t += 1
        elif p < len(tokens) and tokens[p] is None:
            star, mark = p, t
            p += 1
        elif star >= 0:
            p = star + 1
            mark += 1
            t = mark
        else:
            return False
    while p < len(tokens) and tokens[p] is None:
        p += 1
    return p == len(tokens)


@dataclasses.dataclass
class DorisPreparedStatement(PreparedStatement):  # type: ignore[misc]  # mysql-mimic ships no type information
    """mysql-mimic's prepared statement with its placeholders' offsets and its statement count."""

    offsets: tuple[int, ...] = ()
    statements: int = 1


def check_mimic_show(stmt: str) -> None:
    """A SHOW statement the executor does not run goes to mysql-mimic, which answers it from its information
    schema with sqlglot's Python executor (it compiles expressions into Python source) and pastes its names and
    LIKE pattern into SQL text: refuse a WHERE, and a name or pattern with a quote (or a name with a backslash).

    Raises:
        SqlError: the statement is not one mysql-mimic should see.
    """
    if any(tok.token_type == TokenType.WHERE for tok in tokenize(stmt)):
        raise SqlError(f"SHOW ... WHERE is not supported here, use LIKE: {stmt}")
    try:
        trees = sqlglot.parse(stmt, dialect="doris")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, RecursionError):
        raise SqlError(f"Syntax error: {stmt}") from None
    for tree in trees:
        if not isinstance(tree, exp.Show):
            continue  # an unsupported SHOW parses as a Command, which mysql-mimic answers with an empty result
        for arg in ("target", "db", "like"):
            text = tree.text(arg)
            if "'" in text or (arg != "like" and "\\" in text):
                raise SqlError(f"Incorrect {'pattern' if arg == 'like' else 'name'} in SHOW: {text!r}")


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
            statements = await off_loop(split_statements, sql)
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
        route = await off_loop(self._route, stmt)
        if route == "kill":
            return await self._kill(stmt)
        if route == "mimic":
            return await super().handle_query(stmt, attrs)
        if route == "set":
            return await self._set(stmt, attrs)
        return await self._doris(stmt)

    def _route(self, stmt: str) -> str:
        """Who answers the statement: `mimic` (client bookkeeping), `kill`, `set` or `doris` (the executor).
        Tokenizes and parses the statement: a long one is routed in a worker thread."""
        cur = Cursor(stmt)
        first, second = cur.word(), cur.word(1)
        if first == "KILL":
            return "kill"
        if first in _MIMIC_FIRST_WORDS:
            return "mimic"
        if first == "SHOW" and not self.executor.runs(stmt):
            check_mimic_show(stmt)
            return "mimic"
        if first == "SET" and second != "PASSWORD":
            return "set"
        if first == "SELECT" and _CLIENT_FUNCTIONS.search(stmt) and client_query(stmt):
            return "mimic"
        return "doris"

    async def _kill(self, stmt: str) -> AllowedResult:
        """`KILL [CONNECTION | QUERY] <id>`, as Doris checks it: a user kills its own connections and queries;
        another user's only with ADMIN_PRIV (MySQL's 1095 otherwise); an unknown id is MySQL's 1094."""
        cur = Cursor(stmt)
        cur.expect("KILL")
        kind = KillKind.QUERY if cur.accept("QUERY") else KillKind.CONNECTION
        if kind == KillKind.CONNECTION:
            cur.accept("CONNECTION")
        tok = cur.next()
        if tok.token_type != TokenType.NUMBER or not tok.text.isdigit() or not cur.at_end():
            raise SqlError(f"Syntax error: KILL [CONNECTION | QUERY] <connection id>, not {stmt!r}")
        connection_id = int(tok.text)
        control = self.connection.control
        connections: dict[int, Connection] = getattr(control, "_connections", {})
        target = connections.get(connection_id)
        if target is None:
            raise mysql_error(f"Unknown thread id: {connection_id}", NO_SUCH_THREAD)
        owner = getattr(target.session, "username", None)
        if target is not self.connection and (owner is None or owner != self.username):
            if not self.sql.privileges.allows(Priv.ADMIN):
                raise mysql_error(f"You are not owner of thread {connection_id}", KILL_DENIED)
        await control.kill(connection_id, kind)
        return None

    def _show_variables(self, show: exp.Show) -> AllowedResult:
        """mysql-mimic's SHOW VARIABLES, with LIKE matched as LIKE (mysql-mimic compiles the pattern as a regex)."""
        rows = [(k, None if v is None else str(v)) for k, v in self.variables.list()]
        like = show.text("like")
        if like:
            rows = [(k, v) for k, v in rows if like_matches(like, k)]
        return rows, ["Variable_name", "Value"]

    async def _set(self, stmt: str, attrs: dict[str, str]) -> AllowedResult:
        """Session variables go to the Doris session; character sets, transactions and the MySQL variables
        mysql-mimic knows (autocommit, sql_mode, time_zone, ...) also go to mysql-mimic's session."""
        try:
            items = await off_loop(_set_items, stmt)
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, RecursionError):
            return await self._doris(stmt)  # the executor words the syntax error
        if items is None:
            return await self._doris(stmt)
        for kind, text, doris_text, name in items:
            if kind in ("NAMES", "CHARACTER SET", "TRANSACTION"):
                await super().handle_query(text, attrs)
                continue
            await self._doris(doris_text)
            # mysql-mimic parses its copy on the event loop: a value the Doris session took is short (a variable's
            # value), and a long one stays the Doris session's alone
            if kind in ("VARIABLE", "SESSION", "LOCAL") and name in DORIS_VARIABLES and len(text) <= OFF_LOOP_CHARS:
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


def scan_prepared(sql: str) -> tuple[list[int], int]:
    """A prepared statement's `?` placeholders, as offsets, and its statement count (as `split_statements` counts
    them), from one linear pass of sqlglot's Doris tokenizer (the one the executor reads the statement with): a
    `?` inside a string, a quoted name or a comment is no placeholder.

    Raises:
        SqlError: the text does not tokenize (an unterminated string).
    """
    offsets: list[int] = []
    statements = start = 0
    for tok in tokenize(sql):
        if tok.token_type == TokenType.PLACEHOLDER:
            offsets.append(tok.start)
        elif tok.token_type == TokenType.DQMARK:
            offsets.extend((tok.start, tok.start + 1))
        elif tok.token_type == TokenType.SEMICOLON:
            statements += bool(sql[start : tok.start].strip())
            start = tok.end + 1
    return offsets, statements + bool(sql[start:].strip())


class DorisStream:
    """mysql-mimic's packet stream (compiled: it cannot be subclassed, so it is wrapped) with bounds: a logical
    packet (its 16 MB fragments together) larger than `max_packet` is refused with MySQL's error 1153 and the
    connection closed, before its bytes are read; fragments are gathered in a list (no quadratic copy); once
    `wait_timeout` is set (a logged-in client), a connection idle that many seconds between commands is closed.
    Everything but reading is mysql-mimic's."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_packet: int = HANDSHAKE_MAX_PACKET
    ) -> None:
        self.inner = MysqlStream(reader, writer)
        self.reader = reader
        self.writer = writer
        self.max_packet = max_packet
        self.wait_timeout: Callable[[], float] | None = None
        self.closed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def seq(self) -> Any:
        return self.inner.seq

    async def read(self) -> bytes:
        if self.closed:
            raise ConnectionClosed()
        parts: list[bytes] = []
        size = 0
        while True:
            header = await self._read_header(idle=not parts)
            word = int.from_bytes(header, "little")
            payload_length = word & 0x00FFFFFF
            sequence_id = word >> 24
            expected = next(self.seq)
            if sequence_id != expected:
                raise MysqlError(f"Expected seq({expected}) got seq({sequence_id})", ErrorCode.MALFORMED_PACKET)
            if size + payload_length > self.max_packet:
                await self.refuse_packet()
                raise ConnectionClosed()
            if payload_length == 0:
                break
            try:
                parts.append(await self.reader.readexactly(payload_length))
            except asyncio.IncompleteReadError:
                raise ConnectionClosed() from None
            size += payload_length
            if payload_length < 0xFFFFFF:
                break
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def _read_header(self, *, idle: bool) -> bytes:
        try:
            if idle and self.wait_timeout is not None:
                timeout = self.wait_timeout()
                try:
                    idle_header: bytes = await asyncio.wait_for(self.reader.readexactly(4), timeout)
                    return idle_header
                except TimeoutError:
                    log.info("MySQL connection idle for %s s (wait_timeout): closed", timeout)
                    self.closed = True
                    raise ConnectionClosed() from None
            header: bytes = await self.reader.readexactly(4)
        except asyncio.IncompleteReadError:
            raise ConnectionClosed() from None
        return header

    async def write(self, data: bytes, drain: bool = True) -> None:
        if not self.closed:  # nothing more goes out after a refusal (mysql-mimic still words its own error)
            await self.inner.write(data, drain)

    async def refuse_packet(self) -> None:
        """MySQL's 1153 (SQLSTATE 08S01), then the connection is done: the rest of what the client sends meanwhile
        is read and dropped for up to a second, so that the client reads the error rather than a reset."""
        message = b"Got a packet bigger than 'max_allowed_packet' bytes"
        await self.write(b"\xff" + NET_PACKET_TOO_LARGE.to_bytes(2, "little") + b"#08S01" + message)
        self.closed = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1.0
        while (left := deadline - loop.time()) > 0:
            try:
                if not await asyncio.wait_for(self.reader.read(1 << 16), left):
                    break
            except (TimeoutError, ConnectionError):
                break


class DorisConnection(Connection):  # type: ignore[misc]  # mysql-mimic ships no type information
    """A connection whose OK packet carries the statement's affected rows (`Query OK, 1 row affected`), and
    whose handshake (login) must finish within `handshake_timeout` seconds; a failed login closes it.

    Bounds (see `DorisStream`): a packet before login is at most `HANDSHAKE_MAX_PACKET`, after login
    `max_allowed_packet`, and so are the COM_STMT_SEND_LONG_DATA bytes of one prepared statement; a connection
    holds at most `max_prepared_statements` prepared statements of at most `max_prepared_sql_bytes` each.
    Prepared statements bind their parameters as escaped Doris literals (`interpolate`)."""

    session: DorisSession
    stream: DorisStream
    handshake_timeout: float = 10.0
    max_allowed_packet: int = MAX_ALLOWED_PACKET
    max_prepared_statements: int = MAX_PREPARED_STATEMENTS
    max_prepared_sql_bytes: int = MAX_PREPARED_SQL_BYTES

    async def connection_phase(self) -> None:
        await asyncio.wait_for(super().connection_phase(), self.handshake_timeout)

    async def authenticate(self, username: str, *args: Any, **kwargs: Any) -> None:
        """mysql-mimic's login, under the account store's failed-login backoff for the client's address."""
        peer = self.stream.writer.get_extra_info("peername")
        client = str(peer[0]) if peer else ""
        throttle = self.session.accounts.throttle
        self.session.username = None  # COM_CHANGE_USER too: a failed change leaves no user logged in
        try:
            throttle.check(username.split("@", 1)[0], client)
        except DorisError as exc:
            await self.stream.write(self.error(msg=exc.message, code=ErrorCode.ACCESS_DENIED_ERROR))
            self.stream.closed = True  # as MySQL: no command after a refused login
            return
        await super().authenticate(username, *args, **kwargs)
        if self.session.username is None:
            throttle.failed(client)
            self.stream.closed = True
        else:
            throttle.succeeded(client)
            self.stream.max_packet = self.max_allowed_packet
            self.stream.wait_timeout = self._wait_timeout

    def _wait_timeout(self) -> float:
        """The session's `wait_timeout` (MySQL's idle timeout, 28800 s by default), within MySQL's range."""
        try:
            value = float(self.session.variables.get("wait_timeout"))
        except (TypeError, ValueError):
            value = float(SYSTEM_VARIABLES["wait_timeout"][1])
        low, high = WAIT_TIMEOUT_RANGE
        return min(max(value, low), high)

    async def handle_stmt_prepare(self, data: bytes) -> None:
        """COM_STMT_PREPARE: placeholders counted by one pass of the Doris tokenizer (in a worker thread for a long
        statement), the statement's size, its placeholders and the connection's statements bounded."""
        if len(data) > self.max_prepared_sql_bytes:
            raise mysql_error(f"Prepared statement is longer than {self.max_prepared_sql_bytes} bytes", 1105)
        if len(self.prepared_stmts) >= self.max_prepared_statements:
            raise MysqlError(
                "Can't create more than max_prepared_stmt_count statements "
                f"(current value: {self.max_prepared_statements})",
                code=MAX_PREPARED_STMT_COUNT_REACHED,
            )
        sql = self.client_charset.decode(data)
        with mysql_errors():
            offsets, statements = await off_loop(scan_prepared, sql)
        if len(offsets) > MAX_PLACEHOLDERS:
            raise MysqlError("Prepared statement contains too many placeholders", code=PS_MANY_PARAM)
        stmt = DorisPreparedStatement(
            stmt_id=next(self.prepared_stmt_seq),
            sql=sql,
            num_params=len(offsets),
            offsets=tuple(offsets),
            statements=statements,
        )
        self.prepared_stmts[stmt.stmt_id] = stmt
        for packet in self.com_stmt_prepare_response(stmt):
            await self.stream.write(packet, drain=False)
        await self.stream.drain()

    async def handle_stmt_send_long_data(self, data: bytes) -> None:
        """COM_STMT_SEND_LONG_DATA, at most `max_allowed_packet` bytes for one statement's parameters together:
        more is MySQL's 1153 and closes the connection."""
        long_data = packets.parse_com_stmt_send_long_data(data)
        stmt = self.get_stmt(long_data.stmt_id)
        buffers: dict[int, bytearray] = stmt.param_buffers or {}
        if sum(map(len, buffers.values())) + len(long_data.data) > self.max_allowed_packet:
            stmt.param_buffers = None
            await self.stream.refuse_packet()
            return
        stmt.param_buffers = buffers
        buffers.setdefault(long_data.param_id, bytearray()).extend(long_data.data)

    def bind(
        self, stmt: DorisPreparedStatement, reader: io.BytesIO, count_available: bool
    ) -> tuple[str, dict[str, str]]:
        """The statement text with its parameters as escaped literals, and the query attributes (mysql-mimic's
        `_interpolate_params`, which pasted strings between quotes unescaped)."""
        parameter_count = stmt.num_params
        attributes = Capabilities.CLIENT_QUERY_ATTRIBUTES in self.capabilities
        if attributes and (stmt.num_params > 0 or count_available):
            parameter_count = packets.read_uint_len(reader)
        if parameter_count < stmt.num_params or parameter_count > stmt.num_params + MAX_PLACEHOLDERS:
            raise MysqlError("Incorrect arguments to mysqld_stmt_execute", code=1210)
        if parameter_count == 0:
            return stmt.sql, {}
        params = packets._read_params(
            self.capabilities, self.client_charset, reader, parameter_count, stmt.param_buffers
        )
        values = [value for _, value in params[: stmt.num_params]]
        attrs = {k: v for k, v in params[stmt.num_params :] if k is not None}
        return interpolate(stmt.sql, stmt.offsets, values), attrs

    async def handle_stmt_execute(self, data: bytes) -> None:
        """COM_STMT_EXECUTE (mysql-mimic 3.0's, with `bind`): the bound text must hold exactly the statements the
        client prepared."""
        reader = io.BytesIO(data)
        stmt = self.get_stmt(packets.read_uint_4(reader))
        use_cursor, count_available = packets._read_cursor_flags(reader)
        packets.read_uint_4(reader)  # iteration count, always 1
        sql, attrs = self.bind(stmt, reader, count_available)
        stmt.param_buffers = None
        with mysql_errors():
            statements = await off_loop(split_statements, sql)
        if len(statements) != stmt.statements:
            raise mysql_error("A parameter of the prepared statement changed its statements", 1210)
        result_set = await ensure_result_set(await self.session.handle_query(sql, attrs))
        if not result_set:
            await self.stream.write(self.ok())
            return
        await self.stream.write(types.uint_len(len(result_set.columns)))
        for column in result_set.columns:
            await self.stream.write(
                packets.make_column_definition_41(
                    server_charset=self.server_charset,
                    name=column.name,
                    column_type=column.type,
                    character_set=column.character_set,
                )
            )

        async def gen_rows() -> AsyncIterator[bytes]:
            async for row in utils.cooperative_iterate(utils.aiterate(result_set.rows)):
                yield packets.make_binary_resultrow(row, result_set.columns)

        rows = gen_rows()
        if use_cursor:
            stmt.cursor = rows
            await self.stream.write(self.ok_or_eof(flags=types.ServerStatus.SERVER_STATUS_CURSOR_EXISTS))
            return
        if not self.deprecate_eof():
            await self.stream.write(self.eof())
        async for row in rows:
            await self.stream.write(row)
        await self.stream.write(self.ok_or_eof())

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
        except (ConnectionClosed, ConnectionError, asyncio.IncompleteReadError):
            log.info("MySQL client left (or was refused) during its handshake")
        finally:
            self.active -= 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = DorisStream(reader, writer)
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
