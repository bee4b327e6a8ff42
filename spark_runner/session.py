"""The one long-lived SparkSession of a server process (or of a test run)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

# pyspark reads the port of a JVM started by someone else from the environment: one launch at a time
_LAUNCH_LOCK = threading.Lock()

BASE_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    # Doris converts bad values to NULL (or filters them) instead of failing the statement.
    "spark.sql.ansi.enabled": "false",
    # Files carry Iceberg field ids; reading by id keeps renames and drop/re-add correct.
    "spark.sql.parquet.fieldId.read.enabled": "true",
    "spark.sql.parquet.fieldId.write.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # Row groups of at most 128k rows (Parquet's own bound is 128 MB, millions of rows): a small load's merge-on-write
    # lookup decodes the key column of each row group whose statistics may hold its keys (`queries._keyed_parts`),
    # so a one-row load into a table of one bucket and 2M rows decoded 2M keys and the decision columns of 2M rows
    # per load; with this bound, 128k.
    "spark.hadoop.parquet.block.row.count.limit": "131072",
    # reflect/java_method run any static Java method: match nothing.
    "spark.sql.reflect.allowList": "^$",
    # SQL text never reads files (text.`/etc/passwd`) nor expands ${env:...} / ${system:...} from the host.
    "spark.sql.runSQLOnFiles": "false",
    "spark.sql.variable.substitute": "false",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.sql.sources.partitionOverwriteMode": "static",
    "spark.driver.memory": "2g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # PySpark records the Python call site of every Column call in the JVM (several Py4J round trips
    # each): a load builds hundreds of columns, so this alone cost a one-row load ~30 ms (192 → 159 ms).
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # A load's counts come from an observation of its write; AQE must not drop the observed stage
    # when every row was filtered (the metrics would be lost and Observation.get fails).
    "spark.sql.adaptive.optimizer.excludedRules": "org.apache.spark.sql.execution.adaptive.AQEPropagateEmptyRelation",
    # Reads name their data files one by one (from the Iceberg manifests); past 32 paths Spark would list
    # them with a job of its own (measured: a query over 33 rowsets took twice as long as over 31)
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
    # On a cluster, a task whose input "lives" on a host waits up to this long for an executor there: a `file:`
    # path on shared storage reports `localhost`, which no executor matches, so every scan stage waited 3 s
    # (Spark's default) before running anywhere. Shared storage has no locality to wait for; an HDFS
    # deployment may set it back in SL_SPARK_CONF.
    "spark.locality.wait": "0s",
    # Spark's query-side thread pools make a new thread for each task until their maximum (1,024 for result
    # stages, 128 for shuffle and broadcast exchanges) and let them go after 60 s idle: a server answering
    # queries every second swung between 480 and 820 JVM threads (issue 23's soak). 16 each is more than the
    # queries that run at once; past it a stage waits for a thread.
    "spark.sql.resultQueryStage.maxThreadThreshold": "16",
    "spark.sql.shuffleExchange.maxThreadThreshold": "16",
    "spark.sql.broadcastExchange.maxThreadThreshold": "16",
    "spark.sql.subquery.maxThreadThreshold": "16",
    # the cleaner removes a dropped shuffle's files before the next (as it does RDDs and broadcasts): in a
    # burst, each removal took a thread of the block manager's pools (100 each) at once
    "spark.cleaner.referenceTracking.blocking.shuffle": "true",
}


EXIT_ON_OOM = "-XX:+ExitOnOutOfMemoryError"
# the throughput collector: no G1 write barriers on every reference store of Spark's rows, and young collections
# of a 2 GB heap on 2 cores that pause for tens of ms. A 171 MB bulk load took 5-8% less (first after the
# warm-up: 6.91-7.38 s against 7.38-8.08 s; bench/README.md, session 32)
THROUGHPUT_GC = "-XX:+UseParallelGC"


def with_fixed_heap(conf: dict[str, str]) -> dict[str, str]:
    """The driver's JVM options: its heap allocated and touched whole at start, the throughput collector
    (`THROUGHPUT_GC`), and an exit on out-of-memory.

    `-Xms` = `-Xmx`, pre-touched: the server's footprint is fixed when it starts; Spark's sort and shuffle
    buffers live in that heap (spilling to disk beyond it), so a load of any size does not grow the process.
    Java options the operator sets (`spark.driver.extraJavaOptions`) replace the heap and collector options.

    `-XX:+ExitOnOutOfMemoryError` is always there (the operator's options keep it, unless they choose their
    own out-of-memory action): a JVM that caught an `OutOfMemoryError` in a thread Spark does not watch
    lives on half-broken and fails every later request; a JVM that exits is noticed and replaced
    (`spark_runner.supervisor`).
    """
    size = re.fullmatch(r"(\d+)([kmgt]?)b?", conf.get("spark.driver.memory", "").strip().lower())
    options = conf.get("spark.driver.extraJavaOptions")
    if options is None and size is not None:
        heap = size[1] + (size[2] or "m")  # Spark reads a bare number as MiB, the JVM as bytes
        options = f"-Xms{heap} -XX:+AlwaysPreTouch {THROUGHPUT_GC}"
    options = (options or "").strip()
    if "OutOfMemoryError" not in options:  # ExitOn..., CrashOn... or an OnOutOfMemoryError command
        options = f"{options} {EXIT_ON_OOM}".strip()
    return {**conf, "spark.driver.extraJavaOptions": options}


def build_session(
    *, master: str = "local[*]", conf: Mapping[str, str] | None = None, app_name: str = "doris-stream-load"
) -> SparkSession:
    """Build (or get) the process's SparkSession with the settings every job relies on.

    `master` is passed to Spark as given (`local[*]`, `spark://host:7077`, `k8s://...`). No Python code runs on
    executors (no UDFs, `mapInArrow` or RDD lambdas; keep it so): an executor on another node needs only the JVM
    and Spark's jars, never this code or a matching Python. What executors read and write lives under the
    shared dir (`spark_runner.cluster`).

    The JVM is started in its own session, so a signal sent to the server's process group (Ctrl-C,
    `systemctl stop`) reaches only Python, which drains loads in flight before it exits; the JVM
    still exits with Python, when its stdin pipe closes.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", "python3"))
    spark_conf = SparkConf().setMaster(master).setAppName(app_name)
    for key, value in with_fixed_heap({**BASE_CONF, **(conf or {})}).items():
        spark_conf.set(key, value)
    if SparkContext._active_spark_context is None:
        SparkContext(conf=spark_conf, gateway=launch_jvm(spark_conf))
    spark = SparkSession.builder.config(conf=spark_conf).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def launch_jvm(conf: SparkConf, *, timeout: float = 120.0) -> Any:
    """Start the driver JVM (`spark-submit`, as pyspark does) and connect a Py4J gateway to it.

    pyspark's own `launch_gateway` is not used to start it: it forks with a `preexec_fn` (unsafe in a
    process with many threads: the child can deadlock before it runs `spark-submit`, which a server
    replacing its JVM under load is) and waits for the JVM's port without a deadline. Here the JVM starts
    in its own session (a signal to the server's process group reaches only Python) with no Python code
    run in the child, and a JVM that has not reported its port within `timeout` seconds is killed.

    Raises:
        RuntimeError: the JVM exited, or did not report its port in time.
    """
    from pyspark.find_spark_home import _find_spark_home
    from pyspark.java_gateway import launch_gateway
    from pyspark.serializers import UTF8Deserializer, read_int

    command = [os.path.join(_find_spark_home(), "bin", "spark-submit")]
    for key, value in conf.getAll():
        command += ["--conf", f"{key}={value}"]
    command += shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell"))
    info_dir = Path(tempfile.mkdtemp(prefix="spark-gateway-"))
    try:
        info = info_dir / "conn"
        env = {**os.environ, "SPARK_CONNECT_MODE": "0", "_PYSPARK_DRIVER_CONN_INFO_PATH": str(info)}
        # stdin is a pipe: the JVM exits when it closes (when this process is gone)
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not info.is_file():
            if proc.poll() is not None:
                raise RuntimeError(f"the Spark JVM exited with code {proc.returncode} before it started")
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"the Spark JVM did not start within {timeout:.0f} s; killed it")
            time.sleep(0.05)
        with info.open("rb") as stream:
            port = read_int(stream)  # type: ignore[no-untyped-call]
            secret = UTF8Deserializer().loads(stream)  # type: ignore[no-untyped-call]
    finally:
        shutil.rmtree(info_dir, ignore_errors=True)
    with _LAUNCH_LOCK:  # pyspark connects to a running JVM named by these two variables
        os.environ["PYSPARK_GATEWAY_PORT"], os.environ["PYSPARK_GATEWAY_SECRET"] = str(port), secret
        try:
            gateway = launch_gateway(conf)  # type: ignore[no-untyped-call]
        finally:
            del os.environ["PYSPARK_GATEWAY_PORT"], os.environ["PYSPARK_GATEWAY_SECRET"]
    gateway.proc = proc  # the supervisor watches this process
    return gateway
