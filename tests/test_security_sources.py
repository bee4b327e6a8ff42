"""Broker load and routine load cannot be turned against the server (issue 15): LOAD reads only files under
SL_BROKER_ALLOWED_ROOTS after resolving links and globs, never /proc or the server's own folders, from a bounded
queue; CREATE ROUTINE LOAD passes only an allow-list of Kafka client properties, certificate files only from
SL_KAFKA_CERT_DIR. Each attack checks that its target survived: a marker file outside the roots is never in a
reply or a table, and the same table loads afterwards."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
import pytest

from tables.errors import DorisError, SqlError
from tables.source_paths import SourcePolicy, resolve_sources
from tests.helpers import DorisClient
from tests.kafka_mock import MockKafka

NOT_ALLOWED = "file path is not allowed"


@dataclass
class Scene:
    """A database with table `t`, a folder under the allowed root, and a marker file outside every root."""

    db: str
    files: Path
    marker: Path
    secret: str
    replies: list[str] = field(default_factory=list)

    def error(self, doris: DorisClient, stmt: str) -> str:
        text = doris.sql_error(self.db, stmt)
        self.replies.append(text)
        return text


@pytest.fixture(scope="module")
def scene(doris: DorisClient, server_settings: Any, tmp_path_factory: pytest.TempPathFactory) -> Scene:
    db = f"db_{uuid.uuid4().hex[:12]}"
    doris.sql(db, f"CREATE DATABASE {db}")
    doris.sql(db, "CREATE TABLE t (k INT, v VARCHAR(64)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    files = Path(server_settings.broker_allowed_roots[0]) / uuid.uuid4().hex[:12]
    files.mkdir()
    secret = f"MARKER-{uuid.uuid4().hex}"
    marker = tmp_path_factory.mktemp("outside") / "marker.csv"
    marker.write_text(f"1,{secret}\n")
    (files / "good.csv").write_text("7,seven\n")
    (files / "evil.csv").symlink_to(marker)
    (files / "datalink").symlink_to(server_settings.resolved_data_dir)
    os.mkfifo(files / "fifo.csv")
    return Scene(db=db, files=files, marker=marker, secret=secret)


def load(label: str, path: str) -> str:
    return f'LOAD LABEL {label} (DATA INFILE("{path}") INTO TABLE t COLUMNS TERMINATED BY "," (k, v))'


def show_load(doris: DorisClient, db: str, label: str) -> dict[str, Any]:
    data = doris.sql(db, f'SHOW LOAD WHERE LABEL = "{label}"')
    names = [m["name"] for m in data["meta"]]
    rows = data["data"]
    assert len(rows) == 1, rows
    return dict(zip(names, rows[0], strict=True))


def wait_for_state(doris: DorisClient, db: str, label: str, states: tuple[str, ...]) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while (job := show_load(doris, db, label))["State"] not in states:
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    return job


@pytest.mark.parametrize(
    ("path", "message"),
    [
        pytest.param("/etc/passwd", f"{NOT_ALLOWED}: /etc/passwd", id="a-system-file-is-refused"),
        pytest.param(
            "/proc/self/environ", f"{NOT_ALLOWED}: /proc/self/environ", id="the-server-environment-is-refused"
        ),
        pytest.param("/etc/*", f"{NOT_ALLOWED}: /etc", id="a-folder-outside-is-refused-before-it-is-listed"),
        pytest.param("{files}/*/*", f"{NOT_ALLOWED}: {{files}}/datalink", id="a-link-is-refused-before-it-is-listed"),
        pytest.param("{files}/evil.csv", f"{NOT_ALLOWED}: {{files}}/evil.csv", id="a-link-out-of-the-root-is-refused"),
        pytest.param("{files}/*.csv", f"{NOT_ALLOWED}: {{files}}/evil.csv", id="a-glob-matching-that-link-is-refused"),
        pytest.param("{files}/../*/marker.csv", "can not contain '..' in path", id="a-glob-reaching-out-by-dots"),
        pytest.param("{files}/{{good.csv,../x}}", "can not contain '..' in path", id="a-brace-alternative-with-dots"),
        pytest.param("file://{marker}", NOT_ALLOWED, id="a-file-uri-outside-the-root-is-refused"),
        pytest.param("{files}/datalink/load_jobs.db", NOT_ALLOWED, id="the-data-dir-through-a-link-is-refused"),
        pytest.param("{data_dir}/*", NOT_ALLOWED, id="the-data-dir-itself-is-refused"),
        pytest.param("{files}/fifo.csv", "file path is not a regular file", id="a-fifo-that-would-block-is-refused"),
        pytest.param("s3a://bucket/in/x.csv", NOT_ALLOWED, id="a-uri-without-an-allowed-prefix-is-refused"),
        pytest.param("{files}/none-*.csv", "No source file in this table(t).", id="a-glob-matching-nothing"),
    ],
)
def test_broker_load_reads_nothing_outside_the_allowed_roots(
    doris: DorisClient, scene: Scene, server_settings: Any, path: str, message: str
) -> None:
    values = {"files": scene.files, "marker": scene.marker, "data_dir": server_settings.resolved_data_dir}
    label = f"l_{uuid.uuid4().hex[:8]}"
    text = scene.error(doris, load(label, path.format(**values)))
    assert message.format(**values) in text
    assert scene.secret not in text
    assert all(name in path or name not in text for name in ("passwd", "transactions.db"))  # nothing was listed
    assert doris.rows(scene.db, f'SHOW LOAD WHERE LABEL = "{label}"') == []  # no job was created


def test_broker_load_refuses_the_same_paths_over_the_mysql_protocol(mysql_port: int, scene: Scene) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=mysql_port, user="root", password="", database=scene.db)
    try:
        for path, message in (("/proc/self/environ", NOT_ALLOWED), (f"{scene.files}/*.csv", NOT_ALLOWED)):
            with pytest.raises(pymysql.err.MySQLError) as caught:
                conn.cursor().execute(load("over_mysql", path))
            assert message in str(caught.value) and scene.secret not in str(caught.value)
            scene.replies.append(str(caught.value))
    finally:
        conn.close()


def test_the_queue_is_bounded_and_a_job_checks_its_files_again_when_it_runs(
    served_app: Any, server_settings: Any, doris: DorisClient, scene: Scene, tmp_path: Path
) -> None:
    """A server (no workers: its jobs stay PENDING) takes two jobs, refuses a third past its bound of 2, and
    stops; a link planted into a job's glob before the next start is refused when that job runs there."""
    from sql.broker_load import BrokerLoads

    services = served_app.state.services
    policy = SourcePolicy.build(server_settings.broker_allowed_roots, [server_settings.resolved_data_dir])

    def server(concurrency: int) -> BrokerLoads:
        return BrokerLoads(
            loads=services.loads, data_dir=tmp_path, sources=policy, max_waiting_jobs=2, concurrency=concurrency
        )

    db = scene.db
    queued = scene.files / "queued"
    queued.mkdir()
    (queued / "ok.csv").write_text("8,eight\n")
    stopped = server(concurrency=0)
    stopped.submit(load("late", f"{queued}/*.csv"), db)
    stopped.submit(load("other", f"{queued}/ok.csv"), db)
    with pytest.raises(SqlError) as refused:
        stopped.submit(load("third", f"{queued}/ok.csv"), db)
    assert refused.value.detail == (
        "There are more than 2 unfinished load jobs, please retry later. You can use `SHOW LOAD` to view submitted jobs"
    )
    stopped.cancel('CANCEL LOAD WHERE LABEL = "other"', db)  # a waiting job is cancelled at once
    other = stopped.store.in_database(db, label="other")[0]
    assert (other.state, other.error_msg) == ("CANCELLED", "type:USER_CANCEL; msg:user cancel")
    (queued / "evil.csv").symlink_to(scene.marker)

    restarted = server(concurrency=1)
    assert restarted.recover() == (1, 0)
    late = _wait(restarted, db, "late")
    assert (late.state, late.error_msg) == ("CANCELLED", f"type:ETL_RUN_FAIL; msg:{NOT_ALLOWED}: {queued}/evil.csv")
    (queued / "evil.csv").unlink()
    restarted.submit(load("third", f"{queued}/*.csv"), db)  # the queue has room again, and the table still loads
    assert _wait(restarted, db, "third").state == "FINISHED"
    rows = doris.rows(db, "SELECT k, v FROM t ORDER BY k")
    assert rows == [[8, "eight"]]
    assert scene.secret not in json.dumps(rows) + "".join(scene.replies) + str(late)
    assert scene.marker.read_text() == f"1,{scene.secret}\n"


def _wait(broker: Any, db: str, label: str) -> Any:
    deadline = time.monotonic() + 120
    while (job := broker.store.in_database(db, label=label)[-1]).state not in ("FINISHED", "CANCELLED"):
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
    return job


@pytest.mark.parametrize(
    ("roots", "server_roots", "path", "message"),
    [
        pytest.param(["{tmp}"], ["{tmp}/data"], "{tmp}/data/x.csv", NOT_ALLOWED, id="server-folders-win-over-a-root"),
        pytest.param(["/"], [], "/proc/self/status", NOT_ALLOWED, id="proc-is-refused-under-the-root-slash"),
        pytest.param([], [], "{tmp}/in/x.csv", NOT_ALLOWED, id="no-roots-refuse-every-path"),
        pytest.param(["s3a://b/in"], [], "s3a://b/inner/x", NOT_ALLOWED, id="a-uri-prefix-ends-at-a-slash"),
        pytest.param(["s3a://b/in"], [], "s3a://b/in/%2e%2e/x", "can not contain '..'", id="encoded-dots-in-a-uri"),
        pytest.param(["s3a://b/in"], [], "s3a://b/in/\\.\\./x", "can not contain '\\'", id="hadoop-glob-escapes"),
        pytest.param(["s3a://b/in"], [], "s3a://b/in/*.csv", None, id="a-glob-under-an-allowed-uri-prefix"),
        pytest.param(["{tmp}/in"], [], "{tmp}/in/x.csv", None, id="a-file-in-the-root"),
    ],
)
def test_source_policy_cases(
    tmp_path: Path, roots: list[str], server_roots: list[str], path: str, message: str | None
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.csv").write_text("1\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.csv").write_text("1\n")
    policy = SourcePolicy.build(
        [r.format(tmp=tmp_path) for r in roots], [Path(r.format(tmp=tmp_path)) for r in server_roots]
    )
    if message is None:
        assert resolve_sources([path.format(tmp=tmp_path)], policy, "t")
        return
    with pytest.raises(DorisError) as caught:
        resolve_sources([path.format(tmp=tmp_path)], policy, "t")
    assert message in caught.value.message


# -- routine load ------------------------------------------------------------------------------------------

BROKER = '"kafka_broker_list" = "127.0.0.1:9092", "kafka_topic" = "t"'


@pytest.fixture(scope="module")
def cert_scene(server_settings: Any, scene: Scene) -> Path:
    """A CA file in the certificate folder, and a link there to the marker outside it."""
    cert_dir = Path(server_settings.kafka_cert_dir)
    (cert_dir / "ca.pem").write_text("not really a certificate\n")
    (cert_dir / "evil.pem").symlink_to(scene.marker)
    return cert_dir


@pytest.mark.parametrize(
    ("prop", "value", "message"),
    [
        pytest.param(
            "plugin.library.paths",
            "{marker}",
            "property.plugin.library.paths is invalid kafka property or can not be set",
            id="native-code-plugins-are-refused",
        ),
        pytest.param(
            "ssl.engine.location",
            "{marker}",
            "property.ssl.engine.location is invalid kafka property",
            id="ssl-engines-are-refused",
        ),
        pytest.param(
            "sasl.kerberos.kinit.cmd",
            "touch {marker}.ran",
            "property.sasl.kerberos.kinit.cmd is invalid kafka property",
            id="commands-are-refused",
        ),
        pytest.param("debug", "all", "property.debug is invalid kafka property", id="debug-logging-is-refused"),
        pytest.param(
            "sasl.oauthbearer.token.endpoint.url",
            "http://127.0.0.1:1/",
            "property.sasl.oauthbearer.token.endpoint.url is invalid kafka property",
            id="oauth-callouts-are-refused",
        ),
        pytest.param(
            "ssl.ca.location",
            "/etc/passwd",
            "property.ssl.ca.location is not allowed: /etc/passwd is not a file in the certificate folder",
            id="a-certificate-outside-the-folder-is-refused",
        ),
        pytest.param(
            "ssl.key.location",
            "FILE:evil.pem",
            "property.ssl.key.location is not allowed",
            id="a-link-in-the-folder-pointing-out-is-refused",
        ),
        pytest.param(
            "ssl.certificate.location",
            "FILE:../outside/marker.csv",
            "property.ssl.certificate.location is not allowed",
            id="dots-out-of-the-folder-are-refused",
        ),
        pytest.param(
            "sasl.kerberos.principal",
            "x; touch {marker}.ran",
            "property.sasl.kerberos.principal has an invalid value",
            id="a-principal-that-is-a-command-line-is-refused",
        ),
        pytest.param(
            "security.protocol", "bogus", "property.security.protocol has an invalid value", id="an-unknown-protocol"
        ),
    ],
)
def test_create_routine_load_refuses_client_properties_off_the_allow_list(
    doris: DorisClient, db: str, scene: Scene, cert_scene: Path, prop: str, value: str, message: str
) -> None:
    doris.sql(db, "CREATE TABLE u (k INT, v VARCHAR(64)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    stmt = f'CREATE ROUTINE LOAD j ON u FROM KAFKA ({BROKER}, "property.{prop}" = "{value}")'
    text = doris.sql_error(db, stmt.format(marker=scene.marker))
    assert message in text and scene.secret not in text
    assert doris.sql(db, "SHOW ALL ROUTINE LOAD")["data"] == []
    assert not Path(f"{scene.marker}.ran").exists()


def test_create_routine_load_refuses_over_the_mysql_protocol(mysql_port: int, db: str, doris: DorisClient) -> None:
    doris.sql(db, "CREATE TABLE u (k INT, v VARCHAR(64)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    conn = pymysql.connect(host="127.0.0.1", port=mysql_port, user="root", password="", database=db)
    try:
        with pytest.raises(pymysql.err.MySQLError) as caught:
            conn.cursor().execute(
                f'CREATE ROUTINE LOAD j ON u FROM KAFKA ({BROKER}, "property.plugin.library.paths" = "/tmp/x.so")'
            )
        assert "property.plugin.library.paths is invalid kafka property or can not be set" in str(caught.value)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def kafka() -> Iterator[MockKafka]:
    cluster = MockKafka()
    yield cluster
    cluster.producer.flush(5)


def test_allowed_client_properties_reach_a_running_job(
    doris: DorisClient, db: str, kafka: MockKafka, cert_scene: Path
) -> None:
    topic = f"t_{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic)
    kafka.produce(topic, [(0, b"1,one"), (1, b"2,two")])
    doris.sql(db, "CREATE TABLE u (k INT, v VARCHAR(64)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(
        db,
        f"""CREATE ROUTINE LOAD ok_job ON u COLUMNS TERMINATED BY ","
            PROPERTIES ("max_batch_rows" = "2", "max_batch_interval" = "1")
            FROM KAFKA ("kafka_broker_list" = "{kafka.bootstrap}", "kafka_topic" = "{topic}",
                "property.kafka_default_offsets" = "OFFSET_BEGINNING", "property.group.id" = "g1",
                "property.client.id" = "c1", "property.security.protocol" = "PLAINTEXT",
                "property.fetch.message.max.bytes" = "1048576", "property.ssl.ca.location" = "FILE:ca.pem")""",
    )
    deadline = time.monotonic() + 60
    while doris.rows(db, "SELECT k, v FROM u ORDER BY k") != [[1, "one"], [2, "two"]]:
        assert time.monotonic() < deadline, doris.sql(db, "SHOW ROUTINE LOAD FOR ok_job")
        time.sleep(0.2)
    data = doris.sql(db, "SHOW ROUTINE LOAD FOR ok_job")
    row = dict(zip([m["name"] for m in data["meta"]], data["data"][0], strict=True))
    assert row["State"] == "RUNNING"
    assert json.loads(row["CustomProperties"])["client.id"] == "c1"
    doris.sql(db, "STOP ROUTINE LOAD FOR ok_job")


def test_a_stored_job_with_a_refused_property_is_paused_at_start_and_on_resume(
    served_app: Any, scene: Scene, tmp_path: Path
) -> None:
    """A job an older release stored with `plugin.library.paths`: start-up pauses it with the reason instead of
    building its consumer; RESUME pauses it again."""
    from spark_runner.routine_load import RoutineLoadManager
    from tables.routine_load import RoutineLoadSpec, RoutineLoadStore

    services = served_app.state.services
    store = RoutineLoadStore(tmp_path / "old.db")
    spec = RoutineLoadSpec(
        name="old_job",
        db=scene.db,
        table="t",
        broker_list="127.0.0.1:9092",
        topic="x",
        custom_properties={"plugin.library.paths": str(scene.marker), "group.id": "g"},
    )
    store.create(spec)
    manager = RoutineLoadManager(loads=services.loads, store=store, txns=services.txns, staging_dir=tmp_path)
    try:
        manager.start()
        job = manager.find(scene.db, "old_job")
        reason = "property.plugin.library.paths is invalid kafka property or can not be set"
        assert (job.state.value, job.reason) == ("PAUSED", f"ErrorReason{{code=errCode = 103, msg='{reason}'}}")
        assert manager.runtime(job.id) == (None, {})  # no consumer thread was started
        manager.resume(scene.db, "old_job")
        deadline = time.monotonic() + 30
        while (job := manager.find(scene.db, "old_job")).state.value != "PAUSED":
            assert time.monotonic() < deadline, job
            time.sleep(0.05)
        assert job.reason == f"ErrorReason{{code=errCode = 103, msg='{reason}'}}"
    finally:
        manager.close()
