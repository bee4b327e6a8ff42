"""Routine load from a real Kafka-protocol broker (librdkafka's mock cluster) into tables, checked against a
pure-Python model of the sequenced merge; statements, states, SHOW columns and error accounting as Doris."""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.helpers import DorisClient
from tests.kafka_mock import MockKafka


@pytest.fixture(scope="module")
def kafka() -> Iterator[MockKafka]:
    cluster = MockKafka()
    yield cluster
    cluster.producer.flush(5)


def topic(kafka: MockKafka) -> str:
    name = f"t_{uuid.uuid4().hex[:10]}"
    kafka.create_topic(name)
    return name


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def show(doris: DorisClient, db: str, job: str, *, history: bool = False) -> dict[str, Any]:
    data = doris.sql(db, f"SHOW {'ALL ' if history else ''}ROUTINE LOAD FOR {job}")
    names = [m["name"] for m in data["meta"]]
    rows = [dict(zip(names, row, strict=True)) for row in data["data"]]
    assert len(rows) == 1, rows
    return rows[0]


def statistic(doris: DorisClient, db: str, job: str) -> dict[str, Any]:
    return json.loads(show(doris, db, job)["Statistic"])


def consumed_all(doris: DorisClient, db: str, job: str, count: int) -> Callable[[], bool]:
    def check() -> bool:
        stat = statistic(doris, db, job)
        return bool(stat["totalRows"] == count)

    return check


def select(doris: DorisClient, db: str, stmt: str) -> list[list[Any]]:
    return [list(r) for r in doris.sql(db, stmt)["data"]]


def model(messages: list[dict[str, Any]]) -> list[list[Any]]:
    """The sequenced merge: per key the largest sequence wins (all sequences distinct); a winning delete hides it."""
    best: dict[int, dict[str, Any]] = {}
    for m in messages:
        if m["k"] not in best or m["s"] > best[m["k"]]["s"]:
            best[m["k"]] = m
    return [[k, m["v"], m["s"]] for k, m in sorted(best.items()) if not m["delete"]]


def random_messages(rng: random.Random, count: int, keys: int) -> list[dict[str, Any]]:
    sequences = rng.sample(range(1, count * 10), count)  # shuffled and distinct: no ties to break
    return [
        {"k": rng.randint(1, keys), "v": f"v{i}", "s": sequences[i], "delete": rng.random() < 0.25}
        for i in range(count)
    ]


def test_csv_messages_with_deletes_and_shuffled_sequences_match_the_model(
    doris: DorisClient, db: str, kafka: MockKafka
) -> None:
    rng = random.Random(10)
    name = topic(kafka)
    doris.sql(
        db,
        "CREATE TABLE t (k INT, v VARCHAR(16)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2 "
        'PROPERTIES ("function_column.sequence_type" = "int")',
    )
    messages = random_messages(rng, 120, 25)
    kafka.produce(
        name, [(i % 4, f"{m['k']},{m['v']},{m['s']},{int(m['delete'])}".encode()) for i, m in enumerate(messages)]
    )
    doris.sql(
        db,
        f"""CREATE ROUTINE LOAD {db}.csv_job ON t WITH MERGE
            COLUMNS TERMINATED BY ",",
            COLUMNS(k, v, src_seq, op),
            DELETE ON op = 1,
            ORDER BY src_seq
            PROPERTIES ("max_batch_rows" = "40", "desired_concurrent_number" = "1")
            FROM KAFKA ("kafka_broker_list" = "{kafka.bootstrap}", "kafka_topic" = "{name}",
                        "property.kafka_default_offsets" = "OFFSET_BEGINNING")""",
    )
    wait_for("every message loaded", consumed_all(doris, db, "csv_job", 120))
    rows = select(
        doris,
        db,
        "SET show_hidden_columns = true; "
        "SELECT k, v, __DORIS_SEQUENCE_COL__ FROM t WHERE __DORIS_DELETE_SIGN__ = 0 ORDER BY k",
    )
    assert rows == model(messages)
    assert select(doris, db, "SELECT k, v FROM t ORDER BY k") == [r[:2] for r in model(messages)]

    row = show(doris, db, "csv_job")
    stat = json.loads(row["Statistic"])
    assert (row["State"], row["DataSourceType"], row["TableName"]) == ("RUNNING", "KAFKA", "t")
    assert (stat["loadedRows"], stat["errorRows"], stat["committedTaskNum"]) == (120, 0, 3)
    assert json.loads(row["Progress"]) == {"0": "29", "1": "29", "2": "29", "3": "29"}  # last offset consumed
    # the lag is measured after each batch's commit: wait for the last measurement
    wait_for("no lag", lambda: json.loads(show(doris, db, "csv_job")["Lag"]) == {"0": 0, "1": 0, "2": 0, "3": 0})
    props = json.loads(row["JobProperties"])
    assert (props["merge_type"], props["sequence_col"], props["max_batch_rows"]) == ("MERGE", "src_seq", "40")
    assert json.loads(row["CustomProperties"])["kafka_default_offsets"] == "OFFSET_BEGINNING"
    doris.sql(db, "STOP ROUTINE LOAD FOR csv_job")


def test_json_messages_honour_per_partition_offsets(doris: DorisClient, db: str, kafka: MockKafka) -> None:
    rng = random.Random(20)
    name = topic(kafka)
    doris.sql(
        db,
        "CREATE TABLE j (k INT, v VARCHAR(16), s INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
        'PROPERTIES ("function_column.sequence_col" = "s")',
    )
    messages = random_messages(rng, 60, 15)
    placed = [(i % 4, m) for i, m in enumerate(messages)]
    kafka.produce(
        name,
        [
            (p, json.dumps({"k": m["k"], "v": m["v"], "s": m["s"], "op": "d" if m["delete"] else "u"}).encode())
            for p, m in placed
        ],
    )
    # partition 0 from offset 5, partition 1 from its beginning, partitions 2 and 3 not consumed at all
    skipped_p0 = [m for p, m in placed if p == 0][:5]
    wanted = [m for p, m in placed if p == 1] + [m for p, m in placed if p == 0 and not any(m is s for s in skipped_p0)]
    doris.sql(
        db,
        f"""CREATE ROUTINE LOAD json_job ON j WITH MERGE COLUMNS(k, v, s, op), DELETE ON op = "d"
            PROPERTIES ("format" = "json", "jsonpaths" = '["$.k", "$.v", "$.s", "$.op"]', "max_batch_rows" = "10",
                        "max_batch_interval" = "2")
            FROM KAFKA ("kafka_broker_list" = "{kafka.bootstrap}", "kafka_topic" = "{name}",
                        "kafka_partitions" = "0,1", "kafka_offsets" = "5,OFFSET_BEGINNING")""",
    )
    wait_for("partitions 0 and 1 loaded", consumed_all(doris, db, "json_job", len(wanted)))
    assert select(doris, db, "SELECT k, v, s FROM j ORDER BY k") == model(wanted)
    row = show(doris, db, "json_job")
    assert json.loads(row["Progress"]) == {"0": "14", "1": "14"}
    assert json.loads(row["DataSourceProperties"])["currentKafkaPartitions"] == "0,1"
    doris.sql(db, "STOP ROUTINE LOAD FOR json_job")


def test_malformed_messages_are_counted_and_pause_the_job_past_max_error_number(
    doris: DorisClient, db: str, kafka: MockKafka
) -> None:
    name = topic(kafka)
    doris.sql(db, "CREATE TABLE e (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(
        db,
        f"""CREATE ROUTINE LOAD err_job ON e COLUMNS TERMINATED BY ","
            PROPERTIES ("max_batch_rows" = "10", "max_error_number" = "2")
            FROM KAFKA ("kafka_broker_list" = "{kafka.bootstrap}", "kafka_topic" = "{name}",
                        "kafka_partitions" = "0", "kafka_offsets" = "OFFSET_BEGINNING")""",
    )
    kafka.produce(name, [(0, f"{k},{k}".encode()) for k in range(1, 11)])
    wait_for("the first batch", consumed_all(doris, db, "err_job", 10))
    bad = [b"3 fields,in,one", b"no separator", b"a,b,c,d"]
    kafka.produce(name, [(0, f"{k},{k}".encode()) for k in range(11, 18)] + [(0, b) for b in bad])
    row = wait_for("the job to pause", lambda: (r := show(doris, db, "err_job"))["State"] == "PAUSED" and r)
    assert row["ReasonOfStateChanged"] == (
        "ErrorReason{code=errCode = 102, msg='current error rows is more than max_error_number "
        "or the max_filter_ratio is more than the value set'}"
    )
    stat = json.loads(row["Statistic"])
    assert (stat["totalRows"], stat["loadedRows"], stat["errorRows"]) == (20, 17, 3)
    assert row["PauseTime"] is not None and row["CurrentTaskNum"] == "0"
    error_log = doris.http.get(row["ErrorLogUrls"]).text
    assert "no separator" in error_log
    assert select(doris, db, "SELECT count(*) FROM e") == [[17]]  # the batch's good rows committed

    kafka.produce(name, [(0, f"{k},{k}".encode()) for k in range(18, 28)])
    time.sleep(0.5)
    assert statistic(doris, db, "err_job")["totalRows"] == 20  # paused: nothing consumed
    doris.sql(db, "RESUME ROUTINE LOAD FOR err_job")
    wait_for("the batch after resuming", consumed_all(doris, db, "err_job", 30))
    row = show(doris, db, "err_job")
    assert (row["State"], row["ReasonOfStateChanged"]) == ("RUNNING", "")
    assert select(doris, db, "SELECT count(*), max(k) FROM e") == [[27, 27]]
    doris.sql(db, "STOP ROUTINE LOAD FOR err_job")


def test_default_offset_end_skips_what_was_produced_before_the_job_started(
    doris: DorisClient, db: str, kafka: MockKafka
) -> None:
    name = topic(kafka)
    doris.sql(db, "CREATE TABLE o (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    kafka.produce(name, [(k % 4, f"{k}\told".encode()) for k in range(1, 9)])
    doris.sql(
        db,
        f"""CREATE ROUTINE LOAD end_job ON o PROPERTIES ("max_batch_rows" = "4")
            FROM KAFKA ("kafka_broker_list" = "{kafka.bootstrap}", "kafka_topic" = "{name}")""",
    )
    assert json.loads(show(doris, db, "end_job")["CustomProperties"])["kafka_default_offsets"] == "OFFSET_END"
    progress = wait_for("offsets resolved", lambda: json.loads(show(doris, db, "end_job")["Progress"]))
    assert progress == {"0": "1", "1": "1", "2": "1", "3": "1"}  # two messages in each partition, both skipped
    kafka.produce(name, [(k % 4, f"{k}\tnew".encode()) for k in range(11, 15)])
    wait_for("the new messages", consumed_all(doris, db, "end_job", 4))
    assert select(doris, db, "SELECT k, v FROM o ORDER BY k") == [[k, "new"] for k in range(11, 15)]
    doris.sql(db, "STOP ROUTINE LOAD FOR end_job")


def test_pause_resume_stop_move_the_job_through_doris_states(doris: DorisClient, db: str, kafka: MockKafka) -> None:
    name = topic(kafka)
    doris.sql(db, "CREATE TABLE s (k INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(
        db,
        f"""CREATE ROUTINE LOAD {db}.state_job ON s PROPERTIES ("max_batch_rows" = "100", "max_batch_interval" = "30")
            FROM KAFKA ("kafka_broker_list" = "{kafka.bootstrap}", "kafka_topic" = "{name}")
            COMMENT 'a job'""",
    )
    wait_for("RUNNING", lambda: show(doris, db, "state_job")["State"] == "RUNNING")
    data = doris.sql(db, 'SHOW ROUTINE LOAD TASK WHERE JobName = "state_job"')
    assert [m["name"] for m in data["meta"]] == [
        "TaskId", "TxnId", "TxnStatus", "JobId", "CreateTime", "ExecuteStartTime", "Timeout", "BeId",
        "DataSourceProperties",
    ]  # fmt: skip
    task = wait_for("a task", lambda: doris.sql(db, 'SHOW ROUTINE LOAD TASK WHERE JobName = "state_job"')["data"])
    assert task[0][1:3] == ["-1", "NULL"] and json.loads(task[0][8]) == {"0": 0, "1": 0, "2": 0, "3": 0}
    row = show(doris, db, "state_job")
    assert (row["CurrentTaskNum"], row["Comment"], row["IsMultiTable"], row["DbName"]) == ("1", "a job", "false", db)

    doris.sql(db, "PAUSE ROUTINE LOAD FOR state_job")
    row = show(doris, db, "state_job")
    assert row["State"] == "PAUSED"
    assert row["ReasonOfStateChanged"] == "ErrorReason{code=errCode = 100, msg='User root pauses routine load job'}"
    assert "Could not transform PAUSED to PAUSED" in doris.sql_error(db, "PAUSE ROUTINE LOAD FOR state_job")
    doris.sql(db, "RESUME ROUTINE LOAD FOR state_job")
    assert show(doris, db, "state_job")["State"] in ("NEED_SCHEDULE", "RUNNING")
    doris.sql(db, "STOP ROUTINE LOAD FOR state_job")
    assert doris.sql(db, "SHOW ROUTINE LOAD")["data"] == []
    row = show(doris, db, "state_job", history=True)
    assert row["State"] == "STOPPED" and row["EndTime"] is not None
    assert "Could not transform STOPPED to NEED_SCHEDULE" in doris.sql_error(db, "RESUME ROUTINE LOAD FOR state_job")
    # the name is free again once the job is final
    doris.sql(
        db,
        f"""CREATE ROUTINE LOAD state_job ON s FROM KAFKA ("kafka_broker_list" = "{kafka.bootstrap}",
            "kafka_topic" = "{name}")""",
    )
    assert "Name state_job already used in db" in doris.sql_error(
        db,
        f'CREATE ROUTINE LOAD state_job ON s FROM KAFKA ("kafka_broker_list" = "{kafka.bootstrap}", {TOPIC_X})',
    )
    doris.sql(db, "STOP ROUTINE LOAD FOR state_job")


TOPIC_X = '"kafka_topic" = "x"'
BROKER = '"kafka_broker_list" = "127.0.0.1:9092", "kafka_topic" = "t"'


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        pytest.param(
            f'CREATE ROUTINE LOAD j ON u PROPERTIES ("foo" = "1") FROM KAFKA ({BROKER})',
            "foo is invalid property",
            id="unknown-job-property",
        ),
        pytest.param(
            'CREATE ROUTINE LOAD j ON u FROM KAFKA ("kafka_topic" = "t")',
            "kafka_broker_list is a required property",
            id="broker-list-required",
        ),
        pytest.param(
            f'CREATE ROUTINE LOAD j ON u FROM KAFKA ({BROKER}, "foo" = "x")',
            "foo is invalid kafka property or can not be set",
            id="unknown-kafka-property",
        ),
        pytest.param(
            f"CREATE ROUTINE LOAD j ON u COLUMNS(k, v), DELETE ON v = 1 FROM KAFKA ({BROKER})",
            "not support DELETE ON clause when merge type is not MERGE.",
            id="delete-on-without-merge",
        ),
        pytest.param(
            f"CREATE ROUTINE LOAD j ON u WITH MERGE COLUMNS(k, v) FROM KAFKA ({BROKER})",
            "Excepted DELETE ON clause when merge type is MERGE.",
            id="merge-without-delete-on",
        ),
        pytest.param(
            f"CREATE ROUTINE LOAD j ON d WITH DELETE FROM KAFKA ({BROKER})",
            "load by MERGE or DELETE is only supported in unique tables.",
            id="delete-on-a-duplicate-table",
        ),
        pytest.param(
            f'CREATE ROUTINE LOAD j ON u PROPERTIES ("max_filter_ratio" = "2") FROM KAFKA ({BROKER})',
            "max_filter_ratio should between 0 and 1",
            id="filter-ratio-out-of-range",
        ),
        pytest.param(
            f'CREATE ROUTINE LOAD j ON u FROM KAFKA ({BROKER}, "kafka_partitions" = "0,1", "kafka_offsets" = "0")',
            "Partitions number should be equals to offsets number",
            id="offsets-per-partition",
        ),
        pytest.param(
            f'CREATE ROUTINE LOAD j ON u FROM KAFKA ({BROKER}, "kafka_partitions" = "0", "kafka_offsets" = "0", '
            '"property.kafka_default_offsets" = "OFFSET_END")',
            "Only one of kafka_offsets and kafka_default_offsets can be set.",
            id="offsets-and-default-offsets",
        ),
        pytest.param(
            f"CREATE ROUTINE LOAD j ON u COLUMNS(k, v), WHERE nope > 1 FROM KAFKA ({BROKER})",
            "Unknown column 'nope'",
            id="where-on-unknown-column",
        ),
        pytest.param(
            f"CREATE ROUTINE LOAD j ON missing FROM KAFKA ({BROKER})",
            "Unknown table 'missing'",
            id="unknown-table",
        ),
        pytest.param(
            "PAUSE ROUTINE LOAD FOR nope", "There is not operable routine load job with name nope", id="pause-unknown"
        ),
        pytest.param("SHOW ROUTINE LOAD FOR nope", "There is no job named nope in db", id="show-unknown"),
    ],
)
def test_bad_routine_load_statements_are_refused_with_doris_messages(
    doris: DorisClient, db: str, statement: str, message: str
) -> None:
    doris.sql(db, "CREATE TABLE u (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(db, "CREATE TABLE d (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    assert message in doris.sql_error(db, statement)
    assert doris.sql(db, "SHOW ALL ROUTINE LOAD")["data"] == []
