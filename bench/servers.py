"""Several servers (issue 22): loads/s of 16 clients against one server and against two, on one PostgreSQL.

    python bench/servers.py [--clients 16] [--seconds 20] [--keep]

Starts a PostgreSQL (tests/postgres.py: Debian's package, a temp dir, a free port), then, on one fresh database
and one shared dir each time:
1. one server (`local[1]`) and `--clients` clients sending one-row loads into one table for `--seconds`;
2. two servers (`local[1]` each: the same 2 cores split) and the same clients, spread over them alternately.
Both print loads/s, p50 and p99 (client side); the ratio is two servers' throughput over one's. Every load must
be Success; the table's row count must equal the loads acknowledged. The per-load cost of the store itself on
PostgreSQL against SQLite is bench/store.py's.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
from _common import BenchError, Server, banner, percentile, report_log, run_main, table, unique_table_ddl  # noqa: E402

from tests.postgres import start_postgres, unavailable_reason  # noqa: E402


@contextmanager
def deployment(uri: str, root: Path, servers: int) -> Iterator[list[Server]]:
    """`servers` servers on one PostgreSQL database and one shared dir, started at once, stopped at the end."""
    shared = root / "shared"
    started: list[Server] = []
    with ExitStack() as stack:
        for n in range(servers):
            server = Server(
                root / f"server{n}" / "data",
                spark_master="local[1]",
                extra_env={"SL_CATALOG_URI": uri, "SL_SHARED_DIR": str(shared)},
            )
            server.data_dir.parent.mkdir(parents=True)
            started.append(server)
            stack.callback(report_log, server)
            stack.callback(server.stop)
        with ThreadPoolExecutor(servers) as pool:
            list(pool.map(lambda s: s.start(), started))
        yield started


def run(servers: list[Server], clients: int, seconds: float, run_id: str) -> list[object]:
    servers[0].sql("CREATE DATABASE IF NOT EXISTS bench", db="bench")
    servers[0].sql(unique_table_ddl("s", 1))
    with httpx.Client() as http:  # warm-up: each server's first loads pay for JIT and caches
        for n, server in enumerate(servers):
            for w in range(3):
                reply = server.load(http, "s", f"{-1 - n * 10 - w},0,warm,0.00\n".encode(), f"warm_{run_id}_{n}_{w}")
                if reply.get("Status") != "Success":
                    raise BenchError(f"warm-up load failed: {reply}")
    warm = 3 * len(servers)
    latencies: list[float] = []
    failures: list[dict[str, object]] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    counter = iter(range(10**9))

    def client(c: int) -> None:
        server = servers[c % len(servers)]
        with httpx.Client() as http:
            while time.monotonic() < deadline:
                i = next(counter)
                body = f"{i},{i},name{i % 1000},{i % 1000}.00\n".encode()
                started = time.perf_counter()
                reply = server.load(http, "s", body, f"srv_{run_id}_{i}")
                ms = (time.perf_counter() - started) * 1000
                with lock:
                    if reply.get("Status") == "Success":
                        latencies.append(ms)
                    else:
                        failures.append(reply)

    began = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    wall = time.monotonic() - began
    if failures:
        raise BenchError(f"{len(failures)} loads failed, first: {failures[0]}")
    count = servers[-1].sql("SELECT count(*) FROM s")["data"][0][0]
    if count != len(latencies) + warm:
        raise BenchError(f"{len(latencies)} loads acknowledged, {count} rows visible")
    return [f"{len(servers)} server(s)", len(latencies), len(latencies) / wall, percentile(latencies, 50),
            percentile(latencies, 99)]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    args = parser.parse_args()
    banner("several servers", f"{args.clients} clients of one-row loads, one server vs two, one PostgreSQL")
    if (reason := unavailable_reason()) is not None:
        raise BenchError(reason)
    postgres = start_postgres(fsync=True)  # durable commits, as in production
    root = Path(tempfile.mkdtemp(prefix="sl-bench-servers-"))
    rows = []
    try:
        for count in (1, 2):
            uri = postgres.create_database()
            with deployment(uri, root / f"run{count}", count) as servers:
                rows.append(run(servers, args.clients, args.seconds, f"r{count}"))
    finally:
        postgres.close()
        if args.keep:
            print(f"   kept data and logs under {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(table(["deployment", "loads", "loads/s", "p50 ms", "p99 ms"], rows))
    print(f"   two servers / one: {float(rows[1][2]) / float(rows[0][2]):.2f}x loads/s")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    run_main(main)
