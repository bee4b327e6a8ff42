"""Broker load, routine load and their SHOW statements against a logged-in user with only the privileges the
feature needs (LOAD_PRIV on one table): no path pattern that expands without bound, no job list or secret of a
table the user may not load, no unbounded number of routine load jobs, no batch held whole in memory."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sql.tokens import Cursor
from tests.helpers import DorisClient
from tests.kafka_mock import MockKafka


@dataclass
class World:
    """A database with tables `t` and `other`, a user `loader` granted LOAD_PRIV on `t` only, and a folder under
    the allowed broker-load root."""

    db: str
    files: Path
    user: str
    loader: DorisClient
    ddl: DorisClient  # CREATE_PRIV and ALTER_PRIV on the database, nothing else


@pytest.fixture(scope="module")
def world(doris: DorisClient, base_url: str, server_settings: Any) -> World:
    db = f"db_{uuid.uuid4().hex[:12]}"
    user = f"loader_{uuid.uuid4().hex[:8]}"
    doris.sql(db, f"CREATE DATABASE {db}")
    for table in ("t", "other"):
        doris.sql(db, f"CREATE TABLE {table} (k INT, v VARCHAR(64)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(db, f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'; GRANT LOAD_PRIV ON {db}.t TO '{user}'")
    doris.sql(
        db, f"CREATE USER 'ddl_{user}'@'%' IDENTIFIED BY 'pw'; GRANT CREATE_PRIV, ALTER_PRIV ON {db}.* TO 'ddl_{user}'"
    )
    files = Path(server_settings.broker_allowed_roots[0]) / uuid.uuid4().hex[:12]
    files.mkdir()
    (files / "good.csv").write_text("7,seven\n")
    return World(
        db=db,
        files=files,
        user=user,
        loader=DorisClient(base_url, auth=(user, "pw")),
        ddl=DorisClient(base_url, auth=(f"ddl_{user}", "pw")),
    )


@pytest.fixture(scope="module")
def kafka() -> Iterator[MockKafka]:
    cluster = MockKafka()
    yield cluster
    cluster.producer.flush(5)


def load(label: str, path: str, table: str = "t") -> str:
    return f'LOAD LABEL {label} (DATA INFILE("{path}") INTO TABLE {table} COLUMNS TERMINATED BY "," (k, v))'


# -- broker load: path patterns ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        pytest.param(
            "{files}/" + "{a,b}" * 20,
            "too many paths in one load: the {a,b} alternatives expand to more than 1000",
            id="alternatives-that-multiply",
        ),
        pytest.param(
            "{files}/" + "{" * 2000 + "x" + "}" * 2000,
            "path has '{...}' groups nested more than 32 deep",
            id="groups-nested-without-bound",
        ),
        pytest.param(
            "{files}/" + "{good}" * 20000 + ".csv", "path is longer than 4096 characters", id="a-path-past-path-max"
        ),
    ],
)
def test_a_path_pattern_cannot_expand_without_bound(world: World, pattern: str, message: str) -> None:
    """`{a,b}` twenty times was a million patterns, each globbed (thirty times, 2^30 strings in memory before the
    first check, with no allowed root at all); now the expansion is counted before anything is built."""
    label = f"l_{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    text = world.loader.sql_error(world.db, load(label, pattern.replace("{files}", str(world.files), 1)))
    assert message in text
    assert time.monotonic() - started < 10
    assert world.loader.rows(world.db, f'SHOW LOAD WHERE LABEL = "{label}"') == []  # no job was created


def test_a_glob_through_links_back_up_the_tree_is_bounded(world: World) -> None:
    """Two links to their own folder make `*/*/.../*` match 2^depth names, each resolved; the matches of one
    component are bounded, so the statement is refused at once."""
    loop = world.files / f"loop_{uuid.uuid4().hex[:6]}"
    loop.mkdir()
    (loop / "a").symlink_to(".")
    (loop / "b").symlink_to(".")
    started = time.monotonic()
    text = world.loader.sql_error(world.db, load("loop", f"{loop}/" + "/".join(["*"] * 16) + "/x.csv"))
    assert "too many files in one load: more than 1000" in text
    assert time.monotonic() - started < 10


def test_brace_alternatives_still_expand(world: World) -> None:
    label = f"l_{uuid.uuid4().hex[:8]}"
    world.loader.sql(world.db, load(label, f"{world.files}/{{good,none}}.{{csv,txt}}"))
    deadline = time.monotonic() + 120
    while (state := world.loader.rows(world.db, f'SHOW LOAD WHERE LABEL = "{label}"')[0][2]) != "FINISHED":
        assert state != "CANCELLED" and time.monotonic() < deadline, state
        time.sleep(0.1)


# -- routine load ---------------------------------------------------------------------------------------------------
def routine_load(job: str, kafka: MockKafka, topic: str, *extra: str, table: str = "t") -> str:
    properties = "".join(f', "{p.split("=", 1)[0]}" = "{p.split("=", 1)[1]}"' for p in extra)
    return (
        f'CREATE ROUTINE LOAD {job} ON {table} COLUMNS TERMINATED BY "," PROPERTIES ("max_batch_interval" = "1") '
        f'FROM KAFKA ("kafka_broker_list" = "{kafka.bootstrap}", "kafka_topic" = "{topic}"{properties})'
    )


def show_routine(client: DorisClient, db: str, stmt: str) -> list[dict[str, Any]]:
    data = client.sql(db, stmt)
    names = [m["name"] for m in data["meta"]]
    return [dict(zip(names, row, strict=True)) for row in data["data"]]


def test_show_routine_load_never_prints_a_kafka_password(doris: DorisClient, world: World, kafka: MockKafka) -> None:
    """`property.sasl.password` (and the key and keystore passwords) were printed in CustomProperties to anyone
    who could see the database; they are shown as `******`, as Doris masks a routine load's secrets."""
    topic = f"t_{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic)
    secret = f"S3CRET-{uuid.uuid4().hex}"
    job = f"pw_{uuid.uuid4().hex[:6]}"
    world.loader.sql(
        world.db,
        routine_load(
            job, kafka, topic, "property.sasl.username=u", f"property.sasl.password={secret}", "property.group.id=g"
        ),
    )
    try:
        for client in (doris, world.loader):
            body = json.dumps(client.sql_raw(world.db, f"SHOW ALL ROUTINE LOAD FOR {job}"))
            assert secret not in body
            (row,) = show_routine(client, world.db, f"SHOW ALL ROUTINE LOAD FOR {job}")
            shown = json.loads(row["CustomProperties"])
            assert (shown["sasl.username"], shown["sasl.password"], shown["group.id"]) == ("u", "******", "g")
    finally:
        doris.sql(world.db, f"STOP ROUTINE LOAD FOR {job}")


def test_routine_load_jobs_are_bounded(doris: DorisClient, world: World, kafka: MockKafka, served_app: Any) -> None:
    """Each job is a thread and a Kafka consumer of the server: past Doris's `max_routine_load_job_num` (100)
    unfinished jobs, CREATE ROUTINE LOAD is refused with Doris's text and creates nothing."""
    manager = served_app.state.services.routine_loads
    topic = f"t_{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic)
    unfinished = sum(not j.state.is_final for j in manager.store.all())
    saved = getattr(manager, "max_jobs", None)
    manager.max_jobs = unfinished - 1  # as if the server held one job more than its bound
    try:
        text = world.loader.sql_error(world.db, routine_load("one_too_many", kafka, topic))
    finally:
        manager.max_jobs = saved
    assert f"There are more than {unfinished - 1} routine load jobs are running. exceed limit." in text
    assert show_routine(doris, world.db, "SHOW ALL ROUTINE LOAD") == [] or all(
        r["Name"] != "one_too_many" for r in show_routine(doris, world.db, "SHOW ALL ROUTINE LOAD")
    )
    assert sum(not j.state.is_final for j in manager.store.all()) == unfinished


def test_a_routine_load_batch_is_staged_as_it_is_read(kafka: MockKafka, tmp_path: Path) -> None:
    """A batch may be `max_batch_size` (up to 10 GB), and every message of it was held in the server's memory
    until the batch ended; now each message goes to the staged body as it arrives."""
    from spark_runner.kafka_source import KafkaBatches
    from tables.load_spec import LoadRequest
    from tables.routine_load import OFFSET_BEGINNING, RoutineLoadSpec

    topic = f"t_{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic)
    message = b"1," + b"x" * 20000
    for _ in range(4):
        kafka.produce(topic, [(p, message) for p in range(4) for _ in range(100)])
    spec = RoutineLoadSpec(
        name="mem",
        db="d",
        table="t",
        request=LoadRequest(db="d", table="t", label="mem"),
        broker_list=kafka.bootstrap,
        topic=topic,
        default_offset=OFFSET_BEGINNING,
        max_batch_interval_s=2,
        max_batch_rows=1600,
        custom_properties={"group.id": "g"},
    )
    source = KafkaBatches(spec, {})
    staged = tmp_path / "batch"
    try:
        tracemalloc.start()
        batch = source.read(threading.Event(), staged, fmt="csv", strip_outer_array=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        source.close()
    # the mock cluster keeps the last segments of a partition: some 1000 of the 1600 messages, 20 MB
    assert batch.rows >= 600 and batch.size == batch.rows * len(message)
    assert staged.stat().st_size == batch.staged == batch.rows * (len(message) + 1)
    assert peak < 4 * 1024 * 1024, peak


# -- SHOW LOAD / SHOW ROUTINE LOAD list only the jobs of tables the user may load --------------------------------------
def test_show_load_lists_only_jobs_of_tables_the_user_may_load(
    doris: DorisClient, world: World, served_app: Any
) -> None:
    """Doris's SHOW LOAD skips a job whose table the user holds no LOAD_PRIV on (`checkAuth`); its ErrorURL
    needs no credentials and holds that table's rejected rows."""
    broker = served_app.state.services.broker_loads
    label = f"root_{uuid.uuid4().hex[:6]}"
    doris.sql(world.db, load(label, f"{world.files}/good.csv", table="other"))

    def can_load(db: str, table: str) -> bool:
        return table == "t"

    shown = broker.show_load(Cursor(f'FROM {world.db} WHERE LABEL = "{label}"'), world.db, can_load=can_load)
    assert shown.rows == []
    assert len(broker.show_load(Cursor(f'FROM {world.db} WHERE LABEL = "{label}"'), world.db).rows) == 1


def test_show_routine_load_lists_only_jobs_of_tables_the_user_may_load(
    doris: DorisClient, world: World, kafka: MockKafka, served_app: Any
) -> None:
    from sql.routine_load_commands import run_routine_load_statement

    services = served_app.state.services
    topic = f"t_{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic)
    job = f"other_{uuid.uuid4().hex[:6]}"
    doris.sql(world.db, routine_load(job, kafka, topic, "property.group.id=g", table="other"))

    def can_load(db: str, table: str) -> bool:
        return table == "t"

    def run(stmt: str) -> Any:
        return run_routine_load_statement(
            stmt, world.db, manager=services.routine_loads, catalog=services.catalog, can_load=can_load
        )

    try:
        assert [r for r in run("SHOW ALL ROUTINE LOAD").rows if r[1] == job] == []
        with pytest.raises(Exception, match=f"There is no job named {job}"):
            run(f"SHOW ALL ROUTINE LOAD FOR {job}")
        with pytest.raises(Exception, match=f"There is not operable routine load job with name {job}"):
            run(f"SHOW ROUTINE LOAD TASK WHERE JobName = '{job}'")
        assert len(show_routine(doris, world.db, f"SHOW ALL ROUTINE LOAD FOR {job}")) == 1
        # through the server: the user with LOAD_PRIV on `t` alone sees no job of `other`, and a LIKE of many `%`
        # is matched in linear steps (a regex of `.*` runs held the GIL for hours on it)
        assert [r for r in show_routine(world.loader, world.db, "SHOW ALL ROUTINE LOAD") if r["Name"] == job] == []
        assert job in world.loader.sql_error(world.db, f"SHOW ALL ROUTINE LOAD FOR {job}")
        started = time.monotonic()
        assert show_routine(doris, world.db, "SHOW ALL ROUTINE LOAD LIKE '" + "%" * 60 + "_X'") == []
        assert time.monotonic() - started < 5
        assert len(show_routine(doris, world.db, f"SHOW ALL ROUTINE LOAD LIKE '%{job[2:].upper()}'")) == 1
    finally:
        doris.sql(world.db, f"STOP ROUTINE LOAD FOR {job}")


# -- DDL: partitions --------------------------------------------------------------------------------------------------
def test_a_table_holds_at_most_4096_partitions(doris: DorisClient, world: World) -> None:
    """Each partition a statement adds was checked against every other one, parsing their bounds again: a CREATE
    TABLE of 20,000 partitions (900 KB) held a core and the interpreter lock for over 20 minutes, and batches of
    4096 could be repeated without end. A table holds at most 4096 (Doris's documented default), checked before
    anything is created."""
    batch = "FROM (0) TO (4096) INTERVAL 1"
    text = world.ddl.sql_error(
        world.db,
        "CREATE TABLE too_many (k INT) DUPLICATE KEY(k) PARTITION BY RANGE(k) "
        f"({batch}, FROM (4096) TO (4100) INTERVAL 1) DISTRIBUTED BY HASH(k) BUCKETS 1",
    )
    assert "Too many partitions: 4097. Limit: 4096" in text
    assert doris.sql_raw(world.db, "DESC too_many")["code"] == 1  # nothing was created
    world.ddl.sql(
        world.db,
        f"CREATE TABLE full_range (k INT) DUPLICATE KEY(k) PARTITION BY RANGE(k) ({batch}) "
        "DISTRIBUTED BY HASH(k) BUCKETS 1",
    )
    text = world.ddl.sql_error(world.db, "ALTER TABLE full_range ADD PARTITION p_more VALUES LESS THAN (5000)")
    assert "Too many partitions: 4097. Limit: 4096" in text


def test_many_list_partitions_are_checked_in_linear_time(doris: DorisClient, world: World) -> None:
    """2048 LIST partitions of 20 values each rebuilt the set of every earlier value for each partition (40
    million parses); each value is now looked up once."""
    parts = ", ".join(
        f"PARTITION p{i} VALUES IN ({', '.join(str(i * 20 + j) for j in range(20))})" for i in range(2048)
    )
    started = time.monotonic()
    world.ddl.sql(
        world.db,
        f"CREATE TABLE many_list (k INT) DUPLICATE KEY(k) PARTITION BY LIST(k) ({parts}) "
        "DISTRIBUTED BY HASH(k) BUCKETS 1",
    )
    assert time.monotonic() - started < 30
    text = world.ddl.sql_error(world.db, "ALTER TABLE many_list ADD PARTITION p_dup VALUES IN (40959, 50000)")
    assert "The partition key[(40959)] in partition item[p_dup] is conflict" in text


def test_a_table_definition_is_bounded(doris: DorisClient, world: World, served_app: Any) -> None:
    """The definition is written again with every commit: a 5 MB column comment made each one-row load write
    5 MB more to the warehouse (100 MB per load with a comment the size of the HTTP body cap). CREATE TABLE and
    ALTER TABLE refuse a definition over 4 MiB and change nothing."""
    big = "x" * 5_000_000
    text = world.ddl.sql_error(
        world.db, f"CREATE TABLE huge (k INT COMMENT '{big}') DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"
    )
    assert "The definition of table huge would take" in text and "more than 4194304" in text
    assert doris.sql_raw(world.db, "DESC huge")["code"] == 1
    world.ddl.sql(world.db, "CREATE TABLE small (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    text = world.ddl.sql_error(world.db, f"ALTER TABLE small MODIFY COLUMN v INT COMMENT '{big}'")
    assert "The definition of table small would take" in text
    assert served_app.state.services.catalog.load(world.db, "small").definition.columns[1].comment == ""


def test_a_kafka_message_nested_past_the_recursion_limit_is_one_error_line() -> None:
    """A JSON message nested deeper than Python's recursion limit is staged as it came, one line (the load
    counts it as an error row), like any message that is not JSON; it used to raise RecursionError out of the
    batch, so one message from the topic's producer failed every batch of the job."""
    import io

    from spark_runner.kafka_source import stage_message

    out = io.BytesIO()
    deep = b"[" * 100_000
    stage_message(out, deep, fmt="json", strip_outer_array=True)
    stage_message(out, b'[{"k": 1}]', fmt="json", strip_outer_array=True)
    assert out.getvalue() == deep + b'\n{"k":1}\n'
