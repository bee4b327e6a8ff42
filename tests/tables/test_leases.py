"""Leases in the shared store (tables/leases.py): one holder per duty across servers, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tables.leases import COMPACTION, MAINTENANCE, Leases, LeaseTable


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        url = request.getfixturevalue("postgres").create_database()
    engine = sa.create_engine(url)
    yield engine
    engine.dispose()


def test_a_lease_has_one_holder_until_it_expires_or_is_released(engine: sa.Engine) -> None:
    table = LeaseTable(engine)
    assert table.acquire("duty:x", "a", 10, now=100.0)
    assert not table.acquire("duty:x", "b", 10, now=105.0)  # a holds it
    assert table.acquire("duty:x", "a", 10, now=108.0)  # a renews: until 118
    assert not table.acquire("duty:x", "b", 10, now=117.0)
    assert table.acquire("duty:x", "b", 10, now=118.5)  # expired: b takes it
    assert table.holders("duty:", now=119.0) == {"duty:x": "b"}
    table.release("duty:x", "a")  # not a's any more: nothing happens
    assert table.holders("duty:", now=119.0) == {"duty:x": "b"}
    table.release("duty:x", "b")
    assert table.holders("duty:", now=119.0) == {}
    assert table.acquire("duty:x", "a", 10, now=119.0)


def test_servers_racing_for_a_duty_get_exactly_one_winner_per_round(engine: sa.Engine) -> None:
    table = LeaseTable(engine)
    for round_ in range(5):
        wins: list[str] = []
        barrier = threading.Barrier(8)

        def contend(me: str, now: float, barrier: threading.Barrier, wins: list[str]) -> None:
            barrier.wait()
            if table.acquire("duty:race", me, 10, now=now):
                wins.append(me)

        now = 1000.0 + round_ * 100  # every round starts after the last holder's lease expired
        threads = [threading.Thread(target=contend, args=(f"s{i}", now, barrier, wins)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1, (round_, wins)


def test_a_dead_servers_duties_are_taken_over_within_one_period(engine: sa.Engine) -> None:
    period = 1.2
    first = Leases(LeaseTable(engine), server_name="first", period=period, duties=(MAINTENANCE, COMPACTION))
    second = Leases(LeaseTable(engine), server_name="second", period=period, duties=(MAINTENANCE, COMPACTION))
    first.start()
    second.start()
    try:
        assert first.leads(MAINTENANCE) and first.leads(COMPACTION)
        assert not second.leads(MAINTENANCE) and not second.leads(COMPACTION)
        assert first.live_servers() == {"first", "second"}
        assert second.leaders() == {MAINTENANCE: "first", COMPACTION: "first"}
        # the first server dies: it stops renewing and releases nothing
        first._stop.set()
        assert first._thread is not None
        first._thread.join()
        died = time.monotonic()
        while not second.leads(MAINTENANCE):
            assert time.monotonic() - died < period, "the duty was not taken over within one lease period"
            time.sleep(0.02)
        assert second.leads(COMPACTION) and second.leaders() == {MAINTENANCE: "second", COMPACTION: "second"}
        assert second.live_servers() == {"second"}
        # the dead server, had it only paused, no longer believes it leads
        time.sleep(period * 2 / 3)
        assert not first.leads(MAINTENANCE)
    finally:
        second.close()
    assert LeaseTable(engine).holders("") == {}  # a clean stop hands everything back


def test_a_clean_stop_hands_the_duties_over_at_the_next_renewal(engine: sa.Engine) -> None:
    first = Leases(LeaseTable(engine), server_name="first", period=30, duties=(MAINTENANCE,))
    second = Leases(LeaseTable(engine), server_name="second", period=30, duties=(MAINTENANCE,))
    first.start()
    second.renew()
    assert first.leads(MAINTENANCE) and not second.leads(MAINTENANCE)
    first.close()
    second.renew()
    assert second.leads(MAINTENANCE)


def test_a_restarted_server_waits_for_the_survivor_that_adopted_it(engine: sa.Engine) -> None:
    period = 1.2
    first = Leases(LeaseTable(engine), server_name="first", period=period, duties=())
    first.start()
    first._stop.set()  # killed: its lease expires
    survivor = Leases(LeaseTable(engine), server_name="survivor", period=period, duties=())
    survivor.start()
    assert not survivor.adopt("first")  # not expired yet
    time.sleep(period * 2 / 3 + 0.05)
    assert survivor.adopt("first")
    assert survivor.live_servers() == {"first", "survivor"}  # adopted: its claims are the survivor's to resolve
    restarted = Leases(LeaseTable(engine), server_name="first", period=period, duties=())
    starting = threading.Thread(target=restarted.start)
    starting.start()
    time.sleep(period)  # the survivor renews the adopted lease: the restart waits
    assert starting.is_alive()
    survivor.release("first")
    starting.join(timeout=5)
    assert not starting.is_alive()
    assert LeaseTable(engine).holders("server:first")["server:first"] == restarted.token
    restarted.close()
    survivor.close()


def test_a_server_restarted_after_a_kill_takes_its_own_lease_at_once(engine: sa.Engine) -> None:
    first = Leases(LeaseTable(engine), server_name="one", period=30, duties=(MAINTENANCE,))
    first.start()
    first._stop.set()  # killed: its lease is valid for 20 s more
    again = Leases(LeaseTable(engine), server_name="one", period=30, duties=(MAINTENANCE,))
    started = time.monotonic()
    again.start()
    assert time.monotonic() - started < 2
    assert LeaseTable(engine).holders("server:one")["server:one"] == again.token
    assert again.leads(MAINTENANCE)  # and the duties its previous run held
    again.close()
