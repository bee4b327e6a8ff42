"""Injected faults (issue 23) against a server in a process of its own: a client that vanishes mid-body leaves
nothing staged and its label free; one gone before its reply leaves its load whole, and a retry finds its label;
a client sending one byte per second does not hold up the others; a disk that fills up while a body is staged
fails that load with a clear error, leaves nothing half written, and the server loads again once space is back."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server_process import ServerProcess

DB = "faults"
DDL = "CREATE TABLE {name} (k INT NOT NULL, v VARCHAR(64)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2"
# a server of their own (and one on a small disk): past make test's budget, so `make test-full` runs them
pytestmark = pytest.mark.full


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("faults")
    proc = ServerProcess(tmp / "data", tmp / "server.log")
    proc.start()
    proc.sql(DB, f"CREATE DATABASE {DB}")
    yield proc
    proc.kill()


def open_chunked_load(server: ServerProcess, table: str, label: str, first: bytes) -> socket.socket:
    """A stream load whose chunked body has sent `first` and stays open (the caller sends more or vanishes)."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    head = [
        f"PUT /api/{DB}/{table}/_stream_load HTTP/1.1",
        f"Host: 127.0.0.1:{server.port}",
        "Authorization: Basic cm9vdDo=",
        "column_separator: ,",
        f"label: {label}",
        "Transfer-Encoding: chunked",
        "",
        "",
    ]
    sock.sendall("\r\n".join(head).encode() + b"%x\r\n%s\r\n" % (len(first), first))
    return sock


def staged_files(server: ServerProcess) -> list[Path]:
    staging = server.data_dir / "staging"
    return sorted(staging.iterdir()) if staging.is_dir() else []


def wait_until(condition, what: str, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_client_vanishing_mid_body_leaves_nothing_staged_and_frees_its_label(server: ServerProcess) -> None:
    server.sql(DB, DDL.format(name="vanish"))
    label = f"vanish_{uuid.uuid4().hex[:8]}"
    sock = open_chunked_load(server, "vanish", label, b"".join(b"%d,row\n" % i for i in range(20000)))
    wait_until(lambda: server.label_state(DB, label) == "PREPARE", "the load never started")
    sock.shutdown(socket.SHUT_RDWR)  # gone mid-body: no last chunk, no reply read
    sock.close()
    wait_until(lambda: server.label_state(DB, label) in ("UNKNOWN", "ABORTED"), "the label stayed taken")
    wait_until(lambda: staged_files(server) == [], f"staged files left: {staged_files(server)}")
    assert server.sql(DB, "SELECT count(*) FROM vanish")["data"] == [[0]]
    again = server.load(DB, "vanish", b"1,again\n", label=label)
    assert again["Status"] == "Success" and again["NumberLoadedRows"] == 1, again


def test_a_client_gone_before_its_reply_leaves_its_load_whole_and_a_retry_finds_its_label(
    server: ServerProcess,
) -> None:
    """The whole body sent, the connection reset before the reply is read: the load is all there with its label
    VISIBLE or not at all; the same load again answers Label Already Exists with the first one's state."""
    server.sql(DB, DDL.format(name="noreply"))
    label = f"noreply_{uuid.uuid4().hex[:8]}"
    body = b"".join(b"%d,row\n" % i for i in range(1000))
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    head = [
        f"PUT /api/{DB}/noreply/_stream_load HTTP/1.1",
        f"Host: 127.0.0.1:{server.port}",
        "Authorization: Basic cm9vdDo=",
        "column_separator: ,",
        f"label: {label}",
        f"Content-Length: {len(body)}",
        "",
        "",
    ]
    sock.sendall("\r\n".join(head).encode() + body)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # a reset, the reply never read
    wait_until(lambda: server.label_state(DB, label) not in ("PREPARE", "COMMITTED"), "the load never finished")
    state = server.label_state(DB, label)
    count = server.sql(DB, "SELECT count(*) FROM noreply")["data"]
    assert (state, count) in (("VISIBLE", [[1000]]), ("UNKNOWN", [[0]]), ("ABORTED", [[0]])), (state, count)
    again = server.load(DB, "noreply", body, label=label)
    if state == "VISIBLE":
        assert again["Status"] == "Label Already Exists" and again["ExistingJobStatus"] == "FINISHED", again
    else:
        assert again["Status"] == "Success", again
    assert server.sql(DB, "SELECT count(*) FROM noreply")["data"] == [[1000]]
    assert server.label_state(DB, label) == "VISIBLE"


def test_a_client_sending_one_byte_per_second_does_not_hold_up_the_others(server: ServerProcess) -> None:
    server.sql(DB, DDL.format(name="slow"))
    server.sql(DB, DDL.format(name="busy"))
    label = f"slow_{uuid.uuid4().hex[:8]}"
    sock = open_chunked_load(server, "slow", label, b"1,")
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(1.0):
            try:
                sock.sendall(b"1\r\nx\r\n")
            except OSError:
                return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.label_state(DB, label) == "PREPARE", "the slow load never started")
        for i, table in enumerate(["slow", "busy", "busy"]):
            started = time.monotonic()
            reply = server.load(DB, table, f"{10 + i},quick\n".encode(), label=f"quick_{i}_{label}")
            assert reply["Status"] == "Success", reply
            assert time.monotonic() - started < 30, "a load waited behind the slow client"
        assert server.sql(DB, "SELECT k FROM slow ORDER BY k")["data"] == [[10]]
        assert server.label_state(DB, label) == "PREPARE"  # still trickling, still its own load
    finally:
        stop.set()
        sock.close()
        thread.join(timeout=5)
    wait_until(lambda: server.label_state(DB, label) in ("UNKNOWN", "ABORTED"), "the slow load's label stayed taken")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 20 MB tmpfs (we run as root); unmounted afterwards."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_while_staging_fails_the_load_and_the_server_loads_once_space_is_back(
    small_disk: Path, tmp_path: Path
) -> None:
    """The shared dir (staging and warehouse) on a 20 MB disk, filled up but for 1 MB; a 6 MB body."""
    proc = ServerProcess(tmp_path / "data", tmp_path / "server.log", SL_SHARED_DIR=str(small_disk))
    proc.start()
    try:
        proc.sql(DB, f"CREATE DATABASE {DB}")
        proc.sql(DB, DDL.format(name="t"))
        assert proc.load(DB, "t", b"1,before\n", label="before")["Status"] == "Success"
        filler = small_disk / "filler"
        free = shutil.disk_usage(small_disk).free
        with filler.open("wb") as out:
            out.write(b"\0" * (free - 1024 * 1024))
        body = b"".join(b"%d,%s\n" % (i, b"x" * 50) for i in range(100000))  # ~6 MB
        reply = proc.load(DB, "t", body, label="full")
        assert reply["Status"] == "Fail", reply
        assert reply["Message"].startswith("[INTERNAL_ERROR]failed to stage the body: "), reply  # the server's
        assert "No space left on device" in reply["Message"], reply
        assert proc.label_state(DB, "full") in ("UNKNOWN", "ABORTED")
        assert sorted((small_disk / "staging").iterdir()) == []
        assert proc.sql(DB, "SELECT k, v FROM t ORDER BY k")["data"] == [[1, "before"]]
        os.remove(filler)
        again = proc.load(DB, "t", body, label="full")
        assert again["Status"] == "Success" and again["NumberLoadedRows"] == 100000, again
        assert proc.sql(DB, "SELECT count(*) FROM t")["data"] == [[100000]]
    finally:
        proc.kill()


def test_an_async_load_whose_group_lost_its_jvm_commits_on_the_new_jvm_without_a_restart(tmp_path: Path) -> None:
    """The JVM killed alone under an acknowledged async group-commit load (issue 23, found by `tools/torture.py
    --fault jvm`): its replays while no JVM runs fail for want of one and are tried again, so the load becomes
    visible on the new JVM. It used to wait in the WAL for the next start of the server."""
    proc = ServerProcess(tmp_path / "data", tmp_path / "server.log")
    proc.start(SL_GROUP_COMMIT_INTERVAL_MS="20")
    try:
        proc.sql(DB, f"CREATE DATABASE {DB}")
        proc.sql(DB, DDL.format(name="async"))
        body = b"".join(b"%d,%s\n" % (i, b"v" * 40) for i in range(200000))
        reply = proc.load(DB, "async", body, group_commit="async_mode")
        assert reply["Status"] == "Success" and reply["GroupCommit"], reply
        jvms = [pid for pid in proc.children() if b"java" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert jvms
        for pid in jvms:
            os.kill(pid, 9)  # while its group runs (or is about to)
        proc.wait_for_log(["starting a new Spark session"], timeout=60)
        proc.wait_for_log(["new Spark session ready"], timeout=240)
        wait_until(
            lambda: proc.sql(DB, "SELECT count(*) FROM async")["data"] == [[200000]],
            "the acknowledged async load never became visible",
            timeout=90,
        )
        assert proc.label_state(DB, reply["Label"]) == "VISIBLE"
    finally:
        proc.kill()
