"""The server on a Spark cluster: what it checks at start, and how it notices that its cluster application is gone.

With a master other than `local[...]` every task runs in an executor on another node, so everything an executor
reads or writes must be on storage every node mounts at the same path: the shared dir (`SL_SHARED_DIR`). The
server checks this at start instead of letting the first load find out:

    master_problem(master)             a `spark://` master that does not accept a connection (before the session)
    check_cluster(spark, shared, ...)  an executor registers within the timeout, reads a file the server just
                                       wrote under the shared dir, and writes one back that the server reads
                                       (a node that mounts something else there writes where the server never
                                       looks: its rows would vanish at commit without this check)

Each failure raises `ClusterProblem`, naming what is wrong; the server logs it and exits.

While serving, `ExecutorWatch` is the `SparkHandle`'s probe: a context the cluster stopped (the master removed
the application, or no master answered its registration), or a session left without any executor for the timeout
(a standalone master restarted without recovery: it knows nothing of the application and has the workers kill
its executors) is declared lost; the handle then stops its JVM and builds a new session, which registers with
the master again (`spark_runner.supervisor`). Loads in flight fail as on any JVM stop; nothing is half-visible.

No Python runs on executors (no UDFs, `mapInArrow` or RDD lambdas): executors need only the JVM and the
pyspark package's jars, never this code.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from tables.errors import ServiceUnavailable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CHECK_DIR = "cluster_check"


class ClusterProblem(ServiceUnavailable):
    """The Spark cluster cannot run the server's jobs: no master, no executor, or storage not shared."""


def is_local(master: str) -> bool:
    """Whether `master` runs executors inside the server's own JVM (`local`, `local[4]`, `local[*, 2]`...)."""
    return master.strip().lower().startswith("local")


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The host and port of each master of a `spark://` URL (`spark://h1:7077,h2:7077` for standby masters);
    empty for every other kind of master (`k8s://`, `yarn`, `local`), which Spark itself resolves."""
    if not master.startswith("spark://"):
        return []
    out = []
    for part in master.removeprefix("spark://").split(","):
        part = part.strip()
        if part.startswith("["):  # [::1]:7077
            host, _, rest = part[1:].partition("]")
            port = rest.removeprefix(":")
        else:
            host, sep, port = part.rpartition(":")
            host, port = (host, port) if sep else (part, "")
        out.append((host, int(port) if port.isdigit() else 7077))
    return out


def master_problem(master: str, timeout: float = 5.0) -> str | None:
    """Why a `spark://` master cannot be used, or None: none of its addresses accepts a TCP connection."""
    addresses = master_addresses(master)
    failures = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return None
        except OSError as exc:
            failures.append(f"{host}:{port}: {exc.strerror or exc}")
    if not failures:
        return None
    return f"cannot reach the Spark master {master} ({'; '.join(failures)}): is the master running (SL_SPARK_MASTER)?"


def executor_count(spark: SparkSession) -> int:
    """Executors registered with the driver now (the driver itself is not counted)."""
    context = spark.sparkContext._jsc.sc()
    return max(0, len(context.statusTracker().getExecutorInfos()) - 1)


def context_stopped(spark: SparkSession) -> bool:
    return bool(spark.sparkContext._jsc.sc().isStopped())


def dynamic_allocation(spark: SparkSession) -> bool:
    """Whether executors come and go with the load (then having none for a while is normal)."""
    return spark.sparkContext.getConf().get("spark.dynamicAllocation.enabled", "false").lower() == "true"


def wait_for_executors(spark: SparkSession, timeout: float) -> int:
    """The number of executors once at least one registered.

    Raises:
        ClusterProblem: none within `timeout` seconds (or the cluster stopped the application).
    """
    deadline = time.monotonic() + timeout
    while True:
        if context_stopped(spark):
            raise ClusterProblem(
                f"the Spark master {spark.sparkContext.master} stopped the application: no master accepted it "
                "(check the master's log and SL_SPARK_MASTER)"
            )
        if (count := executor_count(spark)) > 0:
            return count
        if time.monotonic() >= deadline:
            raise ClusterProblem(
                f"no Spark executor registered within {timeout:g} s (SL_SPARK_CLUSTER_CHECK_TIMEOUT_SECONDS): does "
                f"the master {spark.sparkContext.master} have workers with free cores and memory for "
                "spark.executor.memory / spark.executor.cores, and can they connect back to this server "
                "(spark.driver.host)?"
            )
        time.sleep(0.2)


def check_cluster(spark: SparkSession, shared_dir: Path, *, timeout: float) -> None:
    """Run one small job on the cluster: an executor reads a file the server wrote under `shared_dir` and
    writes one back, which the server reads. Dynamic allocation starts executors for the job itself.

    Raises:
        ClusterProblem: naming what failed (no executor, the file not found on an executor, the written file
        not found by the server, or the job not finished within `timeout`).
    """
    started = time.monotonic()
    if not dynamic_allocation(spark):
        wait_for_executors(spark, timeout)
    token = uuid.uuid4().hex
    folder = shared_dir / CHECK_DIR / token
    folder.mkdir(parents=True)
    try:
        (folder / "from-server.txt").write_text(token + "\n")
        left = max(1.0, timeout - (time.monotonic() - started))
        read, written = _probe_job(spark, folder, token, left)
        if read != [token]:
            raise ClusterProblem(f"an executor read {read!r} from {folder / 'from-server.txt'}, not {token!r}")
        back = sorted((folder / "from-executor").glob("part-*"))
        found = [line for part in back for line in part.read_text().split()]
        if found != [written]:
            raise ClusterProblem(
                f"an executor wrote a file under {folder / 'from-executor'} that the server does not see "
                f"(found {found!r}): the executors' {shared_dir} is not the server's; mount the same shared storage "
                "at the same path on every node (SL_SHARED_DIR)"
            )
    finally:
        _remove(folder)


def _probe_job(spark: SparkSession, folder: Path, token: str, timeout: float) -> tuple[list[str], str]:
    """Read `from-server.txt` on an executor and write a line to `from-executor/`; cancelled after `timeout`."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    context = spark.sparkContext
    group = f"cluster_check_{uuid.uuid4().hex}"
    timer = threading.Timer(timeout, context.cancelJobGroup, args=(group,))
    written = f"{token}-back"
    context.setJobGroup(group, "cluster check", interruptOnCancel=True)
    timer.start()
    try:
        # read on an executor: the driver only lists the file, a task opens it
        frame = spark.read.text(str(folder / "from-server.txt"))
        read = [row.value for row in frame.collect()]
        spark.createDataFrame([(written,)], "value string").coalesce(1).write.text(str(folder / "from-executor"))
    except (Py4JJavaError, PySparkException) as exc:
        text = str(exc)
        if not timer.is_alive():
            raise ClusterProblem(
                f"the cluster check job did not finish within {timeout:g} s (SL_SPARK_CLUSTER_CHECK_TIMEOUT_SECONDS)"
            ) from exc
        if "FileNotFoundException" in text or "does not exist" in text:
            raise ClusterProblem(
                f"an executor cannot read {folder / 'from-server.txt'}, which the server just wrote: the executors "
                "do not see the server's shared dir; mount the same shared storage at the same path on every node "
                "(SL_SHARED_DIR)"
            ) from exc
        raise ClusterProblem(f"the cluster check job failed: {text.splitlines()[0][:500]}") from exc
    finally:
        timer.cancel()
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    return read, written


def _remove(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


class ExecutorWatch:
    """A `SparkHandle` probe for a session on a cluster: a reason when the session is lost, else None."""

    def __init__(self, grace_seconds: float) -> None:
        self.grace_seconds = grace_seconds
        self._empty_since: float | None = None

    def __call__(self, spark: SparkSession) -> str | None:
        if context_stopped(spark):
            return "the cluster stopped the Spark application (its master removed it or never accepted it)"
        if dynamic_allocation(spark) or executor_count(spark) > 0:
            self._empty_since = None
            return None
        now = time.monotonic()
        if self._empty_since is None:
            self._empty_since = now
        if now - self._empty_since < self.grace_seconds:
            return None
        self._empty_since = None
        return (
            f"no Spark executor for {self.grace_seconds:g} s (the master restarted, or every worker is gone): "
            "registering again with the master"
        )
