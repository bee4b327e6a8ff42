"""Table versions in the shared store: one version order per table across every server of a deployment.

A load takes its table's next version before its job runs and commits when every lower version is done: its
version is its commit order, written into its rows (`tables/commit.py`, `_Turnstile`). With one server that
order lives in its memory; with several on one PostgreSQL store it lives in two tables of the store:

    table_versions  (table_uuid, next_version)               the next version to hand out
    version_claims  (table_uuid, version, holder, claimed)   versions handed out and not yet done

A load's turn comes when its version is the lowest claim of its table (a released claim: its load was
abandoned, the turn raises). Every commit to the table, in its turn or not (a compaction takes no version),
holds the table's cross-server commit lock: a PostgreSQL advisory lock on a connection of its own, which the
database releases if the server dies. So commits of one table never race between servers, and a commit
never lands on metadata another server changed without refreshing (the shared turnstile never trusts its
last commit's metadata location).

A server that dies leaves claims behind: a waiting load whose way is blocked by the claim of a holder the
leases no longer list as alive (`tables.leases`) removes that holder's claims (its transactions are aborted by
the recovery of unfinished transactions).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from tables.errors import DorisError
from tables.store import create_tables, lock_key

log = logging.getLogger(__name__)

_METADATA = sa.MetaData()
TABLE_VERSIONS = sa.Table(
    "table_versions",
    _METADATA,
    sa.Column("table_uuid", sa.String(64), primary_key=True),
    sa.Column("next_version", sa.BigInteger, nullable=False),
)
VERSION_CLAIMS = sa.Table(
    "version_claims",
    _METADATA,
    sa.Column("table_uuid", sa.String(64), primary_key=True),
    sa.Column("version", sa.BigInteger, primary_key=True),
    sa.Column("holder", sa.String(200), nullable=False),
    sa.Column("claimed", sa.Float, nullable=False),
)

POLL_SECONDS = 0.01  # how often a waiting turn looks at the claims (a local release wakes it at once)
DEAD_CHECK_SECONDS = 2.0  # how long a turn waits behind another server's claim before asking if it is alive


class SharedVersions:
    """The store side of shared turnstiles: one per deployment, on the store's PostgreSQL engine."""

    def __init__(self, engine: sa.Engine, holder: str, is_live: Callable[[str], bool]) -> None:
        if engine.dialect.name != "postgresql":
            raise ValueError("a version order shared by several servers needs a PostgreSQL store")
        self.engine = engine
        self.holder = holder
        self.is_live = is_live
        create_tables(engine, _METADATA)

    def take(self, table_uuid: str, floor: int) -> int:
        """Hand out the table's next version (at least `floor`) and record the claim, in one transaction."""
        with self.engine.begin() as conn:
            conn.execute(
                postgresql.insert(TABLE_VERSIONS)
                .values(table_uuid=table_uuid, next_version=floor)
                .on_conflict_do_nothing(index_elements=["table_uuid"])
            )
            current = sa.func.greatest(TABLE_VERSIONS.c.next_version, floor)
            version: int = conn.execute(
                sa.update(TABLE_VERSIONS)
                .where(TABLE_VERSIONS.c.table_uuid == table_uuid)
                .values(next_version=current + 1)
                .returning(TABLE_VERSIONS.c.next_version - 1)
            ).scalar_one()
            conn.execute(
                sa.insert(VERSION_CLAIMS).values(
                    table_uuid=table_uuid, version=version, holder=self.holder, claimed=time.time()
                )
            )
        return int(version)

    def raise_floor(self, table_uuid: str, floor: int) -> None:
        """Versions handed out from now on are at least `floor`."""
        with self.engine.begin() as conn:
            conn.execute(
                postgresql.insert(TABLE_VERSIONS)
                .values(table_uuid=table_uuid, next_version=floor)
                .on_conflict_do_update(
                    index_elements=["table_uuid"],
                    set_={"next_version": sa.func.greatest(TABLE_VERSIONS.c.next_version, floor)},
                )
            )

    def next_version(self, table_uuid: str, floor: int) -> int:
        with self.engine.connect() as conn:
            stored = conn.execute(
                sa.select(TABLE_VERSIONS.c.next_version).where(TABLE_VERSIONS.c.table_uuid == table_uuid)
            ).scalar()
        return max(floor, int(stored or 0))

    def release(self, table_uuid: str, version: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                sa.delete(VERSION_CLAIMS).where(
                    VERSION_CLAIMS.c.table_uuid == table_uuid, VERSION_CLAIMS.c.version == version
                )
            )

    def lowest(self, table_uuid: str) -> tuple[int, str] | None:
        """The table's lowest claimed version and its holder, or None."""
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(VERSION_CLAIMS.c.version, VERSION_CLAIMS.c.holder)
                .where(VERSION_CLAIMS.c.table_uuid == table_uuid)
                .order_by(VERSION_CLAIMS.c.version)
                .limit(1)
            ).first()
        return (int(row[0]), str(row[1])) if row is not None else None

    def claimed(self, table_uuid: str, version: int) -> bool:
        with self.engine.connect() as conn:
            return (
                conn.execute(
                    sa.select(VERSION_CLAIMS.c.version).where(
                        VERSION_CLAIMS.c.table_uuid == table_uuid, VERSION_CLAIMS.c.version == version
                    )
                ).first()
                is not None
            )

    def forget_holder(self, holder: str) -> int:
        """Remove every claim of a server that is gone; returns how many."""
        with self.engine.begin() as conn:
            return conn.execute(sa.delete(VERSION_CLAIMS).where(VERSION_CLAIMS.c.holder == holder)).rowcount

    @contextmanager
    def commit_lock(self, table_uuid: str) -> Iterator[None]:
        """The table's cross-server commit lock, held until the block ends (or the server's connection drops)."""
        key = lock_key(f"table commit\0{table_uuid}")
        with self.engine.connect() as conn:
            conn.execute(sa.select(sa.func.pg_advisory_lock(key)))
            try:
                yield
            finally:
                conn.execute(sa.select(sa.func.pg_advisory_unlock(key)))
                conn.commit()


class SharedTurnstile:
    """A table's turnstile (`tables.commit._Turnstile`'s interface) whose order is shared by every server."""

    def __init__(self, versions: SharedVersions, table_uuid: str, floor: int) -> None:
        self.versions = versions
        self.table_uuid = table_uuid
        self.floor = floor
        self.cond = threading.Condition()  # a local release wakes this server's waiting turns at once
        self.commit_lock = _CommitLock(versions, table_uuid)
        # this server's versions of the table between `take` and `done`; a claim of this server not among them is
        # left over (its release failed, or the reply to its take was lost) and is released by the next turn
        self._mine: set[int] = set()
        self._mine_lock = threading.Lock()

    # another server may have committed since this server's last commit: never skip the refresh
    @property
    def last_metadata(self) -> str | None:
        return None

    @last_metadata.setter
    def last_metadata(self, _location: str | None) -> None:
        pass

    @property
    def next_version(self) -> int:
        return self.versions.next_version(self.table_uuid, self.floor)

    @next_version.setter
    def next_version(self, version: int) -> None:
        self.versions.raise_floor(self.table_uuid, version)

    def take(self) -> int:
        with self._mine_lock:
            version = self.versions.take(self.table_uuid, self.floor)
            self._mine.add(version)
        return version

    def _mine_below(self, version: int) -> bool:
        with self._mine_lock:
            return any(v < version for v in self._mine)

    def _release_left_over(self, version: int) -> bool:
        """Release a claim of this server that no take of it holds (`done` releases before it forgets)."""
        with self._mine_lock:
            if version in self._mine or not self.versions.claimed(self.table_uuid, version):
                return False
            self.versions.release(self.table_uuid, version)
        log.warning("released version %d of table %s: left over by this server", version, self.table_uuid)
        return True

    @contextmanager
    def turn(self, version: int) -> Iterator[None]:
        """Wait until `version` is the table's lowest claim (on every server); then hold its commit lock.

        Raises:
            DorisError: the version was released meanwhile (its load was abandoned at its deadline).
        """
        # this server's lower versions first, without asking the store: only a server's lowest waiting load polls
        with self.cond:
            self.cond.wait_for(lambda: not self._mine_below(version))
        blocked_since: dict[tuple[int, str], float] = {}
        while True:
            lowest = self.versions.lowest(self.table_uuid)
            if lowest is None or lowest[0] > version:
                raise DorisError(f"version {version} was released: its load passed its deadline")
            if lowest[0] == version:
                break
            since = blocked_since.setdefault(lowest, time.monotonic())
            holder = lowest[1]
            if holder == self.versions.holder and lowest[0] not in self._mine and self._release_left_over(lowest[0]):
                continue
            if holder != self.versions.holder and time.monotonic() - since > DEAD_CHECK_SECONDS:
                blocked_since.pop(lowest)
                if not self.versions.is_live(holder):
                    gone = self.versions.forget_holder(holder)
                    log.warning("released %d version claims of server %s, which is gone", gone, holder)
            with self.cond:
                self.cond.wait(POLL_SECONDS)
        with self.commit_lock:
            yield

    def done(self, version: int) -> None:
        """Release a version (a second release changes nothing). If the store cannot be reached, the claim stays
        and the next turn of the table on this server releases it."""
        try:
            self.versions.release(self.table_uuid, version)
        finally:
            with self._mine_lock:  # after the release: a turn meanwhile must not take it for a left-over
                self._mine.discard(version)
            with self.cond:
                self.cond.notify_all()


class _CommitLock:
    """`with turnstile.commit_lock:` for a shared turnstile (a compaction's commit): this server's threads one at a
    time, and then the cross-server lock."""

    def __init__(self, versions: SharedVersions, table_uuid: str) -> None:
        self._versions = versions
        self._table_uuid = table_uuid
        self._local = threading.Lock()
        self._held: AbstractContextManager[None] | None = None

    def __enter__(self) -> None:
        self._local.acquire()
        try:
            held = self._versions.commit_lock(self._table_uuid)
            held.__enter__()
        except BaseException:
            self._local.release()
            raise
        self._held = held

    def __exit__(self, *exc: object) -> None:
        held, self._held = self._held, None
        try:
            if held is not None:
                held.__exit__(None, None, None)
        finally:
            self._local.release()
