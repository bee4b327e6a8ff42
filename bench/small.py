"""Small-load latency and throughput: one-row stream loads, sequential then from concurrent clients.

    python bench/small.py [--sequential 50] [--clients 16] [--per-client 5]

Starts a server with `python -m app`, creates a unique-key table with a sequence column, and sends
one-row CSV stream loads with httpx (each with its own label, `column_separator: ,`). Every reply must
be Success; exits non-zero otherwise.
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
from _common import (  # noqa: E402
    BenchError,
    Server,
    banner,
    create_database,
    percentile,
    run_main,
    running_server,
    table,
    unique_table_ddl,
)

WARMUP = 3


class Loader:
    """Numbered one-row loads into `table`: load i writes key i with sequence i under label small_<run>_<i>."""

    def __init__(self, server: Server, run: str, table: str = "s", keys: list[int] | None = None) -> None:
        self.server = server
        self.run = run
        self.table = table
        self.keys = keys  # load i writes keys[i] instead (with a sequence above the stored ones)
        self.failures: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def one(self, client: httpx.Client, i: int) -> tuple[float, int]:
        """(client-side ms, server LoadTimeMs) of load i."""
        key, seq = (i, i) if self.keys is None else (self.keys[i % len(self.keys)], 1_000_000 + i)
        body = f"{key},{seq},name{i % 1000},{i % 100000}.{i % 100:02d}\n".encode()
        started = time.perf_counter()
        reply = self.server.load(client, self.table, body, f"small_{self.run}_{i}")
        ms = (time.perf_counter() - started) * 1000
        if reply.get("Status") != "Success" or reply.get("NumberLoadedRows") != 1:
            with self._lock:
                self.failures.append(reply)
        return ms, int(reply.get("LoadTimeMs") or 0)


def stats(name: str, lat: list[float], server_ms: list[int], wall: float) -> list[Any]:
    return [
        name,
        len(lat),
        len(lat) / wall,
        percentile(lat, 50),
        percentile(lat, 99),
        sum(lat) / len(lat),
        max(lat),
        percentile([float(v) for v in server_ms], 50),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=50, help="sequential measured loads (default 50)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent client threads (default 16)")
    parser.add_argument("--per-client", type=int, default=5, help="loads per client thread (default 5)")
    parser.add_argument("--buckets", type=int, default=1, help="BUCKETS of the table (default 1)")
    parser.add_argument("--spark-master", default="local[2]", help="SL_SPARK_MASTER (default local[2])")
    parser.add_argument("--keep", action="store_true", help="keep the server's data directory and log")
    parser.add_argument("--json", action="store_true", help="print one machine-readable JSON line at the end")
    args = parser.parse_args()

    banner(
        "small stream loads",
        f"""
One-row CSV stream loads (httpx, distinct labels) into a UNIQUE KEY table with a sequence column.
{WARMUP} warm-up loads, then {args.sequential} sequential loads timed one by one (client-side latency), then
{args.clients} concurrent client threads x {args.per_client} loads each: total loads/s and latency.
""",
    )
    run = str(int(time.time()))
    rows: list[list[Any]] = []
    with running_server(spark_master=args.spark_master, keep=args.keep) as server:
        create_database(server)
        server.sql(unique_table_ddl("s", args.buckets))
        loader = Loader(server, run)
        n = 0
        with httpx.Client() as client:
            warm = []
            for _ in range(WARMUP):
                warm.append(loader.one(client, n)[0])
                n += 1
            print("   warm-up loads (ms): " + ", ".join(f"{ms:.0f}" for ms in warm))
            lat, srv = [], []
            started = time.perf_counter()
            for _ in range(args.sequential):
                ms, s = loader.one(client, n)
                lat.append(ms)
                srv.append(s)
                n += 1
            seq_wall = time.perf_counter() - started
        if lat:
            rows.append(stats("sequential (1 client)", lat, srv, seq_wall))

        first = n
        total = args.clients * args.per_client

        def client_job(c: int) -> list[tuple[float, int]]:
            with httpx.Client() as cl:
                return [loader.one(cl, first + c * args.per_client + j) for j in range(args.per_client)]

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            results = [r for chunk in pool.map(client_job, range(args.clients)) for r in chunk]
        conc_wall = time.perf_counter() - started
        n += total
        if results:
            rows.append(
                stats(
                    f"concurrent ({args.clients} clients)", [r[0] for r in results], [r[1] for r in results], conc_wall
                )
            )

        if loader.failures:
            raise BenchError(f"{len(loader.failures)} load(s) not Success, first: {json.dumps(loader.failures[0])}")
        count = server.sql("SELECT count(*) FROM s")["data"][0][0]
        if count != n:
            raise BenchError(f"SELECT count(*) = {count}, expected {n} (one key per load)")
        print(f"   check:   all {n} loads Success; SELECT count(*) FROM s = {count}")

    print()
    print(table(["", "loads", "loads/s", "p50 ms", "p99 ms", "mean ms", "max ms", "server LoadTimeMs p50"], rows))
    if args.json:
        keys = ["name", "loads", "loads_s", "p50_ms", "p99_ms", "mean_ms", "max_ms", "server_p50_ms"]
        print(json.dumps({"bench": "small", "results": [dict(zip(keys, r, strict=True)) for r in rows]}))
    return 0


if __name__ == "__main__":
    run_main(main)
