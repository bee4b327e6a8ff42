"""Labels and transactions, in a small SQLite table beside the catalog.

A load claims its label (PREPARE) before its job runs, its snapshot carries `doris.txn_id`, and it is
marked VISIBLE after the Iceberg commit, or ABORTED when it fails (which frees the label).

Claims of concurrent loads share one database transaction (`begin`): a claim that arrives while another
batch is being written waits and goes into the next one, so N concurrent loads cost about one synced write,
not N, as a database's group commit of its log does.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tables.errors import LabelAlreadyExists

PREPARE = "PREPARE"
PRECOMMITTED = "PRECOMMITTED"
COMMITTED = "COMMITTED"
VISIBLE = "VISIBLE"
ABORTED = "ABORTED"
UNKNOWN = "UNKNOWN"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS txns (
    txn_id INTEGER PRIMARY KEY AUTOINCREMENT,
    db TEXT NOT NULL,
    tbl TEXT NOT NULL,
    label TEXT NOT NULL,
    state TEXT NOT NULL,
    created REAL NOT NULL,
    finished REAL,
    reason TEXT,
    precommitted REAL,
    schema_version INTEGER,
    table_uuid TEXT
);
CREATE INDEX IF NOT EXISTS txns_label ON txns (db, label);
"""


@dataclass(frozen=True)
class Txn:
    txn_id: int
    db: str
    table: str
    label: str
    state: str
    created: float
    finished: float | None
    reason: str | None = None
    precommitted: float | None = None
    schema_version: int | None = None  # of the table the load was planned on (2PC: checked at commit)
    table_uuid: str | None = None  # Iceberg uuid of the table the load was planned on: checked at commit


@dataclass
class _Claim:
    """One `begin` waiting for its batch: its result (`txn_id`) or its error once `done`."""

    db: str
    table: str
    label: str
    table_uuid: str | None
    txn_id: int = 0
    error: BaseException | None = None
    done: bool = False


class TransactionStore:
    """Label claims and transaction states; one SQLite connection guarded by a lock."""

    def __init__(self, path: Path, *, label_keep_seconds: float = 43200.0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.executescript(_SCHEMA)
        present = {row[1] for row in self._conn.execute("PRAGMA table_info(txns)")}
        for column in (
            "reason TEXT",
            "precommitted REAL",
            "schema_version INTEGER",
            "table_uuid TEXT",
        ):  # tables created before these columns existed
            if column.split()[0] not in present:
                self._conn.execute(f"ALTER TABLE txns ADD COLUMN {column}")
        self._lock = threading.Lock()
        # reads go through a connection of their own (WAL mode: a read sees the last commit and never waits
        # for a write's sync, e.g. an async load's state check behind a batch of label claims)
        self._read = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._read_lock = threading.Lock()
        self.label_keep_seconds = label_keep_seconds
        self._claims: list[_Claim] = []  # waiting for the next batch
        self._claiming = False  # a batch is being written
        self._claims_ready = threading.Condition(threading.Lock())
        self.claim_batches = 0  # database transactions that wrote claims (each may hold many)

    def begin(self, db: str, table: str, label: str, *, table_uuid: str | None = None) -> int:
        """Claim a label and open a PREPARE transaction; returns its id. `table_uuid` is the identity of the
        table the load is planned against: a table dropped and re-created under the same name has another.

        Raises:
            LabelAlreadyExists: a transaction with this label is not aborted (and not expired).
        """
        claim = _Claim(db, table, label, table_uuid)
        with self._claims_ready:
            self._claims.append(claim)
            while not claim.done:
                if self._claiming:  # the batch being written started before this claim: wait for the next
                    self._claims_ready.wait()
                    continue
                self._claiming = True
                batch, self._claims = self._claims, []
                self._claims_ready.release()
                try:
                    self._claim_all(batch)
                finally:
                    self._claims_ready.acquire()
                    self._claiming = False
                    self._claims_ready.notify_all()
        if claim.error is not None:
            raise claim.error
        return claim.txn_id

    def _claim_all(self, batch: list[_Claim]) -> None:
        """Write a batch of claims in one transaction; each claim gets its id or its own error (a label
        already held), and all of them the error of a write that failed."""
        ids: list[int | LabelAlreadyExists] = []
        try:
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    for claim in batch:
                        holder = self._holder(claim.db, claim.label)  # sees the claims earlier in this batch
                        if holder is not None:
                            ids.append(LabelAlreadyExists(claim.label, holder.txn_id, holder.state))
                            continue
                        cur = self._conn.execute(
                            "INSERT INTO txns (db, tbl, label, state, created, table_uuid) VALUES (?, ?, ?, ?, ?, ?)",
                            (claim.db, claim.table, claim.label, PREPARE, time.time(), claim.table_uuid),
                        )
                        assert cur.lastrowid is not None
                        ids.append(cur.lastrowid)
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self.claim_batches += 1
        except BaseException as exc:
            for claim in batch:
                claim.error, claim.done = exc, True
            return
        for claim, outcome in zip(batch, ids, strict=True):
            if isinstance(outcome, LabelAlreadyExists):
                claim.error = outcome
            else:
                claim.txn_id = outcome
            claim.done = True

    def _holder(self, db: str, label: str) -> Txn | None:
        horizon = time.time() - self.label_keep_seconds
        rows = self._conn.execute(
            "SELECT * FROM txns WHERE db = ? AND label = ? AND state != ? ORDER BY txn_id DESC",
            (db, label, ABORTED),
        ).fetchall()
        for row in rows:
            txn = Txn(*row)
            if txn.state == VISIBLE and txn.finished is not None and txn.finished < horizon:
                continue
            return txn
        return None

    def set_state(self, txn_id: int, state: str) -> None:
        with self._lock:
            self._conn.execute("UPDATE txns SET state = ?, finished = ? WHERE txn_id = ?", (state, time.time(), txn_id))

    def set_states(self, txn_ids: Sequence[int], state: str) -> None:
        """`set_state` of many transactions in one database write (a group commit's loads)."""
        marks = ", ".join("?" for _ in txn_ids)
        with self._lock:
            self._conn.execute(
                f"UPDATE txns SET state = ?, finished = ? WHERE txn_id IN ({marks})", (state, time.time(), *txn_ids)
            )

    def transition(
        self,
        txn_id: int,
        expect: tuple[str, ...],
        state: str,
        *,
        reason: str | None = None,
        schema_version: int | None = None,
    ) -> bool:
        """Move a transaction to `state` only if it is in one of `expect`; True when it moved.

        A precommit records the schema version its files were written with."""
        now = time.time()
        marks = ", ".join("?" for _ in expect)
        stamp = ", precommitted = ?" if state == PRECOMMITTED else ", finished = ?"
        with self._lock:
            cur = self._conn.execute(
                f"UPDATE txns SET state = ?, reason = coalesce(?, reason), "
                f"schema_version = coalesce(?, schema_version){stamp} "
                f"WHERE txn_id = ? AND state IN ({marks})",
                (state, reason, schema_version, now, txn_id, *expect),
            )
        return cur.rowcount == 1

    def find_label(self, db: str, label: str, states: tuple[str, ...] | None = None) -> Txn | None:
        """The newest transaction of a label in the database (in one of `states`, when given)."""
        sql = "SELECT * FROM txns WHERE db = ? AND label = ?"
        args: list[object] = [db, label]
        if states:
            sql += f" AND state IN ({', '.join('?' for _ in states)})"
            args += states
        with self._read_lock:
            row = self._read.execute(sql + " ORDER BY txn_id DESC LIMIT 1", args).fetchone()
        return Txn(*row) if row else None

    def in_database(self, db: str, *, label_like: str | None = None, limit: int = 1000) -> list[Txn]:
        """Transactions of a database, newest first; `label_like` is a SQL LIKE pattern."""
        sql = "SELECT * FROM txns WHERE db = ?"
        args: list[object] = [db]
        if label_like is not None:
            sql += " AND label LIKE ?"
            args.append(label_like)
        with self._read_lock:
            rows = self._read.execute(sql + " ORDER BY txn_id DESC LIMIT ?", (*args, limit)).fetchall()
        return [Txn(*r) for r in rows]

    def get(self, txn_id: int) -> Txn | None:
        with self._read_lock:
            row = self._read.execute("SELECT * FROM txns WHERE txn_id = ?", (txn_id,)).fetchone()
        return Txn(*row) if row else None

    def label_state(self, db: str, label: str) -> str:
        """The state of the newest transaction with this label, or UNKNOWN (also once expired)."""
        with self._read_lock:
            row = self._read.execute(
                "SELECT * FROM txns WHERE db = ? AND label = ? ORDER BY txn_id DESC LIMIT 1", (db, label)
            ).fetchone()
        if row is None:
            return UNKNOWN
        txn = Txn(*row)
        if txn.finished is not None and txn.finished < time.time() - self.label_keep_seconds:
            return UNKNOWN
        return txn.state

    def unfinished(self, db: str, *, table: str | None = None, table_uuid: str | None = None) -> list[Txn]:
        """Transactions of a database (or of one table) not yet VISIBLE or ABORTED.

        A table's are those planned against its uuid, plus those that recorded none (begun before uuids
        were recorded, or a group-commit group) under its name; without a uuid, every one under its name."""
        sql = "SELECT * FROM txns WHERE db = ? AND state IN (?, ?, ?)"
        args: list[object] = [db, PREPARE, PRECOMMITTED, COMMITTED]
        if table is not None and table_uuid is None:  # identity unknown (an unreadable table): all by name
            sql += " AND tbl = ?"
            args += [table]
        elif table is not None:
            sql += " AND (table_uuid = ? OR (table_uuid IS NULL AND tbl = ?))"
            args += [table_uuid, table]
        with self._read_lock:
            rows = self._read.execute(sql + " ORDER BY txn_id", args).fetchall()
        return [Txn(*r) for r in rows]

    def in_state(self, state: str) -> list[Txn]:
        with self._read_lock:
            rows = self._read.execute("SELECT * FROM txns WHERE state = ?", (state,)).fetchall()
        return [Txn(*r) for r in rows]

    def forget_expired(self) -> int:
        """Delete finished transactions older than the label keep time; returns how many."""
        horizon = time.time() - self.label_keep_seconds
        with self._lock:
            cur = self._conn.execute(
                "DELETE FROM txns WHERE state IN (?, ?) AND finished < ?", (VISIBLE, ABORTED, horizon)
            )
        return cur.rowcount

    def close(self) -> None:
        with self._read_lock:
            self._read.close()
        with self._lock:
            self._conn.close()
