"""The server as users start it: `python -m app ...` in its own process, with its own JVM.

One start serves the whole module (a JVM start is the expensive part): the port comes from `--port` and the
data directory from `SL_DATA_DIR`, while `SL_PORT` names another port that must stay unused (the flag wins).
It listens on every address (`--host 0.0.0.0`), as in a container, so it has a root password, and small
connection bounds that the tests below reach. The Java check and the refusal to serve beyond loopback with an
empty password are tested without a server: both happen before anything imports Spark.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.helpers import DorisClient, assert_doris_result

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 120
STOP_TIMEOUT = 20
PASSWORD = "s3cret-Pass"
MAX_CONNECTIONS = 6
HEADER_TIMEOUT = 2


@dataclass(frozen=True)
class ServerProcess:
    base_url: str
    env_data_dir: Path
    env_port: int
    log: Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without any SL_* / PYICEBERG_* setting, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SL_", "PYICEBERG_"))}
    env.update(extra)
    return env


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group (python and its JVM), SIGKILL what is left after a timeout."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        pass
    # the JVM may outlive the python process; nothing of the group may survive the test run
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=STOP_TIMEOUT)


def wait_until_serving(proc: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"{base_url}/", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"server did not answer GET / within {START_TIMEOUT} s:\n{log.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    port, env_port = free_port(), free_port()
    data_dir = tmp_path_factory.mktemp("process-data")
    log = tmp_path_factory.mktemp("process-log") / "server.log"
    env = clean_env(
        SL_DATA_DIR=str(data_dir),
        SL_PORT=str(env_port),
        SL_MYSQL_PORT="0",
        SL_SPARK_MASTER="local[2]",
        SL_SPARK_CONF='{"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"}',
        SL_LOG_LEVEL="warning",
        SL_ROOT_PASSWORD=PASSWORD,
        SL_HTTP_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
        SL_HTTP_HEADER_TIMEOUT_SECONDS=str(HEADER_TIMEOUT),
        PYICEBERG_HOME=str(tmp_path_factory.mktemp("process-pyiceberg-home")),
    )
    cmd = [sys.executable, "-m", "app", "--host", "0.0.0.0", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_until_serving(proc, base_url, log)
        yield ServerProcess(base_url=base_url, env_data_dir=data_dir, env_port=env_port, log=log)
    finally:
        stop_group(proc)


@pytest.fixture(scope="module")
def doris(server: ServerProcess) -> DorisClient:
    return DorisClient(server.base_url, auth=("root", PASSWORD))


@pytest.fixture(scope="module")
def first_load(doris: DorisClient) -> tuple[str, httpx.Response]:
    """A new database and unique table with a sequence column, and one stream load into it."""
    db = f"db_{uuid.uuid4().hex[:12]}"
    doris.sql(db, f"CREATE DATABASE {db}")
    doris.sql(
        db,
        "CREATE TABLE t (k BIGINT, v VARCHAR(32), seq INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
        'PROPERTIES ("function_column.sequence_col" = "seq")',
    )
    resp = doris.stream_load(db, "t", "1,a,2\n1,b,1\n2,c,0\n", headers={"column_separator": ",", "label": "first"})
    return db, resp


def test_health_answers_in_the_fe_envelope(server: ServerProcess) -> None:
    resp = httpx.get(f"{server.base_url}/api/health", timeout=10)
    assert resp.status_code == 200
    body = resp.json()
    assert list(body) == ["msg", "code", "data", "count"]
    assert body["msg"] == "success" and body["code"] == 0 and body["count"] == 0
    assert isinstance(body["data"], dict)


def test_stream_load_into_a_new_unique_table_succeeds(first_load: tuple[str, httpx.Response]) -> None:
    _, resp = first_load
    body = assert_doris_result(resp, total=3, loaded=3, filtered=0)
    assert body["Label"] == "first" and body["Message"] == "OK"


def test_loaded_rows_read_back_with_the_larger_sequence(
    doris: DorisClient, first_load: tuple[str, httpx.Response]
) -> None:
    db, _ = first_load
    assert doris.rows(db, "SELECT * FROM t ORDER BY k") == [[1, "a", 2], [2, "c", 0]]


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("catalog.db", id="the catalog lives in the data dir from SL_DATA_DIR"),
        pytest.param("transactions.db", id="the transactions live in the data dir from SL_DATA_DIR"),
    ],
)
def test_data_dir_comes_from_sl_data_dir(
    server: ServerProcess, first_load: tuple[str, httpx.Response], name: str
) -> None:
    assert (server.env_data_dir / name).is_file(), sorted(p.name for p in server.env_data_dir.iterdir())


def test_port_flag_wins_over_sl_port(server: ServerProcess) -> None:
    assert httpx.get(f"{server.base_url}/", timeout=10).status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{server.env_port}/", timeout=5)


def fake_java(directory: Path, version_line: str) -> Path:
    """A `java` executable that only prints a version banner on stderr, as `java -version` does."""
    directory.mkdir(parents=True, exist_ok=True)
    java = directory / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return java


@pytest.mark.parametrize(
    "java_home, path_java, says",
    [
        pytest.param(None, None, "Java was not found", id="no java on PATH and no JAVA_HOME"),
        pytest.param("empty", None, "Java was not found", id="JAVA_HOME without bin/java"),
        pytest.param(
            None, 'openjdk version "11.0.22" 2024-01-16', "Java 11 is too old", id="java 11 on PATH is too old"
        ),
        pytest.param("old", None, "Java 8 is too old", id="java 1.8 under JAVA_HOME is too old"),
    ],
)
def test_start_without_java_17_exits_2_and_says_what_to_install(
    tmp_path: Path, java_home: str | None, path_java: str | None, says: str
) -> None:
    python_dir = Path(sys.executable).parent
    path = [str(python_dir)]
    env = {k: v for k, v in clean_env().items() if k not in ("JAVA_HOME", "PATH")}
    if path_java is not None:
        fake_java(tmp_path / "path-bin", path_java)
        path.insert(0, str(tmp_path / "path-bin"))
    if java_home == "empty":
        (tmp_path / "jdk").mkdir()
        env["JAVA_HOME"] = str(tmp_path / "jdk")
    elif java_home == "old":
        fake_java(tmp_path / "jdk" / "bin", 'java version "1.8.0_392"')
        env["JAVA_HOME"] = str(tmp_path / "jdk")
    env["PATH"] = os.pathsep.join(path)
    if path_java is None:
        assert not (python_dir / "java").exists(), "the test needs a PATH without java"
    out = subprocess.run(
        [sys.executable, "-m", "app", "--port", str(free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out
    assert says in out.stderr and "Java 17" in out.stderr and "openjdk-17" in out.stderr, out.stderr
    assert out.stdout == ""


@pytest.mark.parametrize(
    "args, env",
    [
        pytest.param(["--host", "0.0.0.0"], {}, id="--host 0.0.0.0 with an empty password"),
        pytest.param([], {"SL_HOST": "::"}, id="SL_HOST :: with an empty password"),
        pytest.param(["--host", "example.internal"], {"SL_ROOT_PASSWORD": ""}, id="a host name that is not localhost"),
    ],
)
def test_serving_beyond_loopback_with_an_empty_root_password_exits_2_and_says_to_set_one(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "app", "--port", str(free_port()), "--data-dir", str(tmp_path / "data"), *args],
        cwd=ROOT,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out
    assert "empty password" in out.stderr and "SL_ROOT_PASSWORD" in out.stderr, out.stderr
    assert not (tmp_path / "data").exists(), "nothing may be created before the refusal"


def test_beyond_loopback_only_the_root_password_logs_in(server: ServerProcess, doris: DorisClient) -> None:
    assert doris.sql_raw("information_schema", "SELECT 1")["code"] == 0
    for auth in (("root", ""), ("root", "wrong"), ("admin", "")):
        body = httpx.post(
            f"{server.base_url}/api/query/default_cluster/information_schema",
            json={"stmt": "SELECT 1"},
            auth=auth,
            timeout=30,
        ).json()
        assert body["code"] != 0 and "Access denied" in str(body["data"]) + body["msg"], body


def test_connections_that_never_finish_their_request_head_are_closed_and_free_the_bound(
    server: ServerProcess, doris: DorisClient
) -> None:
    host, port = server.base_url.removeprefix("http://").split(":")
    stalled = []
    for _ in range(MAX_CONNECTIONS):
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\n")  # the head never ends
        stalled.append(sock)
    try:
        time.sleep(0.3)
        # every slot is held: a new request is refused at once rather than waiting behind them
        assert httpx.get(f"{server.base_url}/api/health", timeout=10).status_code == 503
        time.sleep(HEADER_TIMEOUT + 1)
        for sock in stalled:  # the server closed each of them
            sock.settimeout(5)
            assert sock.recv(1024) == b""
        assert httpx.get(f"{server.base_url}/api/health", timeout=10).status_code == 200
        assert doris.sql_raw("information_schema", "SELECT 1")["code"] == 0
    finally:
        for sock in stalled:
            sock.close()
