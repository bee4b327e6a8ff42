"""One version order per table across servers (tables/versions.py), on a real PostgreSQL store."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tables.errors import DorisError
from tables.versions import SharedTurnstile, SharedVersions
from tests.postgres import PostgresServer

TABLE = "0b6f8d9e-1111-4c4c-8888-000000000001"


@pytest.fixture
def engine(postgres: PostgresServer) -> Iterator[sa.Engine]:
    engine = sa.create_engine(postgres.create_database(), pool_size=20)
    yield engine
    engine.dispose()


def servers(engine: sa.Engine, *names: str, live: set[str] | None = None) -> list[SharedVersions]:
    alive = live if live is not None else set(names)
    return [SharedVersions(engine, name, alive.__contains__) for name in names]


def test_commits_of_three_servers_land_in_the_order_their_versions_were_handed_out(engine: sa.Engine) -> None:
    """Each of 3 servers runs 4 loads of one table at once, each with a job of random length; the commits (a
    critical section that would interleave without the lock) land in strictly increasing version order."""
    turnstiles = [SharedTurnstile(v, TABLE, floor=5) for v in servers(engine, "a", "b", "c")]
    committed: list[int] = []
    inside = threading.Semaphore(1)
    overlaps: list[int] = []

    def load(turnstile: SharedTurnstile) -> None:
        version = turnstile.take()
        try:
            time.sleep(random.uniform(0, 0.05))  # the job
            with turnstile.turn(version):
                if not inside.acquire(blocking=False):
                    overlaps.append(version)
                    return
                committed.append(version)
                time.sleep(0.005)
                inside.release()
        finally:
            turnstile.done(version)

    threads = [threading.Thread(target=load, args=(t,)) for t in turnstiles for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert overlaps == []
    assert committed == list(range(5, 17))
    assert turnstiles[0].next_version == 17


def test_a_released_version_gives_its_turn_away_and_its_own_turn_fails(engine: sa.Engine) -> None:
    a, b = (SharedTurnstile(v, TABLE, floor=1) for v in servers(engine, "a", "b"))
    stuck = a.take()
    later = b.take()
    got_turn = threading.Event()

    def wait_for_turn() -> None:
        with b.turn(later):
            got_turn.set()

    waiter = threading.Thread(target=wait_for_turn)
    waiter.start()
    assert not got_turn.wait(0.3)  # the lower version holds the table
    a.done(stuck)  # abandoned at its deadline: released
    assert got_turn.wait(5)
    waiter.join()
    b.done(later)
    with pytest.raises(DorisError, match="was released"), a.turn(stuck):
        pass


def test_the_claims_of_a_server_that_died_are_released_by_the_next_waiting_server(engine: sa.Engine) -> None:
    live = {"survivor"}
    dead, survivor = (SharedTurnstile(v, TABLE, floor=1) for v in servers(engine, "dead", "survivor", live=live))
    dead.take()  # its server was killed before it committed: the claim stays in the store
    mine = survivor.take()
    started = time.monotonic()
    with survivor.turn(mine):
        waited = time.monotonic() - started
    survivor.done(mine)
    assert 1.5 < waited < 10  # after DEAD_CHECK_SECONDS, not before


def test_a_live_servers_claim_is_never_released_by_another(engine: sa.Engine) -> None:
    slow, other = (SharedTurnstile(v, TABLE, floor=1) for v in servers(engine, "slow", "other"))
    first = slow.take()
    second = other.take()
    done = threading.Event()

    def wait() -> None:
        with other.turn(second):
            done.set()
        other.done(second)

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert not done.wait(3.0)  # past DEAD_CHECK_SECONDS: "slow" is alive, its claim holds
    with slow.turn(first):
        pass
    slow.done(first)
    assert done.wait(5)
    waiter.join()


def test_the_commit_lock_excludes_a_compaction_on_another_server(engine: sa.Engine) -> None:
    a, b = (SharedTurnstile(v, TABLE, floor=1) for v in servers(engine, "a", "b"))
    version = a.take()
    entered = threading.Event()

    def compaction() -> None:
        with b.commit_lock:
            entered.set()

    with a.turn(version):
        thread = threading.Thread(target=compaction)
        thread.start()
        assert not entered.wait(0.5)
    a.done(version)
    assert entered.wait(5)
    thread.join()


def test_a_claim_this_server_failed_to_release_is_released_by_its_next_turn(engine: sa.Engine) -> None:
    versions = servers(engine, "a")[0]
    turnstile = SharedTurnstile(versions, TABLE, floor=1)
    lost = turnstile.take()
    turnstile._mine.discard(lost)  # its `done` could not reach the store: the claim stayed
    mine = turnstile.take()
    started = time.monotonic()
    with turnstile.turn(mine):
        assert time.monotonic() - started < 1
    turnstile.done(mine)
    assert versions.lowest(TABLE) is None


def test_servers_starting_at_once_on_a_new_database_all_create_what_they_need(postgres: PostgresServer) -> None:
    """Four servers' first start at the same instant: each creates the leases and version tables if missing
    (without the schema lock, concurrent CREATE TABLEs of one name fail in PostgreSQL's catalog)."""
    from tables.leases import LeaseTable

    engine = sa.create_engine(postgres.create_database(), pool_size=8)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def start(name: str) -> None:
        barrier.wait()
        try:
            LeaseTable(engine)
            SharedVersions(engine, name, lambda _: True)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(f"s{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine.dispose()
    assert errors == []
