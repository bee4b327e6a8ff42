"""Sustained one-row loads: does a load get slower as the table's history grows?

    python bench/sustained.py [--loads 800] [--block 100] [--keep-count 100]

Starts a server with `python -m app` (its defaults, and `SL_SNAPSHOT_KEEP_COUNT` as given), then sends
one-row CSV stream loads one after another into one table and prints, per block of loads, the median
client latency, server `LoadTimeMs` and `CommitAndPublishTimeMs`, and the table's snapshot count at the
end of the block. Every Iceberg commit rewrites the table's snapshot list, so commit time follows the
snapshots the table keeps; `--keep-count 1000000` shows the behaviour without the bound.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from _common import (  # noqa: E402
    DB,
    BenchError,
    banner,
    create_database,
    run_main,
    running_server,
    table,
    unique_table_ddl,
)


def snapshot_count(data_dir: Path, table_name: str) -> int:
    """Snapshots of the table's current metadata, read from the catalog without changing it."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "default", uri=f"sqlite:///{data_dir / 'catalog.db'}", warehouse=f"file://{data_dir / 'warehouse'}"
    )
    return len(catalog.load_table((DB, table_name)).snapshots())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=800)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--keep-count", type=int, default=100)
    args = parser.parse_args()
    banner("sustained", f"{args.loads} sequential one-row loads, SL_SNAPSHOT_KEEP_COUNT={args.keep_count}.")
    rows = []
    with running_server(extra_env={"SL_SNAPSHOT_KEEP_COUNT": str(args.keep_count)}) as server:
        create_database(server)
        server.sql(unique_table_ddl("s", 1))
        with httpx.Client(auth=("root", ""), timeout=120) as client:
            for start in range(0, args.loads, args.block):
                latency, load_ms, commit_ms = [], [], []
                for i in range(start, min(start + args.block, args.loads)):
                    body = f"{i},{i},name{i},{i}.00\n".encode()
                    began = time.perf_counter()
                    reply = server.load(client, "s", body, f"sustained_{i}")
                    latency.append((time.perf_counter() - began) * 1000)
                    if reply.get("Status") != "Success":
                        raise BenchError(f"load {i} failed: {reply}")
                    load_ms.append(int(reply["LoadTimeMs"]))
                    commit_ms.append(int(reply["CommitAndPublishTimeMs"]))
                rows.append(
                    [
                        f"{start}-{start + len(latency) - 1}",
                        round(statistics.median(latency)),
                        round(statistics.median(load_ms)),
                        round(statistics.median(commit_ms)),
                        snapshot_count(server.data_dir, "s"),
                    ]
                )
                print(f"   block {rows[-1][0]} done", flush=True)
    print(table(["loads", "p50 ms", "LoadTimeMs p50", "CommitAndPublishTimeMs p50", "snapshots"], rows))
    return 0


if __name__ == "__main__":
    run_main(main)
