"""The store (tables/store.py) on both dialects: every store class against SQLite and a real PostgreSQL, and
several stores on one PostgreSQL as several servers are: one winner per label, unique ids, one decision per
transaction, and a database restart survived."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tables.accounts import AccountStore, Identity, Priv, Scope, SharedLoginThrottle
from tables.errors import AlreadyExists, LabelAlreadyExists, NotAuthorized, StoreFailed, StoreUnavailable
from tables.load_jobs import FINISHED, LOADING, PENDING, LoadJobStore
from tables.routine_load import STORE_FORMAT, BatchCounts, JobState, RoutineLoadJob, RoutineLoadSpec, RoutineLoadStore
from tables.store import Store
from tables.transactions import ABORTED, COMMITTED, PRECOMMITTED, PREPARE, UNKNOWN, VISIBLE, TransactionStore
from tests.postgres import PostgresServer


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A fresh store of each dialect (PostgreSQL: a database of its own on the run's server)."""
    if request.param == "sqlite":
        made = Store.sqlite(tmp_path / "transactions.db")
    else:
        server: PostgresServer = request.getfixturevalue("postgres")
        made = Store(server.create_database())
    yield made
    made.close()


def test_labels_conflicts_and_transitions(store: Store) -> None:
    txns = TransactionStore(store, label_keep_seconds=3600)
    first = txns.begin("d", "t", "l1", table_uuid="u1")
    with pytest.raises(LabelAlreadyExists) as held:
        txns.begin("d", "t", "l1")
    assert (held.value.txn_id, held.value.state) == (first, PREPARE)
    assert txns.begin("other_db", "t", "l1") > first  # a label is per database
    assert txns.transition(first, (PREPARE,), PRECOMMITTED, schema_version=3)
    assert not txns.transition(first, (PREPARE,), ABORTED)  # compare-and-set: it is no longer PREPARE
    txn = txns.get(first)
    assert txn is not None and (txn.state, txn.schema_version, txn.table_uuid) == (PRECOMMITTED, 3, "u1")
    assert txn.precommitted is not None and txn.finished is None
    assert txns.transition(first, (PRECOMMITTED,), ABORTED, reason="aborted by user")
    again = txns.begin("d", "t", "l1")  # an ABORTED holder frees the label
    assert again > first and txns.label_state("d", "l1") == PREPARE
    assert txns.set_state(again, VISIBLE)
    assert not txns.set_state(again, ABORTED)  # a VISIBLE transaction stays VISIBLE
    assert txns.label_state("d", "l1") == VISIBLE and txns.label_state("d", "nope") == UNKNOWN
    found = txns.find_label("d", "l1", (ABORTED,))
    assert found is not None and (found.txn_id, found.reason) == (first, "aborted by user")
    assert [t.txn_id for t in txns.in_database("d", label_like="L%")] == [again, first]  # newest first, any case
    other = txns.begin("d", "t2", "l2")
    assert txns.set_states([other], COMMITTED) == 1
    assert [t.txn_id for t in txns.unfinished("d")] == [other]
    assert [t.txn_id for t in txns.unfinished("d", table="t2", table_uuid="u2")] == [other]  # none recorded
    assert txns.unfinished("d", table="t", table_uuid="u1") == []
    assert [t.txn_id for t in txns.in_state(COMMITTED)] == [other]
    expiring = TransactionStore(store, label_keep_seconds=0.05)  # the same table, a short keep time
    time.sleep(0.1)
    assert expiring.label_state("d", "l1") == UNKNOWN
    assert expiring.begin("d", "t", "l1") > other  # an expired VISIBLE holder frees the label
    assert expiring.forget_expired() == 2  # l1's VISIBLE and ABORTED transactions
    assert txns.get(first) is None


def test_accounts(store: Store) -> None:
    accounts = AccountStore(store)
    accounts.bootstrap("secret")
    AccountStore(store).bootstrap("other")  # a second server starting: nothing changes
    assert accounts.authenticate("root", "secret", "10.0.0.1") == Identity("root")
    loader = Identity("loader", "10.0.0.%")
    accounts.create_user(loader, "*HASH")
    with pytest.raises(AlreadyExists):
        accounts.create_user(loader, "*HASH")
    accounts.create_user(loader, "*HASH", if_not_exists=True)
    assert accounts.match("loader", "10.0.0.7") == loader and accounts.match("loader", "10.1.0.7") is None
    accounts.grant(Priv.LOAD | Priv.SELECT, Scope("db", "*"), user=loader)
    accounts.grant(Priv.LOAD, Scope("db", "*"), user=loader)  # privileges add up, one row per scope
    accounts.create_role("readers")
    accounts.grant(Priv.SELECT, Scope("other", "t"), role="readers")
    accounts.grant_role("readers", loader)
    accounts.grant_role("readers", loader)  # twice: still one membership
    privileges = accounts.privileges(loader)
    assert privileges.roles == ("readers",)
    assert privileges.allows(Priv.LOAD, "db", "t") and privileges.allows(Priv.SELECT, "other", "t")
    assert not privileges.allows(Priv.LOAD, "other", "t")
    accounts.revoke(Priv.LOAD | Priv.SELECT, Scope("db", "*"), user=loader)
    assert accounts.own_grants(user=loader) == []
    accounts.set_password(loader, "*OTHER")
    assert accounts.password_hash(loader) == "*OTHER"
    accounts.drop_role("readers")
    assert accounts.privileges(loader).roles == ()
    accounts.drop_user(loader)
    assert loader not in accounts.users() and "readers" not in accounts.roles()


def test_routine_load_jobs_and_offsets(store: Store) -> None:
    jobs = RoutineLoadStore(store)
    assert jobs.format == STORE_FORMAT and RoutineLoadStore(store).format == STORE_FORMAT
    spec = RoutineLoadSpec(name="job", db="db", table="t", broker_list="h:9092", topic="x")
    job = jobs.create(spec)
    with pytest.raises(AlreadyExists):
        jobs.create(spec)
    jobs.record_batch(101, job.id, {0: 10}, BatchCounts(total=10))
    jobs.record_batch(102, job.id, {0: 20}, BatchCounts(total=10, filtered=1))
    jobs.update_batch_counts(102, BatchCounts(total=10, filtered=2))
    assert [(t, p, c.filtered) for t, p, c in jobs.batches_after(job.id, 101)] == [(102, {0: 20}, 2)]
    jobs.save(job.model_copy(update={"state": JobState.STOPPED}))
    assert jobs.create(spec).id > job.id  # a STOPPED job frees its name
    assert [j.state for j in jobs.all()] == [JobState.STOPPED, JobState.NEED_SCHEDULE]


def test_broker_load_jobs(store: Store) -> None:
    jobs = LoadJobStore(store)
    first = jobs.create(db="db", label="a", table="t", statement="LOAD LABEL a ...", task_info="info")
    second = jobs.create(db="db", label="b", table="t", statement="LOAD LABEL b ...", task_info="")
    jobs.update(first, state=LOADING, load_started=1.5, details={"files": 2})
    jobs.update(second, state=FINISHED, txn_id=7, finished=2.5)
    job = jobs.get(first)
    assert job is not None and (job.state, job.details, job.task_info, job.load_started) == (
        LOADING,
        {"files": 2},
        "info",
        1.5,
    )
    assert [j.label for j in jobs.in_database("db")] == ["a", "b"]
    assert [j.txn_id for j in jobs.in_database("db", label="b")] == [7]
    assert [j.job_id for j in jobs.unfinished()] == [first] and jobs.unfinished_count() == 1
    jobs.update(first, state=PENDING)
    assert jobs.unfinished_count() == 1


def test_a_data_dir_of_an_earlier_release_opens_and_gains_the_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "transactions.db"
    with sqlite3.connect(path) as conn:  # the transactions table as its first release made it
        conn.executescript(
            "CREATE TABLE txns (txn_id INTEGER PRIMARY KEY AUTOINCREMENT, db TEXT NOT NULL, tbl TEXT NOT NULL,"
            " label TEXT NOT NULL, state TEXT NOT NULL, created REAL NOT NULL, finished REAL);"
            "INSERT INTO txns (db, tbl, label, state, created) VALUES ('d', 't', 'old', 'PRECOMMITTED', 1.0);"
        )
    conn.close()
    txns = TransactionStore(path)
    old = txns.find_label("d", "old")
    assert old is not None and (old.txn_id, old.state, old.reason, old.table_uuid) == (1, PRECOMMITTED, None, None)
    assert txns.transition(1, (PRECOMMITTED,), COMMITTED, reason="kept")
    assert txns.begin("d", "t", "new", table_uuid="u") == 2
    txns.close()


# -- several servers on one PostgreSQL ----------------------------------------------------------------------------


@pytest.fixture
def shared(postgres: PostgresServer) -> Iterator[str]:
    yield postgres.create_database()


def test_two_servers_claiming_the_same_labels_from_eight_threads(shared: str) -> None:
    servers = [TransactionStore(Store(shared)), TransactionStore(Store(shared))]
    labels = [f"label_{n}" for n in range(40)]
    won: list[tuple[str, int]] = []
    lost: list[str] = []
    guard = threading.Lock()
    start = threading.Barrier(8)

    def claim(n: int) -> None:
        txns = servers[n % 2]
        start.wait()
        for label in labels:
            try:
                txn_id = txns.begin("db", "t", label)
                with guard:
                    won.append((label, txn_id))
            except LabelAlreadyExists:
                with guard:
                    lost.append(label)

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(label for label, _ in won) == sorted(labels)  # exactly one winner per label
    assert len(lost) == 7 * len(labels)
    ids = [txn_id for _, txn_id in won]
    assert len(set(ids)) == len(ids)  # ids unique across the servers
    for label, txn_id in won:
        assert servers[0].label_state("db", label) == PREPARE
        held = servers[1].find_label("db", label)
        assert held is not None and held.txn_id == txn_id
    for txns in servers:
        txns.store.close()


def _set(job: RoutineLoadJob, state: JobState) -> bool:
    job.state = state
    return True


def test_a_routine_load_job_changed_from_two_servers_at_once_loses_no_change(shared: str) -> None:
    """One server folds batches into a job while another pauses and resumes it: every change is a locked
    read-modify-write, so none is lost and the revision counts them all."""
    servers = [RoutineLoadStore(Store(shared)), RoutineLoadStore(Store(shared))]
    job = servers[0].create(RoutineLoadSpec(name="job", db="db", table="t", broker_list="h:9092", topic="x"))
    start = threading.Barrier(8)

    def count_one(stored: RoutineLoadJob) -> bool:
        stored.statistic.total_rows += 1
        return True

    def batches(n: int) -> None:
        start.wait()
        for _ in range(10):
            servers[n % 2].update(job.id, count_one)

    def statements(n: int) -> None:
        start.wait()
        for i in range(10):
            state = JobState.PAUSED if i % 2 == 0 else JobState.NEED_SCHEDULE
            servers[n % 2].update(job.id, lambda stored, state=state: _set(stored, state))

    threads = [threading.Thread(target=batches if n < 6 else statements, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (stored,) = servers[1].all()
    assert (stored.statistic.total_rows, stored.revision, stored.state) == (60, 80, JobState.NEED_SCHEDULE)
    assert servers[0].update(job.id, lambda stored: False).revision == 80  # nothing written: no new revision
    for jobs in servers:
        jobs.store.close()


def test_failed_logins_on_two_servers_count_together(shared: str) -> None:
    one, other = (SharedLoginThrottle(3, 60, store=Store(shared)) for _ in range(2))
    one.failed("10.0.0.1")
    other.failed("10.0.0.1")
    one.check("u", "10.0.0.1")  # two failures: not yet
    other.failed("10.0.0.1")
    for throttle in (one, other):
        with pytest.raises(NotAuthorized, match="due to 3 consecutive failed logins"):
            throttle.check("u", "10.0.0.1")
    one.check("u", "10.0.0.2")  # another address is not counted
    other.succeeded("10.0.0.1")  # a success anywhere clears the count everywhere
    one.check("u", "10.0.0.1")
    for throttle in (one, other):
        assert throttle.store is not None
        throttle.store.close()


def test_a_commit_on_one_server_and_an_abort_on_another_cannot_both_win(shared: str) -> None:
    one, other = TransactionStore(Store(shared)), TransactionStore(Store(shared))
    for round_ in range(20):
        txn_id = one.begin("db", "t", f"2pc_{round_}")
        assert one.transition(txn_id, (PREPARE,), PRECOMMITTED)
        outcomes: dict[str, bool] = {}
        start = threading.Barrier(2)

        def decide(txns: TransactionStore, state: str, start: threading.Barrier = start, txn_id: int = txn_id) -> None:
            start.wait()
            won = txns.transition(txn_id, (PRECOMMITTED,), state)
            outcomes[state] = won  # noqa: B023 (joined below, in this round)

        threads = [
            threading.Thread(target=decide, args=(one, COMMITTED)),
            threading.Thread(target=decide, args=(other, ABORTED)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes.values()) == [False, True]
        winner = COMMITTED if outcomes[COMMITTED] else ABORTED
        assert other.label_state("db", f"2pc_{round_}") == winner
    one.store.close()
    other.store.close()


def test_a_database_restart_is_survived_and_its_absence_is_reported(postgres: PostgresServer, shared: str) -> None:
    txns = TransactionStore(Store(shared))
    accounts = AccountStore(txns.store)
    first = txns.begin("db", "t", "before")
    postgres.stop()
    try:
        with pytest.raises(StoreUnavailable, match=r"catalog database unavailable: .*refused") as down:
            txns.begin("db", "t", "while_down")
        assert down.value.doris_message.startswith("[INTERNAL_ERROR]catalog database unavailable: ")
        with pytest.raises(StoreUnavailable):
            txns.label_state("db", "before")
        with pytest.raises(StoreUnavailable):
            accounts.match("root", "127.0.0.1")
    finally:
        postgres.start()
    assert txns.label_state("db", "before") == PREPARE  # the pools reconnect: no restart of the store
    assert txns.begin("db", "t", "after") > first
    assert txns.find_label("db", "while_down") is None  # nothing of the failed claim
    txns.store.close()


def test_servers_starting_together_on_a_new_database_all_start(postgres: PostgresServer) -> None:
    uri = postgres.create_database()  # no tables yet: each start creates them, the accounts and the format row
    stores: list[Store] = []
    errors: list[BaseException] = []
    go = threading.Barrier(4)

    def start() -> None:
        store = Store(uri)
        stores.append(store)
        go.wait()
        try:
            TransactionStore(store)
            AccountStore(store).bootstrap("secret")
            RoutineLoadStore(store)
            LoadJobStore(store)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert AccountStore(stores[0]).users() == [Identity("admin"), Identity("root")]
    assert RoutineLoadStore(stores[0]).format == STORE_FORMAT
    for store in stores:
        store.close()


def test_a_read_only_store_fails_writes_in_dorises_words_and_writes_again_once_writable(
    store: Store, request: pytest.FixtureRequest
) -> None:
    """SQLite: the write connection refuses writes (`query_only`, as a connection opened while its file could not
    be written does); PostgreSQL: the database's sessions are read-only (`default_transaction_read_only`, as on a
    standby). The write fails with the reason, not the driver's error in SQLAlchemy's wrapping; reads answer;
    once writes are possible again they succeed, on the same store."""
    txns = TransactionStore(store, label_keep_seconds=3600)
    first = txns.begin("db", "t", "before")
    if store.dialect == "sqlite":
        store._write_conn.execute("PRAGMA query_only = ON")
    else:
        import psycopg
        import sqlalchemy as sa

        postgres: PostgresServer = request.getfixturevalue("postgres")
        name = sa.engine.make_url(store.uri).database
        with psycopg.connect(postgres.dsn(), autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        store._engine.dispose()  # new sessions take the database's setting
    with pytest.raises(StoreFailed) as refused:
        txns.begin("db", "t", "during")
    assert refused.value.doris_message.startswith(
        "[INTERNAL_ERROR]catalog store write failed: the database is read-only"
    )
    assert "sqlalchemy" not in refused.value.doris_message.lower()
    assert txns.label_state("db", "before") == PREPARE and txns.label_state("db", "during") == UNKNOWN
    if store.dialect == "postgresql":
        with psycopg.connect(postgres.dsn(), autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = off')
        store._engine.dispose()
    assert txns.begin("db", "t", "during") > first  # SQLite: the refusing connection was replaced
