"""A server started the way users start it (`python -m app`), in its own process group, for kill/restart tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: each socket is held until all are bound (ports picked one at a time may be the
    same one twice: a server given it for HTTP and MySQL fails to bind the second, `[Errno 98]`)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def default_command(port: int, mysql_port: int, data_dir: Path) -> list[str]:
    """`python -m app --host 127.0.0.1 --port P --data-dir D` (the MySQL port comes from SL_MYSQL_PORT)."""
    return [sys.executable, "-m", "app", "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data_dir)]


class ServerProcess:
    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        command: Callable[[int, int, Path], list[str]] = default_command,
        **env: str,
    ) -> None:
        self.command = command
        self.data_dir = data_dir
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.mysql_port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120, **env: str) -> ServerProcess:
        self.port, self.mysql_port = free_ports(2)
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("SL_")}
        full_env.update(
            SL_SPARK_MASTER="local[2]",
            SL_MYSQL_PORT=str(self.mysql_port),
            SL_WARM_UP_SECONDS="0",  # tests/conftest.py: no warm-up unless a test asks for it
            SL_SPARK_CONF=json.dumps({"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"}),
        )
        full_env.update(self.env)
        full_env.update(env)
        self._log = open(self.log_path, "ab")
        self.log_offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            self.command(self.port, self.mysql_port, self.data_dir),
            cwd=ROOT,
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
            try:
                if httpx.get(self.base_url + "/", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"server did not start:\n{self.log_text()[-3000:]}")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, texts: list[str], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            current = self.log_text()[self.log_offset :]
            if all(t in current for t in texts):
                return
            time.sleep(0.1)
        raise AssertionError(f"log never showed {texts}:\n{self.log_text()[-3000:]}")

    def children(self) -> list[int]:
        """Processes the server started (the JVM runs in a session of its own)."""
        assert self.proc is not None
        out = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid:
                out.append(int(stat.parent.name))
        return out

    def kill(self) -> None:
        """SIGKILL the whole process group and the JVM: nothing of the server survives."""
        if self.proc is None:
            return
        children = self.children()
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self._log.close()
        self.proc = None

    def terminate(self, timeout: float = 60) -> int:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self._log.close()
        self.proc = None
        return code

    def sql(self, db: str, stmt: str) -> dict:  # type: ignore[type-arg]
        resp = httpx.post(
            f"{self.base_url}/api/query/default_cluster/{db}", json={"stmt": stmt}, auth=("root", ""), timeout=120
        )
        body = resp.json()
        assert body["code"] == 0, body
        return body["data"]  # type: ignore[no-any-return]

    def load(self, db: str, table: str, data: bytes, **headers: str) -> dict:  # type: ignore[type-arg]
        resp = httpx.put(
            f"{self.base_url}/api/{db}/{table}/_stream_load",
            content=data,
            headers={"column_separator": ",", **headers},
            auth=("root", ""),
            timeout=120,
        )
        return resp.json()  # type: ignore[no-any-return]

    def label_state(self, db: str, label: str) -> str:
        resp = httpx.get(
            f"{self.base_url}/api/{db}/get_load_state", params={"label": label}, auth=("root", ""), timeout=30
        )
        return str(resp.json()["data"])
