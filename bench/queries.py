"""Query latency over HTTP: point, count, join and aggregate queries against `SELECT 1` in the same run.

    python bench/queries.py [--rows 200000] [--repeat 30]

Starts a server with `python -m app`, loads a UNIQUE KEY table of `--rows` rows, then reloads every 7th key
(superseded rows: the reads drop their positions), and a second table of 100 rows. Each query runs 5 times to
warm up, then `--repeat` times timed one by one (client-side). The ratio column is each query's median over
`SELECT 1`'s (a statement that reads no table: parsing, checks and the HTTP round trip alone).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from _common import (  # noqa: E402
    DB,
    banner,
    check_success,
    create_database,
    median,
    percentile,
    run_main,
    running_server,
    table,
)

QUERIES = {
    "SELECT 1 (reference)": "SELECT 1",
    "point": "SELECT * FROM t WHERE k = 5",
    "count": "SELECT count(*) FROM t",
    "join 100 rows": "SELECT count(*) FROM t a JOIN s b ON a.k = b.k",
    "aggregate": "SELECT v, count(*) FROM s GROUP BY v ORDER BY v LIMIT 3",
    "group_concat": "SELECT length(group_concat(v)) FROM s",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows of table t (default 200000)")
    parser.add_argument("--repeat", type=int, default=30, help="timed runs of each query (default 30)")
    parser.add_argument("--spark-master", default="local[2]", help="SL_SPARK_MASTER (default local[2])")
    args = parser.parse_args()
    banner("query latency", __doc__.split("\n\n", 2)[2])
    rows: list[list[Any]] = []
    with running_server(spark_master=args.spark_master) as server:
        create_database(server)
        for name in ("t", "s"):
            server.sql(f"CREATE TABLE {name} (k BIGINT, v VARCHAR(32)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
        with httpx.Client() as client:
            loads = [
                ("t", range(args.rows)),
                ("t", range(0, args.rows, 7)),
                ("s", range(100)),
            ]
            for i, (name, keys) in enumerate(loads):
                body = "".join(f"{k},value{k}\n" for k in keys).encode()
                check_success(server.load(client, name, body, f"q_{time.time_ns()}_{i}"), f"load {name}")
            reference = 0.0
            for label, stmt in QUERIES.items():
                for _ in range(5):
                    server.sql(stmt, DB, client=client)
                times = []
                for _ in range(args.repeat):
                    started = time.perf_counter()
                    server.sql(stmt, DB, client=client)
                    times.append((time.perf_counter() - started) * 1000)
                p50 = median(times)
                reference = reference or p50
                rows.append([label, p50, percentile(times, 90), p50 / reference])
    print(table(["query", "p50 ms", "p90 ms", "x SELECT 1"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
