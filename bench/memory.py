"""Server memory while a large body streams in: `python bench/memory.py [--rows 5000000]`.

Starts a server, loads the bulk CSV (see bulk.py) with `curl -T -` (chunked, from stdin), and samples the
resident memory of the server's Python process and its JVM every 0.2 s. Prints the RSS before the load, the
peak during it, and the growth: the body is streamed to staging, never held in memory.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    DB,
    banner,
    bulk_csv,
    check_success,
    create_database,
    run_main,
    running_server,
    table,
    unique_table_ddl,
)


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def server_pids(root: int) -> list[int]:
    """The server's Python process and its children (the JVM runs in a session of its own)."""
    pids = [root]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == root:
                pids.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--buckets", type=int, default=8)
    args = parser.parse_args()
    banner("memory", "Server RSS (Python + JVM) while a large CSV streams in chunked with curl -T -.")
    path, meta = bulk_csv(args.rows)
    with running_server() as server:
        create_database(server)
        server.sql(unique_table_ddl("t", args.buckets))
        assert server.proc is not None
        pids = server_pids(server.proc.pid)
        time.sleep(2)
        before = rss_mb(pids)
        peak = before
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, rss_mb(pids))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        with open(path, "rb") as body:
            out = subprocess.run(
                [
                    "curl",
                    "-sS",
                    "-u",
                    "root:",
                    "-H",
                    "column_separator: ,",
                    "-T",
                    "-",
                    f"{server.base_url}/api/{DB}/t/_stream_load",
                ],
                stdin=body,
                capture_output=True,
                text=True,
                check=True,
            )
        done.set()
        sampler.join()
        import json

        reply = json.loads(out.stdout)
        check_success(reply, "streamed load")
    mb = meta["bytes"] / 1e6
    print(
        table(
            ["body MB", "rows", "RSS before MB", "RSS peak MB", "growth MB"],
            [[round(mb, 1), args.rows, round(before), round(peak), round(peak - before)]],
        )
    )
    return 0


if __name__ == "__main__":
    run_main(main)
