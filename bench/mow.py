"""Merge-on-write costs (issue 18's proof): reads after many loads vs compacted, a point lookup and a partial-column
load on a large table.

    python bench/mow.py [--parts reads,lookup,partial] [--checkpoints 1,50,200] [--rows 5000000]

Starts one server with `python -m app` (background compaction off), then, over HTTP SQL (warm: one run first,
then the median of `--runs`):

  reads    after a warm-up on a throwaway table, for each checkpoint N: a table `s_N` gets N loads of
           bench/compaction.py's workload (20 rows over 2000 keys, sequence column); its `count(*)` and point
           lookup are timed, then `ADMIN COMPACT TABLE s_N WHERE TYPE = 'BASE'`, the same queries again (same
           answers checked) and the ratio loaded/compacted (goal: within 1.3x); also printed, each table's first
           query after its loads and after its compaction (the untimed run);
  lookup   a table `t` of `--rows` rows with distinct keys (bench/_common.py's bulk CSV, one curl stream load):
           `SELECT * FROM t WHERE k = <key>` (goal: <= 300 ms at 5M rows);
  partial  a 10-row partial-column load (`partial_columns: true`, `columns: k,name`) into `t` and into a table
           `p` holding its first 10,000 rows, alternating, client-side wall time (goal: t/p <= 1.5x).

Exits non-zero if a load or a check fails. Run the 5M size once at a time on the shared machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
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
    banner,
    bulk_csv,
    check_success,
    create_database,
    median,
    run_main,
    running_server,
    table,
    unique_table_ddl,
)
from bulk import curl_load  # noqa: E402
from compaction import QUERIES, load_body, rowsets  # noqa: E402
from mor import timed_sql  # noqa: E402

PARTS = ("reads", "lookup", "partial")
READS = ("count(*)", "point lookup")  # of compaction.py's QUERIES, on table `s`
SMALL_ROWS = 10_000  # rows of the partial-load reference table
PARTIAL_ROWS = 10


def warm_median(server: Server, client: httpx.Client, stmt: str, runs: int) -> tuple[float, list[Any], float]:
    """One run first (its ms are the third value: the table's first query since it changed), then the median
    client-side ms of `runs`; and the answer's rows."""
    started = time.perf_counter()
    server.sql(stmt, client=client)
    first = (time.perf_counter() - started) * 1000
    ms, data = timed_sql(server, client, stmt, runs)
    return ms, data["data"], first


def files_of(server: Server, table_name: str) -> tuple[int, int]:
    """(data files, delete files) of the table's current snapshot, from its summary (read-only catalog look)."""
    from pyiceberg.catalog.sql import SqlCatalog

    data_dir = server.data_dir
    catalog = SqlCatalog(
        "default", uri=f"sqlite:///{data_dir / 'catalog.db'}", warehouse=f"file://{data_dir / 'warehouse'}"
    )
    snapshot = catalog.load_table((DB, table_name)).current_snapshot()
    summary = snapshot.summary if snapshot is not None and snapshot.summary is not None else None
    if summary is None:
        return 0, 0
    return int(summary.get("total-data-files", 0)), int(summary.get("total-delete-files", 0))


# -- reads after N loads vs the same table compacted --------------------------------------------------------------
def warm_up(server: Server, client: httpx.Client) -> None:
    """The reads' statements on a throwaway table, loaded and compacted: the first checkpoint's figures would
    otherwise include the server's warm-up (JIT), which its compacted figures, measured later, do not."""
    server.sql(unique_table_ddl("s_warm", 1))
    rng = random.Random(1)
    for i in range(3):
        check_success(server.load(client, "s_warm", load_body(rng, i, 20, 2000), f"s_warm_{i}"), "warm-up load")
    stmts = [QUERIES[q].replace("FROM s", "FROM s_warm") for q in READS]
    for _ in range(2):
        for stmt in stmts * 5:
            server.sql(stmt, client=client)
        server.sql("ADMIN COMPACT TABLE s_warm WHERE TYPE = 'BASE'")
    server.sql("DROP TABLE s_warm")


def reads_part(server: Server, client: httpx.Client, args: argparse.Namespace) -> list[dict[str, Any]]:
    warm_up(server, client)
    results = []
    for n in args.checkpoints:
        name = f"s_{n}"
        server.sql(unique_table_ddl(name, 1))
        rng = random.Random(7)  # every table gets the same loads: s_50's are the first 50 of s_200's
        started = time.perf_counter()
        for i in range(n):
            check_success(server.load(client, name, load_body(rng, i, 20, 2000), f"{name}_{i}"), f"{name} load {i}")
        load_s = time.perf_counter() - started
        before = {"rowsets": rowsets(server, name), "files": files_of(server, name)}
        stmts = {q: QUERIES[q].replace("FROM s", f"FROM {name}") for q in READS}
        loaded = {q: warm_median(server, client, stmt, args.runs) for q, stmt in stmts.items()}
        started = time.perf_counter()
        server.sql(f"ADMIN COMPACT TABLE {name} WHERE TYPE = 'BASE'")
        compact_s = time.perf_counter() - started
        after = {"rowsets": rowsets(server, name), "files": files_of(server, name)}
        packed = {q: warm_median(server, client, stmt, args.runs) for q, stmt in stmts.items()}
        for q in READS:
            if loaded[q][1] != packed[q][1]:
                raise BenchError(f"{name}: {q} answers {loaded[q][1]} loaded, {packed[q][1]} compacted")
        result = {
            "loads": n,
            "loads_per_s": n / load_s,
            "rowsets": before["rowsets"],
            "data_files": before["files"][0],
            "delete_files": before["files"][1],
            "compact_s": compact_s,
            "rowsets_compacted": after["rowsets"],
        }
        for q, key in zip(READS, ("count", "point"), strict=True):
            result[f"{key}_ms"] = loaded[q][0]
            result[f"{key}_compacted_ms"] = packed[q][0]
            result[f"{key}_ratio"] = loaded[q][0] / packed[q][0]
            result[f"{key}_first_ms"] = loaded[q][2]
            result[f"{key}_compacted_first_ms"] = packed[q][2]
        print(
            f"   {name}: {n} loads, {result['rowsets']} rowsets ({result['data_files']} data, "
            f"{result['delete_files']} delete files); count(*) {result['count_ms']:.0f} ms vs "
            f"{result['count_compacted_ms']:.0f} ms compacted, point lookup {result['point_ms']:.0f} ms vs "
            f"{result['point_compacted_ms']:.0f} ms; first queries after the change (untimed above) "
            f"{result['count_first_ms']:.0f} / {result['point_first_ms']:.0f} ms vs "
            f"{result['count_compacted_first_ms']:.0f} / {result['point_compacted_first_ms']:.0f} ms compacted"
        )
        sys.stdout.flush()
        results.append(result)
    return results


def print_reads(results: list[dict[str, Any]]) -> None:
    headers = ["loads", "rowsets", "data/delete files", "count(*) ms", "compacted", "ratio"]
    headers += ["point ms", "compacted", "ratio", "compact s"]
    rows = [
        [
            r["loads"],
            f"{r['rowsets']} -> {r['rowsets_compacted']}",
            f"{r['data_files']}/{r['delete_files']}",
            r["count_ms"],
            r["count_compacted_ms"],
            f"{r['count_ratio']:.2f}x",
            r["point_ms"],
            r["point_compacted_ms"],
            f"{r['point_ratio']:.2f}x",
            r["compact_s"],
        ]
        for r in results
    ]
    print(table(headers, rows))
    print("   goal (issue 18): count(*) and point lookup within 1.3x of the compacted table")


# -- a large table: point lookup, partial-column loads ------------------------------------------------------------
def load_large(server: Server, args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """`t` with `--rows` distinct keys from one curl stream load; `p` with its first 10,000 rows."""
    path, meta = bulk_csv(args.rows, dup_fraction=0.0)
    print(f"   data:    {path} ({meta['bytes'] / 1e6:.0f} MB, {meta['rows']:,} rows, cached: {meta['cached']})")
    server.sql(unique_table_ddl("t", args.buckets))
    _, reply, seconds = curl_load(server.base_url, path, f"mow_t_{int(time.time())}")
    check_success(reply, "the large load")
    if reply.get("NumberLoadedRows") != args.rows:
        raise BenchError(f"the large load: NumberLoadedRows {reply.get('NumberLoadedRows')}, expected {args.rows}")
    print(f"   loaded {args.rows:,} rows into t in {seconds:.1f} s")
    with open(path, "rb") as f:
        head = b"".join(itertools.islice(f, SMALL_ROWS))
    server.sql(unique_table_ddl("p", args.buckets))
    with httpx.Client() as client:
        check_success(server.load(client, "p", head, f"mow_p_{int(time.time())}"), f"the {SMALL_ROWS:,}-row load")
    return path, meta


def first_rows(path: Path, n: int) -> list[list[str]]:
    with open(path) as f:
        return [line.rstrip("\n").split(",") for line in itertools.islice(f, n)]


def lookup_part(server: Server, client: httpx.Client, path: Path, args: argparse.Namespace) -> dict[str, Any]:
    count_ms, data, _ = warm_median(server, client, "SELECT count(*) FROM t", 1)
    if data[0][0] != args.rows:
        raise BenchError(f"count(*) FROM t = {data[0][0]}, expected {args.rows}")
    k, seq, name, _ = first_rows(path, 1)[0]
    point_ms, data, _ = warm_median(server, client, f"SELECT * FROM t WHERE k = {k}", args.runs)
    if [row[:3] for row in data] != [[int(k), int(seq), name]]:
        raise BenchError(f"k = {k}: {data}, expected one row with seq {seq}, name {name}")
    print(f"   t: count(*) {count_ms:.0f} ms; point lookup by full key {point_ms:.0f} ms (goal <= 300 ms)")
    return {"rows": args.rows, "count_ms": count_ms, "point_ms": point_ms}


def partial_load(server: Server, client: httpx.Client, table_name: str, keys: list[str], label: str) -> float:
    """A 10-row partial-column load (`k,name`); client-side seconds."""
    body = "".join(f"{k},{label}\n" for k in keys).encode()
    headers = {"label": label, "column_separator": ",", "partial_columns": "true", "columns": "k,name"}
    url = f"{server.base_url}/api/{DB}/{table_name}/_stream_load"
    started = time.perf_counter()
    resp = client.put(url, content=body, headers=headers, auth=AUTH, timeout=300)
    seconds = time.perf_counter() - started
    reply = resp.json()
    check_success(reply, f"partial load {label}")
    if reply.get("NumberLoadedRows") != len(keys):
        raise BenchError(f"partial load {label}: NumberLoadedRows {reply.get('NumberLoadedRows')}")
    return seconds


def partial_part(server: Server, client: httpx.Client, path: Path, args: argparse.Namespace) -> dict[str, Any]:
    keys = [row[0] for row in first_rows(path, PARTIAL_ROWS)]
    run = int(time.time())
    partial_load(server, client, "p", keys, f"pw_{run}")  # warm: the first partial load compiles its plan
    times: dict[str, list[float]] = {"t": [], "p": []}
    for i in range(args.runs):
        for name in ("p", "t"):
            times[name].append(partial_load(server, client, name, keys, f"p{name}_{run}_{i}"))
    last = f"pt_{run}_{args.runs - 1}"
    got = server.sql(f"SELECT name, count(*) FROM t WHERE name = '{last}' GROUP BY name", client=client)["data"]
    if got != [[last, PARTIAL_ROWS]]:
        raise BenchError(f"after the partial loads t holds {got}, expected {PARTIAL_ROWS} rows named {last}")
    large, small = median(times["t"]) * 1000, median(times["p"]) * 1000
    print(
        f"   10-row partial load: {large:.0f} ms into {args.rows:,} rows, {small:.0f} ms into {SMALL_ROWS:,} rows: "
        f"{large / small:.2f}x (goal <= 1.5x)"
    )
    return {"large_ms": large, "small_ms": small, "ratio": large / small}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which parts (default {','.join(PARTS)})")
    parser.add_argument("--checkpoints", default="1,50,200", help="loads per reads table (default 1,50,200)")
    parser.add_argument("--rows", type=int, default=5_000_000, help="rows of the large table (default 5,000,000)")
    parser.add_argument("--buckets", type=int, default=8, help="BUCKETS of the large tables (default 8)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs, the median is reported (default 3)")
    parser.add_argument("--spark-master", default="local[2]", help="SL_SPARK_MASTER (default local[2])")
    parser.add_argument("--keep", action="store_true", help="keep the server's data directory and log")
    parser.add_argument("--json", action="store_true", help="print one machine-readable JSON line at the end")
    args = parser.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not parts or set(parts) - set(PARTS):
        parser.error(f"--parts takes some of {','.join(PARTS)}")
    args.checkpoints = sorted({int(c) for c in args.checkpoints.split(",") if c.strip()})
    if not args.checkpoints or args.checkpoints[0] < 1:
        parser.error("--checkpoints must be positive load counts, e.g. 1,50,200")
    if args.rows < SMALL_ROWS:
        parser.error(f"--rows must be at least {SMALL_ROWS:,}")
    banner(
        "merge-on-write costs",
        f"""
Parts {", ".join(parts)}; over HTTP SQL, warm, median of {args.runs} runs. reads: count(*) and the point lookup of
bench/compaction.py after {", ".join(map(str, args.checkpoints))} loads vs the same table after a base compaction.
lookup: point lookup by full key on {args.rows:,} rows. partial: a {PARTIAL_ROWS}-row partial-column load into
{args.rows:,} rows vs into {SMALL_ROWS:,} rows.
""",
    )
    out: dict[str, Any] = {"bench": "mow", "rows": args.rows}
    off = {"SL_COMPACTION_INTERVAL_SECONDS": "0"}
    with running_server(spark_master=args.spark_master, keep=args.keep, extra_env=off) as server:
        create_database(server)
        with httpx.Client() as client:
            if "reads" in parts:
                out["reads"] = reads_part(server, client, args)
            if "lookup" in parts or "partial" in parts:
                path, _ = load_large(server, args)
                if "lookup" in parts:
                    out["lookup"] = lookup_part(server, client, path, args)
                if "partial" in parts:
                    out["partial"] = partial_part(server, client, path, args)
    print()
    if "reads" in out:
        print_reads(out["reads"])
    if "lookup" in out:
        print(f"   point lookup by full key, {args.rows:,} rows: {out['lookup']['point_ms']:.0f} ms (goal <= 300 ms)")
    if "partial" in out:
        p = out["partial"]
        print(
            f"   {PARTIAL_ROWS}-row partial load: {p['large_ms']:.0f} ms ({args.rows:,} rows) / {p['small_ms']:.0f} ms "
            f"({SMALL_ROWS:,} rows) = {p['ratio']:.2f}x (goal <= 1.5x)"
        )
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    run_main(main)
