"""A real Spark standalone cluster from the pyspark package: a master and workers on loopback, each worker in a
mount namespace of its own (`unshare -m`, as root) where the hidden folders (the server's data dir) are covered by
an empty tmpfs, as on another machine that mounts only the shared storage: a driver-local path fails loudly.

    cluster = SparkCluster(tmp, hidden=[data_dir]).start()
    cluster.url             spark://127.0.0.1:<port>
    cluster.kill_worker(0)  SIGKILL a worker and its executor (a machine gone)
    cluster.stop_master() / cluster.start_master()
    cluster.stop()          every process, by its process group
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pyspark

from tests.server_process import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent


def can_run_cluster() -> str | None:
    """Why this machine cannot run the fixture's cluster, or None."""
    if os.geteuid() != 0:
        return "the workers' mount namespaces need root"
    if shutil.which("unshare") is None:
        return "no unshare"
    if not (SPARK_HOME / "bin" / "spark-class").exists():
        return "the pyspark package has no bin/spark-class"
    return None


class SparkCluster:
    def __init__(self, root: Path, *, hidden: list[Path], workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.root = root
        self.hidden = [p.resolve() for p in hidden]
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.web_port = free_port()
        self.master: subprocess.Popen[bytes] | None = None
        self.worker_procs: list[subprocess.Popen[bytes] | None] = [None] * workers

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SL_", "SPARK_", "PYSPARK_"))}
        env.update(
            SPARK_HOME=str(SPARK_HOME),
            SPARK_DAEMON_MEMORY="256m",
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.root / "logs"),
            SPARK_CONF_DIR=str(self.root / "conf"),
        )
        return env

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        (self.root / "conf").mkdir(parents=True, exist_ok=True)
        log = open(self.root / "logs" / f"{name}.out", "ab")
        return subprocess.Popen(
            command, env=self._env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.root
        )

    def log(self, name: str) -> str:
        path = self.root / "logs" / f"{name}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def state(self) -> dict:  # type: ignore[type-arg]
        """The master's JSON status (workers, applications), from its web UI."""
        return httpx.get(f"http://127.0.0.1:{self.web_port}/json/", timeout=5).json()  # type: ignore[no-any-return]

    def alive_workers(self) -> int:
        try:
            return sum(1 for w in self.state()["workers"] if w["state"] == "ALIVE")
        except (httpx.HTTPError, json.JSONDecodeError, KeyError):
            return 0

    def start_master(self) -> None:
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        self.master = self._spawn(
            "master",
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
            + ["--port", str(self.port), "--webui-port", str(self.web_port)],
        )

    def start_worker(self, index: int) -> None:
        """Worker `index` in its own mount namespace: the hidden folders are empty tmpfs mounts there."""
        work = self.root / f"worker-{index}"
        work.mkdir(parents=True, exist_ok=True)
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        mounts = "".join(f"mount -t tmpfs -o size=1m,mode=0555 hidden {shlex.quote(str(p))} && " for p in self.hidden)
        worker = shlex.join(
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"]
            + ["--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work)]
            + ["--webui-port", "0", self.url]
        )
        self.worker_procs[index] = self._spawn(
            f"worker-{index}", ["unshare", "-m", "--propagation", "private", "sh", "-c", f"{mounts}exec {worker}"]
        )

    def start(self, timeout: float = 90) -> SparkCluster:
        self.start_master()
        for index in range(self.workers):
            self.start_worker(index)
        self.wait_for_workers(self.workers, timeout)
        return self

    def wait_for_workers(self, count: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while self.alive_workers() < count:
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{count} Spark workers did not register:\n{self.log('master')[-3000:]}")
            time.sleep(0.5)

    def tasks_started(self, index: int) -> int:
        """Tasks the executors of worker `index` have started so far (their `Running task` log lines)."""
        logs = (self.root / f"worker-{index}").glob("app-*/*/stderr")
        return sum(path.read_text(errors="replace").count("Running task") for path in logs)

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes] | None) -> None:
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def kill_worker(self, index: int) -> None:
        """SIGKILL the worker and its executor (one process group): as if its machine went away."""
        self._kill(self.worker_procs[index])
        self.worker_procs[index] = None

    def stop_master(self) -> None:
        self._kill(self.master)
        self.master = None

    def stop(self) -> None:
        for index in range(self.workers):
            self.kill_worker(index)
        self.stop_master()
