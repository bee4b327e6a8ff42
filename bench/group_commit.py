"""Group commit throughput: concurrent one-row stream loads with and without group commit, and the ratio.

    python bench/group_commit.py [--clients 32] [--per-client 50] [--plain-per-client 5]

Starts a server with `python -m app`, creates two unique-key tables with a sequence column, identical but
for `"group_commit_mode" = "sync_mode"` on one, and sends one-row CSV loads from concurrent client threads
(httpx, each load with its own label). The plain run is smaller (plain loads are slow). Every reply must be
Success and every row must be there; exits non-zero otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from _common import BenchError, Server, banner, create_database, percentile, run_main, running_server, table  # noqa: E402


def concurrent_loads(server: Server, name: str, clients: int, per_client: int) -> tuple[float, list[float]]:
    """(loads/s, client latencies in ms) of clients x per_client one-row loads into table `name`."""
    failures: list[dict[str, Any]] = []
    lock = threading.Lock()

    def client_job(c: int) -> list[float]:
        out = []
        with httpx.Client() as client:
            for j in range(per_client):
                i = c * per_client + j
                started = time.perf_counter()
                reply = server.load(client, name, f"{i},{i},name{i},{i}.00\n".encode(), f"{name}_{i}")
                out.append((time.perf_counter() - started) * 1000)
                if reply.get("Status") != "Success" or reply.get("NumberLoadedRows") != 1:
                    with lock:
                        failures.append(reply)
        return out

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        latencies = [ms for chunk in pool.map(client_job, range(clients)) for ms in chunk]
    wall = time.perf_counter() - started
    if failures:
        raise BenchError(f"{len(failures)} load(s) into {name} not Success, first: {json.dumps(failures[0])}")
    count = server.sql(f"SELECT count(*) FROM {name}")["data"][0][0]
    if count != clients * per_client:
        raise BenchError(f"SELECT count(*) FROM {name} = {count}, expected {clients * per_client}")
    return clients * per_client / wall, latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32, help="concurrent client threads (default 32)")
    parser.add_argument("--per-client", type=int, default=50, help="group-commit loads per client (default 50)")
    parser.add_argument("--plain-per-client", type=int, default=5, help="plain loads per client (default 5)")
    parser.add_argument("--spark-master", default="local[2]", help="SL_SPARK_MASTER (default local[2])")
    parser.add_argument("--keep", action="store_true", help="keep the server's data directory and log")
    parser.add_argument("--json", action="store_true", help="print one machine-readable JSON line at the end")
    args = parser.parse_args()
    banner(
        "group commit",
        f"""
One-row CSV stream loads from {args.clients} concurrent clients: {args.plain_per_client} each into a plain table,
then {args.per_client} each into the same table with "group_commit_mode" = "sync_mode" (replies after visible).
""",
    )
    rows: list[list[Any]] = []
    with running_server(spark_master=args.spark_master, keep=args.keep) as server:
        create_database(server)
        ddl = (
            "CREATE TABLE {name} (k BIGINT NOT NULL, seq INT, name VARCHAR(32), amount DECIMAL(12,2)) "
            'UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 PROPERTIES ("function_column.sequence_col" = "seq"{extra})'
        )
        server.sql(ddl.format(name="plain", extra=""))
        server.sql(ddl.format(name="grouped", extra=', "group_commit_mode" = "sync_mode"'))
        results = {}
        for name, per_client in (("plain", args.plain_per_client), ("grouped", args.per_client)):
            rate, lat = concurrent_loads(server, name, args.clients, per_client)
            results[name] = rate
            rows.append([name, args.clients * per_client, rate, percentile(lat, 50), percentile(lat, 99)])
    print()
    print(table(["table", "loads", "loads/s", "p50 ms", "p99 ms"], rows))
    ratio = results["grouped"] / results["plain"]
    print(f"\n   group commit / plain: {ratio:.1f}x loads/s")
    if args.json:
        print(
            json.dumps(
                {
                    "bench": "group_commit",
                    "plain_loads_s": results["plain"],
                    "grouped_loads_s": results["grouped"],
                    "ratio": ratio,
                }
            )
        )
    return 0


if __name__ == "__main__":
    run_main(main)
