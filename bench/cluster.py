"""The same bulk load and one-row loads on `local[2]` and on a two-worker Spark standalone cluster, side by side.

    python bench/cluster.py [--rows 1000000] [--buckets 8] [--small 20]

Starts a standalone master and two workers (one core each) from the pyspark package (`spark-class`, on
loopback), then for each master (`local[2]`, then the cluster) a server with `python -m app`: a 1,000-row
warm-up load, the bulk CSV of bench/bulk.py with curl into a UNIQUE KEY table with a sequence column, and
`--small` one-row loads one after another. Both runs use the same machine's two cores: the cluster adds the
executors' own JVMs and the shuffle between them, which is the overhead this measures (goal: at most 1.5x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from _common import (  # noqa: E402
    BenchError,
    banner,
    bulk_csv,
    check_success,
    create_database,
    csv_bytes,
    free_port,
    increasing_seq,
    median,
    percentile,
    run_main,
    running_server,
    table,
    unique_table_ddl,
)
from bulk import curl_load  # noqa: E402

CONF = {"spark.sql.shuffle.partitions": "4", "spark.driver.host": "127.0.0.1", "spark.executor.memory": "1g"}


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@contextmanager
def standalone_cluster(workers: int = 2) -> Iterator[str]:
    """A master and `workers` one-core workers on loopback; yields the master URL; every process is stopped."""
    root = Path(tempfile.mkdtemp(prefix="sl-bench-cluster-"))
    port, web = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SL_", "SPARK_"))}
    env.update(SPARK_HOME=str(spark_home()), SPARK_DAEMON_MEMORY="256m", SPARK_LOCAL_IP="127.0.0.1")
    spark_class = str(spark_home() / "bin" / "spark-class")
    commands = [
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
        + ["--webui-port", str(web)]
    ] + [
        [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1"]
        + ["--memory", "2g", "--work-dir", str(root / f"worker-{i}"), "--webui-port", "0", url]
        for i in range(workers)
    ]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for n, command in enumerate(commands):
            log = open(root / f"{n}.log", "ab")
            procs.append(
                subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            )
        deadline = time.monotonic() + 120
        while True:
            try:
                state = httpx.get(f"http://127.0.0.1:{web}/json/", timeout=2).json()
                if sum(w["state"] == "ALIVE" for w in state["workers"]) == workers:
                    break
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"the cluster did not start: see {root}")
            time.sleep(0.5)
        print(f"   cluster: master {url}, {workers} workers x 1 core (logs {root})")
        yield url
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def measure(master: str, path: Path, rows: int, distinct: int, buckets: int, small: int) -> dict[str, Any]:
    """Warm-up, the bulk load (wall seconds around curl) and `small` one-row loads (client ms) on one server."""
    env = {"SL_SPARK_CONF": json.dumps(CONF), "SL_COMPACTION_INTERVAL_SECONDS": "0"}
    with running_server(spark_master=master, extra_env=env) as server, httpx.Client(timeout=600) as client:
        create_database(server)
        for name in ("t", "warmup", "s"):
            server.sql(unique_table_ddl(name, buckets if name == "t" else 1))
        rng = np.random.default_rng(1)
        body = csv_bytes(np.arange(1000, dtype=np.int64), increasing_seq(1000, 0, rng), rng)
        check_success(server.load(client, "warmup", body, f"warmup_{time.time_ns()}"), "warm-up load")
        _, reply, load_s = curl_load(server.base_url, path, f"bulk_{time.time_ns()}")
        check_success(reply, "bulk load")
        count = server.sql("SELECT count(*) FROM t")["data"][0][0]
        if reply.get("NumberLoadedRows") != rows or count != distinct:
            raise BenchError(f"loaded {reply.get('NumberLoadedRows')} rows, {count} keys: expected {rows}, {distinct}")
        latencies = []
        for i in range(small + 3):
            started = time.perf_counter()
            check_success(server.load(client, "s", f"{i},{i},n,1.00\n".encode(), f"s_{time.time_ns()}"), "small")
            if i >= 3:  # the first few pay the table's first reads
                latencies.append((time.perf_counter() - started) * 1000)
    return {"load_s": load_s, "write_ms": reply.get("WriteDataTimeMs"), "small_ms": latencies}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="CSV rows (default 1,000,000)")
    parser.add_argument("--buckets", type=int, default=8, help="BUCKETS of the bulk table (default 8)")
    parser.add_argument("--small", type=int, default=20, help="one-row loads measured on each (default 20)")
    parser.add_argument("--seed", type=int, default=42, help="data seed (default 42)")
    parser.add_argument("--json", action="store_true", help="print one machine-readable JSON line at the end")
    args = parser.parse_args()
    banner(
        "bulk and one-row loads: local[2] vs a two-worker standalone cluster",
        f"""
The bulk CSV of bench/bulk.py (rows={args.rows:,}, 20% repeated keys) loaded with curl into a UNIQUE KEY table
with a sequence column (buckets={args.buckets}), then {args.small} one-row loads one after another, on a server
with SL_SPARK_MASTER=local[2] and then on one whose master is a standalone cluster of two one-core workers
on this machine (same cores; the cluster's executors are JVMs of their own). Each after a 1,000-row warm-up.
""",
    )
    path, meta = bulk_csv(args.rows, seed=args.seed)
    mb = meta["bytes"] / 1e6
    print(f"   data:    {path} ({mb:.1f} MB, {meta['rows']:,} rows, {meta['distinct_keys']:,} distinct keys)")
    runs = {"local[2]": measure("local[2]", path, args.rows, meta["distinct_keys"], args.buckets, args.small)}
    with standalone_cluster() as url:
        runs["cluster (2 workers)"] = measure(url, path, args.rows, meta["distinct_keys"], args.buckets, args.small)
    base = runs["local[2]"]
    rows = [
        [
            name,
            run["load_s"],
            mb / run["load_s"],
            f"{run['load_s'] / base['load_s']:.2f}x",
            median(run["small_ms"]),
            percentile(run["small_ms"], 90),
            f"{median(run['small_ms']) / median(base['small_ms']):.2f}x",
        ]
        for name, run in runs.items()
    ]
    print()
    print(table(["master", "bulk s", "MB/s", "vs local", "1-row p50 ms", "1-row p90 ms", "vs local"], rows))
    if args.json:
        print(json.dumps({"bench": "cluster", "rows": args.rows, "file_mb": round(mb, 2), "runs": runs}))
    return 0


if __name__ == "__main__":
    run_main(main)
