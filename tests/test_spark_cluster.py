"""The server on a real Spark standalone cluster (tests/spark_cluster.py): a master and two one-core workers from
the pyspark package, each worker in a mount namespace where the server's data dir is an empty tmpfs, so only the
shared dir (SL_SHARED_DIR) and the broker-load folder beside it are visible to executors, as on other machines.

`make test` runs the first test (the cluster, a load, a query, the start-up shared-dir check); the rest are marked
`cluster` and run in `make test-full`: the conformance cases, every load path against a `local[2]` server's
answers, a server whose shared dir the workers cannot see, a worker killed during a bulk load, the master restarted.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conformance import run_case
from tests.helpers import DorisClient, assert_doris_result
from tests.kafka_mock import MockKafka
from tests.server_process import ServerProcess
from tests.spark_cluster import SparkCluster, can_run_cluster
from tests.test_conformance import CASES

# every test here starts processes (a cluster, servers), some in the test's own body: the tier says so
pytestmark = pytest.mark.process

CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "1g",
    "spark.driver.host": "127.0.0.1",  # the executors connect back to the server's JVM
    "spark.executor.memory": "640m",
}
LOST_AFTER = 45  # SL_SPARK_CLUSTER_CHECK_TIMEOUT_SECONDS: the start-up check, and a session without executors


class Layout:
    """The folders of one cluster run: the data dir the workers cannot see, and the shared storage they can."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"  # hidden from every worker
        self.shared = root / "shared" / "server"  # SL_SHARED_DIR
        self.broker = root / "shared" / "in"  # broker-load sources: on the shared storage, outside the shared dir
        for path in (self.data, self.shared, self.broker):
            path.mkdir(parents=True, exist_ok=True)


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    if (reason := can_run_cluster()) is not None:
        pytest.skip(reason)
    return Layout(tmp_path_factory.mktemp("cluster"))


@pytest.fixture(scope="module")
def spark_cluster(layout: Layout) -> Iterator[SparkCluster]:
    cluster = SparkCluster(layout.root / "spark", hidden=[layout.data]).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def server_env(layout: Layout, master: str) -> dict[str, str]:
    return {
        "SL_SPARK_MASTER": master,
        "SL_SHARED_DIR": f"file://{layout.shared}",  # as a URI: the start-up check runs on the folder it names
        "SL_SPARK_CONF": json.dumps(CONF),
        "SL_BROKER_ALLOWED_ROOTS": json.dumps([str(layout.broker)]),
        "SL_COMPACTION_INTERVAL_SECONDS": "0",
        "SL_SPARK_CLUSTER_CHECK_TIMEOUT_SECONDS": str(LOST_AFTER),
        "SL_ROUTINE_LOAD_MIN_BATCH_ROWS": "1",  # the routine load's batches of 100 rows
    }


@pytest.fixture(scope="module")
def cluster_server(layout: Layout, spark_cluster: SparkCluster) -> Iterator[ServerProcess]:
    server = ServerProcess(layout.data, layout.root / "server.log", **server_env(layout, spark_cluster.url))
    server.start(timeout=240)
    try:
        yield server
    finally:
        server.kill()


def new_db(doris: DorisClient) -> str:
    db = f"db_{uuid.uuid4().hex[:10]}"
    doris.sql(db, f"CREATE DATABASE {db}")
    return db


@pytest.mark.cluster
def test_a_shared_dir_the_workers_cannot_see_stops_the_server_at_start(
    layout: Layout, spark_cluster: SparkCluster
) -> None:
    """A server whose shared dir is its data dir (the default), which the workers see as an empty tmpfs: first in
    the module, while no other server holds the workers' cores."""
    data = layout.data / "first"
    env = {**server_env(layout, spark_cluster.url), "SL_SHARED_DIR": str(data)}
    server = ServerProcess(data, layout.root / "first.log", **env)
    with pytest.raises(RuntimeError, match="server exited with 3"):
        server.start(timeout=240)
    assert "Spark cluster check failed: an executor cannot read" in server.log_text()
    assert "mount the same shared storage at the same path on every node (SL_SHARED_DIR)" in server.log_text()


def test_cluster_runs_a_load_and_a_query_with_every_file_on_the_shared_dir(
    layout: Layout, spark_cluster: SparkCluster, cluster_server: ServerProcess
) -> None:
    assert "Spark cluster check passed" in cluster_server.log_text()  # an executor read and wrote the shared dir
    apps = spark_cluster.state()["activeapps"]
    assert [app["name"] for app in apps] == ["doris-stream-load"] and apps[0]["cores"] == 2, apps
    doris = DorisClient(cluster_server.base_url)
    db = new_db(doris)
    doris.sql(db, "CREATE TABLE t (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2")
    body = "".join(f"{i},v{i % 7}\n" for i in range(2000))  # 2,000 lines: Spark reads the staged file
    assert_doris_result(doris.stream_load(db, "t", body, {"column_separator": ","}), loaded=2000)
    assert doris.rows(db, "SELECT count(*), count(DISTINCT v), max(k) FROM t") == [[2000, 7, 1999]]
    # the table's files are on the shared storage, and nothing of it in the data dir the workers cannot see
    assert list((layout.shared / "warehouse").rglob("*.parquet"))
    assert not (layout.data / "warehouse").exists() and not (layout.data / "staging").exists()


# --- make test-full ------------------------------------------------------------------------------------------


def big_sequence_body(rows: int) -> bytes:
    """`rows` lines over rows/2 keys, each key twice with the higher sequence first half the time: > 1 MB."""
    out = []
    for i in range(rows):
        key = i % (rows // 2)
        seq = (i * 7919) % 1000
        out.append(f"{key},{seq},value-{key}-{seq}-{'x' * 8}\n")
    return "".join(out).encode()


def scenario(doris: DorisClient, broker: Path) -> dict[str, Any]:
    """Every load path once (big sequence load, partial update, group commit sync and async, JSON, two-phase,
    schema change, broker load, routine load, INSERT, compaction) and the queries whose answers a local run must
    share."""
    db = new_db(doris)
    answers: dict[str, Any] = {}
    csv = {"column_separator": ","}
    doris.sql(
        db,
        "CREATE TABLE seq (k INT, s INT, v VARCHAR(64)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 3 "
        'PROPERTIES ("function_column.sequence_col" = "s")',
    )
    body = big_sequence_body(60000)
    assert len(body) > 1024 * 1024  # the pyarrow split path (SL_CSV_PARQUET_MIN_BYTES)
    assert_doris_result(doris.stream_load(db, "seq", body, csv), loaded=60000)
    answers["sequence"] = doris.rows(db, "SELECT count(*), sum(s), min(v), max(v) FROM seq")

    # a partial update of one column for a third of the keys, on a merge-on-write table
    doris.sql(
        db,
        "CREATE TABLE p (k INT, a INT, b VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2 "
        'PROPERTIES ("enable_unique_key_merge_on_write" = "true")',
    )
    assert_doris_result(doris.stream_load(db, "p", "".join(f"{i},{i},b{i}\n" for i in range(3000)), csv))
    partial = {**csv, "partial_columns": "true", "columns": "k,a"}
    assert_doris_result(doris.stream_load(db, "p", "".join(f"{i},{-i}\n" for i in range(0, 3000, 3)), partial))
    answers["partial"] = doris.rows(db, "SELECT count(*), sum(a), count(DISTINCT b) FROM p")

    # group commit: concurrent small loads in groups
    doris.sql(db, "CREATE TABLE g (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    replies: list[dict[str, Any]] = []

    def small(n: int) -> None:
        replies.append(
            doris.stream_load(db, "g", f"{n},{n}\n{n + 100},{n}\n", {**csv, "group_commit": "sync_mode"}).json()
        )

    threads = [threading.Thread(target=small, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r["Status"] for r in replies] == ["Success"] * 12, replies
    answers["group_commit"] = doris.rows(db, "SELECT count(*), sum(k), sum(v) FROM g")

    # async group commit: acknowledged first, visible once its group commits
    for n in range(6):
        reply = doris.stream_load(db, "g", f"{1000 + n},{n}\n", {**csv, "group_commit": "async_mode"}).json()
        assert reply["Status"] == "Success", reply
    deadline = time.monotonic() + 120
    while doris.rows(db, "SELECT count(*) FROM g WHERE k >= 1000") != [[6]]:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    answers["group_commit_async"] = doris.rows(db, "SELECT count(*), sum(k), sum(v) FROM g")

    # JSON lines, and a two-phase load committed after its precommit
    doris.sql(db, "CREATE TABLE j (k INT, name VARCHAR(16), n DOUBLE) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2")
    lines = "".join(json.dumps({"k": i % 700, "name": f"n{i}", "n": i / 4}) + "\n" for i in range(1000))
    json_lines = {"format": "json", "read_json_by_line": "true"}
    assert_doris_result(doris.stream_load(db, "j", lines, json_lines), loaded=1000)
    txn = doris.precommit(db, "j", b'{"k": 5000, "name": "2pc", "n": 1.5}', json_lines)
    assert doris.rows(db, "SELECT count(*) FROM j WHERE k = 5000") == [[0]]
    doris.commit_txn(db, txn)
    answers["json_2pc"] = doris.rows(db, "SELECT count(*), min(name), max(name), sum(n) FROM j")

    # a schema change, then a load that fills the new column
    doris.sql(db, "ALTER TABLE j ADD COLUMN tag VARCHAR(8) NOT NULL DEFAULT 'old'")
    tagged = "".join(f"{i},t{i},{i},new\n" for i in range(650, 750))
    assert_doris_result(doris.stream_load(db, "j", tagged, {**csv, "columns": "k,name,n,tag"}), loaded=100)
    answers["schema_change"] = doris.rows(db, "SELECT tag, count(*), sum(n) FROM j GROUP BY tag ORDER BY tag")

    # a broker load from the shared storage, as the user names the file
    source = broker / f"{db}.csv"
    source.write_text("".join(f"{i},{i % 5},b{i}\n" for i in range(5000)))
    doris.sql(db, f'LOAD LABEL {db}.bl (DATA INFILE("{source}") INTO TABLE p COLUMNS TERMINATED BY "," (k,a,b))')
    deadline = time.monotonic() + 180
    while (state := doris.rows(db, 'SHOW LOAD WHERE LABEL = "bl"')[0][2]) not in ("FINISHED", "CANCELLED"):
        assert time.monotonic() < deadline, state
        time.sleep(0.5)
    answers["broker"] = [state, doris.rows(db, "SELECT count(*), sum(a), count(DISTINCT b) FROM p")]

    # a routine load from a Kafka-protocol broker: MERGE with deletes and a sequence column, batches of 100
    answers["routine"] = routine_load(doris, db)

    # INSERT ... SELECT (Spark writes) and INSERT ... VALUES
    doris.sql(db, "CREATE TABLE i (k INT, v BIGINT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2")
    doris.sql(db, "INSERT INTO i SELECT k, s FROM seq WHERE k % 10 = 0")
    doris.sql(db, "INSERT INTO i VALUES (-1, 1), (-2, 2)")
    answers["insert"] = doris.rows(db, "SELECT count(*), sum(v), min(k) FROM i")

    # compaction of the sequence table's rowsets (several small loads first)
    for n in range(4):
        assert_doris_result(doris.stream_load(db, "seq", f"{n},5000,late{n}\n", csv))
    tablets = [int(row[0]) for row in doris.rows(db, "SHOW TABLETS FROM seq")]
    # as tests/test_compaction.py: a run on one tablet compacts the table's rowsets (every bucket)
    run = doris.http.post("/api/compaction/run", params={"tablet_id": tablets[0], "compact_type": "cumulative"})
    assert run.json()["status"] == "Success", run.text
    shown = doris.http.get("/api/compaction/show", params={"tablet_id": tablets[0]}).json()
    answers["compaction"] = [len(shown["rowsets"]), doris.rows(db, "SELECT count(*), sum(s), max(v) FROM seq")]

    answers["join"] = doris.rows(
        db,
        "SELECT p.a % 5 AS g, count(*), sum(seq.s) FROM p JOIN seq ON p.k = seq.k GROUP BY p.a % 5 ORDER BY g",
    )
    return answers


def routine_load(doris: DorisClient, db: str) -> list[list[Any]]:
    """400 messages over the topic's 4 partitions (keys colliding, a quarter deletes) consumed by a job; the
    table's rows once every message is in."""
    kafka = MockKafka()
    topic = f"cluster_{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic)
    messages = [(i % 4, f"{(i * 37) % 90},v{i},{(i * 7919) % 1000},{int(i % 4 == 3)}".encode()) for i in range(400)]
    kafka.produce(topic, messages)
    doris.sql(
        db,
        "CREATE TABLE r (k INT, v VARCHAR(16)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2 "
        'PROPERTIES ("function_column.sequence_type" = "int")',
    )
    doris.sql(
        db,
        f"""CREATE ROUTINE LOAD {db}.rl ON r WITH MERGE COLUMNS TERMINATED BY ",", COLUMNS(k, v, src_seq, op),
            DELETE ON op = 1, ORDER BY src_seq
            PROPERTIES ("max_batch_rows" = "100", "max_batch_interval" = "1")
            FROM KAFKA ("kafka_broker_list" = "{kafka.bootstrap}", "kafka_topic" = "{topic}",
                        "property.kafka_default_offsets" = "OFFSET_BEGINNING")""",
    )
    deadline = time.monotonic() + 180
    while True:
        data = doris.sql(db, "SHOW ROUTINE LOAD FOR rl")
        job = dict(zip([m["name"] for m in data["meta"]], data["data"][0], strict=True))
        if json.loads(job["Statistic"])["totalRows"] == len(messages):
            break
        assert job["State"] in ("NEED_SCHEDULE", "RUNNING") and time.monotonic() < deadline, job
        time.sleep(0.5)
    doris.sql(db, "STOP ROUTINE LOAD FOR rl")
    return doris.rows(db, "SELECT count(*), sum(k), min(v), max(v) FROM r") + doris.rows(
        db, "SELECT k, v FROM r WHERE k < 10 ORDER BY k"
    )


@pytest.fixture(scope="module")
def local_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The scenario's answers on a `local[2]` server with the same settings (started, run and stopped first)."""
    layout = Layout(tmp_path_factory.mktemp("local"))
    server = ServerProcess(layout.data, layout.root / "server.log", **server_env(layout, "local[2]"))
    server.start(timeout=180)
    try:
        return scenario(DorisClient(server.base_url), layout.broker)
    finally:
        server.kill()


@pytest.mark.cluster
def test_every_load_path_answers_as_a_local_run(
    local_answers: dict[str, Any], layout: Layout, cluster_server: ServerProcess
) -> None:
    answers = scenario(DorisClient(cluster_server.base_url), layout.broker)
    assert answers == local_answers
    assert answers["sequence"][0] == [30000, *answers["sequence"][0][1:]]
    assert answers["broker"][0] == "FINISHED" and answers["compaction"][0] == 1


@pytest.mark.cluster
@pytest.mark.parametrize("case", [pytest.param(p, id=p.stem) for p in CASES])
def test_conformance_case_on_the_cluster(case: Path, cluster_server: ServerProcess) -> None:
    outcome = run_case(case, DorisClient(cluster_server.base_url))
    assert outcome == "passed" or outcome.startswith("stopped at version-sensitive step")


@pytest.mark.cluster
def test_a_cluster_without_free_executors_stops_the_server_at_start(
    layout: Layout, spark_cluster: SparkCluster, cluster_server: ServerProcess
) -> None:
    """A second server while the first holds every worker's core: no executor registers within the timeout."""
    data = layout.data / "second"
    second = ServerProcess(data, layout.root / "second.log", **server_env(layout, spark_cluster.url))
    with pytest.raises(RuntimeError, match="server exited with 3"):
        second.start(timeout=240)
    assert f"Spark cluster check failed: no Spark executor registered within {LOST_AFTER} s" in second.log_text()


@pytest.mark.cluster
def test_an_unreachable_master_stops_the_server_at_start(layout: Layout) -> None:
    data = layout.root / "no-master"
    env = {**server_env(layout, "spark://127.0.0.1:9"), "SL_SHARED_DIR": str(data)}
    server = ServerProcess(data, layout.root / "no-master.log", **env)
    with pytest.raises(RuntimeError, match="server exited with 3"):
        server.start(timeout=60)
    assert "cannot reach the Spark master spark://127.0.0.1:9" in server.log_text()


def state_of(doris: DorisClient, db: str, timeout: float = 180) -> list[list[Any]]:
    """The table's rows in brief; while the server builds a new Spark session a query fails with Doris's
    'No backend available' (retried here)."""
    deadline = time.monotonic() + timeout
    while True:
        body = doris.sql_raw(db, "SELECT count(*), count(DISTINCT k), sum(v) FROM t")
        if body["code"] == 0:
            return body["data"]["data"]  # type: ignore[no-any-return]
        # a query the server's own JVM stop cut short says only "Connection refused" (not translated in sql/)
        transient = "No backend available" in body["data"] or "Connection refused" in body["data"]
        assert transient and time.monotonic() < deadline, body
        time.sleep(1)


@pytest.mark.cluster
def test_a_worker_killed_during_a_bulk_load_leaves_all_or_nothing(
    layout: Layout, spark_cluster: SparkCluster, cluster_server: ServerProcess
) -> None:
    doris = DorisClient(cluster_server.base_url)
    db = new_db(doris)
    doris.sql(db, "CREATE TABLE t (k INT, v INT, pad VARCHAR(64)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 4")
    rows = 400_000
    body = "".join(f"{i},1,{'p' * 40}\n" for i in range(rows)).encode()
    reply: dict[str, Any] = {}

    def load() -> None:
        reply.update(doris.stream_load(db, "t", body, {"column_separator": ","}, timeout=600).json())

    started = [spark_cluster.tasks_started(i) for i in range(2)]
    loader = threading.Thread(target=load)
    loader.start()
    # kill the worker whose executor first runs a task of the load (after the body is received and split)
    deadline = time.monotonic() + 300
    while (busy := [i for i in range(2) if spark_cluster.tasks_started(i) > started[i]]) == []:
        assert time.monotonic() < deadline and loader.is_alive(), reply
        time.sleep(0.05)
    spark_cluster.kill_worker(busy[0])
    loader.join(timeout=600)
    assert reply, "no reply"
    expected = [[rows, rows, rows]] if reply["Status"] == "Success" else [[0, 0, None]]
    assert state_of(doris, db) == expected, reply
    assert reply["Status"] == "Success", reply  # Spark reran the lost tasks on the other worker
    spark_cluster.start_worker(busy[0])
    spark_cluster.wait_for_workers(2)


@pytest.mark.cluster
def test_a_restarted_master_fails_loads_clearly_then_the_server_registers_again(
    spark_cluster: SparkCluster, cluster_server: ServerProcess
) -> None:
    doris = DorisClient(cluster_server.base_url)
    db = new_db(doris)
    doris.sql(db, "CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2")
    assert_doris_result(doris.stream_load(db, "t", "1,1\n", {"column_separator": ","}))
    spark_cluster.stop_master()
    time.sleep(2)
    spark_cluster.start_master()  # a fresh master: it knows nothing of the server's application
    # until the server has registered with the new master, a load fails with a clear message (or succeeds on
    # executors that outlived the master); never a half-visible load
    statuses: list[str] = []
    keys = {1}
    deadline = time.monotonic() + 300
    while not (statuses and statuses[-1] == "Success" and app_registered(spark_cluster)):
        assert time.monotonic() < deadline, statuses
        key = 100 + len(statuses)
        body = doris.stream_load(db, "t", f"{key},1\n", {"column_separator": ","}, timeout=300).json()
        statuses.append(body["Status"] if body["Status"] == "Success" else f"{body['Status']}: {body['Message']}")
        if body["Status"] == "Success":
            keys.add(key)
        else:
            assert body["Status"] == "Fail" and body["Message"], body
            time.sleep(2)
        assert state_of(doris, db) == [[len(keys), len(keys), len(keys)]], statuses
    failures = [s for s in statuses if s != "Success"]
    assert all("SERVICE_UNAVAILABLE" in s or "backend" in s.lower() for s in failures), statuses
    assert "registering again with the master" in cluster_server.log_text(), statuses


def app_registered(cluster: SparkCluster) -> bool:
    try:
        return any(app["name"] == "doris-stream-load" for app in cluster.state()["activeapps"])
    except (httpx.HTTPError, KeyError, ValueError):
        return False
