"""Labels and transactions, in the store's `txns` table (tables/store.py: SQLite beside the catalog, or the
catalog's PostgreSQL database that several servers share).

A load claims its label (PREPARE) before its job runs, its snapshot carries `doris.txn_id`, and it is
marked VISIBLE after the Iceberg commit, or ABORTED when it fails (which frees the label).

Claims of concurrent loads share one database transaction (`begin`): a claim that arrives while another
batch is being written waits and goes into the next one, so N concurrent loads cost about one synced write,
not N, as a database's group commit of its log does. One thread can queue several claims and then wait for
them (`claim`, `claimed`): the stream loads' step threads write a batch's claims at once (`loads.steps`).

Across servers (one PostgreSQL): transaction ids come from the database's sequence (rowset directories are
named `txn_<id>`); a claim takes a lock on its label for its transaction (`Tx.lock`), so of two servers claiming
one label at once exactly one wins and the other answers LabelAlreadyExists; every state change is a conditional
UPDATE (compare-and-set), so a 2PC commit on one server and an abort on another cannot both win.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tables.errors import LabelAlreadyExists
from tables.store import TXNS, Store, Tx, one_of

PREPARE = "PREPARE"
PRECOMMITTED = "PRECOMMITTED"
COMMITTED = "COMMITTED"
VISIBLE = "VISIBLE"
ABORTED = "ABORTED"
UNKNOWN = "UNKNOWN"


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
    owner: str | None = None  # the server that began it, when several share the store (`tables.takeover`)


@dataclass
class Claim:
    """A label claim waiting for its batch (`TransactionStore.claim`): its result (`txn_id`) or its error once
    `done`."""

    db: str
    table: str
    label: str
    table_uuid: str | None
    txn_id: int = 0
    error: BaseException | None = None
    done: bool = False


class TransactionStore:
    """Label claims and transaction states, in a `Store` (or a SQLite file at the path given)."""

    def __init__(self, store: Store | Path, *, label_keep_seconds: float = 43200.0, owner: str | None = None) -> None:
        self.store = Store.of(store)
        self.owner = owner  # recorded with every transaction this server begins
        self._owns_store = not isinstance(store, Store)
        self.store.ensure(TXNS)
        self.label_keep_seconds = label_keep_seconds
        self._claims: list[Claim] = []  # waiting for the next batch
        self._claiming = False  # a batch is being written
        self._claims_ready = threading.Condition(threading.Lock())
        self.claim_batches = 0  # database transactions that wrote claims (each may hold many)
        sql, t = self.store.sql, TXNS.c
        self._holders = sql(
            "txns holders",
            lambda: (
                sa.select(TXNS)
                .where(t.db == sa.bindparam("p_db"), t.label == sa.bindparam("p_label"), t.state != ABORTED)
                .order_by(t.txn_id.desc())
            ),
        )
        self._insert = sql(
            "txns insert",
            lambda: (
                sa.insert(TXNS)
                .values(
                    db=sa.bindparam("p_db"),
                    tbl=sa.bindparam("p_tbl"),
                    label=sa.bindparam("p_label"),
                    state=PREPARE,
                    created=sa.bindparam("p_now", type_=sa.Float),
                    table_uuid=sa.bindparam("p_uuid", type_=sa.Text),
                    owner=sa.bindparam("p_owner", type_=sa.Text),
                )
                .returning(t.txn_id)
            ),
        )
        self._newest = sql(
            "txns newest",
            lambda: (
                sa.select(TXNS)
                .where(t.db == sa.bindparam("p_db"), t.label == sa.bindparam("p_label"))
                .order_by(t.txn_id.desc())
                .limit(1)
            ),
        )
        self._by_id = sql("txns get", lambda: sa.select(TXNS).where(t.txn_id == sa.bindparam("p_id")))

    def begin(self, db: str, table: str, label: str, *, table_uuid: str | None = None) -> int:
        """Claim a label and open a PREPARE transaction; returns its id. `table_uuid` is the identity of the
        table the load is planned against: a table dropped and re-created under the same name has another.

        Raises:
            LabelAlreadyExists: a transaction with this label is not aborted (and not expired).
            StoreUnavailable: the database cannot be reached (nothing was claimed).
        """
        return self.claimed(self.claim(db, table, label, table_uuid=table_uuid))

    def claim(self, db: str, table: str, label: str, *, table_uuid: str | None = None) -> Claim:
        """`begin` in two steps: queue the claim for the next batch; `claimed` must follow, whatever happens
        between (claims queued by one thread, then waited for, share one database write)."""
        claim = Claim(db, table, label, table_uuid)
        with self._claims_ready:
            self._claims.append(claim)
        return claim

    def claimed(self, claim: Claim) -> int:
        """The transaction id of a queued `claim`, once its batch is written (this thread writes it unless
        another one is writing a batch that holds it).

        Raises:
            LabelAlreadyExists, StoreUnavailable: as `begin`.
        """
        with self._claims_ready:
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

    def _claim_all(self, batch: list[Claim]) -> None:
        """Write a batch of claims in one transaction; each claim gets its id or its own error (a label
        already held), and all of them the error of a write that failed."""
        ids: list[int | LabelAlreadyExists] = []
        try:
            with self.store.write() as tx:
                if self.store.locks:  # against other servers
                    tx.lock(*(f"label\0{claim.db}\0{claim.label}" for claim in batch))
                for claim in batch:
                    holder = self._holder(tx, claim.db, claim.label)  # sees the claims earlier in this batch
                    if holder is not None:
                        ids.append(LabelAlreadyExists(claim.label, holder.txn_id, holder.state))
                        continue
                    row = tx.run(
                        self._insert,
                        p_db=claim.db,
                        p_tbl=claim.table,
                        p_label=claim.label,
                        p_now=time.time(),
                        p_uuid=claim.table_uuid,
                        p_owner=self.owner,
                    )
                    ids.append(int(row.scalar()))
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

    def _holder(self, tx: Tx, db: str, label: str) -> Txn | None:
        horizon = time.time() - self.label_keep_seconds
        for row in tx.run(self._holders, p_db=db, p_label=label).rows:
            txn = Txn(*row)
            if txn.state == VISIBLE and txn.finished is not None and txn.finished < horizon:
                continue
            return txn
        return None

    def set_state(self, txn_id: int, state: str) -> bool:
        """Record a transaction's outcome (its writer's, after its Iceberg commit or its failure). A VISIBLE one
        stays VISIBLE: its data is committed, no later ABORTED undoes that. True when it changed."""
        return self.set_states((txn_id,), state) == 1

    def set_states(self, txn_ids: Sequence[int], state: str) -> int:
        """`set_state` of many transactions in one database write (a group commit's loads); returns how many
        changed."""
        if not txn_ids:
            return 0
        ids = [f"p_id{n}" for n in range(len(txn_ids))]

        def build() -> sa.Update:
            where: sa.ColumnElement[bool] = TXNS.c.txn_id.in_([sa.bindparam(name) for name in ids])
            if state != VISIBLE:
                where = sa.and_(where, TXNS.c.state != VISIBLE)
            return sa.update(TXNS).where(where).values(state=state, finished=sa.bindparam("p_now", type_=sa.Float))

        sql = self.store.sql(("txns set_states", state, len(ids)), build)
        return self.store.write_one(sql, p_now=time.time(), **dict(zip(ids, txn_ids, strict=True))).rowcount

    def transition(
        self,
        txn_id: int,
        expect: tuple[str, ...],
        state: str,
        *,
        reason: str | None = None,
        schema_version: int | None = None,
    ) -> bool:
        """Move a transaction to `state` only if it is in one of `expect` (compare-and-set: of two servers
        deciding one transaction, one moves it); True when it moved.

        A precommit records the schema version its files were written with."""
        stamp = "precommitted" if state == PRECOMMITTED else "finished"

        def build() -> sa.Update:
            t = TXNS.c
            return (
                sa.update(TXNS)
                .where(t.txn_id == sa.bindparam("p_id"), one_of(t.state, expect))
                .values(
                    {
                        "state": state,
                        "reason": sa.func.coalesce(sa.bindparam("p_reason", type_=sa.Text), t.reason),
                        "schema_version": sa.func.coalesce(
                            sa.bindparam("p_schema", type_=sa.Integer), t.schema_version
                        ),
                        stamp: sa.bindparam("p_now", type_=sa.Float),
                    }
                )
            )

        sql = self.store.sql(("txns transition", expect, state), build)
        done = self.store.write_one(sql, p_id=txn_id, p_reason=reason, p_schema=schema_version, p_now=time.time())
        return done.rowcount == 1

    def find_label(self, db: str, label: str, states: tuple[str, ...] | None = None) -> Txn | None:
        """The newest transaction of a label in the database (in one of `states`, when given)."""

        def build() -> sa.Select[Any]:
            t = TXNS.c
            query = sa.select(TXNS).where(t.db == sa.bindparam("p_db"), t.label == sa.bindparam("p_label"))
            if states:
                query = query.where(one_of(t.state, states))
            return query.order_by(t.txn_id.desc()).limit(1)

        sql = self.store.sql(("txns find_label", states), build)
        with self.store.read() as tx:
            row = tx.run(sql, p_db=db, p_label=label).first()
        return Txn(*row) if row else None

    def in_database(self, db: str, *, label_like: str | None = None, limit: int = 1000) -> list[Txn]:
        """Transactions of a database, newest first; `label_like` is a SQL LIKE pattern (ASCII letters match
        either case, on both dialects, as SQLite's LIKE does)."""

        def build() -> sa.Select[Any]:
            t = TXNS.c
            query = sa.select(TXNS).where(t.db == sa.bindparam("p_db"))
            if label_like is not None:
                query = query.where(t.label.ilike(sa.bindparam("p_like", type_=sa.Text)))
            return query.order_by(t.txn_id.desc()).limit(sa.bindparam("p_limit", type_=sa.Integer))

        sql = self.store.sql(("txns in_database", label_like is not None), build)
        with self.store.read() as tx:
            rows = tx.run(sql, p_db=db, p_like=label_like, p_limit=limit).rows
        return [Txn(*r) for r in rows]

    def get(self, txn_id: int) -> Txn | None:
        with self.store.read() as tx:
            row = tx.run(self._by_id, p_id=txn_id).first()
        return Txn(*row) if row else None

    def get_many(self, txn_ids: Sequence[int]) -> dict[int, Txn]:
        """`get` of many transactions in one statement (the ones that exist)."""
        if not txn_ids:
            return {}
        ids = [f"p_id{n}" for n in range(len(txn_ids))]
        sql = self.store.sql(
            ("txns get_many", len(ids)),
            lambda: sa.select(TXNS).where(TXNS.c.txn_id.in_([sa.bindparam(name) for name in ids])),
        )
        with self.store.read() as tx:
            rows = tx.run(sql, **dict(zip(ids, txn_ids, strict=True))).rows
        return {txn.txn_id: txn for txn in (Txn(*row) for row in rows)}

    def label_state(self, db: str, label: str) -> str:
        """The state of the newest transaction with this label, or UNKNOWN (also once expired)."""
        with self.store.read() as tx:
            row = tx.run(self._newest, p_db=db, p_label=label).first()
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
        by_uuid = table is not None and table_uuid is not None

        def build() -> sa.Select[Any]:
            t = TXNS.c
            query = sa.select(TXNS).where(
                t.db == sa.bindparam("p_db"), one_of(t.state, (PREPARE, PRECOMMITTED, COMMITTED))
            )
            if table is not None and table_uuid is None:  # identity unknown (an unreadable table): all by name
                query = query.where(t.tbl == sa.bindparam("p_tbl"))
            elif by_uuid:
                query = query.where(
                    sa.or_(
                        t.table_uuid == sa.bindparam("p_uuid"),
                        sa.and_(t.table_uuid.is_(None), t.tbl == sa.bindparam("p_tbl")),
                    )
                )
            return query.order_by(t.txn_id)

        sql = self.store.sql(("txns unfinished", table is not None, by_uuid), build)
        with self.store.read() as tx:
            rows = tx.run(sql, p_db=db, p_tbl=table, p_uuid=table_uuid).rows
        return [Txn(*r) for r in rows]

    def in_state(self, state: str) -> list[Txn]:
        sql = self.store.sql(
            "txns in_state",
            lambda: sa.select(TXNS).where(TXNS.c.state == sa.bindparam("p_state")).order_by(TXNS.c.txn_id),
        )
        with self.store.read() as tx:
            rows = tx.run(sql, p_state=state).rows
        return [Txn(*r) for r in rows]

    def forget_expired(self) -> int:
        """Delete finished transactions older than the label keep time; returns how many."""
        sql = self.store.sql(
            "txns forget",
            lambda: sa.delete(TXNS).where(
                one_of(TXNS.c.state, (VISIBLE, ABORTED)), TXNS.c.finished < sa.bindparam("p_horizon", type_=sa.Float)
            ),
        )
        return self.store.write_one(sql, p_horizon=time.time() - self.label_keep_seconds).rowcount

    def close(self) -> None:
        if self._owns_store:
            self.store.close()
