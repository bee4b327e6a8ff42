"""Group commit: one-row stream loads from 1, 4, 16 and 64 concurrent clients, sync_mode and async_mode, and plain
loads for reference.

    python bench/group_commit.py [--clients 1,4,16,64] [--seconds 6] [--repeat 1] [--plain-clients 16]
                                 [--plain-seconds 6]

Starts a server with `python -m app`. Each run gets a fresh unique-key table with a sequence column (the default
table kind: merge-on-write), `"group_commit_mode"` set to the run's mode, and its clients (threads, each one
keep-alive `http.client` connection) send one-row CSV loads, each with its own label, for `--seconds`. Printed per
run: loads, loads/s as answered, the clients' p50 / p99 latency, loads/s until every row is visible (async_mode
answers before its rows are; an async load past the WAL bound waits for its group,
`group_commit_max_wal_num_per_table`), and the Iceberg snapshots the run committed per load (the table's last
sequence number: snapshots trimmed since still count), and the CPU seconds the JVM's JIT compiler spent during the
run (`--repeat 8 --clients 16 --seconds 15`: a fresh JVM compiles Spark's code for minutes, and loads/s rise as
that ends). Every reply must be Success and every row must be there; exits non-zero otherwise.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from _common import AUTH, BenchError, Server, banner, create_database, percentile, run_main, running_server, table  # noqa: E402

DB = "bench"
DDL = (
    "CREATE TABLE {name} (k BIGINT NOT NULL, seq INT, name VARCHAR(32), amount DECIMAL(12,2)) "
    'UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 PROPERTIES ("function_column.sequence_col" = "seq"{extra})'
)
GOALS = {"sync_mode": "16 clients ≥ 200 loads/s", "async_mode": "16 clients ≥ 1,000 loads/s, p50 ≤ 20 ms"}


def timed_loads(server: Server, name: str, clients: int, seconds: float) -> tuple[int, float, list[float]]:
    """(loads, seconds, client latencies in ms) of `clients` threads sending one-row loads into `name` for
    `seconds` each.

    Each client is one keep-alive connection of the standard library's `http.client`: the load generator shares
    the server's two cores, and httpx's request path cost 0.6-0.7 ms of CPU a load against 0.1-0.2 ms here (the
    same server answered 520-590 async loads/s to httpx clients and 600-690 to these, in one session)."""
    failures: list[dict[str, Any]] = []
    lock = threading.Lock()
    url = urlsplit(server.base_url)
    auth = "Basic " + base64.b64encode(f"{AUTH[0]}:{AUTH[1]}".encode()).decode()
    start = time.perf_counter()
    stop = start + seconds

    def client_job(c: int) -> list[float]:
        out = []
        conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=300)
        try:
            i = c * 1_000_000
            while time.perf_counter() < stop:
                began = time.perf_counter()
                headers = {"label": f"{name}_{i}", "column_separator": ",", "Authorization": auth}
                body = f"{i},{i},name{i},{i}.00\n".encode()
                conn.request("PUT", f"/api/{DB}/{name}/_stream_load", body=body, headers=headers)
                response = conn.getresponse()
                text = response.read()
                out.append((time.perf_counter() - began) * 1000)
                try:
                    reply = json.loads(text)
                except ValueError:
                    reply = {"Status": "Fail", "Message": f"HTTP {response.status}: {text[:500]!r}"}
                if reply.get("Status") != "Success" or reply.get("NumberLoadedRows") != 1:
                    with lock:
                        failures.append(reply)
                i += 1
        finally:
            conn.close()
        return out

    with ThreadPoolExecutor(max_workers=clients) as pool:
        latencies = [ms for chunk in pool.map(client_job, range(clients)) for ms in chunk]
    wall = time.perf_counter() - start
    if failures:
        raise BenchError(f"{len(failures)} load(s) into {name} not Success, first: {json.dumps(failures[0])}")
    return len(latencies), wall, latencies


def wait_visible(server: Server, name: str, loads: int, started: float, timeout: float = 300) -> float:
    """Seconds from `started` until the table holds `loads` rows."""
    deadline = time.perf_counter() + timeout
    while (count := server.sql(f"SELECT count(*) FROM {name}")["data"][0][0]) != loads:
        if count > loads or time.perf_counter() > deadline:
            raise BenchError(f"SELECT count(*) FROM {name} = {count}, expected {loads}")
        time.sleep(0.05)
    return time.perf_counter() - started


def commits(data_dir: Path, name: str) -> int:
    """Snapshots committed to the table since it was created (its last sequence number), read from the catalog."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "default", uri=f"sqlite:///{data_dir / 'catalog.db'}", warehouse=f"file://{data_dir / 'warehouse'}"
    )
    return int(catalog.load_table((DB, name)).metadata.last_sequence_number)


def run(server: Server, mode: str, clients: int, seconds: float, name: str | None = None) -> list[Any]:
    name = name or f"{mode.split('_')[0]}_{clients}"
    extra = "" if mode == "plain" else f', "group_commit_mode" = "{mode}"'
    server.sql(DDL.format(name=name, extra=extra))
    before = commits(server.data_dir, name)
    started = time.perf_counter()
    loads, wall, latencies = timed_loads(server, name, clients, seconds)
    visible = wait_visible(server, name, loads, started)
    snapshots = commits(server.data_dir, name) - before
    row = [mode, clients, loads, loads / wall, percentile(latencies, 50), percentile(latencies, 99)]
    row += [loads / visible, snapshots, snapshots / loads]
    print(f"   {mode} x {clients}: {loads} loads, {loads / wall:.1f}/s", flush=True)
    return row


def jit_seconds(server: Server) -> float | None:
    """CPU seconds the server's JVM has spent compiling (its JIT compiler threads, from /proc; None elsewhere). A
    fresh JVM compiles Spark's code for minutes of loads: `--repeat` shows the loads/s rise as this falls."""
    assert server.proc is not None
    try:
        children = [
            entry.name
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and _parent(entry) == server.proc.pid
        ]
        total = 0.0
        for pid in children:
            for task in Path(f"/proc/{pid}/task").iterdir():
                if "Compiler" in (task / "comm").read_text():
                    fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                    total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total
    except (OSError, ValueError, IndexError):
        return None


def _parent(process: Path) -> int | None:
    try:
        return int((process / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,4,16,64", help="client counts of the group-commit runs")
    parser.add_argument("--seconds", type=float, default=6.0, help="how long each run sends loads (default 6)")
    parser.add_argument("--plain-clients", type=int, default=16, help="clients of the plain reference run")
    parser.add_argument("--plain-seconds", type=float, default=6.0, help="how long the plain run sends loads")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each mode and client count in a row, on the same server"
    )
    parser.add_argument("--spark-master", default="local[2]", help="SL_SPARK_MASTER (default local[2])")
    parser.add_argument("--keep", action="store_true", help="keep the server's data directory and log")
    parser.add_argument("--json", action="store_true", help="print one machine-readable JSON line at the end")
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    banner(
        "group commit",
        f"""
One-row CSV stream loads into unique-key (merge-on-write) tables with a sequence column, a fresh table per run:
sync_mode and async_mode from {", ".join(map(str, counts))} concurrent clients for {args.seconds:g} s each, then
plain loads from {args.plain_clients} clients for {args.plain_seconds:g} s (reference).
Goals (issue 19): {"; ".join(f"{m}: {g}" for m, g in GOALS.items())}.
""",
    )
    rows: list[list[Any]] = []
    with running_server(spark_master=args.spark_master, keep=args.keep) as server:
        create_database(server)
        run(server, "sync_mode", 1, 1.0, name="warm_up")  # warm-up: the first loads compile Spark's code
        for mode in ("sync_mode", "async_mode"):
            for clients in counts:
                for round_ in range(args.repeat):
                    name = f"{mode.split('_')[0]}_{clients}" + (f"_{round_}" if round_ else "")
                    jit = jit_seconds(server)
                    row = run(server, mode, clients, args.seconds, name=name)
                    after = jit_seconds(server)
                    rows.append([*row, after - jit if jit is not None and after is not None else "-"])
        jit = jit_seconds(server)
        row = run(server, "plain", args.plain_clients, args.plain_seconds)
        after = jit_seconds(server)
        rows.append([*row, after - jit if jit is not None and after is not None else "-"])
        metrics = httpx.get(f"{server.base_url}/metrics").text
    print()
    headers = ["mode", "clients", "loads", "loads/s", "p50 ms", "p99 ms", "visible/s", "snapshots", "snaps/load"]
    headers.append("JIT cpu s")
    print(table(headers, rows))
    counters = {
        line.split()[0]: float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("doris_group_commit_") and "_total " in line
    }
    groups = counters.get("doris_group_commit_groups_total", 0)
    if groups:
        jobs = counters.get("doris_group_commit_spark_jobs_total", 0)
        loads = counters.get("doris_group_commit_loads_total", 0)
        print(f"\n   groups: {groups:.0f}, {loads / groups:.1f} loads and {jobs / groups:.2f} Spark jobs per group")
    appends = counters.get("doris_group_commit_wal_appends_total", 0)
    if appends:
        fsyncs = counters.get("doris_group_commit_wal_fsyncs_total", 0)
        shared = appends / max(fsyncs, 1)
        print(f"   WAL: {appends:.0f} async appends, {fsyncs:.0f} fsyncs ({shared:.1f} appends per fsync)")
    if args.json:
        keys = [
            "mode",
            "clients",
            "loads",
            "loads_s",
            "p50_ms",
            "p99_ms",
            "visible_s",
            "snapshots",
            "per_load",
            "jit_s",
        ]
        print(json.dumps({"bench": "group_commit", "runs": [dict(zip(keys, r, strict=True)) for r in rows]}))
    return 0


if __name__ == "__main__":
    run_main(main)
