"""Server memory while a large body streams in: `python bench/memory.py [--rows 5000000]`.

Starts a server on its default settings, warms it with one small load, then loads the bulk CSV (see bulk.py)
twice, with `curl -T file` (Content-Length) and with `curl -T -` (chunked, from stdin), sampling the resident
memory of the server's Python process and its JVM every 0.1 s. Prints each process's RSS before the load,
its peak during it, and the growth. The body is streamed to staging, never held in memory; the JVM's heap is
touched whole at start (its footprint is fixed), so what grows is what a load needs beyond that.
`--rows 5850000` is a 200 MB body, `--rows 29100000` 1 GB.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

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


def curl_load(server: Any, table_name: str, path: Path, *, chunked: bool) -> dict[str, Any]:
    source = ["-T", "-"] if chunked else ["-T", str(path)]
    with open(path, "rb") as body:
        out = subprocess.run(
            [
                "curl",
                "-sS",
                "-u",
                "root:",
                "-H",
                "column_separator: ,",
                *source,
                f"{server.base_url}/api/{DB}/{table_name}/_stream_load",
            ],
            stdin=body if chunked else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=True,
        )
    reply: dict[str, Any] = json.loads(out.stdout)
    return reply


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_850_000)
    parser.add_argument("--buckets", type=int, default=8)
    args = parser.parse_args()
    banner("memory", "Server RSS (Python + JVM) while a large CSV streams in, by Content-Length and chunked.")
    path, meta = bulk_csv(args.rows)
    warm, _ = bulk_csv(200_000)
    results = []
    with running_server(extra_env={"SL_SPARK_CONF": "{}"}) as server:
        create_database(server)
        assert server.proc is not None
        server.sql(unique_table_ddl("warm", args.buckets))
        check_success(curl_load(server, "warm", warm, chunked=False), "warm-up load")
        pids = server_pids(server.proc.pid)
        for chunked in (False, True):
            name = "chunked" if chunked else "sized"
            server.sql(unique_table_ddl(name, args.buckets))
            time.sleep(1)
            before = [rss_mb([p]) for p in pids]
            peak = list(before)
            done = threading.Event()

            def sample(done: threading.Event = done, peak: list[float] = peak) -> None:
                while not done.is_set():
                    for i, p in enumerate(pids):
                        peak[i] = max(peak[i], rss_mb([p]))
                    time.sleep(0.1)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            started = time.monotonic()
            try:
                reply = curl_load(server, name, path, chunked=chunked)
            finally:
                done.set()
                sampler.join()
            seconds = time.monotonic() - started
            check_success(reply, f"{name} load")
            results.append(
                [
                    "chunked (-T -)" if chunked else "Content-Length (-T file)",
                    round(seconds, 1),
                    round(meta["bytes"] / 1e6 / seconds, 1),
                    *[f"{b:.0f} → {p:.0f}" for b, p in zip(before, peak, strict=True)],
                    round(sum(peak) - sum(before)),
                ]
            )
    print(f"   body: {meta['bytes'] / 1e6:.1f} MB, {args.rows:,} rows")
    print(
        table(
            ["transport", "seconds", "MB/s", "Python RSS MB", "JVM RSS MB", "growth MB"],
            results,
        )
    )
    return 0


if __name__ == "__main__":
    run_main(main)
