"""Merge-on-read query cost: how count(*) and a point lookup slow down as loads (rowsets) pile up.

    python bench/mor.py [--rows-per-load 10000] [--checkpoints 1,10,50]

Starts a server with `python -m app`, creates a unique-key table with a sequence column and keeps
stream-loading batches whose keys overlap (each batch draws its keys from a key space twice the batch
size, so about half of every batch updates keys already loaded). At each checkpoint it times, over
HTTP, `SELECT count(*) FROM m` and `SELECT * FROM m WHERE k = <key>` (median of 3 runs each) and
checks both answers against the expected merge. Exits non-zero if a load or a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from _common import (  # noqa: E402
    BenchError,
    Server,
    banner,
    check_success,
    create_database,
    csv_bytes,
    increasing_seq,
    median,
    rowset_stats,
    run_main,
    running_server,
    table,
    unique_table_ddl,
)

KEY_BASE = 1_000_000_000


def timed_sql(server: Server, client: httpx.Client, stmt: str, runs: int) -> tuple[float, dict[str, Any]]:
    """Median client-side milliseconds of `runs` executions, and the last answer."""
    times = []
    data: dict[str, Any] = {}
    for _ in range(runs):
        started = time.perf_counter()
        data = server.sql(stmt, client=client)
        times.append((time.perf_counter() - started) * 1000)
    return median(times), data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-load", type=int, default=10_000, help="rows per load (default 10,000)")
    parser.add_argument("--checkpoints", default="1,10,50", help="load counts to measure at (default 1,10,50)")
    parser.add_argument("--buckets", type=int, default=8, help="BUCKETS of the table (default 8)")
    parser.add_argument("--runs", type=int, default=3, help="runs per query, the median is reported (default 3)")
    parser.add_argument("--seed", type=int, default=7, help="data seed (default 7)")
    parser.add_argument("--spark-master", default="local[2]", help="SL_SPARK_MASTER (default local[2])")
    parser.add_argument("--keep", action="store_true", help="keep the server's data directory and log")
    parser.add_argument("--json", action="store_true", help="print one machine-readable JSON line at the end")
    args = parser.parse_args()
    checkpoints = sorted({int(c) for c in args.checkpoints.split(",") if c.strip()})
    if not checkpoints or checkpoints[0] < 1:
        parser.error("--checkpoints must be positive load counts, e.g. 1,10,50")
    rows = args.rows_per_load
    key_space = 2 * rows

    banner(
        "merge-on-read query cost",
        f"""
Loads of {rows:,} rows each (keys drawn from a space of {key_space:,}, so batches overlap) into a UNIQUE KEY
table with a sequence column, {args.buckets} buckets. After {", ".join(map(str, checkpoints))} loads: client-side
median of {args.runs} runs of `SELECT count(*) FROM m` and of a point lookup `SELECT * FROM m WHERE k = ...`.
""",
    )
    rng = np.random.default_rng(args.seed)
    best_seq = np.full(key_space, -1, dtype=np.int64)  # expected winner's seq per key index
    lookup_idx = -1
    results: list[list[Any]] = []
    # background compaction off: this measures the merge-on-read cost of rowsets piling up (see compaction.py)
    off = {"SL_COMPACTION_INTERVAL_SECONDS": "0"}
    with running_server(spark_master=args.spark_master, keep=args.keep, extra_env=off) as server:
        create_database(server)
        server.sql(unique_table_ddl("m", args.buckets))
        run = str(int(time.time()))
        load_ms: list[int] = []
        with httpx.Client() as client:
            done = 0
            for checkpoint in checkpoints:
                while done < checkpoint:
                    idx = rng.choice(key_space, size=rows, replace=False)
                    seqs = increasing_seq(rows, done * rows, rng)
                    body = csv_bytes(idx.astype(np.int64) + KEY_BASE, seqs, rng)
                    started = time.perf_counter()
                    reply = server.load(client, "m", body, f"mor_{run}_{done}")
                    load_ms.append(round((time.perf_counter() - started) * 1000))
                    check_success(reply, f"load {done + 1}")
                    if reply.get("NumberLoadedRows") != rows:
                        raise BenchError(f"load {done + 1}: NumberLoadedRows {reply.get('NumberLoadedRows')}")
                    # keys are distinct inside a batch; a later load wins ties on seq
                    best_seq[idx] = np.maximum(best_seq[idx], seqs)
                    if lookup_idx < 0:
                        lookup_idx = int(idx[0])
                    done += 1
                rowsets, files = rowset_stats(server.data_dir, "m")
                count_ms, data = timed_sql(server, client, "SELECT count(*) FROM m", args.runs)
                expected = int((best_seq >= 0).sum())
                if data["data"][0][0] != expected:
                    raise BenchError(f"after {done} loads: count(*) = {data['data'][0][0]}, expected {expected}")
                key = KEY_BASE + lookup_idx
                point_ms, data = timed_sql(server, client, f"SELECT * FROM m WHERE k = {key}", args.runs)
                got = data["data"]
                if len(got) != 1 or got[0][0] != key or got[0][1] != best_seq[lookup_idx]:
                    raise BenchError(f"after {done} loads: k = {key} gave {got}, expected seq {best_seq[lookup_idx]}")
                last = load_ms[-min(len(load_ms), 5) :]
                results.append([done, rowsets, files, expected, count_ms, point_ms, sum(last) / len(last)])
                print(
                    f"   after {done} loads: {rowsets} rowsets, {files} files, count(*) {count_ms:.0f} ms, "
                    f"point lookup {point_ms:.0f} ms"
                )
                sys.stdout.flush()

    print()
    print(
        table(
            ["loads", "rowsets", "data files", "rows (keys)", "count(*) ms", "point lookup ms", "load ms (last <=5)"],
            results,
        )
    )
    print(f"\n   medians of {args.runs} runs, client-side over HTTP; every load Success, answers checked")
    if args.json:
        keys = ["loads", "rowsets", "files", "keys", "count_ms", "point_ms", "load_ms"]
        print(
            json.dumps(
                {
                    "bench": "mor",
                    "rows_per_load": rows,
                    "buckets": args.buckets,
                    "results": [dict(zip(keys, r, strict=True)) for r in results],
                }
            )
        )
    return 0


if __name__ == "__main__":
    run_main(main)
