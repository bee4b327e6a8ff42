"""Warm the JVM at start: private loads through the load path, so that a restarted server's first loads run at
the speed of a warm one.

A fresh JVM interprets Spark's code until its JIT has compiled the hot parts, which takes thousands of calls:
measured on 2 cores, a one-row load took 112 ms (p50) in a fresh server's first 50 loads and 77 ms after 250
more, and the first 171 MB bulk load 9.8 s against 6.4-6.7 s for the next one. The warm-up runs, right after
start and before any user's load arrives, what those loads run: a bulk load of `BULK_ROWS` CSV rows with
repeated keys and a sequence column (the split, field rules, shuffle, dedup and Parquet write of a load past
`spark_runner.service.PARTITION_BYTES`) and another into an empty table (after one, the JIT had not finished
with the bulk path: a user's first 171 MB load took 8.4-9.5 s where the next ones took ~7; after two, 7.2-8.0 s),
then, for `seconds` after them (at least one of each), one-row loads
(planning, the prepared-plan path, the commit) into a table that stays small, every `BIG_EVERY`th into the bulk
load's table (the merge-on-write lookup), and every `GROUP_EVERY`th a group commit of `GROUP_LOADS` one-row loads
(a group's inline source, its per-load counts and its dedup: the plans of sync and async group commit).

The seconds run after the bulk loads: one's Spark job alone takes ~20 s on a slow 2-core machine, and a budget
counted from the start left one one-row load and no group (a fresh server's 16 sync clients then ran at 29 loads/s
in their first 10 s, 42 loads/s after 40 s, while the JIT compiled Spark's planning code: ~1 core of the 2).

Nothing of it is visible: it has its own catalog, transaction store and warehouse in a scratch folder
(`warm_up/` in the server's part of the shared dir, so that a cluster's executors can write there), removed
when it ends (and at the next start, if a stop interrupted it). It shares only the SparkSession. It yields to
users: it stops before its next load once a user's load has come (`busy`), and at shutdown (`stop`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_runner.service import PreparedLoad
    from tables.load_spec import LoadResult

log = logging.getLogger(__name__)

DB = "warm_up"
BIG, SMALL = "big", "small"  # the bulk load's table, and one that stays small
AGAIN = "again"  # the second bulk load's table, empty until then (a user's first bulk load is most often so)
# the benchmark's table shape (bench/_common.py): what a stream load into a unique-key table most often is
DDL = (
    "CREATE TABLE {} (k BIGINT NOT NULL, seq INT, name VARCHAR(32), amount DECIMAL(12,2)) "
    'UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 8 PROPERTIES ("function_column.sequence_col" = "seq")'
)
BIG_EVERY = 5  # every fifth one-row load goes to the big table: a small load's lookup of stored rows
# ~40 MB: past `PARTITION_BYTES`, so that it runs a big load's plan (a shuffle into one Spark partition per bucket,
# the sort and dedup per bucket); 1M rows (33.5 MB) were one partition, no shuffle, and the first 171 MB load
# after the warm-up took 7.5-8.3 s against 7.4 s after this one (6.3-6.6 s when warm)
BULK_ROWS = 1_200_000
HEADERS = {"column_separator": ","}
GROUP_EVERY = 4  # every fourth step after the bulk load is a group commit ...
GROUP_LOADS = 16  # ... of this many one-row loads (two of them on one key: the group's dedup)


def bulk_csv(rows: int, seed: int = 1) -> bytes:
    """`rows` CSV lines of the warm-up table, a fifth of them repeating an earlier key."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    keys = rng.integers(0, max(rows * 4 // 5, 1), rows, dtype=np.int64)
    columns = [
        pa.array(keys).cast(pa.string()),
        pa.array(rng.integers(0, 1 << 30, rows, dtype=np.int32)).cast(pa.string()),
        pc.binary_join_element_wise("n", pa.array(keys).cast(pa.string()), ""),
        pa.array(rng.integers(0, 10_000_000, rows, dtype=np.int64) / 100).cast(pa.string()),
    ]
    lines = pc.binary_join_element_wise(*columns, ",")
    return ("\n".join(lines.to_pylist()) + "\n").encode()


class WarmUp:
    """One warm-up run (`run`), on a thread of its own (`start`)."""

    def __init__(
        self,
        spark: SparkSession,
        directory: Path,
        *,
        seconds: float,
        busy: Callable[[], bool],
        roots: Sequence[Path],
        bulk_rows: int = BULK_ROWS,
    ) -> None:
        self.spark = spark
        self.directory = directory
        self.seconds = seconds
        self.busy = busy
        self.roots = list(roots)  # the folders the scratch folder may be removed from
        self.bulk_rows = bulk_rows
        self.stop = threading.Event()
        self.done = threading.Event()
        self.loads = 0
        self.groups = 0  # group commits among the loads
        self.bulk_loads = 0  # bulk loads among them
        self.outcome = "running"
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="warm-up", daemon=True)
        self.thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """Stop after the load in flight (shutdown)."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout)

    def _should_stop(self) -> bool:
        return self.stop.is_set() or self.busy()

    def _run(self) -> None:
        started = time.monotonic()
        try:
            self.run()
            self.outcome = "done"
        except Exception as exc:  # a warm-up that fails costs nothing but its warmth
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            self.outcome = f"ended early ({type(exc).__name__}: {first})"
        finally:
            self._remove()
            if self.stop.is_set():
                self.outcome = "stopped at shutdown"
            elif self.busy():
                self.outcome = "stopped for a user's load"
            log.info(
                "JVM warm-up %s: %d private loads (%d group commits) in %.1f s",
                self.outcome,
                self.loads,
                self.groups,
                time.monotonic() - started,
            )
            self.done.set()

    def run(self) -> None:
        from loaders.headers import parse_load_request
        from spark_runner.group_commit import GroupCommitter
        from spark_runner.service import LoadService
        from sql.ddl import parse_create_table
        from tables.catalog import Catalog
        from tables.commit import TableWriter
        from tables.store import Store
        from tables.transactions import TransactionStore

        self._remove()
        staging = self.directory / "staging"
        staging.mkdir(parents=True)
        catalog = Catalog(uri=f"sqlite:///{self.directory / 'catalog.db'}", warehouse=self.directory / "warehouse")
        store = Store.sqlite(self.directory / "transactions.db")
        try:
            txns = TransactionStore(store)
            loads = LoadService(
                spark=self.spark,
                catalog=catalog,
                txns=txns,
                writer=TableWriter(catalog, txns),
                error_log_dir=self.directory / "error_log",
            )
            committer = GroupCommitter(loads=loads, data_dir=self.directory / "group_commit")
            catalog.create_database(DB)
            for table in (BIG, SMALL, AGAIN):
                catalog.create_table(parse_create_table(DDL.format(table), DB).definition)

            def staged(table: str, body: bytes, headers: dict[str, str]) -> tuple[PreparedLoad, Path]:
                """A load prepared, its body staged; a grouped one's is kept in memory, as a live load's small
                grouped body (nothing is written at the path returned)."""
                self.loads += 1
                path = staging / f"{self.loads}.csv"
                if "group_commit" not in headers:
                    path.write_bytes(body)
                label = {} if "group_commit" in headers else {"label": f"warm_up_{self.loads}"}  # Doris refuses both
                request = parse_load_request(DB, table, {**HEADERS, **headers, **label})
                return loads.prepare(request), path

            def check(result: LoadResult) -> None:
                if result.status != "Success":
                    raise RuntimeError(f"warm-up load {result.label}: {result.message}")

            def load(table: str, body: bytes) -> None:
                prepared, path = staged(table, body, {})
                check(loads.run_staged(prepared, path, load_bytes=len(body)))
                path.unlink()

            def bulk(table: str, seed: int) -> None:
                load(table, bulk_csv(self.bulk_rows, seed))
                self.bulk_loads += 1

            def group(table: str, first: int) -> None:
                members = []
                for key in [first, *range(first, first + GROUP_LOADS - 1)]:  # the first key twice
                    body = f"{key},{self.loads},n{key},{key}.25\n".encode()
                    prepared, path = staged(table, body, {"group_commit": "sync_mode"})
                    members.append(committer.run(prepared, path, "sync_mode", load_bytes=len(body), data=body))
                for outcome in members:
                    check(outcome.result() if isinstance(outcome, Future) else cast(LoadResult, outcome))
                self.groups += 1

            try:
                if self._should_stop():
                    return
                bulk(BIG, 1)
                if not self._should_stop():
                    bulk(AGAIN, 2)
                small_started, steps = time.monotonic(), 0
                while not self._should_stop() and (
                    steps < GROUP_EVERY or time.monotonic() - small_started < self.seconds  # at least one group
                ):
                    steps += 1
                    i = self.loads
                    if steps % GROUP_EVERY == 0:
                        group(SMALL, i)
                    else:
                        load(BIG if steps % BIG_EVERY == 0 else SMALL, f"{i},{i},n{i},{i}.25\n".encode())
            finally:
                committer.close()
        finally:
            catalog.close()
            store.close()

    def _remove(self) -> None:
        from tables.paths import remove_tree

        if self.directory.exists():
            remove_tree(self.directory, self.roots)
