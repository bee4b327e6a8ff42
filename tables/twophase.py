"""Phase two of a two-phase stream load (contract §1.5): commit or abort a PRECOMMITTED transaction.

The texts are Doris's (FE `DatabaseTransactionMgr` / `FrontendServiceImpl.loadTxn2PCImpl`, BE
`StreamLoad2PCAction`), because the Flink connector matches on them: a failure is
`{"status": "ANALYSIS_ERROR", "msg": "TStatus: errCode = 2, detailMessage = <text>"}`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tables.catalog import Catalog
from tables.commit import TableWriter
from tables.errors import TableDropped, TxnOperationError, TxnStateError
from tables.transactions import ABORTED, COMMITTED, PRECOMMITTED, PREPARE, VISIBLE, TransactionStore, Txn

log = logging.getLogger(__name__)

USER_ABORT = "User Abort"
TIMEOUT_ABORT = "timeout by txn manager"


def _analysis(text: str) -> TxnOperationError:
    return TxnOperationError("ANALYSIS_ERROR", f"TStatus: errCode = 2, detailMessage = {text}")


@dataclass
class TwoPhase:
    """Commit and abort by txn id and/or label; precommit timeouts; commits a crash interrupted."""

    catalog: Catalog
    txns: TransactionStore
    writer: TableWriter

    def operate(
        self,
        db: str,
        *,
        txn_id: str | None,
        label: str | None,
        operation: str,
        may_operate: Callable[[Txn], bool],
    ) -> str:
        """Run `commit` or `abort`; returns Doris's success message.

        `may_operate` says whether the caller may decide a transaction (its privilege on the transaction's
        table); one it may not is answered exactly as one that does not exist, before its state is looked at.

        Raises:
            TxnOperationError: with Doris's status and message; any other failure (a bug) as INTERNAL_ERROR.
        """
        try:
            return self._operate(db, txn_id=txn_id, label=label, operation=operation, may_operate=may_operate)
        except TxnOperationError:
            raise
        except Exception as exc:  # still Doris's error shape, with the text
            log.exception("2PC %s failed", operation)
            raise TxnOperationError("INTERNAL_ERROR", str(exc)) from exc

    def _operate(
        self, db: str, *, txn_id: str | None, label: str | None, operation: str, may_operate: Callable[[Txn], bool]
    ) -> str:
        prefix = (f"label [{label}] " if label else "") + (f"transaction [{txn_id}] " if txn_id else "")
        number: int | None = None
        if txn_id:
            try:
                number = int(txn_id)
            except ValueError:
                raise TxnOperationError("INTERNAL_ERROR", f"convert txn_id [{txn_id}] failed, reason=stoull") from None
        if operation not in ("commit", "abort"):
            raise TxnOperationError("INTERNAL_ERROR", "transaction operation should be 'commit' or 'abort'")
        if not self.catalog.database_exists(db):
            raise _analysis(f"unknown database, database={db}")
        if number is None:
            number = self._by_label(db, label or "", operation, may_operate)
        txn = self.txns.get(number)
        if txn is None or txn.db != db or not may_operate(txn):  # not the caller's: as if it did not exist
            raise _analysis(f"transaction [{number}] not found")
        if operation == "commit":
            self._commit(number)
        else:
            self._abort(number, USER_ABORT)
        return f"{prefix}{operation} successfully."

    def _by_label(self, db: str, label: str, operation: str, may_operate: Callable[[Txn], bool]) -> int:
        wanted = (PRECOMMITTED, PREPARE) if operation == "abort" else (PRECOMMITTED,)
        newest = self.txns.find_label(db, label)
        if newest is None or not may_operate(newest):  # another table's label: its state stays unknown
            raise _analysis(f"transaction not found, label={label}")
        txn = self.txns.find_label(db, label, wanted)
        if txn is None or not may_operate(txn):
            raise _analysis(f"running transaction not found, label={label}")
        return txn.txn_id

    def _commit(self, txn_id: int) -> None:
        txn = self.txns.get(txn_id)
        assert txn is not None
        try:
            self.writer.commit_precommitted(txn)
        except TxnStateError as exc:
            raise _analysis(_commit_refusal(txn_id, exc)) from None
        except TableDropped as exc:  # Doris answers a commit after its table was dropped with errCode 7
            raise TxnOperationError("ANALYSIS_ERROR", f"TStatus: errCode = 7, detailMessage = {exc.message}") from None

    def _abort(self, txn_id: int, reason: str) -> None:
        try:
            self.writer.abort_txn(txn_id, reason)
        except TxnStateError as exc:
            if exc.state == ABORTED:
                raise _analysis(f"transaction [{txn_id}] is already aborted, abort reason: {exc.reason}") from None
            if exc.state in (COMMITTED, VISIBLE):
                raise _analysis(f"transaction [{txn_id}] is already {exc.state}, could not abort.") from None
            raise _analysis(f"transaction [{txn_id}] not found.") from None

    def abort_expired(self, timeout_seconds: float, *, now: float | None = None) -> int:
        """Abort transactions PRECOMMITTED for longer than the precommit timeout; returns how many."""
        now = time.time() if now is None else now
        aborted = 0
        for txn in self.txns.in_state(PRECOMMITTED):
            if (txn.precommitted or txn.created) + timeout_seconds <= now:
                try:
                    self.writer.abort_txn(txn.txn_id, TIMEOUT_ABORT)
                    aborted += 1
                except TxnStateError:
                    pass  # committed or aborted meanwhile
        return aborted

    def recover_committed(self) -> int:
        """At start-up: finish 2PC commits a crash interrupted (COMMITTED is a promise); returns how many."""
        done = 0
        for txn in self.txns.in_state(COMMITTED):
            try:
                self.writer.commit_precommitted(txn)
                done += 1
            except Exception:  # the table is gone: the transaction cannot be published any more
                log.exception("could not finish the commit of transaction %d", txn.txn_id)
                self.writer.abort(txn.txn_id, "table dropped", expect=(COMMITTED,))
        return done


def _commit_refusal(txn_id: int, exc: TxnStateError) -> str:
    if exc.state == ABORTED:
        return f"transaction [{txn_id}] is already aborted. abort reason: {exc.reason}"
    if exc.state == VISIBLE:
        return f"transaction [{txn_id}] is already visible, not pre-committed."
    if exc.state == COMMITTED:
        return f"transaction [{txn_id}] is already committed, not pre-committed."
    if exc.state == PREPARE:
        return f"transaction [{txn_id}] is prepare, not pre-committed."
    return f"transaction [{txn_id}] not found."
