"""The step threads of stream loads (loads/steps.py): every step's value or error reaches its caller,
concurrent loads' steps share a few threads, off the event loop, and the steps of one batch share one WAL sync
and one database write of their label claims."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from loads.steps import STEP_THREADS, StepThreads
from spark_runner.group_commit import WalLog
from tables.errors import LabelAlreadyExists
from tables.transactions import ABORTED, PREPARE, TransactionStore


def test_concurrent_steps_return_their_own_values_on_a_few_threads_off_the_loop() -> None:
    steps = StepThreads("test-step")
    ran_on: set[int] = set()

    def step(i: int) -> int:
        ran_on.add(threading.get_ident())
        time.sleep(0.001)  # a claim's or a sync's wait on the disk
        return i * i

    async def many() -> list[int]:
        return await asyncio.gather(*(steps.run(lambda i=i: step(i)) for i in range(200)))

    async def on_loop() -> tuple[list[int], int]:
        return await many(), threading.get_ident()

    values, loop_thread = asyncio.run(on_loop())
    assert values == [i * i for i in range(200)]
    assert 1 <= len(ran_on) <= STEP_THREADS
    assert loop_thread not in ran_on


def test_a_step_error_is_raised_to_its_caller_alone() -> None:
    steps = StepThreads("test-step")

    def step(i: int) -> int:
        if i == 3:
            raise ValueError("label in use")
        return i

    async def many() -> list[int | BaseException]:
        return await asyncio.gather(*(steps.run(lambda i=i: step(i)) for i in range(6)), return_exceptions=True)

    outcomes = asyncio.run(many())
    assert [o for i, o in enumerate(outcomes) if i != 3] == [0, 1, 2, 4, 5]
    assert isinstance(outcomes[3], ValueError) and str(outcomes[3]) == "label in use"


def test_a_cancelled_callers_step_ends_and_its_value_is_undone() -> None:
    steps = StepThreads("test-step")
    started, go_on = threading.Event(), threading.Event()
    undone: list[str] = []

    def claim() -> str:
        started.set()
        go_on.wait(10)
        return "txn 7"

    async def cancel_midway() -> None:
        task = asyncio.create_task(steps.run(claim, undo=undone.append))
        assert await asyncio.to_thread(started.wait, 10)
        task.cancel()
        go_on.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        deadline = time.monotonic() + 10
        while not undone:
            assert time.monotonic() < deadline, "the cancelled caller's value was never undone"
            await asyncio.sleep(0.01)

    asyncio.run(cancel_midway())
    assert undone == ["txn 7"]


class _Record:
    """A step's `Deferred` value as an async load's is: its WAL record written, synced by `flush`."""

    def __init__(self, wal: WalLog, txn_id: int, fail_sync: bool = False) -> None:
        self.wal, self.txn_id, self.fail_sync = wal, txn_id, fail_sync
        self.mine = wal.write(txn_id, b'{"load": %d}' % txn_id, b"%d,row\n" % txn_id)
        self.failed: BaseException | None = None

    def flush(self) -> None:
        if self.fail_sync:
            raise OSError(5, "Input/output error")
        self.wal.sync(self.mine)

    def finish(self) -> int:
        return self.txn_id

    def fail(self, error: BaseException) -> None:
        self.failed = error
        self.wal.release(self.txn_id)


async def _held(steps: StepThreads, go_on: threading.Event) -> asyncio.Future[bool]:
    """A step that holds the step thread until `go_on` (returned once it runs): the steps queued meanwhile
    form one batch."""
    running = threading.Event()

    def hold() -> bool:
        running.set()
        return go_on.wait(10)

    held = asyncio.ensure_future(steps.run(hold))
    assert await asyncio.to_thread(running.wait, 10)
    return held


def test_the_wal_records_of_a_step_batch_share_one_sync(tmp_path: Path) -> None:
    wal = WalLog(tmp_path)
    steps = StepThreads("test-step", threads=1)
    go_on = threading.Event()

    async def batch() -> list[int]:
        held = await _held(steps, go_on)
        loads = [steps.run_deferred(lambda i=i: _Record(wal, i)) for i in range(16)]
        tasks = [asyncio.ensure_future(load) for load in loads]
        await asyncio.sleep(0.05)
        go_on.set()
        await held
        return await asyncio.gather(*tasks)

    assert asyncio.run(batch()) == list(range(16))
    assert (wal.appends, wal.fsyncs) == (16, 1)
    recovered: list[int] = []
    assert WalLog(tmp_path).recover(lambda txn_id, meta, payload: recovered.append(txn_id) is None) == 16
    assert recovered == list(range(16))


def test_a_failed_sync_fails_its_step_alone_and_its_record_is_not_owed(tmp_path: Path) -> None:
    wal = WalLog(tmp_path)
    steps = StepThreads("test-step", threads=1)
    records: dict[int, _Record] = {}

    def record(i: int) -> _Record:
        records[i] = _Record(wal, i, fail_sync=i == 2)
        return records[i]

    async def batch() -> list[int | BaseException]:
        go_on = threading.Event()
        held = await _held(steps, go_on)
        tasks = [asyncio.ensure_future(steps.run_deferred(lambda i=i: record(i))) for i in range(4)]
        await asyncio.sleep(0.05)
        go_on.set()
        await held
        return await asyncio.gather(*tasks, return_exceptions=True)

    outcomes = asyncio.run(batch())
    assert [o for i, o in enumerate(outcomes) if i != 2] == [0, 1, 3]
    assert isinstance(outcomes[2], OSError) and records[2].failed is outcomes[2]
    assert all(records[i].failed is None for i in (0, 1, 3))


def test_the_label_claims_of_a_step_batch_share_one_database_write(tmp_path: Path) -> None:
    txns = TransactionStore(tmp_path / "txns.db")
    steps = StepThreads("test-step", threads=1)

    class Claiming:
        def __init__(self, label: str) -> None:
            self.claim = txns.claim("db", "t", label)

        def flush(self) -> None:
            self.txn_id = txns.claimed(self.claim)

        def finish(self) -> int:
            return self.txn_id

        def fail(self, error: BaseException) -> None:
            pass

    async def batch() -> list[int | BaseException]:
        go_on = threading.Event()
        held = await _held(steps, go_on)
        labels = [f"l{i}" for i in range(10)] + ["l3"]  # the last one is taken already
        tasks = [asyncio.ensure_future(steps.run_deferred(lambda label=label: Claiming(label))) for label in labels]
        await asyncio.sleep(0.05)
        go_on.set()
        await held
        return await asyncio.gather(*tasks, return_exceptions=True)

    before = txns.claim_batches
    outcomes = asyncio.run(batch())
    assert txns.claim_batches - before == 1
    assert len({o for o in outcomes[:10] if isinstance(o, int)}) == 10
    assert isinstance(outcomes[10], LabelAlreadyExists)
    assert [txns.label_state("db", f"l{i}") for i in range(10)] == [PREPARE] * 10


def test_the_steps_of_a_batch_read_the_catalog_once(tmp_path: Path) -> None:
    """A step thread's batch runs in its `batch_scope` (the catalog's `shared_reads`): ten loads of a table planned
    in one batch see one read of its catalog row, even when another server commits between two of them."""
    from sql.ddl import parse_create_table
    from tables.catalog import Catalog

    uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    mine, theirs = (Catalog(uri=uri, warehouse=tmp_path / "warehouse") for _ in range(2))
    mine.create_database("d")
    mine.create_table(
        parse_create_table("CREATE TABLE t (k INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k)", "d").definition
    )
    steps = StepThreads("test-step", threads=1, batch_scope=mine.shared_reads)

    def plan(i: int) -> str:
        if i == 5:  # another server commits while the batch runs
            theirs.load("d", "t").iceberg.transaction().set_properties({"k": "v"}).commit_transaction()
        return mine.load("d", "t").iceberg.metadata_location

    async def batches() -> tuple[list[str], str]:
        go_on = threading.Event()
        held = await _held(steps, go_on)
        tasks = [asyncio.ensure_future(steps.run(lambda i=i: plan(i))) for i in range(10)]
        await asyncio.sleep(0.05)
        go_on.set()
        await held
        one = await asyncio.gather(*tasks)
        return one, await steps.run(lambda: plan(10))  # the next batch: a read of its own

    one, next_batch = asyncio.run(batches())
    assert len(set(one)) == 1 and next_batch != one[0]


def test_the_transaction_states_of_a_batch_of_async_loads_are_read_at_once(tmp_path: Path) -> None:
    """`StateChecks`: ten loads queued, then read one by one (their WAL syncs): one statement reads all ten, each
    load gets its own transaction (an aborted one as aborted), and a load that is forgotten is not read."""
    from spark_runner.group_commit import StateChecks

    class Counted(TransactionStore):
        reads = 0

        def get_many(self, txn_ids: Any) -> Any:
            Counted.reads += 1
            return super().get_many(txn_ids)

    txns = Counted(tmp_path / "txns.db")
    ids = [txns.begin("db", "t", f"l{i}") for i in range(11)]
    txns.set_state(ids[3], ABORTED)
    checks = StateChecks(txns)
    for txn_id in ids:
        checks.queue(txn_id)
    checks.forget(ids[10])
    states = [checks.read(txn_id) for txn_id in ids[:10]]
    assert Counted.reads == 1
    assert [t.txn_id for t in states if t is not None] == ids[:10]
    assert [t.state for t in states if t is not None] == [PREPARE] * 3 + [ABORTED] + [PREPARE] * 6


def test_a_load_forgotten_while_its_state_is_being_read_leaves_nothing_behind(tmp_path: Path) -> None:
    """A load whose WAL sync failed is forgotten: whether its state is still queued, being read by another load's
    read, or read already, nothing of it stays in `StateChecks` (each failed sync would have kept one entry), and
    the other loads of the read get theirs."""
    from spark_runner.group_commit import StateChecks

    reading, release = threading.Event(), threading.Event()

    class Paused(TransactionStore):
        def get_many(self, txn_ids: Any) -> Any:
            reading.set()
            release.wait(10)
            return super().get_many(txn_ids)

    txns = Paused(tmp_path / "txns.db")
    ids = [txns.begin("db", "t", f"l{i}") for i in range(3)]
    checks = StateChecks(txns)
    for txn_id in ids:
        checks.queue(txn_id)
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.append(checks.read(ids[0])))
    reader.start()
    assert reading.wait(10)
    checks.forget(ids[1])  # held by the read under way
    release.set()
    reader.join(10)
    assert [t.txn_id for t in got] == [ids[0]]
    assert checks.read(ids[2]).txn_id == ids[2]  # type: ignore[union-attr]
    checks.forget(ids[0])  # read already: nothing to drop
    assert (checks._found, checks._pending) == ({}, [])
    assert not getattr(checks, "_forgotten", ())  # (the ids dropped once the read under way ends)
