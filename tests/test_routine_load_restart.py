"""Routine load survives a server crash exactly once: killed mid-stream between a batch's Iceberg commit and
its transaction turning VISIBLE (the narrowest window), the restarted server resolves that batch, resumes
from the committed offsets, and the final table holds every message exactly once with the committed
offsets at the topic's ends.

The mock Kafka cluster belongs to this test process, so it outlives every server process."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kafka_mock import MockKafka
from tests.server_process import ServerProcess

DB = "rl_restart"
TOPIC = "restart_topic"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "data", tmp_path / "server.log", SL_ROUTINE_LOAD_MIN_BATCH_ROWS="1")
    yield proc
    proc.kill()


def _job(server: ServerProcess) -> dict[str, Any]:
    return _show(server, "job")


def _show(server: ServerProcess, job: str) -> dict[str, Any]:
    data = server.sql(DB, f"SHOW ROUTINE LOAD FOR {job}")
    return dict(zip([m["name"] for m in data["meta"]], data["data"][0], strict=True))


def _wait(what: str, check: Any, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _messages(start: int, count: int) -> list[tuple[int, bytes]]:
    return [(i % 4, f"{i},m{i}".encode()) for i in range(start, start + count)]


def test_restarts_resume_from_committed_offsets_exactly_once(server: ServerProcess) -> None:
    kafka = MockKafka()
    kafka.create_topic(TOPIC)
    kafka.produce(TOPIC, _messages(0, 50))

    server.start(SL_PAUSE_AT="after_commit:r")
    server.sql(DB, f"CREATE DATABASE {DB}")
    # duplicate keys: a batch loaded twice or lost shows in the rows themselves
    server.sql(DB, "CREATE TABLE r (k INT, v VARCHAR(8)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    server.sql(
        DB,
        f"""CREATE ROUTINE LOAD job ON r COLUMNS TERMINATED BY ","
            PROPERTIES ("max_batch_rows" = "50")
            FROM KAFKA ("kafka_broker_list" = "{kafka.bootstrap}", "kafka_topic" = "{TOPIC}",
                        "property.kafka_default_offsets" = "OFFSET_BEGINNING")""",
    )
    server.wait_for_log(["paused at after_commit (table r)"])
    server.kill()  # the first batch is in Iceberg, its transaction still PREPARE

    kafka.produce(TOPIC, _messages(50, 50))  # the stream goes on while the server is down
    server.start()
    ends = kafka.end_offsets(TOPIC)
    expected_progress = {str(p): str(end - 1) for p, end in ends.items()}
    _wait("every offset committed", lambda: json.loads(_job(server)["Progress"]) == expected_progress)
    rows = server.sql(DB, "SELECT k, v FROM r ORDER BY k")["data"]
    assert rows == [[i, f"m{i}"] for i in range(100)]
    job = _job(server)
    assert job["State"] == "RUNNING" and job["ReasonOfStateChanged"] == ""
    kafka.producer.flush(5)


# What the release before the option table stored for UPGRADE_JOB: the batches' stream-load headers, raw
OLD_HEADERS = {
    "format": "json",
    "merge_type": "APPEND",
    "max_filter_ratio": "1.0",
    "columns": "k, tmp, v = upper(tmp)",
    "where": "k < 3",
    "strip_outer_array": "true",
}
UPGRADE_JOB = """CREATE ROUTINE LOAD up_job ON u COLUMNS(k, tmp, v = upper(tmp)), WHERE k < 3
    PROPERTIES ("format" = "json", "strip_outer_array" = "true", "max_batch_rows" = "10", "max_batch_interval" = "1")
    FROM KAFKA ("kafka_broker_list" = "{bootstrap}", "kafka_topic" = "{topic}",
                "property.kafka_default_offsets" = "OFFSET_BEGINNING")"""
# SHOW ROUTINE LOAD columns that do not move while a job idles
STEADY_COLUMNS = (
    "Id", "Name", "CreateTime", "PauseTime", "EndTime", "DbName", "TableName", "State", "DataSourceType",
    "DataSourceProperties", "CustomProperties", "Progress", "ReasonOfStateChanged", "OtherMsg", "User", "Comment",
)  # fmt: skip


def _store_as_the_previous_release(data_dir: Path) -> None:
    """Rewrite the job as the previous release wrote it: raw headers in its spec, no store format row."""
    with sqlite3.connect(data_dir / "transactions.db") as conn:
        ((job_id, body),) = conn.execute("SELECT job_id, body FROM routine_load_jobs").fetchall()
        job = json.loads(body)
        for key in ("request", "strip_outer_array"):
            del job["spec"][key]
        job["spec"]["headers"] = OLD_HEADERS
        conn.execute("UPDATE routine_load_jobs SET body = ? WHERE job_id = ?", (json.dumps(job), job_id))
        conn.execute("DROP TABLE routine_load_format")


def _statistic(server: ServerProcess) -> dict[str, Any]:
    return json.loads(_show(server, "up_job")["Statistic"])  # type: ignore[no-any-return]


def _steady(job: dict[str, Any]) -> dict[str, Any]:
    properties = json.loads(job["JobProperties"])
    properties.pop("current_concurrent_number")
    return {**{c: job[c] for c in STEADY_COLUMNS}, "JobProperties": properties}


def test_a_job_the_previous_release_stored_as_headers_runs_on_after_the_upgrade(server: ServerProcess) -> None:
    """Store format 1 (raw headers) is migrated when the server starts: SHOW ROUTINE LOAD shows the job as before
    and its batches load with the stored columns, filter and JSON array setting."""
    kafka = MockKafka()
    name = f"upgrade_{uuid.uuid4().hex[:8]}"
    kafka.create_topic(name)
    kafka.produce(name, [(0, b'[{"k": 1, "tmp": "a"}, {"k": 2, "tmp": "b"}]'), (0, b'[{"k": 3, "tmp": "c"}]')])
    server.start()
    server.sql(DB, f"CREATE DATABASE {DB}")
    server.sql(DB, "CREATE TABLE u (k INT, v VARCHAR(8)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    server.sql(DB, UPGRADE_JOB.format(bootstrap=kafka.bootstrap, topic=name))
    _wait("the first messages", lambda: _statistic(server)["totalRows"] == 3)
    before = _steady(_show(server, "up_job"))
    server.kill()

    _store_as_the_previous_release(server.data_dir)
    kafka.produce(name, [(0, b'[{"k": 0, "tmp": "z"}, {"k": 5, "tmp": "q"}]')])
    server.start()
    server.wait_for_log(["routine load store migrated to format 2: 1 jobs"])
    _wait("the message sent during the upgrade", lambda: _statistic(server)["totalRows"] == 5)
    progress = {**json.loads(before["Progress"]), "0": "2"}
    assert _steady(_show(server, "up_job")) == {**before, "Progress": json.dumps(progress, separators=(",", ":"))}
    assert server.sql(DB, "SELECT k, v FROM u ORDER BY k")["data"] == [[0, "Z"], [1, "A"], [2, "B"]]
    assert _statistic(server)["unselectedRows"] == 2
    server.sql(DB, "STOP ROUTINE LOAD FOR up_job")
    kafka.producer.flush(5)
