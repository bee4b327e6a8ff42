"""Routine load survives a server crash exactly once: killed mid-stream between a batch's Iceberg commit and
its transaction turning VISIBLE (the narrowest window), the restarted server resolves that batch, resumes
from the committed offsets, and the final table holds every message exactly once with the committed
offsets at the topic's ends.

The mock Kafka cluster belongs to this test process, so it outlives every server process."""

from __future__ import annotations

import json
import time
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
    data = server.sql(DB, "SHOW ROUTINE LOAD FOR job")
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
