"""The store's cost per load: the two writes every load makes, its label claim (`TransactionStore.begin`, a
PREPARE row) and its VISIBLE mark (`set_state`), from 1 and from 16 threads, on SQLite (the embedded default,
synchronous=FULL) and on PostgreSQL (a server this script starts from Debian's package, fsync on, as the
tests' fixture does with fsync off).

Unlike the other benchmarks this one calls the store in-process: the store is what it measures, not the service.
It runs against another checkout's store (the SQLite path only: a release before `tables/store.py`) with
`PYTHONPATH=<checkout> python bench/store.py --sqlite-only`.

    python bench/store.py [--seconds 5] [--sqlite-only] [--uri postgresql+psycopg://...] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # appended: a PYTHONPATH checkout comes first


def run(store: Any, threads: int, seconds: float) -> tuple[float, float, float]:
    """(loads/s, median ms per load, CPU µs per load) of `threads` threads claiming a fresh label and marking it
    VISIBLE. The CPU time (this process's, all threads) is the code's own cost: a sync's wait is not in it, so it
    compares two versions even on a machine whose disk is busy with other work."""
    from tables.transactions import VISIBLE

    done: list[list[float]] = [[] for _ in range(threads)]
    deadline = time.monotonic() + seconds
    start = threading.Barrier(threads)

    def work(n: int) -> None:
        start.wait()
        while time.monotonic() < deadline:
            began = time.perf_counter()
            txn_id = store.begin("bench", "t", f"l_{uuid.uuid4().hex}")
            store.set_state(txn_id, VISIBLE)
            done[n].append(time.perf_counter() - began)

    started, cpu = time.monotonic(), time.process_time()
    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    latencies = [x for d in done for x in d]
    return len(latencies) / elapsed, statistics.median(latencies) * 1000, cpu / len(latencies) * 1e6


def report(name: str, make: Any, seconds: float) -> None:
    for threads in (1, 16):
        store = make()
        run(store, threads, min(1.0, seconds))  # warm-up: connections, caches
        rate, p50, cpu = run(store, threads, seconds)
        store.close()
        print(
            f"   {name:<11} {threads:>2} threads: {rate:8.0f} loads/s  p50 {p50:6.2f} ms/load  CPU {cpu:4.0f} µs/load",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement (default 5)")
    parser.add_argument("--sqlite-only", action="store_true", help="skip PostgreSQL (a checkout without it)")
    parser.add_argument("--uri", help="a PostgreSQL database to use instead of starting a server")
    parser.add_argument(
        "--dir", type=Path, default=ROOT / "bench", help="where the SQLite file goes (/dev/shm: the code's cost alone)"
    )
    args = parser.parse_args()
    from tables.transactions import TransactionStore

    print("== store: label claim + VISIBLE mark per load (bench/store.py)")
    print(f"   command: {' '.join([sys.executable, *sys.argv])}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        report("sqlite", lambda: TransactionStore(Path(tmp) / f"{uuid.uuid4().hex}.db"), args.seconds)
    if args.sqlite_only:
        return
    from tables.store import Store

    server = None
    uri = args.uri
    if uri is None:
        from tests.postgres import start_postgres, unavailable_reason

        if (reason := unavailable_reason()) is not None:
            print(f"   postgresql: skipped ({reason})")
            return
        server = start_postgres(fsync=True)
        uri = server.create_database()
    try:
        report("postgresql", lambda: TransactionStore(Store(uri)), args.seconds)
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()
