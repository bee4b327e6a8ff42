"""Group commit: concurrent small loads to one table become one Spark job and one Iceberg commit.

    stream load (group_commit header, or the table's `group_commit_mode` property)
        │ prepared (own txn id and label, claimed as usual: a duplicate label is refused there)
        ▼
    GroupCommitter.run ── async_mode: request and payload appended to the WAL log (`WalLog`), reply once
        │                  an fsync covers the append (concurrent loads share it)
        │                  sync_mode:  wait for the group's commit, reply after it is visible
        ▼
    one worker (queue) per table, its groups one load shape each, formed and run on at most `INSERT_THREADS`
    threads over every table: an idle worker waits `group_commit_interval_ms` after a group's
    first load; loads that queued while its previous group ran go at once, as does a full group; then one
    Spark job over one source of every payload of the group (`group_source`: small CSV bodies split by the
    server into one inline relation, else one scan of the group's directory; rows ordered by (load, line),
    so a later load wins a tie as if the loads had been committed one by one), counts per load from the
    same Spark action, loads over `max_filter_ratio` dropped and the job rerun without them, one snapshot
    (and one transaction-store write making every member VISIBLE) for the rest.

A small body (`loaders.staging.IN_MEMORY_BYTES`) is held in memory from its receipt to its group's commit, never
a file of its own (an async one is also its record in the WAL's log); a group's directory is made, its payloads
written or linked there, only when Spark scans it.

The group has a transaction of its own (label `group_commit_<hex>`, as Doris names it); the snapshot
lists every member, so start-up recovery finds them. Start-up writes the log's owed records back as wal/ files
and replays async payloads in wal/ at group speed: every entry is planned first (its table loaded once), then
handed to its worker at once, so they form groups of up to `group_commit_max_loads` as live loads do.

The WAL is bounded (`WalBacklog`): at most `group_commit_max_wal_num_per_table` acknowledged async loads of a
table and `group_commit_wal_max_disk_limit` bytes in all wait there to become visible. An async load past either
bound is not written to wal/: it joins its group as a sync_mode load does and is answered once visible (Doris
switches such a load to sync_mode), so visibility lags the acknowledgement by about a group, not a queue.

An async load was answered Success, so its WAL entry goes only when its rows are committed or refused
for data quality (filter ratio), or when its table is gone (dropped, or re-created: another uuid). A
group that fails otherwise (a Spark error, a commit conflict, the disk) keeps its async members' WAL
entries and replays each alone after `retry_interval_s`, doubling up to `MAX_RETRY_INTERVAL_S`; after
`retry_num` failed replays the entry is moved to wal/tmp/ (kept, as Doris's BE keeps it) and the load
aborted.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import os
import queue
import shutil
import struct
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from pyiceberg.table import Table
from pyspark import SparkContext
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_runner import arrow_csv, small_rowset
from spark_runner.columns import named
from spark_runner.load_job import LINE, POS, REASON, UNSELECTED, JobOutcome, inline_fields, prepare_rows
from spark_runner.planning import plan_load
from spark_runner.service import ABANDON_GRACE_S, DaemonWorkers, LoadService, PreparedLoad, run_rowset, staged_source
from spark_runner.supervisor import overdue
from tables.catalog import TableHandle
from tables.commit import table_identity
from tables.csv_dialect import CsvDialect
from tables.errors import (
    DatabaseNotFound,
    DataQualityError,
    DorisError,
    LoadError,
    LoadTimeout,
    TableDropped,
    TableNotFound,
    TxnAborted,
)
from tables.load_spec import LoadCounts, LoadRequest, LoadResult, render_load
from tables.transactions import ABORTED, PREPARE, TransactionStore, Txn
from tables.warehouse import delete_dir

log = logging.getLogger(__name__)

MODE_PROPERTY = "group_commit_mode"  # table property: the mode of loads that send no group_commit header
LOAD_SHIFT = 47  # a row's position in the group: (load index << LOAD_SHIFT) + its position in its payload
MAX_ERROR_ROWS = 50
MAX_RETRY_INTERVAL_S = 300.0  # the longest wait between two replays of a failed async load
REJOIN_SHARE = 0.25  # a group formed right after another waits this share of that group's time for more
REJOIN_MIN_S = 0.02  # ... at least this long (a client's turn from its reply to its next load)
REJOIN_MAX_S = 0.25  # ... and at most this long
IDLE_EXIT_S = 60.0  # a worker without loads this long is forgotten (its table may be gone); the next load makes another
INSERT_THREADS = 10  # groups forming or running at once, over every table (Doris BE's group_commit_insert_threads)
IN_MEMORY_BACKLOG_BYTES = 64 * 1024 * 1024  # acknowledged async payloads waiting in memory, over every table
GROUP_INLINE_MAX_BYTES = 4 * 1024 * 1024  # a group of small CSV bodies up to this size is one inline source
GROUP_INLINE_MAX_LINES = 65536  # ... and up to this many lines
# failures after which an acknowledged async load can never commit: its WAL entry goes
REFUSED = (DataQualityError, TableDropped, TableNotFound, DatabaseNotFound)


def group_mode(prepared: PreparedLoad, load_bytes: int) -> str | None:
    """`sync_mode` / `async_mode` when this load goes through group commit, else None.

    As in Doris, group commit is not used for two-phase loads, partial updates or an empty body.
    """
    req = prepared.request
    mode = req.group_commit or prepared.plan.table.properties.get(MODE_PROPERTY, "off_mode").lower()
    if mode not in ("sync_mode", "async_mode") or req.two_phase_commit or req.partitions or prepared.plan.reads_stored:
        return None
    return mode if load_bytes > 0 else None


def _shape(request: LoadRequest) -> str:
    """Loads group together only when everything but their identity is the same."""
    return request.model_dump_json(exclude={"label", "comment", "group_commit", "timeout_s"})


def wal_disk_limit(spec: str, free_bytes: int) -> int:
    """Bytes of `group_commit_wal_max_disk_limit`: a byte count, or a percentage of the free disk space (Doris's
    BE reads its setting of the same name this way, against the WAL disk's space when it starts).

    Raises: ValueError when the spec is neither.
    """
    text = spec.strip()
    try:
        if text.endswith("%"):
            return int(free_bytes * float(text[:-1]) / 100)
        return int(text)
    except ValueError:
        raise ValueError(f"group_commit_wal_max_disk_limit must be bytes or a percentage, not {spec!r}") from None


class WalBacklog:
    """The acknowledged async loads whose rows are not visible yet (their WAL entries), by table and in bytes.

    Doris bounds its WAL the same two ways: by disk (BE `group_commit_wal_max_disk_limit`, 10% of the free space
    by default; a load without room for its WAL switches to sync_mode, `LoadBlockQueue::has_enough_wal_disk_space`)
    and by count per table (BE `group_commit_max_wal_num_per_table`, apache/doris#65362, which refuses the load).
    Past either bound here the load takes the sync_mode way: it waits for its group, and no error is returned
    (nor Doris's refusal of a body over 80% of the free WAL space, "There is no space for group commit stream
    load async WAL": such a body waits too).

    The payloads of these loads kept in memory (small bodies) are bounded too, by `max_memory_bytes` over every
    table: past it a payload waits as a file in wal/ (`keep_in_memory`), so many tables' backlogs cannot fill
    the server's memory.
    """

    def __init__(
        self, *, max_loads_per_table: int, max_bytes: int, max_memory_bytes: int = IN_MEMORY_BACKLOG_BYTES
    ) -> None:
        self.max_loads_per_table = max_loads_per_table
        self.max_bytes = max_bytes
        self.max_memory_bytes = max_memory_bytes
        self._lock = threading.Lock()
        self._entries: dict[int, tuple[tuple[str, str], int]] = {}  # txn id -> (table, bytes)
        self._loads: Counter[tuple[str, str]] = Counter()
        self._bytes = 0
        self._in_memory: dict[int, int] = {}  # txn id -> bytes of its payload kept in memory
        self._memory = 0

    def admit(self, table: tuple[str, str], txn_id: int, load_bytes: int) -> bool:
        """Count a load in when both bounds leave room for it; False when it must wait for its group instead."""
        with self._lock:
            if self._loads[table] >= self.max_loads_per_table or self._bytes + load_bytes > self.max_bytes:
                return False
            self._add(table, txn_id, load_bytes)
            return True

    def add(self, table: tuple[str, str], txn_id: int, load_bytes: int) -> None:
        """Count in a load acknowledged before the last stop (replayed from wal/): it is owed whatever the bounds."""
        with self._lock:
            self._add(table, txn_id, load_bytes)

    def _add(self, table: tuple[str, str], txn_id: int, load_bytes: int) -> None:
        if txn_id not in self._entries:
            self._entries[txn_id] = (table, load_bytes)
            self._loads[table] += 1
            self._bytes += load_bytes

    def keep_in_memory(self, txn_id: int, payload_bytes: int) -> bool:
        """Count an admitted load's payload as kept in memory while it waits, when the memory bound leaves room;
        False: it must wait as a file."""
        with self._lock:
            if txn_id not in self._entries or self._memory + payload_bytes > self.max_memory_bytes:
                return False
            self._in_memory[txn_id] = payload_bytes
            self._memory += payload_bytes
            return True

    def release(self, txn_id: int) -> None:
        """The load's WAL entry is gone (its rows visible, or the load refused or parked); no-op for others."""
        with self._lock:
            self._memory -= self._in_memory.pop(txn_id, 0)
            entry = self._entries.pop(txn_id, None)
            if entry is not None:
                table, load_bytes = entry
                self._loads[table] -= 1
                if not self._loads[table]:
                    del self._loads[table]
                self._bytes -= load_bytes

    def memory(self) -> int:
        """Bytes of the waiting loads' payloads kept in memory now."""
        with self._lock:
            return self._memory

    def size(self) -> tuple[int, int]:
        """(loads, bytes) waiting in the WAL now, over every table."""
        with self._lock:
            return len(self._entries), self._bytes


class WalLog:
    """The durable copy of small async payloads: records appended to one log file, synced by group fsync.

    A load appends its record (its request and payload) and waits until an `fdatasync` that started after
    its append returns. One sync runs at a time; loads that append while it runs are synced together by the
    next one (a database's group commit of its log), so N concurrent acknowledgements cost about one fsync,
    not three each (payload, request, directory). A record is `RECORD` (magic, txn id, lengths, CRC-32 of
    the rest) then the request JSON then the payload; a torn or damaged tail (a crash mid-append: that load was
    never acknowledged) ends a segment's reading.

    Segments are `log_<n>.wal`; a new one starts past `SEGMENT_BYTES`, and a segment goes once none of its
    records is owed any more (`release`). At start-up `recover` writes every record back as the
    `txn_<id>.dat` / `.json` pair that the replay reads; the segment stays until those loads are released.
    """

    RECORD = struct.Struct("<4sqIII")
    MAGIC = b"GCW1"
    SEGMENT_BYTES = 4 * 1024 * 1024
    MAX_PAYLOAD = 1024 * 1024  # larger payloads keep a file of their own (fsynced alone): copying costs more

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.fsyncs = 0  # syncs of the log (each may cover many appends)
        self.appends = 0
        self._lock = threading.Lock()  # appends, segments, owed records
        self._sync_lock = threading.Lock()  # one sync at a time
        self._fd: int | None = None
        self._retired: list[int] = []  # full segments' descriptors, closed by the sync after their last append
        self._number = max((_segment_number(p) for p in directory.glob("log_*.wal")), default=0)
        self._size = 0
        self._written = 0  # appends so far (the current segment's not synced yet past `_synced`)
        self._synced = 0
        self._segment_of: dict[int, int] = {}  # txn id -> segment number
        self._owed: Counter[int] = Counter()  # segment number -> records not released

    def append(self, txn_id: int, meta: bytes, payload: bytes) -> None:
        """Append one record and return once it is durable."""
        self.sync(self.write(txn_id, meta, payload))

    def write(self, txn_id: int, meta: bytes, payload: bytes) -> int:
        """Append one record, not yet durable: returns the `sync` that makes it so."""
        body = meta + payload
        record = self.RECORD.pack(self.MAGIC, txn_id, len(meta), len(payload), zlib.crc32(body))
        with self._lock:
            _write_all(self._current(), record + body)
            self._size += self.RECORD.size + len(body)
            self._segment_of[txn_id] = self._number
            self._owed[self._number] += 1
            self._written += 1
            self.appends += 1
            return self._written

    def sync(self, mine: int) -> None:
        """Return once the records up to the `write` that returned `mine` are durable: at once when a sync that
        started after it has ended, else after one more (which covers every record written before it)."""
        with self._sync_lock:
            if self._synced >= mine:  # synced by the sync this load waited behind
                return
            with self._lock:
                retired, current, target = self._retired, self._fd, self._written
                self._retired = []
            assert current is not None, "a segment is open once a record was appended"
            for each in retired:  # full segments' last records
                os.fdatasync(each)
                os.close(each)
            os.fdatasync(current)
            self.fsyncs += 1
            self._synced = target

    def _current(self) -> int:
        """The segment appends go to (under `_lock`); a full one is retired: the next sync syncs and closes it."""
        if self._fd is not None and self._size < self.SEGMENT_BYTES:
            return self._fd
        if self._fd is not None:
            self._retired.append(self._fd)
            if not self._owed[self._number]:
                self._segment(self._number).unlink(missing_ok=True)
        self._number += 1
        self._fd = os.open(self._segment(self._number), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o644)
        self._size = 0
        _fsync(self.directory)  # the new segment's name is durable before a record in it is acknowledged
        return self._fd

    def release(self, txn_id: int) -> None:
        """The load's record is not owed any more; its segment goes with its last owed record (unless appends
        still go to it)."""
        with self._lock:
            number = self._segment_of.pop(txn_id, None)
            if number is None:
                return
            self._owed[number] -= 1
            if not self._owed[number]:
                del self._owed[number]
                if number != self._number or self._fd is None:
                    self._segment(number).unlink(missing_ok=True)

    def recover(self, write: Callable[[int, bytes, bytes], bool]) -> int:
        """At start-up, before any append: hand every record of every segment to `write` (txn id, request JSON,
        payload), which says whether the load is still owed; returns how many are."""
        found = 0
        for path in sorted(self.directory.glob("log_*.wal"), key=_segment_number):
            number = _segment_number(path)
            data = path.read_bytes()
            at = 0
            while at + self.RECORD.size <= len(data):
                magic, txn_id, meta_len, payload_len, crc = self.RECORD.unpack_from(data, at)
                start = at + self.RECORD.size
                end = start + meta_len + payload_len
                if magic != self.MAGIC or end > len(data) or zlib.crc32(data[start:end]) != crc:
                    log.warning("WAL segment %s: damaged or torn record at byte %d, the rest ignored", path.name, at)
                    break
                if write(txn_id, data[start : start + meta_len], data[start + meta_len : end]):
                    self._segment_of[txn_id] = number
                    self._owed[number] += 1
                    found += 1
                at = end
            if not self._owed[number]:
                path.unlink(missing_ok=True)
        return found

    def _segment(self, number: int) -> Path:
        return self.directory / f"log_{number:08d}.wal"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _segment_number(path: Path) -> int:
    return int(path.stem[4:])


def _member_shape(member: _Member) -> str:
    if member.shape is None:
        member.shape = _shape(member.prepared.request)
    return member.shape


def _table_key(prepared: PreparedLoad) -> tuple[str, str]:
    return prepared.request.db.lower(), prepared.plan.table.name.lower()


@dataclass
class _Member:
    prepared: PreparedLoad
    path: Path  # the payload, hard-linked where the group reads it (nothing there while `data` holds it)
    load_bytes: int
    receive_ms: int
    future: Future[LoadResult] = field(default_factory=Future)
    index: int = -1  # position in its group
    acknowledged: bool = False  # async: answered Success, its WAL entry is owed until it commits
    attempts: int = 0  # failed group jobs so far
    data: bytes | None = None  # the payload itself, when the body was small enough to be kept in memory
    rows: int = 0  # its lines, when its group's source is inline (`_inline_group`)
    shape: str | None = None  # its `_shape`, once asked (`_member_shape`)

    def payload(self) -> Path | bytes:
        """Where the group reads the payload from: its bytes when kept in memory, else its file."""
        return self.data if self.data is not None else self.path


class StateChecks:
    """The states of async loads' transactions, read for the loads of a step batch in one statement: a load is
    `queue`d as its WAL record is written, and `read` (by its `Acknowledging.flush`) reads the states of every
    load queued so far, unless a read that holds it is under way (then it waits for that one). The claims of a
    batch share one write the same way (`TransactionStore.claimed`)."""

    def __init__(self, txns: TransactionStore) -> None:
        self._txns = txns
        self._ready = threading.Condition()
        self._pending: list[int] = []
        self._found: dict[int, Txn | BaseException | None] = {}
        self._held: set[int] = set()  # the loads of the read under way
        self._forgotten: set[int] = set()  # forgotten while a read held them: their states are dropped as they come
        self._reading = False

    def queue(self, txn_id: int) -> None:
        with self._ready:
            self._pending.append(txn_id)

    def read(self, txn_id: int) -> Txn | None:
        """The queued load's transaction as it is now (None: gone).

        Raises:
            StoreUnavailable, StoreFailed: the read failed (for every load it held).
        """
        with self._ready:
            while txn_id not in self._found:
                if self._reading:  # the read under way may hold it, else the next one will
                    self._ready.wait()
                    continue
                self._reading = True
                batch, self._pending = self._pending, []
                self._held = set(batch)
                self._ready.release()
                try:
                    found: dict[int, Txn | BaseException | None] = dict.fromkeys(batch)
                    try:
                        found.update(self._txns.get_many(batch))
                    except Exception as exc:
                        found = dict.fromkeys(batch, exc)
                finally:
                    self._ready.acquire()
                    self._reading, self._held = False, set()
                    for forgotten in self._forgotten:
                        found.pop(forgotten, None)
                    self._forgotten.clear()
                    self._found.update(found)
                    self._ready.notify_all()
            outcome = self._found.pop(txn_id)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def forget(self, txn_id: int) -> None:
        """A queued load that will not be `read` (its WAL sync failed)."""
        with self._ready:
            if txn_id in self._pending:
                self._pending.remove(txn_id)
            elif txn_id in self._held:
                self._forgotten.add(txn_id)  # the read under way holds it
            else:
                self._found.pop(txn_id, None)


@dataclass
class Acknowledging:
    """An async load whose WAL record is written, not yet synced (`GroupCommitter.run` with `defer_sync`).

    Its caller syncs it, with the records written before it (`flush`: the last load's sync covers the loads
    before it), then `finish`es it: queued for its group, its reply returned. A failed sync `fail`s it: not owed,
    not queued, and the caller answers its error.
    """

    committer: GroupCommitter
    member: _Member
    mine: int  # its record's `WalLog.sync`
    reply: LoadResult
    txn: Txn | None = None  # its transaction once synced: aborted while its body came in (its table dropped)?

    def flush(self) -> None:
        self.committer.log.sync(self.mine)
        self.txn = self.committer.checks.read(self.member.prepared.txn_id)

    def finish(self) -> LoadResult:
        if self.txn is not None and self.txn.state != PREPARE:  # not owed: its record goes
            txn_id = self.member.prepared.txn_id
            self.committer._unwritten(txn_id, self.member.path)
            self.committer.backlog.release(txn_id)
            return self.committer._result(self.member, error=LoadError(TxnAborted(txn_id, self.txn.reason).message))
        self.committer._submit(self.member)
        return self.reply

    def fail(self, error: BaseException) -> None:
        txn_id = self.member.prepared.txn_id
        self.committer.checks.forget(txn_id)
        self.committer._unwritten(txn_id, self.member.path)
        self.committer.backlog.release(txn_id)


class _Rounds:
    """At most `threads` group rounds at once, taken in the order they were asked for: daemon threads (a round
    waits for its group up to the group's deadline, which must not keep the process from exiting), started as
    rounds wait and kept once started.

    A table's loads used to have a thread of their own per load shape, and every group one more that never ended:
    400 loads of distinct `where` headers into one table left the server 600 threads (and as many Py4J connections),
    and as many Spark jobs at once. Doris runs its group commit loads on `group_commit_insert_threads` (10)."""

    def __init__(self, name: str, threads: int) -> None:
        self._name = name
        self._max = threads
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = 0
        self._idle = 0  # threads waiting for a task
        self._waiting = 0  # tasks not taken yet

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            self._waiting += 1
            start = self._waiting > self._idle and self._started < self._max
            if start:
                self._started += 1
        self._tasks.put(fn)
        if start:
            threading.Thread(target=self._work, name=self._name, daemon=True).start()

    def threads(self) -> int:
        with self._lock:
            return self._started

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            fn = self._tasks.get()
            with self._lock:
                self._idle -= 1
                self._waiting -= 1
            try:
                fn()
            except BaseException:  # a bug: logged, the thread serves the next round
                log.exception("group commit round failed")


class _Worker:
    """One queue per table: its loads form groups of one load shape each (`_shape`), one group after another,
    each group one round on a thread of the committer's `rounds` (at most `INSERT_THREADS` at once over every
    table; a worker gives its thread back after each group, so busy tables take turns). Loads of another shape
    than the group forming wait in `held` for the next groups, in their order."""

    def __init__(self, owner: GroupCommitter, key: tuple[str, str], first: Iterable[_Member] = ()) -> None:
        self.owner = owner
        self.key = key
        self.items: queue.Queue[_Member] = queue.Queue()
        self.held: collections.deque[_Member] = collections.deque()  # only the round running reads or writes it
        self.scheduled = False  # a round is queued or running (under the owner's `_guard`)
        self.idle_since = time.monotonic()
        self.queued = 0  # loads waiting when the previous group ended (a replay: all of its loads)
        self.last = (0, 0.0, 0.0)  # the previous group's loads, seconds and end (`time.monotonic()`)
        for member in first:  # queued before the first round: they are there when its first group forms
            self.items.put(member)
            self.queued += 1

    def round(self) -> None:
        """One group (none when nothing is queued), then the next round is asked for if loads wait."""
        try:
            batch = self._collect(self.queued, self.last)
            if batch:
                started = time.monotonic()
                run = _GroupRun()
                self.owner.jobs.submit(functools.partial(self._commit, batch, run))
                if not run.done.wait(group_wait(batch)):
                    self.owner.abandon_group(batch, run)
                ended = time.monotonic()
                self.last = (len(batch), ended - started, ended)
            self.queued = self.items.qsize() + len(self.held)
        finally:
            self.owner._next_round(self)

    def _collect(self, queued: int, last: tuple[int, float, float] = (0, 0, 0)) -> list[_Member]:
        """The next group (`queued`: the loads waiting when the previous group ended; `last`: that group's loads,
        seconds and end), of the shape of the load that waited longest. The first load of an idle worker waits up
        to the interval for company (Doris's `group_commit_interval_ms`). Right after a group, the next one
        expects the loads that waited for it and the loads the previous group's clients send next, once answered:
        it closes as soon as that many are in, or after a short grace (`REJOIN_SHARE` of the previous group's
        time, between `REJOIN_MIN_S` and `REJOIN_MAX_S`, at most the interval). Else sync clients split into two
        groups that alternate, each waiting for the other's job, and a lone sync client would wait the interval on
        every load. A full group (`max_loads`) goes at once."""
        if self.held:
            first = self.held.popleft()
        else:
            try:
                first = self.items.get_nowait()
            except queue.Empty:
                return []
        shape = _member_shape(first)
        batch = [first]
        others: collections.deque[_Member] = collections.deque()
        for member in self.held:  # held loads of this shape join it, in their order
            if len(batch) < self.owner.max_loads and _member_shape(member) == shape:
                batch.append(member)
            else:
                others.append(member)
        self.held = others
        size, seconds, ended = last
        now = time.monotonic()
        interval = self.owner.interval_s
        rejoin = bool(queued) or (size > 0 and now - ended < interval)  # right after a group
        grace = min(interval, REJOIN_MAX_S, max(REJOIN_MIN_S, REJOIN_SHARE * seconds))
        deadline = now + (grace if rejoin else interval)
        expected = size + queued if rejoin else self.owner.max_loads
        while len(batch) < self.owner.max_loads:
            remaining = 0.0 if len(batch) >= expected else deadline - time.monotonic()
            try:
                member = self.items.get(timeout=remaining) if remaining > 0 else self.items.get_nowait()
            except queue.Empty:
                break
            if _member_shape(member) != shape:
                self.held.append(member)
                continue
            batch.append(member)
        return batch

    def _commit(self, batch: list[_Member], run: _GroupRun) -> None:
        """One group, on a thread of `GroupCommitter.jobs`: the worker waits for it only until the group's
        deadline."""
        try:
            self.owner.commit_group(batch, run)
        except Exception as exc:  # a bug: every member still gets a Doris-shaped Fail
            log.exception("group commit failed")
            for member in batch:
                if not member.future.done():
                    member.future.set_exception(exc)
        finally:
            run.done.set()


@dataclass
class _GroupRun:
    """What the worker and the group's own thread share: the group's transaction, and who answers its members
    (the group itself, or the worker that abandoned it at its deadline), decided under `lock`."""

    group_txn: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)
    answered: bool = False
    abandoned: bool = False


def group_timeout(batch: list[_Member]) -> int:
    """The group's `timeout`: the smallest of its members' (a group cannot outlive any member's deadline)."""
    return min(m.prepared.request.timeout_s for m in batch)


def group_wait(batch: list[_Member]) -> float:
    """How long the worker waits for a group: until its first member's deadline passes, plus a grace."""
    now = time.monotonic()
    left = min(m.prepared.request.timeout_s - (now - m.prepared.started) for m in batch)
    return max(left, 0.0) + ABANDON_GRACE_S


class GroupCommitter:
    """Collects group-commit loads per table and runs each group as one load job and one commit."""

    def __init__(
        self,
        *,
        loads: LoadService,
        data_dir: Path,
        interval_ms: float = 100.0,
        max_loads: int = 1024,
        retry_num: int = 10,
        retry_interval_s: float = 1.0,
        wal_max_loads_per_table: int = 2048,
        wal_max_disk_limit: str = "10%",
    ) -> None:
        self.loads = loads
        self.interval_s = interval_ms / 1000
        self.max_loads = max_loads
        self.retry_num = retry_num
        self.retry_interval_s = retry_interval_s
        self.wal_dir = data_dir / "wal"
        self.group_dir = data_dir / "group_commit"
        self.wal_dir.mkdir(parents=True, exist_ok=True)
        max_bytes = wal_disk_limit(wal_max_disk_limit, shutil.disk_usage(self.wal_dir).free)
        self.backlog = WalBacklog(max_loads_per_table=wal_max_loads_per_table, max_bytes=max_bytes)
        self.log = WalLog(self.wal_dir)
        self.checks = StateChecks(loads.txns)
        shutil.rmtree(self.group_dir, ignore_errors=True)  # groups in flight at a crash are replayed or failed
        self.group_dir.mkdir(parents=True, exist_ok=True)
        self._workers: dict[tuple[str, str], _Worker] = {}
        self.rounds = _Rounds("group-commit-round", INSERT_THREADS)  # every group's round, over every table
        self._swept = 0.0
        # each group runs on a thread of its own, so that its worker can abandon it at its deadline; threads are
        # reused: a new Python thread is a new Py4J connection and JVM thread for its first Spark call (~1.5 ms)
        self.jobs = DaemonWorkers("group-commit-job")
        self.counters: Counter[str] = Counter({"groups": 0, "loads": 0, "spark_jobs": 0, "inline_groups": 0})
        self._guard = threading.Lock()
        self._idle = threading.Condition(self._guard)  # a worker went idle (`close` waits for all)

    # -- entry point ----------------------------------------------------------------------
    def run(
        self,
        prepared: PreparedLoad,
        path: Path,
        mode: str,
        *,
        load_bytes: int,
        receive_ms: int = 0,
        data: bytes | None = None,
        defer_sync: bool = False,
    ) -> LoadResult | Future[LoadResult] | Acknowledging:
        """Run a staged stream load in a group (`mode` is its `group_mode`, decided by the caller): async
        answers once its payload is durable in wal/ (its result); a sync load, and an async one past the WAL's
        bounds (`WalBacklog`), is answered once its group has committed: its result is the future returned,
        which the caller awaits without holding a thread (a thread per waiting load capped a group at the
        app's thread pool, 40 loads, and every other load's planning waited for one of those threads).

        `data`: the payload kept in memory (a small body, `loaders.staging.IN_MEMORY_BYTES`): nothing is at
        `path`, and the load makes no file at all unless its group is read by a Spark scan.

        `defer_sync`: an async load whose WAL record is written but not yet synced is returned as
        `Acknowledging`; its caller syncs it (with the records of other loads) before it finishes it."""
        if mode == "async_mode":
            # aborted while its body came in (its table dropped)? A load acknowledged by its step thread is asked
            # once its record is synced, with the other loads of its batch (`StateChecks`); any other, now
            deferred = defer_sync and load_bytes <= WalLog.MAX_PAYLOAD
            txn = None if deferred else self.loads.txns.get(prepared.txn_id)
            if txn is not None and txn.state != PREPARE:
                error = LoadError(TxnAborted(txn.txn_id, txn.reason).message)
                return self._result(_Member(prepared, path, load_bytes, receive_ms), error=error)
            if self.backlog.admit(_table_key(prepared), prepared.txn_id, load_bytes):
                if data is not None and not self.backlog.keep_in_memory(prepared.txn_id, len(data)):
                    path.parent.mkdir(parents=True, exist_ok=True)  # past the bound of payloads waiting in
                    path.write_bytes(data)  # memory: staged as a file, as a larger body is
                    data = None
                try:
                    wal, payload, unsynced = self._write_wal(prepared, path, load_bytes, data, sync=not defer_sync)
                except BaseException:
                    self.backlog.release(prepared.txn_id)
                    raise
                member = _Member(prepared, wal, load_bytes, receive_ms, acknowledged=True, data=data)
                rows = _count_rows(payload, prepared.request)
                reply = self._reply(prepared, mode, LoadCounts(total=rows, loaded=rows), load_bytes, receive_ms)
                if unsynced:
                    self.checks.queue(prepared.txn_id)
                    return Acknowledging(self, member, unsynced, reply)
                self._submit(member)
                return reply
        linked = self.group_dir / f"txn_{prepared.txn_id}.dat"
        if data is None:
            os.link(path, linked)
        member = _Member(prepared, linked, load_bytes, receive_ms, data=data)
        self._submit(member)
        return member.future

    def _submit(self, member: _Member) -> None:
        key = _table_key(member.prepared)
        with self._guard:  # queued under the guard: a worker goes idle only while it has nothing queued
            worker = self._workers.get(key)
            if worker is None:
                worker = self._workers[key] = _Worker(self, key)
            worker.items.put(member)
            self._schedule(worker)
            self._forget_idle()

    def _schedule(self, worker: _Worker) -> None:
        """Ask for a round of the worker unless one is queued or running (under `_guard`)."""
        if not worker.scheduled:
            worker.scheduled = True
            self.rounds.submit(worker.round)

    def _next_round(self, worker: _Worker) -> None:
        """After a round: the next one when loads wait, else the worker is idle."""
        with self._guard:
            worker.scheduled = False
            if worker.held or not worker.items.empty():
                self._schedule(worker)
            else:
                worker.idle_since = time.monotonic()
                self._idle.notify_all()

    def _forget_idle(self) -> None:
        """Drop workers idle for `IDLE_EXIT_S` (under `_guard`, at most once a second): workers of tables that
        were dropped, or that stopped receiving grouped loads, do not pile up."""
        now = time.monotonic()
        if now - self._swept < 1.0:
            return
        self._swept = now
        for key, worker in list(self._workers.items()):
            if not worker.scheduled and now - worker.idle_since > IDLE_EXIT_S:
                del self._workers[key]

    def _submit_all(self, members: list[_Member]) -> None:
        """Queue many loads at once (a replay): each worker finds all of its loads queued when it forms a group."""
        by_key: dict[tuple[str, str], list[_Member]] = {}
        for member in members:
            by_key.setdefault(_table_key(member.prepared), []).append(member)
        with self._guard:
            for key, queued in by_key.items():
                worker = self._workers.get(key)
                if worker is None:
                    worker = self._workers[key] = _Worker(self, key, queued)
                else:
                    for member in queued:
                        worker.items.put(member)
                self._schedule(worker)

    # -- write-ahead files ----------------------------------------------------------------
    def _write_wal(
        self, prepared: PreparedLoad, path: Path, load_bytes: int, data: bytes | None = None, *, sync: bool = True
    ) -> tuple[Path, bytes | Path, int]:
        """The payload and its request, durable before the load is acknowledged: a small payload as a record of
        the log (`WalLog`, its fsync shared with concurrent loads), a large one as files of its own. Returns the
        payload's file in wal/, which the group reads (none for a payload kept in memory, `data`), the
        payload (a large one as that file: it is never read whole into memory), and 0, or without `sync` the
        `WalLog.sync` that makes a small payload's record durable."""
        wal = self.wal_dir / f"txn_{prepared.txn_id}.dat"
        meta = _wal_meta(prepared.request, load_bytes)
        if data is None:  # a staged file: linked into wal/, where the group reads it
            os.link(path, wal)
        if load_bytes <= WalLog.MAX_PAYLOAD:
            payload = data if data is not None else wal.read_bytes()
            try:
                mine = self.log.write(prepared.txn_id, meta, payload)
                if not sync:
                    return wal, payload, mine
                self.log.sync(mine)
            except BaseException:  # not acknowledged: not owed (a record that did reach the disk is replayed)
                self._unwritten(prepared.txn_id, wal)
                raise
            return wal, payload, 0
        if data is not None:  # (a body kept in memory is far smaller than the log's largest record)
            wal.write_bytes(data)
        tmp = self.wal_dir / f"txn_{prepared.txn_id}.tmp"
        tmp.write_bytes(meta)
        for name in (wal, tmp):
            _fsync(name)
        os.replace(tmp, tmp.with_suffix(".json"))
        _fsync(self.wal_dir)
        return wal, wal, 0

    def _unwritten(self, txn_id: int, wal: Path) -> None:
        """A load's WAL record that did not become durable: not owed (a record that did reach the disk is read
        back at start-up, and its aborted transaction says it is not owed)."""
        self.log.release(txn_id)
        wal.unlink(missing_ok=True)

    def _restore_wal(self, txn_id: int, meta: bytes, payload: bytes) -> bool:
        """A record of the log still owed written back as the files the replay reads (the log stays the durable
        copy); False for a load committed or aborted since."""
        if not _owed(self.loads.txns.get(txn_id)):
            return False
        for suffix, data in ((".dat", payload), (".json", meta)):
            tmp = self.wal_dir / f"txn_{txn_id}{suffix}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, tmp.with_suffix(""))
        return True

    def _drop_wal(self, txn_id: int, *, files: bool = True) -> None:
        """The load is no longer owed: its record of the log and its files in wal/ go (`files`: False for a load
        that never had any, an async load's small payload kept in memory, whose record is all there is)."""
        if files:
            for suffix in (".dat", ".json"):
                (self.wal_dir / f"txn_{txn_id}{suffix}").unlink(missing_ok=True)
        self.log.release(txn_id)
        self.backlog.release(txn_id)

    def _park_wal(
        self,
        txn_id: int,
        attempts: int,
        request: LoadRequest | None = None,
        load_bytes: int = 0,
        data: bytes | None = None,
    ) -> None:
        """Give up on an async load after `retry_num` failed replays: its WAL entry is kept in wal/tmp/ for
        an operator (Doris's BE renames it to its tmp dir the same way), the load aborted."""
        parked = self.wal_dir / "tmp"
        parked.mkdir(exist_ok=True)
        for suffix in (".dat", ".json"):
            source = self.wal_dir / f"txn_{txn_id}{suffix}"
            if source.exists():
                os.replace(source, parked / source.name)
        if data is not None and not (parked / f"txn_{txn_id}.dat").exists():  # a payload kept in memory
            (parked / f"txn_{txn_id}.dat").write_bytes(data)
        if request is not None and not (parked / f"txn_{txn_id}.json").exists():  # a record of the log
            (parked / f"txn_{txn_id}.json").write_bytes(_wal_meta(request, load_bytes))
        self.log.release(txn_id)
        self.backlog.release(txn_id)
        reason = f"group commit replay failed {attempts} times; its WAL entry is kept in {parked}"
        self.loads.writer.abort(txn_id, reason)
        log.error("async load %d: %s", txn_id, reason)

    def replay_wal(self) -> int:
        """At start-up: queue again every acknowledged async load that did not commit; returns how many.

        All are planned before any is queued, so each table's worker groups them as it groups live loads.
        """
        members: list[_Member] = []
        handles: dict[tuple[str, str, str], TableHandle] = {}
        self.log.recover(self._restore_wal)
        for orphan in self.wal_dir.glob("txn_*.dat"):  # a payload whose record never became durable
            if not orphan.with_suffix(".json").exists():
                orphan.unlink(missing_ok=True)
        for meta in sorted(self.wal_dir.glob("txn_*.json"), key=lambda p: int(p.stem[4:])):
            txn_id = int(meta.stem[4:])
            payload = meta.with_suffix(".dat")
            info = json.loads(meta.read_text())
            try:
                request = LoadRequest.model_validate(info["request"])
                prepared = self._replan(txn_id, request, handles) if payload.exists() else None
            except Exception:  # not the load's fault: its WAL entry stays for the next start
                log.exception("async load %d could not be replayed now", txn_id)
                continue
            if prepared is None:
                self._drop_wal(txn_id)
                continue
            member = _Member(prepared, payload, int(info["load_bytes"]), 0, acknowledged=True)
            self.backlog.add(_table_key(prepared), txn_id, member.load_bytes)
            members.append(member)
        self._submit_all(members)
        return len(members)

    def _replan(
        self, txn_id: int, request: LoadRequest, handles: dict[tuple[str, str, str], TableHandle] | None = None
    ) -> PreparedLoad | None:
        """Plan an owed async load again against its table as it is now; None when it is not owed any more
        (committed, aborted on purpose) or can never apply (its table dropped or re-created, its columns gone).
        `handles` keeps each table loaded once over a replay of many loads.
        """
        txn = self.loads.txns.get(txn_id)
        if txn is None or not _owed(txn):
            return None
        try:
            key = (request.db, request.table, _shape(request))  # one worker's loads: its groups run in turn
            loaded = handles.get(key) if handles is not None else None
            if loaded is None:
                handle = self.loads.catalog.load(request.db, request.table)
                if handles is not None:
                    handles[key] = handle
            else:  # a handle of its own (a commit refreshes it in place), from the metadata already read
                handle = _same_table(loaded)
            if txn.table_uuid is not None and table_identity(handle) != txn.table_uuid:
                raise TableDropped(txn.table_uuid)
            plan = plan_load(request.model_copy(update={"table": handle.definition.name}), handle.definition)
        except (DorisError, LoadError) as exc:  # the table is gone or changed beyond the load: it never applies
            log.warning("async load %d cannot be replayed: %s", txn_id, exc)
            self.loads.writer.abort(txn_id, f"replay failed: {exc}", expect=(ABORTED, PREPARE))
            return None
        self.loads.writer.reopen(txn_id)
        return PreparedLoad(
            plan=plan, txn_id=txn_id, started=time.monotonic(), begin_txn_ms=0, plan_ms=0, handle=handle
        )

    def _retry_later(self, member: _Member, error: LoadError) -> None:
        """Replay an acknowledged async load whose group failed for a reason other than its data, alone
        (a payload that breaks its job delays no other load), after a delay that doubles per failure."""
        member.attempts += 1
        if member.attempts > self.retry_num:
            self._park_wal(
                member.prepared.txn_id, member.attempts - 1, member.prepared.request, member.load_bytes, member.data
            )
            return
        delay = min(self.retry_interval_s * 2 ** (member.attempts - 1), MAX_RETRY_INTERVAL_S)
        txn_id = member.prepared.txn_id
        log.warning("async load %d: group failed (%s); replay %d in %.1f s", txn_id, error.text, member.attempts, delay)
        timer = threading.Timer(delay, self._replay_one, args=(member,))
        timer.daemon = True
        timer.start()

    def _replay_one(self, member: _Member) -> None:
        try:
            prepared = self._replan(member.prepared.txn_id, member.prepared.request)
        except Exception as exc:  # the catalog or the transaction table failed: another reason to try later
            self._retry_later(member, LoadError(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)))
            return
        if prepared is None:
            self._drop_wal(member.prepared.txn_id)
            return
        again = _Member(
            prepared, member.path, member.load_bytes, 0, acknowledged=True, attempts=member.attempts, data=member.data
        )
        try:
            self.commit_group([again])
        except Exception:  # a bug: the WAL entry stays for the next start
            log.exception("replay of async load %d failed", prepared.txn_id)

    # -- one group --------------------------------------------------------------------------
    def commit_group(self, batch: list[_Member], run: _GroupRun | None = None) -> None:
        """One job and one commit for the whole batch; every member's future gets its own result (unless the
        worker abandoned the group at its deadline: then the worker has answered them)."""
        run = run or _GroupRun()
        first = batch[0].prepared
        req = first.request
        group_label = f"group_commit_{uuid.uuid4().hex}"
        group_txn = self.loads.writer.begin(req.db, first.plan.table.name, group_label)
        run.group_txn = group_txn
        directory = self.group_dir / f"group_{group_txn}"
        for index, member in enumerate(batch):
            member.index = index
        load_bytes = sum(m.load_bytes for m in batch)
        context: SparkContext | None = None
        job_group = f"group_commit_{group_txn}"
        started = time.monotonic()
        failed: dict[int, LoadResult] = {}
        retry: set[int] = set()
        error = LoadError("group commit failed")
        outcome: JobOutcome | None = None
        per_load: list[LoadCounts] = []
        error_urls: dict[int, str | None] = {}
        try:
            # no JVM (being replaced): ServiceUnavailable, in here so that acknowledged members are retried
            context = self.loads.spark.sparkContext
            with self.loads.writer.write(
                req.db,
                first.plan.table.name,
                txn_id=group_txn,
                label=group_label,
                planned=first.plan.table,
                handle=first.handle,
            ) as rowset:
                self.loads.writer.pauses.hit("job", first.plan.table.name)
                failed |= self._refuse_stale(batch, rowset.table_uuid)
                spark = self.loads.session_for(req)
                context.setJobGroup(job_group, f"group commit of {len(batch)} loads", interruptOnCancel=True)
                source = group_source(spark, directory, batch, first)
                small = small_rowset.is_small(source)
                if small:
                    with self._guard:
                        self.counters["inline_groups"] += 1
                while True:
                    kept = [i for i in range(len(batch)) if i not in failed]
                    if not kept:
                        break
                    frame = source if not failed else _only(source, kept)
                    outcome = run_rowset(
                        spark,
                        frame,
                        first.plan,
                        rowset,
                        load_bytes=load_bytes,
                        extra_metrics=_per_load_metrics(len(batch), small) if len(batch) > 1 else (),
                    )
                    per_load = _counts(outcome, batch, small)
                    newly = [i for i in kept if _too_many_filtered(per_load[i], req.max_filter_ratio)]
                    if not newly:
                        break
                    for i in newly:
                        failed[i] = self._fail(batch[i], per_load[i], source, spark)
                    delete_dir(rowset.directory)  # rerun without the failed loads
                    outcome = None
                rowset.files = outcome.files if outcome else []
                for i, member in enumerate(batch):  # a sync load's filtered rows within its ratio: its error log
                    if i not in failed and per_load[i].filtered and not member.acknowledged:
                        error_urls[i] = self._error_log(member, source)
                rowset.group = tuple(batch[i].prepared.txn_id for i in range(len(batch)) if i not in failed)
        except Exception as exc:
            if not isinstance(exc, (LoadError, *REFUSED)):
                log.exception("group commit of %d loads failed", len(batch))
            self.loads.writer.abort(group_txn)  # when the writer did not get to it
            error = exc if isinstance(exc, LoadError) else LoadError(str(exc).strip().splitlines()[0])
            for i, member in enumerate(batch):
                if i in failed:
                    continue
                if member.acknowledged and not isinstance(exc, REFUSED):
                    retry.add(i)  # answered Success: kept in the WAL and replayed, not lost
                    continue
                self.loads.writer.abort(member.prepared.txn_id, error.text)
                failed[i] = self._result(member, error=error)
        finally:
            overdue.returned(job_group)
            shutil.rmtree(directory, ignore_errors=True)
            self._count_group(len(batch), context, job_group)
        commit_ms = int((time.monotonic() - started) * 1000)
        with run.lock:
            if run.abandoned:  # past its deadline: the worker aborted the group and answered its members
                log.warning(
                    "abandoned group commit of %d loads into %s.%s ended after %d ms",
                    len(batch),
                    req.db,
                    req.table,
                    commit_ms,
                )
                return
            run.answered = True
        log.info("group commit of %d loads into %s.%s took %d ms", len(batch), req.db, req.table, commit_ms)
        for i, member in enumerate(batch):
            if i in retry:
                self._retry_later(member, error)
                continue
            result = failed.get(i) or self._result(
                member, counts=per_load[i], commit_ms=commit_ms, error_url=error_urls.get(i)
            )
            if member.data is None or member.load_bytes > WalLog.MAX_PAYLOAD:  # files were made for it
                self._drop_wal(member.prepared.txn_id)
                member.path.unlink(missing_ok=True)
            else:  # a small payload kept in memory: a record of the log at most (three unlinks a load saved)
                self._drop_wal(member.prepared.txn_id, files=False)
            member.future.set_result(result)

    def _count_group(self, loads: int, context: SparkContext | None, job_group: str) -> None:
        """Count a group, its loads and its Spark jobs (those of its job group: the job, and an error log's)."""
        try:
            jobs = 0
            if context is not None:  # None: the group failed for want of a JVM
                jobs = len(context.statusTracker().getJobIdsForGroup(job_group))
                context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        except Exception:  # the JVM went away under the group: its failure is reported elsewhere
            jobs = 0
        with self._guard:
            self.counters["groups"] += 1
            self.counters["loads"] += loads
            self.counters["spark_jobs"] += jobs

    def close(self, timeout: float = 60) -> None:
        """Return once every worker's queued loads have gone (a committer that replayed another server's WAL)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while any(w.scheduled for w in self._workers.values()) and time.monotonic() < deadline:
                self._idle.wait(max(0.0, deadline - time.monotonic()))
            self._workers.clear()

    def stats(self) -> dict[str, int]:
        """Counts since start: groups run, loads in them, their Spark jobs, WAL appends and the fsyncs they took."""
        with self._guard:
            out = dict(self.counters)
        return out | {"wal_appends": self.log.appends, "wal_fsyncs": self.log.fsyncs}

    def abandon_group(self, batch: list[_Member], run: _GroupRun) -> None:
        """The group outlived its deadline (a Spark call that never returns): abort its transaction, which gives
        its version turn to the next load of the table, and answer its members; its thread is left to end.

        Sync members fail with `[TIMEOUT]` and leave nothing; acknowledged async members keep their WAL entry and
        are replayed, as after any failure that is not their data's. A group that committed (or failed) just
        before keeps its own outcome.
        """
        reason = f"load timed out after {group_timeout(batch)} s (timeout header)"
        with run.lock:
            abandoned = (
                not run.answered and run.group_txn is not None and self.loads.writer.abandon(run.group_txn, reason)
            )
            run.abandoned = abandoned
        if not abandoned:
            run.done.wait()  # its own outcome stands: it is answering its members now
            return
        log.warning("group commit of %d loads abandoned at its deadline; its job is still running", len(batch))
        # a job that never returns holds its task slot: the JVM is replaced once it is overdue (`supervisor`)
        overdue.cancelled(f"group_commit_{run.group_txn}", f"group commit of {len(batch)} loads")
        error = LoadTimeout(reason)
        for member in batch:
            if member.future.done():
                continue
            if member.acknowledged:
                self._retry_later(member, error)
                continue
            self.loads.writer.abort(member.prepared.txn_id, reason)
            member.path.unlink(missing_ok=True)
            member.future.set_result(self._result(member, error=error))

    def _refuse_stale(self, batch: list[_Member], table_uuid: str) -> dict[int, LoadResult]:
        """Members that can no longer commit fail alone, before the job: aborted meanwhile (their table was
        dropped) or planned against another table of the same name (dropped and re-created since)."""
        refused: dict[int, LoadResult] = {}
        for i, member in enumerate(batch):
            txn = self.loads.txns.get(member.prepared.txn_id)
            if txn is None:
                continue
            if txn.state != PREPARE:
                error = LoadError(TxnAborted(txn.txn_id, txn.reason).message)
            elif txn.table_uuid is not None and txn.table_uuid != table_uuid:
                error = LoadError(TableDropped(txn.table_uuid).message)
                self.loads.writer.abort(txn.txn_id, error.text)
            else:
                continue
            refused[i] = self._result(member, error=error)
        return refused

    def _fail(self, member: _Member, counts: LoadCounts, source: DataFrame, spark: SparkSession) -> LoadResult:
        """A load of the group over its filter ratio: its error log, its transaction aborted."""
        error = DataQualityError("too many filtered rows", error_url=None)
        self.loads.writer.abort(member.prepared.txn_id, error.text)
        return self._result(member, counts=counts, error=error, error_source=(source, spark))

    def _result(
        self,
        member: _Member,
        *,
        counts: LoadCounts | None = None,
        error: LoadError | None = None,
        commit_ms: int = 0,
        error_source: tuple[DataFrame, SparkSession] | None = None,
        error_url: str | None = None,
    ) -> LoadResult:
        prepared = member.prepared
        counts = counts or LoadCounts()
        if counts.filtered and error_source is not None:
            error_url = self._error_log(member, error_source[0])
        mode = prepared.request.group_commit or prepared.plan.table.properties.get(MODE_PROPERTY, "sync_mode")
        return self._reply(
            prepared,
            mode,
            counts,
            member.load_bytes,
            member.receive_ms,
            error=error,
            error_url=error_url,
            write_data_time_ms=commit_ms,
        )

    def _reply(
        self,
        prepared: PreparedLoad,
        mode: str,
        counts: LoadCounts,
        load_bytes: int,
        receive_ms: int,
        error: LoadError | None = None,
        **fields: object,
    ) -> LoadResult:
        """Doris's group-commit reply: GroupCommit fields instead of TwoPhaseCommit and the txn timings."""
        req = prepared.request
        return render_load(
            error,
            txn_id=prepared.txn_id,
            label=req.label,
            comment=req.comment,
            two_phase_commit=None,
            group_commit=True,
            group_commit_mode=mode,
            load_id=uuid.UUID(int=prepared.txn_id).hex,
            number_total_rows=counts.total,
            number_loaded_rows=counts.loaded,
            number_filtered_rows=counts.filtered,
            number_unselected_rows=counts.unselected,
            load_bytes=load_bytes,
            load_time_ms=int((time.monotonic() - prepared.started) * 1000),
            begin_txn_time_ms=None,
            stream_load_put_time_ms=prepared.plan_ms,
            receive_data_time_ms=receive_ms,
            commit_and_publish_time_ms=None,
            **fields,
        )

    def _error_log(self, member: _Member, source: DataFrame) -> str | None:
        """The rejected rows of one load of the group (a second, small Spark job on the error path only)."""
        mine = source.where(F.expr(f"({POS} >> {LOAD_SHIFT}) = {member.index}"))
        rows = prepare_rows(mine, member.prepared.plan)
        bad = rows.where(f"{REASON} IS NOT NULL").select(REASON, LINE).limit(MAX_ERROR_ROWS).collect()
        errors = [f"Reason: {r[REASON]}. src line [{r[LINE]}]; " for r in bad]
        counts = LoadCounts(filtered=len(errors))
        return self.loads.write_error_log(member.prepared, JobOutcome(counts=counts, files=[], errors=errors))


def _same_table(handle: TableHandle) -> TableHandle:
    """Another handle on the metadata `handle` read (immutable, shared), refreshed apart from it."""
    table = handle.iceberg
    copy = Table(table.name(), table.metadata, table.metadata_location, table.io, table.catalog, table.config)
    return TableHandle(definition=handle.definition, iceberg=copy)


def group_source(spark: SparkSession, directory: Path, batch: list[_Member], first: PreparedLoad) -> DataFrame:
    """The group's rows as one source, each row's position prefixed with its load's index (rows ordered by
    (load, line)): CSV bodies small together are split by the server and handed to Spark as one inline Arrow
    relation (no scan at all, and a small rowset is written from the job's result, as a small plain load's);
    other groups are one Spark scan over the group's directory (made here: each payload linked, or written when
    it was kept in memory), the load's index read from each file's name."""
    inline = _inline_group(spark, batch, first)
    if inline is not None:
        return inline
    directory.mkdir()
    for member in batch:
        file = directory / f"{member.index:06d}.dat"
        if member.data is not None:
            file.write_bytes(member.data)
        else:
            os.link(member.path, file)
    return _indexed(staged_source(spark, directory, first))


def _inline_group(spark: SparkSession, batch: list[_Member], first: PreparedLoad) -> DataFrame | None:
    """Every member's CSV lines split (`arrow_csv`) into one inline source, or None when the group is over the
    group's inline band (`_inline_group_fits`, `GROUP_INLINE_MAX_LINES`) or a body needs Spark's text path."""
    import pyarrow as pa

    plan = first.plan
    if plan.request.format != "csv":
        return None
    dialect = CsvDialect.of(plan.request, len(plan.source_fields))
    if not _inline_group_fits(batch, dialect):
        return None
    max_lines = max(dialect.inline_max_lines, GROUP_INLINE_MAX_LINES)
    segments: list[pa.Array] = []
    few: list[bytes] = []  # lines of bodies of one segment, not yet an array (`arrow_csv.few_lines`)
    positions: list[int] = []
    try:
        for index, member in enumerate(batch):
            payload = member.payload()
            if isinstance(payload, Path) and payload.stat().st_size <= arrow_csv.SEGMENT_BYTES:
                payload = payload.read_bytes()  # as `body_lines` reads it: one segment
            if isinstance(payload, bytes) and len(payload) <= arrow_csv.SEGMENT_BYTES:
                lines = arrow_csv.few_lines(payload, dialect)
                few += lines
                count = len(lines)
            else:
                if few:
                    segments.append(arrow_csv.as_strings(few))
                    few = []
                pieces = list(arrow_csv.body_lines(payload, dialect))
                segments += pieces
                count = sum(len(piece) for piece in pieces)
            member.rows = count
            positions += range(index << LOAD_SHIFT, (index << LOAD_SHIFT) + count)
            if len(positions) > max_lines:
                return None
        if few:
            segments.append(arrow_csv.as_strings(few))
    except arrow_csv.GeneralPath:
        return None
    if not positions:  # an inline relation needs a row
        return None
    return inline_fields(spark, arrow_csv.split_lines(pa.concat_arrays(segments), dialect), dialect, positions)


def _inline_group_fits(batch: list[_Member], dialect: CsvDialect) -> bool:
    """Whether a group's bodies go to Spark inline: up to `GROUP_INLINE_MAX_BYTES` together, past the band of
    one plain load (an inline Arrow source costs hardly more for thousands of rows, while a scan of as many files
    costs a listing and a count per load: `_per_load_metrics`), unless inline sources are off or the dialect is
    quoted (Spark's own CSV parser splits those)."""
    if dialect.inline_max_bytes < 0 or dialect.inline_max_lines == 0 or dialect.quoted:
        return False
    return sum(m.load_bytes for m in batch) <= max(dialect.inline_max_bytes, GROUP_INLINE_MAX_BYTES)


def _only(source: DataFrame, loads: list[int]) -> DataFrame:
    """The rows of the given loads of the group (a small source stays small)."""
    frame = source.where(F.expr(f"({POS} >> {LOAD_SHIFT}) IN ({_in(loads)})"))
    return small_rowset.mark_small(frame) if small_rowset.is_small(source) else frame


def _indexed(frame: DataFrame) -> DataFrame:
    """Prefix each row's position with its load's index (from the payload's file name `NNNNNN.dat`)."""
    load = "CAST(regexp_extract(input_file_name(), '([0-9]+)\\\\.dat$', 1) AS BIGINT)"
    columns = [c for c in frame.columns if c != POS]
    return frame.selectExpr(f"({load} << {LOAD_SHIFT}) + {POS} AS {POS}", *columns)


def _per_load_metrics(loads: int, small: bool) -> tuple[Column, ...]:
    """Rows, filtered rows and unselected rows of each load of the group, from the group job's one action (a
    group of one load has the job's own counts: a one-row load then runs no job, as a plain one, `_counts`).

    A small (inline) source's rows are few: each kind is the list of its rows' loads (three aggregates). Other
    groups count each kind in an array indexed by load: 3 x loads aggregates, whose evaluation costs the
    group's job about a second for 16 loads on 2 cores, and seconds for 128.
    """
    load = f"shiftright({POS}, {LOAD_SHIFT})"
    kinds = {"t": "true", "f": f"{REASON} IS NOT NULL", "u": UNSELECTED}
    if small:
        return tuple(named(k, f"collect_list(CASE WHEN {cond} THEN {load} END)") for k, cond in kinds.items())
    return tuple(
        named(k, "array(" + ", ".join(f"count_if({load} = {i} AND {cond})" for i in range(loads)) + ")")
        for k, cond in kinds.items()
    )


def _counts(outcome: JobOutcome, batch: list[_Member], small: bool) -> list[LoadCounts]:
    """Each member's counts: the group's for a group of one; each member's lines, all loaded, when the group's
    rowset was folded without a job (`JobOutcome.folded`, an inline source); else its job's per-load metrics."""
    loads = len(batch)
    if loads == 1:
        return [outcome.counts]
    if outcome.folded:
        return [LoadCounts(total=m.rows, loaded=m.rows) for m in batch]
    metrics = outcome.metrics or {}
    if small:  # the loads of the rows of each kind
        per_kind = [Counter(metrics.get(kind) or []) for kind in ("t", "f", "u")]
        kinds = [[counts[i] for i in range(loads)] for counts in per_kind]
    else:
        kinds = [[int(c or 0) for c in metrics.get(kind) or [0] * loads] for kind in ("t", "f", "u")]
    return [
        LoadCounts(total=total, filtered=filtered, unselected=unselected, loaded=total - filtered - unselected)
        for total, filtered, unselected in zip(*kinds, strict=True)
    ]


def _too_many_filtered(counts: LoadCounts, ratio: float) -> bool:
    selected = counts.total - counts.unselected
    return selected > 0 and counts.filtered / selected > ratio


def _in(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


def _count_rows(payload: bytes | Path, request: LoadRequest) -> int:
    """Rows of an async payload as received (non-empty lines), reported before the job has run. A payload in a
    file (a large body: up to the server's largest, gigabytes) is counted a block at a time (`_count_file`)."""
    if request.format not in ("csv", "json") or (request.format == "json" and request.strip_outer_array):
        return 0
    delimiter = request.line_delimiter
    if isinstance(payload, bytes):
        count = _nonblank(payload.decode(errors="replace").split(delimiter))
    else:
        count = _count_file(payload, delimiter)
    return max(0, count - request.skip_lines)


def _nonblank(lines: list[str]) -> int:
    return sum(1 for line in lines if line.strip())


COUNT_BLOCK = 8 << 20  # bytes of a large payload counted at a time


def _count_file(path: Path, delimiter: str, block: int = COUNT_BLOCK) -> int:
    """The non-empty lines of the file at `path`, as `_count_rows` counts those of bytes (split at `delimiter` from
    the left, decoded with replacement, blank when only whitespace), holding about two blocks in memory: a line
    left unfinished at a block's end is carried into the next, and one longer than a block is reduced to whether
    it has text so far (its last bytes kept, from a character's start, for a delimiter cut by the block's end)."""
    mark = delimiter.encode()
    count = 0
    carried = b""  # the unfinished line's bytes (or the last of them)
    text = False  # the unfinished line had text before `carried`
    with open(path, "rb") as f:
        while piece := f.read(block):
            data = carried + piece
            lines = data.split(mark)
            carried = lines.pop()
            if lines:
                count += int(text or _has_text(lines[0])) + sum(1 for line in lines[1:] if _has_text(line))
                text = False
            elif len(data) > len(mark) + block:  # one long line: its head reduced to whether it has text
                cut = len(data) - len(mark) - block
                for _ in range(3):  # not inside a character (UTF-8's longest is 4 bytes)
                    if cut > 0 and data[cut] & 0xC0 == 0x80:
                        cut -= 1
                text = text or _has_text(data[:cut])
                carried = data[cut:]
    return count + int(text or _has_text(carried))


ASCII_WHITESPACE = b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # what `str.strip` takes away of ASCII


def _has_text(line: bytes) -> bool:
    """`line` decoded with replacement is not whitespace alone (`str.strip`), without decoding an ASCII line."""
    if line.isascii():
        return bool(line.strip(ASCII_WHITESPACE))
    return bool(line.decode(errors="replace").strip())


def _owed(txn: Txn | None) -> bool:
    """An acknowledged async load is still owed: not committed, not aborted on purpose (start-up recovery aborts a
    load without a snapshot and without a reason: that one is owed)."""
    return txn is not None and (txn.state == PREPARE or (txn.state == ABORTED and txn.reason is None))


def _wal_meta(request: LoadRequest, load_bytes: int) -> bytes:
    """A WAL entry's request: what the replay plans the load from (`{"request": ..., "load_bytes": n}`, the
    request serialized by pydantic's own JSON writer: ~4x faster than `json.dumps` of its `model_dump`)."""
    return b'{"request": %b, "load_bytes": %d}' % (request.model_dump_json().encode(), load_bytes)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
