"""One request must not kill or wedge the Spark JVM for good (issue 15).

The JVM exits on an out-of-memory error instead of living on half-broken; the server notices a JVM that
stopped (health turns unhealthy, loads and SQL get SERVICE_UNAVAILABLE), starts a new Spark session by
itself, and acknowledged loads are still there afterwards. A load stuck past its `timeout` answers
`[TIMEOUT]` and gives its table's version turn to the next load. One subprocess server (small heap)
serves every case; the last one takes its JVM down.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pymysql
import pytest

from spark_runner.session import with_fixed_heap
from tests.helpers import AUTH, assert_doris_result
from tests.server_process import ServerProcess

DB = "jvm"
SCRATCH_BOUND = 48 * 1024 * 1024
DDL = "CREATE TABLE {name} (k INT NOT NULL, v VARCHAR(16)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"
NO_BACKEND = "[SERVICE_UNAVAILABLE]No backend available for load, please check the status of your backends."
NO_SCAN_NODE = (
    "errCode = 2, detailMessage = No backend available as scan node, please check the status of your backends."
)


@pytest.mark.parametrize(
    "conf, options",
    [
        pytest.param(
            {"spark.driver.memory": "512m"},
            "-Xms512m -XX:+AlwaysPreTouch -XX:+UseParallelGC -XX:+ExitOnOutOfMemoryError",
            id="the-default-heap-options-exit-on-out-of-memory",
        ),
        pytest.param(
            {"spark.driver.memory": "1g", "spark.driver.extraJavaOptions": "-verbose:gc"},
            "-verbose:gc -XX:+ExitOnOutOfMemoryError",
            id="operator-java-options-keep-the-exit-on-out-of-memory",
        ),
        pytest.param(
            {"spark.driver.extraJavaOptions": "-XX:+CrashOnOutOfMemoryError"},
            "-XX:+CrashOnOutOfMemoryError",
            id="an-operator-chosen-out-of-memory-action-is-kept-as-is",
        ),
    ],
)
def test_driver_jvm_is_started_to_end_on_out_of_memory(conf: dict[str, str], options: str) -> None:
    assert with_fixed_heap(conf)["spark.driver.extraJavaOptions"] == options


def test_the_driver_jvm_runs_the_throughput_collector(spark: Any) -> None:
    """The session's JVM collects with the parallel collector (its beans are "PS Scavenge" and "PS MarkSweep";
    G1's are "G1 Young Generation" and "G1 Old Generation"), started with the collector and the pre-touched heap."""
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    collectors = {bean.getName() for bean in management.getGarbageCollectorMXBeans()}
    assert collectors == {"PS Scavenge", "PS MarkSweep"}
    arguments = list(management.getRuntimeMXBean().getInputArguments())
    assert "-XX:+UseParallelGC" in arguments and "-XX:+AlwaysPreTouch" in arguments


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("jvm")
    # what a killed JVM of an earlier run left in Spark's scratch folder
    (tmp / "data" / "spark-local" / "blockmgr-left-behind").mkdir(parents=True)
    (tmp / "data" / "spark-local" / "blockmgr-left-behind" / "shuffle_0_0_0.data").write_bytes(b"x" * 4096)
    proc = ServerProcess(tmp / "data", tmp / "server.log")
    proc.start(
        SL_SPARK_CONF=json.dumps({"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "512m"}),
        SL_PAUSE_AT="job:stuck:once,job:gstuck:once",
        SL_SQL_MAX_RESULT_BYTES=str(64 * 1024**3),  # an operator's result cap far past the heap (the way to OOM)
        SL_SPARK_SCRATCH_MAX_BYTES=str(SCRATCH_BOUND),
    )
    proc.sql("x", f"CREATE DATABASE {DB}")
    for name in ("stuck", "survivor"):
        proc.sql(DB, DDL.format(name=name))
    proc.sql(DB, DDL.format(name="gstuck") + ' PROPERTIES ("group_commit_mode" = "sync_mode")')
    yield proc
    proc.kill()


def query(server: ServerProcess, stmt: str) -> dict[str, Any]:
    resp = httpx.post(f"{server.base_url}/api/query/default_cluster/{DB}", json={"stmt": stmt}, auth=AUTH, timeout=120)
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


def backend_alive(server: ServerProcess) -> bool:
    health = httpx.get(f"{server.base_url}/api/health", timeout=10).json()["data"]
    return bool(health["online_backend_num"])


def listed_backends(server: ServerProcess, **params: str) -> list[bool]:
    reply = httpx.get(f"{server.base_url}/api/backends", params=params, auth=("root", ""), timeout=10).json()
    return [b["is_alive"] for b in reply["data"]["backends"]]


def test_group_commit_stuck_past_its_timeout_fails_and_the_next_group_of_its_table_commits(
    server: ServerProcess,
) -> None:
    replies: dict[str, Any] = {}

    def stuck_load() -> None:  # the group's job pauses forever: a Spark call that never returns
        started = time.monotonic()
        replies["stuck"] = server.load(DB, "gstuck", b"1,stuck\n", label="g_stuck", timeout="2")
        replies["stuck_s"] = time.monotonic() - started

    thread = threading.Thread(target=stuck_load, daemon=True)
    thread.start()
    server.wait_for_log(["paused at job (table gstuck)"])
    thread.join(timeout=30)
    assert replies["stuck"]["Status"] == "Fail" and "[TIMEOUT]load timed out after 2 s" in replies["stuck"]["Message"]
    assert replies["stuck_s"] < 10
    assert server.label_state(DB, "g_stuck") == "ABORTED"
    # the abandoned group gave up its version turn: the next group of the table commits
    nxt = server.load(DB, "gstuck", b"2,next\n", label="g_next")
    assert nxt["Status"] == "Success" and nxt["NumberLoadedRows"] == 1, nxt
    assert server.sql(DB, "SELECT k, v FROM gstuck ORDER BY k")["data"] == [[2, "next"]]


def test_load_stuck_past_its_timeout_fails_and_the_next_load_of_its_table_commits(server: ServerProcess) -> None:
    replies: dict[str, Any] = {}

    def stuck_load() -> None:  # its job pauses forever: a Spark call that never returns
        started = time.monotonic()
        replies["stuck"] = server.load(DB, "stuck", b"1,stuck\n", label="stuck_load", timeout="2")
        replies["stuck_s"] = time.monotonic() - started

    thread = threading.Thread(target=stuck_load, daemon=True)
    thread.start()
    server.wait_for_log(["paused at job (table stuck)"])
    # the stuck load holds the table's lower version: this load can commit only once it is released
    assert_doris_result(server.load(DB, "stuck", b"2,next\n", label="next_load"), loaded=1)
    thread.join(timeout=30)
    assert_doris_result(replies["stuck"], status="Fail", message_contains="[TIMEOUT]load timed out after 2 s")
    assert replies["stuck_s"] < 10
    assert server.label_state(DB, "stuck_load") == "ABORTED"
    assert server.sql(DB, "SELECT k, v FROM stuck ORDER BY k")["data"] == [[2, "next"]]
    # the table keeps taking loads, and the abandoned load's label is free again
    assert_doris_result(server.load(DB, "stuck", b"3,again\n", label="stuck_load"), loaded=1)
    assert server.sql(DB, "SELECT k FROM stuck ORDER BY k")["data"] == [[2], [3]]


def test_a_jvm_out_of_memory_exits_is_reported_down_then_replaced_and_acknowledged_loads_survive(
    server: ServerProcess,
) -> None:
    assert_doris_result(server.load(DB, "survivor", b"".join(b"%d,x\n" % k for k in range(100)), label="acked"))
    offset = len(server.log_text())
    # one query whose result outgrows the 512 MB heap: 1000 rows of 5 MB each, under the operator's result cap
    # (what a query holds besides its result is measured and bounded: tests/test_security_query_memory.py)
    cut = query(server, "SELECT repeat(a.v, 5000000) FROM survivor a, survivor b")
    assert cut["code"] == 1 and cut["data"] == f"Failed to execute sql: {NO_SCAN_NODE}", cut
    deadline = time.monotonic() + 60
    while backend_alive(server):
        assert time.monotonic() < deadline, "health never reported the stopped JVM"
        time.sleep(0.1)
    assert "Terminating due to java.lang.OutOfMemoryError" in server.log_text()[offset:]
    # while it is down: Doris's answers at once, and nothing changes
    assert listed_backends(server) == [False] and listed_backends(server, is_alive="true") == []
    down = server.load(DB, "survivor", b"-1,lost\n", label="while_down")
    assert_doris_result(down, status="Fail", message_contains=NO_BACKEND)
    refused = query(server, "SELECT count(*) FROM survivor")
    assert refused["code"] == 1 and refused["data"] == f"Failed to execute sql: {NO_SCAN_NODE}", refused
    with pymysql.connect(host="127.0.0.1", port=server.mysql_port, user="root", password="", database=DB) as conn:
        with pytest.raises(pymysql.err.OperationalError) as err:
            conn.cursor().execute("SELECT count(*) FROM survivor")
    assert err.value.args == (1105, NO_SCAN_NODE)
    deadline = time.monotonic() + 180
    while not backend_alive(server):
        assert time.monotonic() < deadline, f"no new Spark session was started:\n{server.log_text()[-4000:]}"
        time.sleep(0.2)
    assert listed_backends(server, is_alive="true") == [True]
    assert_doris_result(server.load(DB, "survivor", b"100,after\n"), loaded=1)
    assert server.sql(DB, "SELECT count(*), min(k) FROM survivor")["data"] == [[101, 0]]
    assert server.label_state(DB, "while_down") == "UNKNOWN"


def test_a_job_that_finishes_after_its_load_was_abandoned_commits_nothing(tmp_path: Path) -> None:
    from sql.ddl import parse_create_table
    from tables.catalog import Catalog
    from tables.commit import TableWriter
    from tables.transactions import TransactionStore

    catalog = Catalog(uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=tmp_path / "warehouse")
    txns = TransactionStore(tmp_path / "transactions.db")
    writer = TableWriter(catalog, txns)
    catalog.create_database(DB)
    catalog.create_table(parse_create_table(DDL.format(name="t"), DB).definition)
    late = txns.begin(DB, "t", "late")
    running, finish = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def job() -> None:  # a load whose job outlives its deadline, then writes its files anyway
        try:
            with writer.write(DB, "t", txn_id=late, label="late") as rowset:
                seen["directory"] = rowset.directory
                running.set()
                finish.wait(timeout=30)
                rowset.directory.mkdir(parents=True, exist_ok=True)
                (rowset.directory / "part-0.parquet").write_bytes(b"late rows")
                rowset.files = [str(rowset.directory / "part-0.parquet")]
        except Exception as exc:
            seen["error"] = exc

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    assert running.wait(timeout=30)
    assert writer.abandon(late, "load timed out after 2 s (timeout header)")
    # the next load's commit turn does not wait for the abandoned version
    following = txns.begin(DB, "t", "following")
    with writer.write(DB, "t", txn_id=following, label="following"):
        pass
    finish.set()
    thread.join(timeout=30)
    assert "error" in seen, "the abandoned load committed"
    assert not seen["directory"].exists(), "the abandoned load's late files were left behind"
    assert [txns.get(t).state for t in (late, following)] == ["ABORTED", "VISIBLE"]  # type: ignore[union-attr]
    assert catalog.load(DB, "t").iceberg.current_snapshot() is None


def test_spark_scratch_is_a_data_dir_folder_emptied_before_the_jvm_starts(server: ServerProcess) -> None:
    scratch = server.data_dir / "spark-local"
    assert not (scratch / "blockmgr-left-behind").exists()
    assert any(p.name.startswith("blockmgr-") for p in scratch.iterdir()), list(scratch.iterdir())


def test_a_query_writing_past_the_scratch_bound_is_cancelled_and_loads_go_on(server: ServerProcess) -> None:
    assert_doris_result(server.load(DB, "survivor", b"".join(b"%d,s\n" % k for k in range(1000, 1100))))
    # 10^6 distinct 128-character digests: ~150 MB of shuffled rows that do not compress, over the 48 MB bound
    digests = (
        "SELECT count(DISTINCT sha2(concat(a.k, '-', b.k, '-', c.k), 512)) FROM survivor a, survivor b, survivor c"
    )
    started = time.monotonic()
    cut = query(server, digests)
    assert cut["code"] == 1 and "(SL_SPARK_SCRATCH_MAX_BYTES)" in cut["data"], cut
    assert time.monotonic() - started < 60
    assert_doris_result(server.load(DB, "survivor", b"-5,after\n"), loaded=1)
    assert query(server, "SELECT count(*) FROM survivor WHERE k = -5")["data"]["data"] == [[1]]
