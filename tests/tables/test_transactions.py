"""Label claims of concurrent loads share one database transaction (issue 19: the label record costs at most one
small database write per load, and concurrent loads share its sync)."""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tables.errors import LabelAlreadyExists
from tables.transactions import ABORTED, PREPARE, TransactionStore


def test_concurrent_claims_share_database_transactions_and_stay_unique(tmp_path: Path) -> None:
    store = TransactionStore(tmp_path / "txns.db")
    threads = 32
    barrier = threading.Barrier(threads)

    def claim(i: int) -> int | str:
        barrier.wait()
        try:  # every label twice: one of each pair wins, whether the pair is in one batch or in two
            return store.begin("d", "t", f"label_{i // 2}")
        except LabelAlreadyExists as exc:
            return exc.message

    with ThreadPoolExecutor(threads) as pool:
        outcomes = list(pool.map(claim, range(threads)))
    ids = [o for o in outcomes if isinstance(o, int)]
    refused = [o for o in outcomes if isinstance(o, str)]
    assert len(ids) == len(set(ids)) == threads // 2, outcomes
    assert len(refused) == threads // 2 and all("has already been used" in r for r in refused), refused
    for pair in range(threads // 2):
        txn = store.find_label("d", f"label_{pair}")
        assert txn is not None and txn.state == PREPARE and txn.txn_id in ids
    assert store.claim_batches <= threads // 2, f"{store.claim_batches} database transactions for {threads} claims"


def test_a_claim_after_an_abort_takes_the_label_and_a_failed_write_fails_only_its_batch(tmp_path: Path) -> None:
    store = TransactionStore(tmp_path / "txns.db")
    first = store.begin("d", "t", "l1")
    with pytest.raises(LabelAlreadyExists):
        store.begin("d", "t", "l1")
    assert store.transition(first, (PREPARE,), ABORTED)
    again = store.begin("d", "t", "l1")
    assert again > first
    other = sqlite3.connect(tmp_path / "txns.db", isolation_level=None)  # another connection to the file
    other.execute("CREATE TRIGGER no_more BEFORE INSERT ON txns BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    with pytest.raises(Exception, match="disk full"):
        store.begin("d", "t", "l2")
    other.execute("DROP TRIGGER no_more")
    other.close()
    assert store.find_label("d", "l2") is None  # nothing of the failed batch stayed
    assert store.begin("d", "t", "l2") > again  # and the store still claims
