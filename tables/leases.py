"""Leases in the shared store: which servers are alive, and which one runs each background duty.

Several servers share one store (PostgreSQL; SQLite for the embedded single server, with the same code). A lease
is a row `(name, holder, expires)`: a holder renews it well before it expires, and anyone may take it once it
has expired. Two kinds of names:

    server:<name>   every running server holds its own: the servers alive are those whose lease is unexpired
                    (a server killed mid-load is known dead one lease later, and a survivor adopts the lease
                    while it resolves the dead server's unfinished work)
    duty:<name>     one server at a time runs each background duty (maintenance, compaction, dynamic
                    partitions, precommit timeouts): the holder; the others take over within one lease
                    period when it dies

Times are the servers' wall clocks (`time.time()`): servers of one deployment run NTP, and a lease lasts tens
of seconds, so a skew of milliseconds changes nothing. A lease is renewed every sixth of its period and
expires two thirds of a period after its last renewal, so a dead holder's duty is taken over within
`period` seconds (`SL_LEASE_SECONDS`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from tables.store import create_tables

log = logging.getLogger(__name__)

_METADATA = sa.MetaData()
LEASES = sa.Table(
    "leases",
    _METADATA,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("holder", sa.String(200), nullable=False),
    sa.Column("expires", sa.Float, nullable=False),
    sa.Column("acquired", sa.Float, nullable=False),
)

SERVER_PREFIX = "server:"
DUTY_PREFIX = "duty:"

# the background duties; each runs on one server at a time
MAINTENANCE = "maintenance"  # label expiry, snapshot expiry, orphan files
COMPACTION = "compaction"
DYNAMIC_PARTITIONS = "dynamic_partitions"
PRECOMMIT_TIMEOUTS = "precommit_timeouts"
DUTIES = (MAINTENANCE, COMPACTION, DYNAMIC_PARTITIONS, PRECOMMIT_TIMEOUTS)


def new_server_id() -> str:
    """This server's id for one run: host, pid and a random part (a restarted server is a new one)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class LeaseTable:
    """Acquire, renew, release and list leases: each a single conditional statement, on either dialect."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        create_tables(engine, _METADATA)

    def _insert(self) -> sa.Insert:
        dialect = self.engine.dialect.name
        if dialect == "postgresql":
            return postgresql.insert(LEASES).on_conflict_do_nothing(index_elements=["name"])
        if dialect == "sqlite":
            return sqlite.insert(LEASES).on_conflict_do_nothing(index_elements=["name"])
        raise ValueError(f"leases need PostgreSQL or SQLite, not {dialect}")

    def acquire(self, name: str, holder: str, seconds: float, *, now: float | None = None) -> bool:
        """Take the lease (or renew it when `holder` has it) for `seconds`; False while another holds it."""
        return name in self.acquire_all([name], holder, seconds, now=now)

    def acquire_all(self, names: Iterable[str], holder: str, seconds: float, *, now: float | None = None) -> set[str]:
        """`acquire` of several leases in one database transaction; returns those held."""
        now = time.time() if now is None else now
        held: set[str] = set()
        with self.engine.begin() as conn:
            for name in names:
                taken = conn.execute(
                    self._insert().values(name=name, holder=holder, expires=now + seconds, acquired=now)
                ).rowcount
                if taken == 1:
                    held.add(name)
                    continue
                renewed = conn.execute(
                    sa.update(LEASES)
                    .where(LEASES.c.name == name, sa.or_(LEASES.c.holder == holder, LEASES.c.expires < now))
                    .values(
                        holder=holder,
                        expires=now + seconds,
                        acquired=sa.case((LEASES.c.holder == holder, LEASES.c.acquired), else_=now),
                    )
                ).rowcount
                if renewed == 1:
                    held.add(name)
        return held

    def take_from(self, name: str, old: str, holder: str, seconds: float) -> bool:
        """Take a lease `old` holds, whether or not it expired (a previous run of the same server); False when
        it changed hands meanwhile."""
        now = time.time()
        with self.engine.begin() as conn:
            return (
                conn.execute(
                    sa.update(LEASES)
                    .where(LEASES.c.name == name, LEASES.c.holder == old)
                    .values(holder=holder, expires=now + seconds, acquired=now)
                ).rowcount
                == 1
            )

    def release(self, name: str, holder: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.delete(LEASES).where(LEASES.c.name == name, LEASES.c.holder == holder))

    def holders(self, prefix: str, *, now: float | None = None) -> dict[str, str]:
        """Unexpired leases whose name starts with `prefix`: name → holder."""
        now = time.time() if now is None else now
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(LEASES.c.name, LEASES.c.holder).where(
                    LEASES.c.name.startswith(prefix, autoescape=True), LEASES.c.expires >= now
                )
            ).all()
        return {str(name): str(holder) for name, holder in rows}


class Leases:
    """This server's leases, renewed by a thread: its own `server:<name>`, the duties it runs, and the
    `server:<name>` of servers it adopted (a dead server whose unfinished work it is resolving).

    A server's name is stable across its restarts (`Settings.server_name`: its host and data dir); each run holds
    the leases under a token of its own (`<name>/<random>`). At start a server waits for its own lease: a run of
    it that died leaves the lease to expire, and a survivor that adopted it keeps it until it has finished.

    `leads(duty)` is what a background loop asks before each pass: True only while this server holds the duty's
    lease with time to spare (a pass started just before a lost renewal can overlap the next holder's first
    pass by at most one renewal interval; every duty is safe to run twice: it re-reads what it acts on).
    """

    def __init__(
        self,
        table: LeaseTable,
        *,
        server_name: str | None = None,
        period: float = 30.0,
        duties: Iterable[str] = DUTIES,
    ) -> None:
        self.table = table
        self.server_name = server_name or new_server_id()
        self.token = f"{self.server_name}/{uuid.uuid4().hex[:8]}"
        self.period = period
        self.duties = tuple(duties)
        self._adopted: set[str] = set()  # names of dead servers this one is resolving
        self._valid_until: dict[str, float] = {}  # lease name → until when this server may act on it
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def _hold(self) -> float:
        return self.period * 2 / 3

    @property
    def interval(self) -> float:
        return self.period / 6

    @property
    def _own(self) -> str:
        return SERVER_PREFIX + self.server_name

    def renew(self) -> None:
        """One round, one database transaction: renew this server's leases and try every duty (taking those whose
        holder has gone)."""
        with self._lock:
            adopted = sorted(SERVER_PREFIX + name for name in self._adopted)
        names = [self._own, *adopted, *(DUTY_PREFIX + d for d in self.duties)]
        started = time.time()
        try:
            held = self.table.acquire_all(names, self.token, self._hold, now=started)
        except Exception:  # the store is unreachable: act on nothing until it answers again
            log.warning("could not renew this server's leases", exc_info=True)
            held = set()
        with self._lock:
            was = {name for name, until in self._valid_until.items() if until > time.time()}
            # act only until a safety margin before the lease could be taken by another
            self._valid_until = {name: started + self._hold - self.interval for name in held}
        for name in sorted((held ^ was) & {DUTY_PREFIX + d for d in self.duties}):
            log.info("%s duty %s", "took" if name in held else "gave up", name.removeprefix(DUTY_PREFIX))

    def leads(self, duty: str) -> bool:
        with self._lock:
            return self._valid_until.get(DUTY_PREFIX + duty, 0.0) > time.time()

    def live_servers(self) -> set[str]:
        """Names of the servers running, or adopted by a running one."""
        return {name.removeprefix(SERVER_PREFIX) for name in self.table.holders(SERVER_PREFIX)}

    def leaders(self) -> dict[str, str]:
        """duty → the name of the server running it (duties nobody holds are absent)."""
        return {
            name.removeprefix(DUTY_PREFIX): holder.rsplit("/", 1)[0]
            for name, holder in self.table.holders(DUTY_PREFIX).items()
        }

    def adopt(self, name: str) -> bool:
        """Take the lease of server `name`, which must be gone (its lease expired); renewed until `release`."""
        if name == self.server_name or not self.table.acquire(SERVER_PREFIX + name, self.token, self._hold):
            return False
        with self._lock:
            self._adopted.add(name)
        return True

    def release(self, name: str) -> None:
        """Hand back an adopted server's lease (its unfinished work is resolved): it may start again at once."""
        with self._lock:
            self._adopted.discard(name)
            self._valid_until.pop(SERVER_PREFIX + name, None)
        self.table.release(SERVER_PREFIX + name, self.token)

    def start(self, *, log_every: float = 10.0) -> None:
        """Wait for this server's own lease (another run of it, or a survivor resolving its work, holds it), then
        renew in a thread every `interval` seconds."""
        waited = 0.0
        while not self.table.acquire(self._own, self.token, self._hold):
            holder = self.table.holders(self._own).get(self._own, "?")
            # a previous run of this server (its data dir is this one's alone) died: nothing to wait for
            if holder.startswith(self.server_name + "/") and self.table.take_from(
                self._own, holder, self.token, self._hold
            ):
                break
            if waited % log_every < self.interval:
                log.warning("waiting for this server's lease %s, held by %s", self._own, holder)
            time.sleep(self.interval)
            waited += self.interval
        for name, holder in self.table.holders(DUTY_PREFIX).items():  # duties its previous run held
            if holder.startswith(self.server_name + "/") and name.removeprefix(DUTY_PREFIX) in self.duties:
                self.table.take_from(name, holder, self.token, self._hold)
        self.renew()
        self._thread = threading.Thread(target=self._run, name="leases", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.renew()

    def close(self) -> None:
        """Stop renewing and hand every lease back (a clean stop: the others take over at once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            names = list(self._valid_until)
            self._valid_until.clear()
        for name in names:
            try:
                self.table.release(name, self.token)
            except Exception:  # the store is gone: the leases expire on their own
                log.warning("could not release lease %s", name, exc_info=True)
