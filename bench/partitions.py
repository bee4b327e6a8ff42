"""Partitioned tables (issue 20's proof): a point query with a partition predicate on many partitions vs on one,
and a small load into one partition of a table with many vs a table with one.

    python bench/partitions.py [--days 365] [--rows-per-day 2000] [--partitions 1000] [--runs 5]

Starts one server with `python -m app` (background compaction off), then, over HTTP:

  query  table `y` has `--days` daily partitions (`FROM ... TO ... INTERVAL 1 DAY`) holding `--rows-per-day` rows
         each, loaded in one stream load; table `one` has one partition holding the rows of one of those days.
         `SELECT * FROM <t> WHERE d = '<day>' AND k = <k>`, warm, median of `--runs` (goal: y / one <= 1.5x);
  load   table `many` has `--partitions` partitions (RANGE on an INT key, one per 10 values), `single` one
         partition; the same 20-row load into one partition of each, alternating, median of `--runs` client-side
         wall times (goal: many / single <= 1.2x).

Exits non-zero if a load or a check fails.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from _common import (  # noqa: E402
    AUTH,
    DB,
    BenchError,
    Server,
    add_server_options,
    banner,
    check_success,
    create_database,
    median,
    run_main,
    running_server,
)

LOAD_ROWS = 20


def _load(server: Server, client: httpx.Client, table: str, body: str, label: str) -> dict[str, Any]:
    resp = client.put(
        f"{server.base_url}/api/{DB}/{table}/_stream_load",
        content=body.encode(),
        headers={"label": label, "column_separator": ","},
        auth=AUTH,
        timeout=600,
    )
    reply: dict[str, Any] = resp.json()
    check_success(reply, f"load into {table}")
    return reply


def _timed_query(server: Server, client: httpx.Client, stmt: str, runs: int) -> tuple[float, list[Any]]:
    server.sql(stmt, client=client)  # warm
    times, rows = [], []
    for _ in range(runs):
        started = time.perf_counter()
        rows = server.sql(stmt, client=client)["data"]
        times.append((time.perf_counter() - started) * 1000)
    return median(times), rows


def query_part(server: Server, client: httpx.Client, args: argparse.Namespace) -> dict[str, Any]:
    start = dt.date(2024, 1, 1)
    end = start + dt.timedelta(days=args.days)
    server.sql(
        f"""CREATE TABLE y (d DATE, k INT, v INT) UNIQUE KEY(d, k)
        PARTITION BY RANGE(d) (FROM ("{start}") TO ("{end}") INTERVAL 1 DAY) DISTRIBUTED BY HASH(k) BUCKETS 1""",
        client=client,
    )
    day = start + dt.timedelta(days=args.days // 2)
    server.sql(
        f"""CREATE TABLE one (d DATE, k INT, v INT) UNIQUE KEY(d, k)
        PARTITION BY RANGE(d) (PARTITION p VALUES [("{day}"), ("{day + dt.timedelta(days=1)}")))
        DISTRIBUTED BY HASH(k) BUCKETS 1""",
        client=client,
    )
    lines = [
        f"{start + dt.timedelta(days=i)},{k},{i * args.rows_per_day + k}"
        for i in range(args.days)
        for k in range(args.rows_per_day)
    ]
    started = time.perf_counter()
    _load(server, client, "y", "\n".join(lines) + "\n", "bench_y")
    load_s = time.perf_counter() - started
    _load(server, client, "one", "\n".join(line for line in lines if line.startswith(str(day))) + "\n", "bench_one")
    stmt = f"SELECT * FROM {{t}} WHERE d = '{day}' AND k = {args.rows_per_day // 3}"
    many_ms, many_rows = _timed_query(server, client, stmt.format(t="y"), args.runs)
    one_ms, one_rows = _timed_query(server, client, stmt.format(t="one"), args.runs)
    if many_rows != one_rows or len(many_rows) != 1:
        raise BenchError(f"different answers: {many_rows} vs {one_rows}")
    return {"load_s": load_s, "many_ms": many_ms, "one_ms": one_ms, "ratio": many_ms / one_ms}


def load_part(server: Server, client: httpx.Client, args: argparse.Namespace) -> dict[str, Any]:
    bounds = ", ".join(f"PARTITION p{i} VALUES LESS THAN ({(i + 1) * 10})" for i in range(args.partitions))
    server.sql(
        f"""CREATE TABLE many (k INT, v INT) UNIQUE KEY(k) PARTITION BY RANGE(k) ({bounds})
        DISTRIBUTED BY HASH(k) BUCKETS 1""",
        client=client,
    )
    server.sql(
        """CREATE TABLE single (k INT, v INT) UNIQUE KEY(k) PARTITION BY RANGE(k) (
        PARTITION p0 VALUES LESS THAN (2147483647)) DISTRIBUTED BY HASH(k) BUCKETS 1""",
        client=client,
    )
    target = (args.partitions // 2) * 10
    times: dict[str, list[float]] = {"many": [], "single": []}
    for run in range(args.runs + 1):
        body = "".join(f"{target + i % 10},{run * 100 + i}\n" for i in range(LOAD_ROWS))
        for table in ("many", "single"):
            started = time.perf_counter()
            _load(server, client, table, body, f"bench_{table}_{run}")
            if run:  # the first round warms up
                times[table].append((time.perf_counter() - started) * 1000)
    many_ms, single_ms = median(times["many"]), median(times["single"])
    answers = [server.sql(f"SELECT * FROM {t} ORDER BY k", client=client)["data"] for t in ("many", "single")]
    if answers[0] != answers[1]:
        raise BenchError("the two tables answer differently")
    return {"many_ms": many_ms, "single_ms": single_ms, "ratio": many_ms / single_ms}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=365, help="daily partitions of the query table (default 365)")
    parser.add_argument("--rows-per-day", type=int, default=2000, help="rows per day (default 2000)")
    parser.add_argument("--partitions", type=int, default=1000, help="partitions of the load table (default 1000)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs, the median is reported (default 5)")
    add_server_options(parser)
    args = parser.parse_args()
    banner(
        "partitioned tables",
        f"""
query: SELECT by day and key on {args.days} daily partitions ({args.rows_per_day:,} rows a day) vs one partition
holding that day; load: a {LOAD_ROWS}-row load into one partition of {args.partitions:,} vs of one; medians of
{args.runs} warm runs.
""",
    )
    out: dict[str, Any] = {"bench": "partitions"}
    off = {"SL_COMPACTION_INTERVAL_SECONDS": "0"}
    with running_server(spark_master=args.spark_master, keep=args.keep, extra_env=off) as server:
        create_database(server)
        with httpx.Client() as client:
            out["query"] = query_part(server, client, args)
            out["load"] = load_part(server, client, args)
    q, ld = out["query"], out["load"]
    print()
    rows = args.days * args.rows_per_day
    print(f"   one stream load of {rows:,} rows into {args.days} partitions: {q['load_s']:.1f} s")
    print(
        f"   point query with a partition predicate: {q['many_ms']:.0f} ms ({args.days} partitions) / "
        f"{q['one_ms']:.0f} ms (1) = {q['ratio']:.2f}x (goal <= 1.5x)"
    )
    print(
        f"   {LOAD_ROWS}-row load into one partition: {ld['many_ms']:.0f} ms ({args.partitions:,} partitions) / "
        f"{ld['single_ms']:.0f} ms (1) = {ld['ratio']:.2f}x (goal <= 1.2x)"
    )
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    run_main(main)
