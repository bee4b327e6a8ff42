"""Rowset count and query time after many small loads, with background compaction off and on.

    python bench/compaction.py [--loads 200] [--rows-per-load 20] [--keys 2000] [--queries 5]

Runs the same workload twice, each time on a fresh server (`python -m app`): once with
`SL_COMPACTION_INTERVAL_SECONDS=0` (no background compaction), once with it on (2 s interval, default
thresholds). The workload: a unique-key table with a sequence column, `--loads` sequential CSV stream loads of
`--rows-per-load` rows over `--keys` keys. Then the rowset count (`SHOW TABLETS` VersionCount, after background
compaction settled) and the median time of a few queries. Both runs must give the same answers.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from _common import (  # noqa: E402
    BenchError,
    Server,
    banner,
    check_success,
    create_database,
    median,
    run_main,
    running_server,
    table,
    unique_table_ddl,
)

QUERIES = {
    "count(*)": "SELECT count(*) FROM s",
    "sum + group by": "SELECT k % 10, sum(amount) FROM s GROUP BY k % 10 ORDER BY 1",
    "point lookup": "SELECT * FROM s WHERE k = 17",
}


def load_body(rng: random.Random, i: int, rows_per_load: int, keys: int) -> bytes:
    """Load `i` of the workload: `rows_per_load` rows over `keys` keys, with sequence `i` (bench/mow.py too)."""
    return "".join(
        f"{rng.randrange(keys)},{i},name{i % 97},{rng.randrange(10000)}.{i % 100:02d}\n" for _ in range(rows_per_load)
    ).encode()


def rowsets(server: Server, table_name: str = "s") -> int:
    reply = server.sql(f"SHOW TABLETS FROM {table_name}")
    names = [c["name"] for c in reply["meta"]]
    return int(reply["data"][0][names.index("VersionCount")])


def run(args: argparse.Namespace, *, compaction: bool) -> dict[str, Any]:
    env = {"SL_COMPACTION_INTERVAL_SECONDS": "2" if compaction else "0"}
    with running_server(spark_master=args.spark_master, keep=args.keep, extra_env=env) as server:
        create_database(server)
        server.sql(unique_table_ddl("s", args.buckets))
        rng = random.Random(7)
        started = time.perf_counter()
        with httpx.Client() as client:
            for i in range(args.loads):
                body = load_body(rng, i, args.rows_per_load, args.keys)
                check_success(server.load(client, "s", body, f"c_{i}"), f"load {i}")
        load_seconds = time.perf_counter() - started
        after_loads = rowsets(server)
        settled = after_loads
        if compaction:  # let the background pass finish what the last loads started
            deadline = time.monotonic() + args.settle
            quiet = 0
            while time.monotonic() < deadline and quiet < 3:
                time.sleep(2)
                now = rowsets(server)
                quiet = quiet + 1 if now == settled else 0
                settled = now
        timings: dict[str, float] = {}
        answers: dict[str, Any] = {}
        for name, stmt in QUERIES.items():
            server.sql(stmt)  # warm
            runs = []
            for _ in range(args.queries):
                t = time.perf_counter()
                answers[name] = server.sql(stmt)["data"]
                runs.append((time.perf_counter() - t) * 1000)
            timings[name] = median(runs)
        return {
            "compaction": "on" if compaction else "off",
            "loads_per_s": args.loads / load_seconds,
            "rowsets_after_loads": after_loads,
            "rowsets_settled": settled,
            "query_ms": timings,
            "answers": answers,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=200, help="small loads (default 200)")
    parser.add_argument("--rows-per-load", type=int, default=20, help="rows per load (default 20)")
    parser.add_argument("--keys", type=int, default=2000, help="distinct keys the loads draw from (default 2000)")
    parser.add_argument("--buckets", type=int, default=1, help="BUCKETS of the table (default 1)")
    parser.add_argument("--queries", type=int, default=5, help="timed runs per query (default 5)")
    parser.add_argument("--settle", type=float, default=120, help="max seconds to wait for compaction (default 120)")
    parser.add_argument("--spark-master", default="local[2]", help="SL_SPARK_MASTER (default local[2])")
    parser.add_argument("--keep", action="store_true", help="keep the server's data directory and log")
    parser.add_argument("--json", action="store_true", help="print one machine-readable JSON line at the end")
    args = parser.parse_args()
    banner(
        "compaction",
        f"""
{args.loads} sequential stream loads of {args.rows_per_load} rows ({args.keys} keys, unique table with sequence),
on a server without and then with background compaction (2 s interval, default thresholds); then rowsets
(SHOW TABLETS VersionCount) and the median of {args.queries} runs of each query.
""",
    )
    results = [run(args, compaction=False), run(args, compaction=True)]
    if results[0]["answers"] != results[1]["answers"]:
        raise BenchError("the answers differ with and without compaction")
    print("   check:   same answers with and without compaction")
    print()
    headers = ["compaction", "loads/s", "rowsets after loads", "rowsets settled", *[f"{q} ms" for q in QUERIES]]
    rows = [
        [r["compaction"], r["loads_per_s"], r["rowsets_after_loads"], r["rowsets_settled"], *r["query_ms"].values()]
        for r in results
    ]
    print(table(headers, rows))
    if args.json:
        for r in results:
            r.pop("answers")
        print(json.dumps({"bench": "compaction", "results": results}))
    return 0


if __name__ == "__main__":
    run_main(main)
