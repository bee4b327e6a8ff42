"""The store: everything the server remembers about loads (labels and transactions, accounts, routine-load and
broker-load jobs), in one database, through SQLAlchemy Core, on two dialects.

    SQLite      the embedded default: the file `data_dir/transactions.db` (broker-load jobs: `load_jobs.db`), WAL,
                synchronous=FULL; one write connection under a lock (`BEGIN IMMEDIATE` ... `COMMIT`) and one
                read connection of its own (WAL: a read sees the last commit and never waits for a write's sync)
    PostgreSQL  `SL_CATALOG_URI=postgresql+psycopg://...`: every store in the catalog's database, one schema,
                created (or migrated) at start; a pool of write connections and one of autocommit reads, both
                pinged before use, so a restart of the database is survived; several servers share it

The tables are declared once here (`METADATA`); each store creates (or adds the missing columns of) its own at
start (`Store.ensure`). Statements are built with Core, compiled once per store for its dialect (`Store.sql`) and
run on the driver's cursor: the one-row load is latency-critical, and SQLAlchemy's execution layer would cost a
fifth of the SQLite path's ~0.4 ms per load.

Across servers (PostgreSQL): ids come from the database's sequences (unique across servers), a write transaction
may take named locks (`Tx.lock`: `pg_advisory_xact_lock`, released at its end; on SQLite `BEGIN IMMEDIATE`
already excludes every other writer), and callers write state changes as conditional UPDATEs.

A database that cannot be reached raises `StoreUnavailable` ("[INTERNAL_ERROR]catalog database unavailable: ...");
the broken connection is dropped, and the next call connects again. One that refuses a statement for a reason
the user can act on (its disk full, locked by another process past the wait, read-only, its file not writable)
raises `StoreFailed` ("[INTERNAL_ERROR]catalog store write failed: database or disk is full", `store_failure`),
not the driver's error in SQLAlchemy's wrapping; the transaction is rolled back and the next call tries again.
"""

from __future__ import annotations

import sqlite3
import threading
import zlib
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.pool import NullPool

from tables.errors import LoadError, StoreFailed, StoreUnavailable

# -- the tables ------------------------------------------------------------------------------------------------
METADATA = sa.MetaData()
# a row id: INTEGER on SQLite (the rowid itself, AUTOINCREMENT as the stores always made it), BIGSERIAL elsewhere
RowId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Real = sa.Float()  # REAL on SQLite, double precision on PostgreSQL

TXNS = sa.Table(
    "txns",
    METADATA,
    sa.Column("txn_id", RowId, primary_key=True, autoincrement=True),
    sa.Column("db", sa.Text, nullable=False),
    sa.Column("tbl", sa.Text, nullable=False),
    sa.Column("label", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("created", Real, nullable=False),
    sa.Column("finished", Real),
    sa.Column("reason", sa.Text),
    sa.Column("precommitted", Real),
    sa.Column("schema_version", sa.Integer),
    sa.Column("table_uuid", sa.Text),
    sa.Column("owner", sa.Text),  # the server that began it (`Settings.server_name`); None: one server
    sa.Index("txns_label", "db", "label"),
    sqlite_autoincrement=True,
)

USERS = sa.Table(
    "users",
    METADATA,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("host", sa.Text, primary_key=True),
    sa.Column("password", sa.Text, nullable=False),
    sa.Column("created", Real, nullable=False),
)
ROLES = sa.Table(
    "roles",
    METADATA,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("created", Real, nullable=False),
)
USER_ROLES = sa.Table(
    "user_roles",
    METADATA,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("host", sa.Text, primary_key=True),
    sa.Column("role", sa.Text, primary_key=True),
)
GRANTS = sa.Table(
    "grants",
    METADATA,
    sa.Column("grantee", sa.Text, primary_key=True),  # 'user'@'host' for a user, the role's name for a role
    sa.Column("is_role", sa.Integer, primary_key=True),
    sa.Column("db", sa.Text, primary_key=True),
    sa.Column("tbl", sa.Text, primary_key=True),
    sa.Column("privs", sa.Integer, nullable=False),
)

ROUTINE_LOAD_JOBS = sa.Table(
    "routine_load_jobs",
    METADATA,
    sa.Column("job_id", RowId, primary_key=True, autoincrement=True),
    sa.Column("db", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sqlite_autoincrement=True,
)
ROUTINE_LOAD_TXNS = sa.Table(
    "routine_load_txns",
    METADATA,
    sa.Column("txn_id", RowId, primary_key=True, autoincrement=False),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("progress", sa.Text, nullable=False),
    sa.Column("counts", sa.Text, nullable=False),
    sa.Index("routine_load_txns_job", "job_id", "txn_id"),
)
ROUTINE_LOAD_FORMAT = sa.Table(
    "routine_load_format",
    METADATA,
    sa.Column("version", sa.Integer, nullable=False),
)

LOAD_JOBS = sa.Table(
    "load_jobs",
    METADATA,
    sa.Column("job_id", RowId, primary_key=True, autoincrement=True),
    sa.Column("db", sa.Text, nullable=False),
    sa.Column("label", sa.Text, nullable=False),
    sa.Column("tbl", sa.Text, nullable=False),
    sa.Column("statement", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("txn_id", sa.BigInteger),
    sa.Column("error_msg", sa.Text),
    sa.Column("url", sa.Text),
    sa.Column("details", sa.Text, nullable=False, server_default="{}"),
    sa.Column("task_info", sa.Text, nullable=False, server_default=""),
    sa.Column("created", Real, nullable=False),
    sa.Column("load_started", Real),
    sa.Column("finished", Real),
    sa.Column("owner", sa.Text),  # the server that runs it (`Settings.server_name`); None: one server
    sa.Index("load_jobs_label", "db", "label"),
    sqlite_autoincrement=True,
)


ACCOUNTS_VERSION = sa.Table(  # bumped by every account, role or grant change: logins cache what they read
    "accounts_version",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.BigInteger, nullable=False),
)
LOGIN_FAILURES = sa.Table(  # several servers: failed logins counted across them (`tables.accounts`)
    "login_failures",
    METADATA,
    sa.Column("id", RowId, primary_key=True, autoincrement=True),
    sa.Column("client", sa.Text, nullable=False),
    sa.Column("at", Real, nullable=False),  # wall-clock time of the failure
    sa.Index("login_failures_client", "client", "at"),
    sa.Index("login_failures_at", "at"),
    sqlite_autoincrement=True,
)


def is_postgresql(uri: str | None) -> bool:
    return bool(uri) and sa.engine.make_url(str(uri)).get_backend_name() == "postgresql"


def one_of(column: sa.ColumnElement[Any], values: Sequence[Any]) -> sa.ColumnElement[bool]:
    """`column IN (v1, v2, ...)` with one parameter per value (an expanding IN cannot be compiled ahead)."""
    return column.in_([sa.literal(v, type_=column.type) for v in values])


# -- compiled statements ---------------------------------------------------------------------------------------
class Sql:
    """A Core statement compiled for one dialect: its text and how to lay out its parameters."""

    __slots__ = ("text", "defaults", "order")

    def __init__(self, statement: sa.sql.ClauseElement, dialect: Dialect) -> None:
        compiled: Any = statement.compile(dialect=dialect)  # a SQLCompiler
        self.text = compiled.string
        self.defaults: dict[str, Any] = dict(compiled.construct_params(_check=False))  # literals (and Nones)
        self.order: Sequence[str] | None = getattr(compiled, "positiontup", None)  # positional (SQLite's qmark)

    def args(self, params: Mapping[str, Any]) -> Sequence[Any] | Mapping[str, Any]:
        merged = {**self.defaults, **params} if self.defaults else params
        if self.order is not None:
            return [merged[name] for name in self.order]
        return merged


class Result:
    """What a statement returned: its rows and how many rows it changed."""

    __slots__ = ("rows", "rowcount")

    def __init__(self, rows: list[tuple[Any, ...]], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    def first(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def scalar(self) -> Any:
        return self.rows[0][0] if self.rows else None


class Tx:
    """One transaction (or, for reads, one connection) of a store."""

    def __init__(self, store: Store, conn: Any) -> None:
        self.store = store
        self._conn = conn

    def run(self, sql: Sql, /, **params: Any) -> Result:
        cur = self._conn.cursor()
        try:
            cur.execute(sql.text, sql.args(params))
            rows = cur.fetchall() if cur.description is not None else []
            return Result([tuple(r) for r in rows], cur.rowcount)
        finally:
            cur.close()

    def lock(self, *names: str) -> None:
        """Hold named locks until this transaction ends (PostgreSQL's advisory locks, taken in one order so two
        transactions never wait on each other; on SQLite the transaction already excludes every other writer)."""
        if not self.store.locks or not names:
            return
        keys = sorted({lock_key(name) for name in names})
        cur = self._conn.cursor()
        try:  # one round trip, the keys in order
            cur.execute(
                "SELECT pg_advisory_xact_lock(k) FROM (SELECT unnest(%s::bigint[]) AS k ORDER BY 1) AS keys", (keys,)
            )
        finally:
            cur.close()


def create_tables(engine: sa.Engine, metadata: sa.MetaData) -> None:
    """Create `metadata`'s tables that do not exist yet; on PostgreSQL under the store's schema lock, as several
    servers may start at once (two concurrent `CREATE TABLE` of one name fail on PostgreSQL's catalog)."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s)", (lock_key("store schema"),))
        metadata.create_all(conn, checkfirst=True)


def pool_options(size: int, *, bounded: bool) -> dict[str, int]:
    """A connection pool of `size` connections kept, and as many more under load unless `bounded`."""
    return {"pool_size": size, "max_overflow": 0 if bounded else size}


class PoolSizes(NamedTuple):
    """How a server's PostgreSQL connections (`SL_CATALOG_POOL_SIZE`) are shared out among its engines."""

    writes: int  # the store's write transactions
    reads: int  # the store's autocommit reads
    coordination: int  # leases and version order; a commit holds one for the table's commit lock
    catalog: int  # pyiceberg's catalog

    @classmethod
    def of(cls, total: int) -> PoolSizes:
        """A fifth each for reads and the catalog, three tenths for coordination (at least 2 each, so at least 8 in
        all), the rest for writes."""
        if total < 8:
            raise ValueError("a catalog pool needs at least 8 connections")
        reads = catalog = max(2, total // 5)
        coordination = max(2, total * 3 // 10)
        return cls(total - reads - catalog - coordination, reads, coordination, catalog)


def lock_key(name: str) -> int:
    """A PostgreSQL advisory lock's key for a name: signed 64 bits, the same on every server and Python (crc32 of
    the name and of it reversed, not `hash`)."""
    data = name.encode()
    high = zlib.crc32(data)
    low = zlib.crc32(data[::-1], 0x5F3759DF)
    key = (high << 32) | low
    return key - (1 << 64) if key >= 1 << 63 else key


# -- the store -------------------------------------------------------------------------------------------------
class Store:
    """One database: `Store(uri)` for PostgreSQL (or any SQLAlchemy URI), `Store.sqlite(path)` for a file."""

    def __init__(
        self, uri: str, *, pool_size: int = 16, read_pool_size: int | None = None, bounded: bool = False
    ) -> None:
        self.uri = uri
        url = sa.engine.make_url(uri)
        self._sqlite_path: Path | None = None
        if url.get_backend_name() == "sqlite":
            if not url.database or url.database == ":memory:":
                raise ValueError("a SQLite store needs a file")
            self._sqlite_path = Path(url.database)
            self._sqlite_path.parent.mkdir(parents=True, exist_ok=True)
            self._engine = sa.create_engine("sqlite://", creator=self._sqlite_connect, poolclass=NullPool)
            self._write_conn = self._sqlite_connect()
            self._write_conn.execute("PRAGMA journal_mode=WAL")
            self._write_conn.execute("PRAGMA synchronous=FULL")
            self._read_conn = self._sqlite_connect()
            self._write_lock = threading.Lock()
            self._read_lock = threading.Lock()
        else:
            # connections are opened on demand and kept (up to `pool_size`): an overflow connection is closed when
            # it is returned, and opening one costs a PostgreSQL backend's start (16 writers churning through a
            # pool of 4 ran at a third of the rate)
            # (`bounded`: never more than the pool sizes, `SL_CATALOG_POOL_SIZE`; a checkout waits for a connection)
            reads = read_pool_size or pool_size
            options: dict[str, Any] = {"pool_pre_ping": True}
            self._engine = sa.create_engine(uri, **options, **pool_options(pool_size, bounded=bounded))
            self._reads = sa.create_engine(
                uri, isolation_level="AUTOCOMMIT", **options, **pool_options(reads, bounded=bounded)
            )
            report_unavailable(self._engine)
            report_unavailable(self._reads)
        self.dialect: str = self._engine.dialect.name
        self._compiled: dict[Hashable, Sql] = {}
        self._compiled_lock = threading.Lock()

    @classmethod
    def sqlite(cls, path: Path) -> Store:
        return cls(f"sqlite:///{path}")

    @classmethod
    def of(cls, where: Store | Path) -> Store:
        """A store as the store classes take it: a `Store`, or the path of a SQLite file (tests, tools)."""
        return where if isinstance(where, Store) else cls.sqlite(where)

    def _sqlite_connect(self) -> sqlite3.Connection:
        assert self._sqlite_path is not None
        return sqlite3.connect(self._sqlite_path, check_same_thread=False, isolation_level=None)

    @contextmanager
    def _sqlite_failures(self, *, writes: bool) -> Iterator[None]:
        """SQLite's refusals inside the block raised as `store_failure` words them (under the connection's lock);
        a write connection found read-only is opened anew, so writes succeed again once the file is writable."""
        try:
            yield
        except sqlite3.Error as exc:
            if writes and _sqlite_read_only(exc):
                self._write_conn.close()
                self._write_conn = self._sqlite_connect()
                self._write_conn.execute("PRAGMA synchronous=FULL")
            if (failure := store_failure(exc)) is not None:
                raise failure from exc
            raise

    # statements

    def sql(self, key: Hashable, build: Callable[[], sa.sql.ClauseElement]) -> Sql:
        """The statement `build` makes, compiled for this store's dialect once (`key` names it)."""
        found = self._compiled.get(key)
        if found is None:
            found = Sql(build(), self._engine.dialect)
            with self._compiled_lock:
                self._compiled[key] = found
        return found

    def insert(self, table: sa.Table) -> Any:
        """The dialect's INSERT, with its ON CONFLICT clauses (`on_conflict_do_nothing`, `on_conflict_do_update`)."""
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            return pg_insert(table)
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table)

    # transactions

    @contextmanager
    def write(self) -> Iterator[Tx]:
        """One write transaction: committed at the end of the block, rolled back on an exception."""
        if self._sqlite_path is not None:
            with self._write_lock, self._sqlite_failures(writes=True):
                conn = self._write_conn
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield Tx(self, conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:  # a failed COMMIT too: the shared connection is left clean
                        conn.execute("ROLLBACK")
                    raise
            return
        with self._pooled(self._engine) as conn:
            try:
                yield Tx(self, conn)
                conn.commit()
            except BaseException:
                conn.rollback()
                raise

    def write_one(self, sql: Sql, /, **params: Any) -> Result:
        """One statement in a transaction of its own (on SQLite without BEGIN/COMMIT around it: SQLite's own
        implicit transaction, half the statements of `write`)."""
        if self._sqlite_path is not None:
            with self._write_lock, self._sqlite_failures(writes=True):
                return Tx(self, self._write_conn).run(sql, **params)
        with self.write() as tx:
            return tx.run(sql, **params)

    @property
    def locks(self) -> bool:
        """Whether `Tx.lock` takes locks (PostgreSQL); on SQLite a write transaction excludes every other."""
        return self.dialect == "postgresql"

    @contextmanager
    def read(self) -> Iterator[Tx]:
        """A connection for reads: each statement sees the last commit (autocommit), never waits for a write."""
        if self._sqlite_path is not None:
            with self._read_lock, self._sqlite_failures(writes=False):
                yield Tx(self, self._read_conn)
            return
        with self._pooled(self._reads) as conn:
            yield Tx(self, conn)

    @contextmanager
    def _pooled(self, engine: sa.Engine) -> Iterator[Any]:
        """A pooled driver connection (pinged at checkout); a lost database becomes `StoreUnavailable` and its
        connection is dropped, so the next checkout connects again."""
        dbapi = engine.dialect.loaded_dbapi
        try:
            conn = engine.raw_connection()
        except (sa.exc.DBAPIError, dbapi.Error) as exc:  # refused, or gone again since the pool's ping
            raise StoreUnavailable(_reason(getattr(exc, "orig", None) or exc)) from exc
        try:
            yield conn
        except (dbapi.OperationalError, dbapi.InterfaceError) as exc:
            if _lost(conn):
                conn.invalidate(exc)
                raise StoreUnavailable(_reason(exc)) from exc
            if (failure := store_failure(exc)) is not None:
                raise failure from exc
            raise
        except dbapi.Error as exc:
            if (failure := store_failure(exc)) is not None:
                raise failure from exc
            raise
        finally:
            conn.close()

    # schema

    def ensure(self, *tables: sa.Table) -> None:
        """Create the tables that do not exist and add the columns an older release's tables lack (nullable
        ones only: a release adds no other kind); on PostgreSQL under a lock, as several servers may start."""
        try:
            with self._engine.begin() as conn:
                if self.dialect == "postgresql":
                    conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s)", (lock_key("store schema"),))
                METADATA.create_all(conn, tables=list(tables), checkfirst=True)
                inspector = sa.inspect(conn)
                for table in tables:
                    present = {c["name"] for c in inspector.get_columns(table.name)}
                    for column in table.columns:
                        if column.name not in present:
                            kind = column.type.compile(dialect=conn.dialect)
                            conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}")
        except sa.exc.OperationalError as exc:
            if self.dialect == "sqlite":
                raise
            raise StoreUnavailable(_reason(exc.orig or exc)) from exc

    def close(self) -> None:
        if self._sqlite_path is not None:
            with self._read_lock:
                self._read_conn.close()
            with self._write_lock:
                self._write_conn.close()
            return
        self._engine.dispose()
        self._reads.dispose()


def report_unavailable(engine: sa.Engine) -> None:
    """Make a lost or unreachable database raise `StoreUnavailable` from `engine` (pyiceberg's catalog engine):
    a connection refused, or one that broke under a statement; a pre-ping's finding is left to the pool, which
    reconnects. A statement the database refuses for a reason `store_failure` knows raises `StoreFailed`."""

    @sa.event.listens_for(engine, "handle_error")
    def unavailable(ctx: sa.engine.ExceptionContext) -> BaseException | None:
        if ctx.is_pre_ping:
            return None
        refused = ctx.connection is None and isinstance(ctx.sqlalchemy_exception, sa.exc.OperationalError)
        if ctx.is_disconnect or refused:
            return StoreUnavailable(_reason(ctx.original_exception))
        if _sqlite_read_only(ctx.original_exception):  # opened while the file could not be written: open anew
            ctx.is_disconnect, ctx.invalidate_pool_on_disconnect = True, False
        return store_failure(ctx.original_exception)


# SQLite's primary result codes (the low byte of an extended one) and PostgreSQL's SQLSTATEs a user can act on
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL, _SQLITE_CANTOPEN = 5, 6, 8, 10, 13, 14
_PG_LOCKED = {"55P03", "40P01"}  # lock_not_available (lock_timeout), deadlock_detected
_PG_READ_ONLY = "25006"  # read_only_sql_transaction: a standby, or default_transaction_read_only
_PG_RESOURCES = "53"  # insufficient resources: 53100 disk_full, 53200 out_of_memory, 53300 too_many_connections


def store_failure(exc: BaseException) -> LoadError | None:
    """The catalog database's refusal of a statement as the user reads it, or None when it is not one of these
    (a bug's error stays as it is):

        disk full          catalog store write failed: database or disk is full
        locked, busy       catalog store busy: database is locked (another process holds it)
        read-only          catalog store write failed: the database is read-only
        disk I/O error     catalog store write failed: disk I/O error
        cannot open file   catalog database unavailable: unable to open database file
    """
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    if isinstance(orig, sqlite3.Error):
        code = (getattr(orig, "sqlite_errorcode", None) or 0) & 0xFF
        text = str(orig).strip() or type(orig).__name__
        if code == _SQLITE_FULL or "disk is full" in text:
            return StoreFailed("catalog store write failed: database or disk is full")
        if code in (_SQLITE_BUSY, _SQLITE_LOCKED) or "is locked" in text:
            return StoreFailed(f"catalog store busy: {text} (another process holds it)")
        if code == _SQLITE_READONLY or "readonly database" in text:
            return StoreFailed("catalog store write failed: the database is read-only")
        if code == _SQLITE_IOERR or "disk I/O error" in text:
            return StoreFailed("catalog store write failed: disk I/O error")
        if code == _SQLITE_CANTOPEN or "unable to open" in text:
            return StoreUnavailable(text)
        return None
    sqlstate = getattr(orig, "sqlstate", None)
    if not isinstance(sqlstate, str):
        return None
    text = _reason(orig)
    if sqlstate == "53100":
        return StoreFailed(f"catalog store write failed: database or disk is full ({text})")
    if sqlstate.startswith(_PG_RESOURCES):
        return StoreFailed(f"catalog store write failed: {text}")
    if sqlstate in _PG_LOCKED:
        return StoreFailed(f"catalog store busy: {text}")
    if sqlstate == _PG_READ_ONLY:
        return StoreFailed(f"catalog store write failed: the database is read-only ({text})")
    if sqlstate.startswith(("08", "57P")):  # connection exception, operator intervention (shutdown)
        return StoreUnavailable(text)
    return None


def _sqlite_read_only(exc: BaseException) -> bool:
    """SQLite refused a write as read-only: the file could not be opened for writing when the connection was
    made (SQLite then opens it read-only), so the connection stays read-only after the file is writable again."""
    return isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF == _SQLITE_READONLY


def _lost(conn: Any) -> bool:
    """The connection no longer works (its server went away or restarted)."""
    driver = getattr(conn, "driver_connection", None)
    return bool(getattr(driver, "closed", False) or getattr(driver, "broken", False))


def _reason(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
