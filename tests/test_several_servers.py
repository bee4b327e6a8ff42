"""Several servers on one PostgreSQL store and one shared dir: any server takes any load and answers the same.

Two servers (`python -m app`, each its own data dir and local Spark) share a real PostgreSQL database (the
Iceberg catalog and everything the servers record) and one shared dir (the warehouse). A client may send a load
to either, its two-phase commit to the other; labels are unique across them; loads into one table commit in one
version order whichever server took them; a killed server's in-flight loads are resolved by the survivor and
its background duties taken over.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conformance import run_case
from tests.helpers import DorisClient, assert_doris_result
from tests.kafka_mock import MockKafka
from tests.postgres import PostgresServer
from tests.server_process import ServerProcess

DATA = Path(__file__).resolve().parent / "data" / "conformance" / "cases"
LEASE_SECONDS = 6
LOGIN_MAX_FAILURES = 4
ROUTINE_JOB = """CREATE ROUTINE LOAD rl_a ON routine_a COLUMNS TERMINATED BY ",", COLUMNS(k, v)
    PROPERTIES ("max_batch_interval" = "1")
    FROM KAFKA ("kafka_broker_list" = "{bootstrap}", "kafka_topic" = "{topic}",
                "property.kafka_default_offsets" = "OFFSET_BEGINNING")"""


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(0.3)


@dataclass
class Deployment:
    uri: str
    shared: Path
    servers: list[ServerProcess]
    root: Path

    def client(self, i: int) -> DorisClient:
        return DorisClient(self.servers[i].base_url)


def new_server(root: Path, name: str, uri: str, shared: Path, **env: str) -> ServerProcess:
    return ServerProcess(
        root / name,
        root / f"{name}.log",
        SL_CATALOG_URI=uri,
        SL_SHARED_DIR=str(shared),
        SL_SPARK_MASTER="local[1]",
        SL_LEASE_SECONDS=str(LEASE_SECONDS),
        SL_LOGIN_MAX_FAILURES=str(LOGIN_MAX_FAILURES),
        SL_LOGIN_LOCK_SECONDS="3",
        **env,
    )


@pytest.fixture(scope="module")
def deployment(postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("several")
    uri = postgres.create_database()
    shared = root / "shared"
    servers = [
        new_server(root, "a", uri, shared, SL_PAUSE_AT="job:paused_a:once,job:async_a:once"),
        new_server(root, "b", uri, shared),
    ]
    try:
        with ThreadPoolExecutor(2) as pool:  # both at once: a start is mostly waiting for the JVM
            list(pool.map(lambda server: server.start(timeout=180), servers))
        yield Deployment(uri, shared, servers, root)
    finally:
        for server in servers:
            server.kill()


class Alternating(DorisClient):
    """A client that sends each request to the next server in turn (a round-robin load balancer)."""

    def __init__(self, clients: list[DorisClient]) -> None:
        super().__init__(clients[0].base_url)
        self._clients = clients
        self._next = 0

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_") or name not in ("sql", "sql_raw", "stream_load", "rows"):
            return super().__getattribute__(name)
        clients = self._clients
        client = clients[self._next % len(clients)]
        self._next += 1
        return getattr(client, name)


def new_db(doris: DorisClient, name: str) -> str:
    db = f"{name}_{random.randrange(1 << 30)}"
    doris.sql(db, f"CREATE DATABASE {db}")
    return db


def test_a_label_is_unique_across_servers_and_a_schema_change_reaches_the_other(deployment: Deployment) -> None:
    a, b = deployment.client(0), deployment.client(1)
    db = new_db(a, "labels")
    a.sql(db, "CREATE TABLE t (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    assert_doris_result(a.stream_load(db, "t", "1,a\n", {"column_separator": ",", "label": "once"}), loaded=1)
    again = b.stream_load(db, "t", "2,b\n", {"column_separator": ",", "label": "once"}).json()
    assert again["Status"] == "Label Already Exists", again
    for server in deployment.servers:
        assert server.label_state(db, "once") == "VISIBLE"
    assert b.rows(db, "SELECT k, v FROM t") == [[1, "a"]]
    # a schema change through one server is what the other's next load is planned on
    a.sql(db, "ALTER TABLE t ADD COLUMN w INT")
    assert_doris_result(b.stream_load(db, "t", "2,b,7\n", {"column_separator": ",", "columns": "k,v,w"}), loaded=1)
    assert a.rows(db, "SELECT k, v, w FROM t ORDER BY k") == [[1, "a", None], [2, "b", 7]]


def test_a_loads_error_log_is_served_by_every_server(deployment: Deployment) -> None:
    """The ErrorURL of a load through a opens on b too (behind a load balancer the next request may go anywhere),
    with the same credentials; a name that is not an error log is not found on either; one an earlier release
    wrote in a server's data dir is still served by that server."""
    a, b = deployment.client(0), deployment.client(1)
    db = new_db(a, "errorlog")
    a.sql(db, "CREATE TABLE t (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    reply = a.stream_load(db, "t", "1,a\n2,b,c\n", {"column_separator": ",", "max_filter_ratio": "0.9"}).json()
    assert reply["Status"] == "Success" and reply["NumberFilteredRows"] == 1, reply
    name = reply["ErrorURL"].split("file=", 1)[1]
    for doris in (a, b):
        found = doris.http.get("/api/_load_error_log", params={"file": name})
        assert found.status_code == 200 and "actual column number" in found.text, found.text
        assert doris.http.get("/api/_load_error_log", params={"file": "../transactions.db"}).status_code == 404
    anonymous = httpx.get(f"{deployment.servers[1].base_url}/api/_load_error_log", params={"file": name})
    assert anonymous.status_code == 401
    # one an earlier release wrote in a's data dir: a still serves it
    old = deployment.servers[0].data_dir / "error_log" / "error_log_123_old_label"
    old.parent.mkdir(exist_ok=True)
    old.write_text("Reason: an earlier release's error log\n")
    assert "earlier release" in a.http.get("/api/_load_error_log", params={"file": old.name}).text


def test_failed_logins_spread_over_servers_lock_the_address_out_on_all(deployment: Deployment) -> None:
    """Guesses alternating between a and b count together (the store holds them): after four, the right password
    is refused on both servers until the lock passes. The guesser comes from 127.0.0.2, so root's own
    requests (127.0.0.1) stay unaffected."""
    name = f"guessed_{uuid.uuid4().hex[:6]}"
    deployment.client(0).sql("information_schema", f"CREATE USER '{name}'@'%' IDENTIFIED BY 'right'")
    guesser = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=30)
    urls = [f"{server.base_url}/api/backends" for server in deployment.servers]
    for guess in range(LOGIN_MAX_FAILURES):
        reply = guesser.get(urls[guess % 2], auth=(name, f"wrong{guess}")).json()
        assert "Access denied for user" in reply["data"] and "blocked" not in reply["data"], reply
    for url in urls:
        locked = guesser.get(url, auth=(name, "right")).json()  # the right password, too late, on either
        assert locked["code"] == 401 and f"{LOGIN_MAX_FAILURES} consecutive failed logins" in locked["data"], locked
    assert deployment.client(1).rows("information_schema", "SELECT 1") == [[1]]  # another address logs in
    time.sleep(3.1)
    assert guesser.get(urls[1], auth=(name, "right")).json()["code"] == 0
    assert guesser.get(urls[0], auth=(name, "wrong")).json()["code"] == 401  # the count started again: one
    assert guesser.get(urls[0], auth=(name, "right")).json()["code"] == 0


def test_a_two_phase_load_precommitted_on_one_server_commits_on_the_other(deployment: Deployment) -> None:
    a = deployment.client(0)
    db = new_db(a, "twophase")
    a.sql(db, "CREATE TABLE t (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    txn_id = a.precommit(db, "t", b"1,x\n2,y\n", {"column_separator": ",", "label": "tp"})
    deployment.client(1).commit_txn(db, txn_id)
    assert a.rows(db, "SELECT k, v FROM t ORDER BY k") == [[1, "x"], [2, "y"]]
    assert deployment.servers[0].label_state(db, "tp") == "VISIBLE"


def test_clients_spread_over_servers_commit_in_one_version_order(deployment: Deployment) -> None:
    """8 clients, 3 loads each, over both servers into one table with a sequence column: colliding keys and
    sequence ties. The table equals a model replaying the loads in the version order the snapshots record
    (a tie goes to the later commit, as in Doris)."""
    check_spread_loads(deployment, [deployment.client(0), deployment.client(1)])


@pytest.mark.full
def test_clients_spread_over_three_servers_commit_in_one_version_order(deployment: Deployment) -> None:
    third = new_server(deployment.root, "c", deployment.uri, deployment.shared).start(timeout=180)
    try:
        check_spread_loads(deployment, [deployment.client(0), deployment.client(1), DorisClient(third.base_url)])
    finally:
        third.terminate()


def check_spread_loads(deployment: Deployment, clients: list[DorisClient]) -> None:
    a = clients[0]
    db = new_db(a, "order")
    a.sql(
        db,
        "CREATE TABLE t (k INT, s INT, v VARCHAR(16)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2 "
        'PROPERTIES ("function_column.sequence_col" = "s")',
    )
    loads: dict[str, list[tuple[int, int]]] = {}
    for c in range(8):
        for i in range(3):
            rng = random.Random(f"{c}/{i}")
            loads[f"c{c}_{i}"] = [(k, rng.randrange(3)) for k in rng.sample(range(10), 4)]

    def client(c: int) -> None:
        doris = clients[c % len(clients)]
        for i in range(3):
            label = f"c{c}_{i}"
            body = "".join(f"{k},{s},{label}\n" for k, s in loads[label])
            assert_doris_result(doris.stream_load(db, "t", body, {"column_separator": ",", "label": label}), loaded=4)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(client, range(8)))
    order = version_order(deployment, db, "t")
    assert sorted(order) == sorted(loads)
    expected: dict[int, tuple[int, str]] = {}
    for label in order:  # in version order: an equal sequence value goes to the later load
        for k, s in loads[label]:
            if k not in expected or s >= expected[k][0]:
                expected[k] = (s, label)
    want = [[k, s, label] for k, (s, label) in sorted(expected.items())]
    for doris in clients:
        assert doris.rows(db, "SELECT k, s, v FROM t ORDER BY k") == want


def version_order(deployment: Deployment, db: str, table: str) -> list[str]:
    """The table's load labels in version (commit) order, from its snapshots in the shared catalog."""
    from tables.catalog import VERSION_PROPERTY, Catalog

    catalog = Catalog(uri=deployment.uri, warehouse=deployment.shared / "warehouse")
    snaps = [s.summary.additional_properties for s in catalog.load(db, table).iceberg.snapshots() if s.summary]
    loads = [p for p in snaps if "doris.label" in p]
    versions = [int(p[VERSION_PROPERTY]) for p in loads]
    assert len(set(versions)) == len(versions), "two loads got one version"
    return [p["doris.label"] for p in sorted(loads, key=lambda p: int(p[VERSION_PROPERTY]))]


def show_job(doris: DorisClient, db: str, name: str) -> dict[str, Any]:
    data = doris.sql(db, f"SHOW ALL ROUTINE LOAD FOR {name}")
    names = [m["name"] for m in data["meta"]]
    (row,) = data["data"]
    return dict(zip(names, row, strict=True))


def test_a_routine_load_job_is_shown_paused_resumed_and_stopped_through_any_server(deployment: Deployment) -> None:
    """A job created through a runs on a; b lists it and pauses, resumes and stops it, and a's consumer follows
    (Doris: any FE answers for any job)."""
    a, b = deployment.client(0), deployment.client(1)
    db = new_db(a, "anyserver")
    a.sql(db, "CREATE TABLE t (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    kafka = MockKafka()
    topic = f"any_{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic)
    a.sql(db, ROUTINE_JOB.replace("rl_a ON routine_a", "rl_any ON t").format(bootstrap=kafka.bootstrap, topic=topic))
    listed = b.sql(db, "SHOW ROUTINE LOAD")["data"]
    assert [row[1] for row in listed] == ["rl_any"], listed
    b.sql(db, "PAUSE ROUTINE LOAD FOR rl_any")
    for doris in (a, b):
        job = show_job(doris, db, "rl_any")
        assert job["State"] == "PAUSED", job
        assert "User root pauses routine load job" in job["ReasonOfStateChanged"], job
    assert "Could not transform PAUSED to PAUSED" in a.sql_error(db, "PAUSE ROUTINE LOAD FOR rl_any")
    time.sleep(1.5)  # a's consumer has seen the pause on its poll (every second) and stopped
    kafka.produce(topic, [(0, b"1,first")])
    time.sleep(2.5)  # two batch intervals: a paused job consumes nothing
    assert a.rows(db, "SELECT k, v FROM t") == []
    b.sql(db, "RESUME ROUTINE LOAD FOR rl_any")
    wait_for("the message after the resume", lambda: b.rows(db, "SELECT k, v FROM t") == [[1, "first"]])
    assert show_job(b, db, "rl_any")["State"] == "RUNNING"
    b.sql(db, "STOP ROUTINE LOAD FOR rl_any")
    assert show_job(a, db, "rl_any")["State"] == "STOPPED"
    assert "Could not transform STOPPED to STOPPED" in a.sql_error(db, "STOP ROUTINE LOAD FOR rl_any")


# every case, each request to the next server in turn (`make test-full`: a minute or two)
@pytest.mark.full
@pytest.mark.parametrize("case", sorted(DATA.glob("*.json")), ids=lambda p: p.stem)
def test_every_conformance_case_through_both_servers(deployment: Deployment, case: Path) -> None:
    run_case(case, Alternating([deployment.client(0), deployment.client(1)]))


@pytest.mark.full
def test_a_database_restart_under_both_servers_fails_their_loads_clearly_and_is_survived(
    deployment: Deployment, postgres: PostgresServer
) -> None:
    """PostgreSQL stops under both servers: each answers a load with Doris's INTERNAL_ERROR naming the database,
    claims nothing, and loads again once it is back, without a restart."""
    a, b = deployment.client(0), deployment.client(1)
    db = new_db(a, "dbrestart")
    a.sql(db, "CREATE TABLE t (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    postgres.stop()
    try:
        for i, doris in enumerate((a, b)):
            down = doris.stream_load(db, "t", f"{i},down\n", {"column_separator": ",", "label": f"down_{i}"}).json()
            assert down["Status"] == "Fail", down
            assert down["Message"].startswith("[INTERNAL_ERROR]catalog database unavailable: "), down
    finally:
        postgres.start()
    for i, doris in enumerate((a, b)):
        assert deployment.servers[i].label_state(db, f"down_{i}") == "UNKNOWN"  # nothing of it was claimed
        back = doris.stream_load(db, "t", f"{i},back\n", {"column_separator": ",", "label": f"back_{i}"})
        assert_doris_result(back, loaded=1)
    for doris in (a, b):
        assert doris.rows(db, "SELECT k, v FROM t ORDER BY k") == [[0, "back"], [1, "back"]]


def test_a_killed_servers_loads_are_resolved_and_its_duties_taken_over(deployment: Deployment) -> None:
    """Last in the module: server a dies (SIGKILL) with a load paused in its job and an acknowledged async
    group-commit load whose group is paused. Its acknowledged loads stay: server b replays the async one from a's
    WAL on the shared dir, aborts the paused one after the lease, takes every background duty and runs its routine
    load."""
    a, b = deployment.client(0), deployment.client(1)
    db = new_db(b, "killed")
    for name in ("kept", "paused_a", "async_a", "routine_a"):
        b.sql(db, f"CREATE TABLE {name} (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    # a routine load created through a: it runs there, and on b once a is gone
    kafka = MockKafka()
    topic = f"several_{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic)
    kafka.produce(topic, [(0, b"1,first")])
    a.sql(db, ROUTINE_JOB.format(bootstrap=kafka.bootstrap, topic=topic))
    wait_for("the first message", lambda: a.rows(db, "SELECT k, v FROM routine_a") == [[1, "first"]])
    assert_doris_result(a.stream_load(db, "kept", "1,acked\n", {"column_separator": ",", "label": "acked"}), loaded=1)
    precommitted = a.precommit(db, "kept", b"3,twophase\n", {"column_separator": ",", "label": "pre_a"})
    headers = {"column_separator": ",", "group_commit": "async_mode"}
    acked = a.stream_load(db, "async_a", "5,owed\n", headers).json()  # acknowledged: in a's WAL
    assert acked["Status"] == "Success" and acked["GroupCommitMode"] == "async_mode", acked
    async_label = acked["Label"]
    deployment.servers[0].wait_for_log(["paused at job (table async_a)"])
    with ThreadPoolExecutor(1) as pool:
        pool.submit(a.stream_load, db, "paused_a", "1,lost\n", {"column_separator": ",", "label": "in_flight"})
        deployment.servers[0].wait_for_log(["paused at job (table paused_a)"])
        assert deployment.servers[1].label_state(db, "in_flight") == "PREPARE"
        deployment.servers[0].kill()
    died = time.monotonic()
    survivor = deployment.servers[1]
    while survivor.label_state(db, "in_flight") != "ABORTED" or survivor.label_state(db, async_label) != "VISIBLE":
        assert time.monotonic() - died < 60, (survivor.label_state(db, "in_flight"), survivor.log_text()[-3000:])
        time.sleep(0.5)
    assert b.rows(db, "SELECT k, v FROM kept") == [[1, "acked"]]
    assert survivor.label_state(db, "pre_a") == "PRECOMMITTED"  # a's two-phase load waits for any server
    b.commit_txn(db, precommitted)
    assert b.rows(db, "SELECT k, v FROM kept ORDER BY k") == [[1, "acked"], [3, "twophase"]]
    assert b.rows(db, "SELECT k, v FROM async_a") == [[5, "owed"]]
    assert b.rows(db, "SELECT count(*) FROM paused_a") == [[0]]
    assert not list((deployment.shared / "warehouse").rglob("paused_a*/data/txn_*/*.parquet"))
    # the label is free again, and the table takes loads through the survivor
    assert_doris_result(
        b.stream_load(db, "paused_a", "2,b\n", {"column_separator": ",", "label": "in_flight"}), loaded=1
    )
    survivor.wait_for_log(["took duty maintenance"], timeout=2 * LEASE_SECONDS)
    kafka.produce(topic, [(0, b"2,second")])
    wait_for("the message after the kill", lambda: b.rows(db, "SELECT k, v FROM routine_a ORDER BY k") == [
        [1, "first"], [2, "second"]])  # fmt: skip
    job = b.sql(db, "SHOW ROUTINE LOAD FOR rl_a")
    assert job["data"][0][[m["name"] for m in job["meta"]].index("State")] == "RUNNING", job
    b.sql(db, "STOP ROUTINE LOAD FOR rl_a")
