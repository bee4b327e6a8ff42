"""Small loads at service speed (issue 19): its figures in one run on one fresh server, next to their goals.

    python bench/service.py [--sequential 50] [--warm 250] [--clients 16] [--seconds 8] [--rows 5000000] [--no-profile]
                            [--no-warm-up]

Starts one server with `python -m app` (local[2]), waits for the end of its JVM warm-up (`SL_WARM_UP_SECONDS`,
20 s by default; `--no-warm-up` turns it off to measure a cold JVM), and measures, in this order:
1. one-row loads, sequential (after 3 warm-up loads): client-side p50 / p99, then again after `--warm` more
   (the JVM compiles the load path's code over its first few hundred loads); meanwhile py-spy samples the
   server's Python process, and the top frames of the one-row path are printed (wall-clock samples of the
   threads that were not idle; `--no-profile` skips it, as does a machine without py-spy);
2. `--clients` clients sending plain one-row loads (`--per-client` each): loads/s;
3. `--clients` clients in `sync_mode` and in `async_mode` for `--seconds` each (bench/group_commit.py's run: the
   WAL bound on, as by default): loads/s and p50, and loads/s until visible;
4. the bulk load of bench/bulk.py (`--rows`, 8 buckets, curl -T): MB/s; then `--sequential` one-row loads into
   that table, each superseding a stored row (a key of the file, a higher sequence): p50 / p99;
then, with the server stopped, the bulk references on the same file: pyarrow's parse, DuckDB doing the same job,
and Spark alone writing the CSV as Parquet. Exits non-zero if a load is not Success or a check fails.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bulk  # noqa: E402
import group_commit  # noqa: E402
import httpx  # noqa: E402
from _common import (  # noqa: E402
    BenchError,
    banner,
    bulk_csv,
    check_success,
    create_database,
    percentile,
    run_main,
    running_server,
    table,
    unique_table_ddl,
)
from small import WARMUP, Loader  # noqa: E402

PROJECT = ("app/", "loaders/", "loads/", "spark_runner/", "tables/", "sql/")


def profile_start(pid: int, out: Path) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the server's Python process until stopped (None without py-spy)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("   profile: py-spy not found, skipped")
        return None
    argv = [spy, "record", "-p", str(pid), "-r", "250", "-f", "raw", "-o", str(out), "--nonblocking", "-t"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # attached before the first measured load
    return proc


def profile_stop(proc: subprocess.Popen[bytes] | None, out: Path, top: int = 12) -> list[list[Any]]:
    """Stop py-spy and summarize its samples: the project's frames by inclusive samples (share of the busy
    samples), then every frame by self samples."""
    if proc is None:
        return []
    proc.send_signal(2)  # SIGINT: py-spy writes what it has
    proc.wait(timeout=30)
    if not out.exists():
        return []
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")[1:]  # the first is the thread
        if not frames:
            continue
        n = int(count)
        total += n
        own[frames[-1]] += n
        for frame in {f for f in frames if any(f"({p}" in f or f" {p}" in f for p in PROJECT)}:
            inclusive[frame] += n
    rows = [["inclusive", f, n, n / total] for f, n in inclusive.most_common(top)]
    rows += [["self", f, n, n / total] for f, n in own.most_common(top)]
    return [[kind, frame[:100], n, f"{share:.0%}"] for kind, frame, n, share in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=50, help="sequential one-row loads (default 50)")
    parser.add_argument(
        "--warm",
        type=int,
        default=250,
        help="one-row loads after the first sequential run, before it is repeated on a warm JVM (default 250)",
    )
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    parser.add_argument("--per-client", type=int, default=5, help="plain loads per client (default 5)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds of each group-commit run (default 8)")
    parser.add_argument("--rows", type=int, default=5_000_000, help="rows of the bulk CSV (default 5,000,000)")
    parser.add_argument("--no-profile", action="store_true", help="do not profile the one-row path")
    parser.add_argument("--no-warm-up", action="store_true", help="start the server with SL_WARM_UP_SECONDS=0")
    parser.add_argument("--spark-master", default="local[2]", help="SL_SPARK_MASTER (default local[2])")
    parser.add_argument("--keep", action="store_true", help="keep the server's data directory and log")
    parser.add_argument("--json", action="store_true", help="print one machine-readable JSON line at the end")
    args = parser.parse_args()

    banner(
        "small loads at service speed (issue 19)",
        f"""
One fresh server: {args.sequential} sequential one-row loads (profiled), {args.clients} clients of plain loads,
{args.clients} clients in sync_mode and in async_mode for {args.seconds:g} s each, a bulk load of {args.rows:,} rows;
then pyarrow, DuckDB and Spark alone on the bulk file with the server stopped.
""",
    )
    path, meta = bulk_csv(args.rows)
    mb = meta["bytes"] / 1e6
    figures: dict[str, Any] = {}
    spots: list[list[Any]] = []
    env = {"SL_WARM_UP_SECONDS": "0"} if args.no_warm_up else None
    with running_server(spark_master=args.spark_master, keep=args.keep, extra_env=env) as server:
        create_database(server)
        server.sql(unique_table_ddl("s", 1))
        loader = Loader(server, str(int(time.time())))
        with httpx.Client() as client:
            for n in range(WARMUP):
                loader.one(client, n)
            out = Path(tempfile.mkdtemp(prefix="sl-bench-spy-")) / "one_row.txt"
            assert server.proc is not None
            spy = None if args.no_profile else profile_start(server.proc.pid, out)
            latencies = [loader.one(client, WARMUP + i)[0] for i in range(args.sequential)]
            spots = profile_stop(spy, out)
        figures["one-row p50 ms"] = percentile(latencies, 50)
        figures["one-row p99 ms"] = percentile(latencies, 99)
        # the JVM's JIT compiles the load path's code for its first few hundred loads (C2 compiler threads:
        # ~215 ms of CPU per load over loads 11-40, ~36 ms over loads 151-190): the same run again once warm
        first = WARMUP + args.sequential
        with httpx.Client() as client:
            for i in range(args.warm):
                loader.one(client, first + i)
            first += args.warm
            warm = [loader.one(client, first + i)[0] for i in range(args.sequential)]
        first += args.sequential
        figures["warm one-row p50 ms"] = percentile(warm, 50)
        figures["warm one-row p99 ms"] = percentile(warm, 99)

        def client_job(c: int) -> list[tuple[float, int]]:
            with httpx.Client() as cl:
                return [loader.one(cl, first + c * args.per_client + j) for j in range(args.per_client)]

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            done = sum(len(chunk) for chunk in pool.map(client_job, range(args.clients)))
        figures["plain loads/s"] = done / (time.perf_counter() - started)
        if loader.failures:
            raise BenchError(f"{len(loader.failures)} load(s) not Success, first: {json.dumps(loader.failures[0])}")

        for mode in ("sync_mode", "async_mode"):
            row = group_commit.run(server, mode, args.clients, args.seconds)
            figures[f"{mode} loads/s"], figures[f"{mode} p50 ms"], figures[f"{mode} visible/s"] = row[3], row[4], row[6]

        server.sql(unique_table_ddl("t", 8))
        _, reply, load_s = bulk.curl_load(server.base_url, path, f"bulk_{int(time.time())}")
        check_success(reply, "bulk load")
        if reply.get("NumberLoadedRows") != args.rows:
            raise BenchError(f"NumberLoadedRows {reply.get('NumberLoadedRows')} != {args.rows}")
        figures["bulk MB/s"] = mb / load_s
        # one-row loads into the bulk's table, each superseding a stored row (merge-on-write looks it up)
        with open(path) as f:  # keys the table holds: each load supersedes a stored row
            stored_keys = [int(next(f).split(",", 1)[0]) for _ in range(WARMUP + args.sequential)]
        big = Loader(server, f"{int(time.time())}_big", table="t", keys=stored_keys)
        with httpx.Client() as client:
            for i in range(WARMUP):
                big.one(client, i)
            into_big = [big.one(client, WARMUP + i)[0] for i in range(args.sequential)]
        if big.failures:
            raise BenchError(f"{len(big.failures)} load(s) not Success, first: {json.dumps(big.failures[0])}")
        figures["big one-row p50 ms"] = percentile(into_big, 50)
        figures["big one-row p99 ms"] = percentile(into_big, 99)

    print("   references (server stopped) ...", flush=True)
    duck_s = bulk.duckdb_job(path, meta["distinct_keys"])
    spark_s = bulk.spark_plain_job(path, args.rows, args.spark_master)
    pa_s = bulk.pyarrow_parse(path)
    figures["bulk / DuckDB"] = (mb / load_s) / (mb / duck_s)
    figures["bulk / Spark alone"] = (mb / load_s) / (mb / spark_s)

    c = args.clients
    goals = [
        ("one-row load p50 (ms)", figures["one-row p50 ms"], "≤ 100", figures["one-row p50 ms"] <= 100),
        ("one-row load p99 (ms)", figures["one-row p99 ms"], "≤ 300", figures["one-row p99 ms"] <= 300),
        (
            f"one-row load p50, after {args.warm} more (ms)",
            figures["warm one-row p50 ms"],
            "≤ 100",
            figures["warm one-row p50 ms"] <= 100,
        ),
        (
            f"one-row load p99, after {args.warm} more (ms)",
            figures["warm one-row p99 ms"],
            "≤ 300",
            figures["warm one-row p99 ms"] <= 300,
        ),
        (f"{c} clients, plain loads (loads/s)", figures["plain loads/s"], "— (grouping is the answer)", None),
        (
            f"{c} clients, sync_mode (loads/s)",
            figures["sync_mode loads/s"],
            "≥ 200",
            figures["sync_mode loads/s"] >= 200,
        ),
        (
            f"{c} clients, async_mode (loads/s)",
            figures["async_mode loads/s"],
            "≥ 1,000",
            figures["async_mode loads/s"] >= 1000,
        ),
        (f"{c} clients, async_mode p50 (ms)", figures["async_mode p50 ms"], "≤ 20", figures["async_mode p50 ms"] <= 20),
        (f"{c} clients, async_mode visible (loads/s)", figures["async_mode visible/s"], "—", None),
        (
            f"one-row load p50 into the {args.rows:,}-row table (ms)",
            figures["big one-row p50 ms"],
            "≤ 100",
            figures["big one-row p50 ms"] <= 100,
        ),
        (
            f"one-row load p99 into the {args.rows:,}-row table (ms)",
            figures["big one-row p99 ms"],
            "≤ 300",
            figures["big one-row p99 ms"] <= 300,
        ),
        ("bulk (MB/s)", figures["bulk MB/s"], "≥ 60 (quiet machine)", figures["bulk MB/s"] >= 60),
        ("bulk / DuckDB (throughput)", figures["bulk / DuckDB"], "≥ 0.5", figures["bulk / DuckDB"] >= 0.5),
        ("bulk / Spark csv->parquet", figures["bulk / Spark alone"], "≥ 0.8", figures["bulk / Spark alone"] >= 0.8),
    ]
    print()
    print(
        table(
            ["figure", "measured", "goal", "met"],
            [[f, v, g, "" if m is None else "yes" if m else "no"] for f, v, g, m in goals],
        )
    )
    seconds = f"ours {load_s:.2f} s, DuckDB {duck_s:.2f} s, Spark alone {spark_s:.2f} s, pyarrow parse {pa_s:.2f} s"
    print(f"\n   bulk file {mb:.1f} MB: {seconds}")
    if spots:
        print("\n   one-row path, py-spy samples of the server's Python process (non-idle threads):")
        print(table(["kind", "frame", "samples", "share"], spots))
    if args.json:
        print(json.dumps({"bench": "service", "figures": {k: round(v, 3) for k, v in figures.items()}}))
    return 0


if __name__ == "__main__":
    run_main(main)
