"""Resource exhaustion by a logged-in loader: what one user's loads may take of the server's threads stays bounded.

Group commit had one worker thread per (table, load shape), and every group a job thread that never ended: a user
holding LOAD_PRIV on one table sent grouped loads with distinct `where` headers, and 400 of them left the server
615 threads (a Py4J connection and a JVM thread with each job thread), and ran as many Spark jobs at once. Now a
table's loads of every shape share one queue, and groups form and run on at most `INSERT_THREADS` threads over
every table (Doris BE's `group_commit_insert_threads`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers import DorisClient, serving

SHAPES = 24


@contextmanager
def one_table_loader(spark: Any, tmp_path: Path, **settings: Any) -> Iterator[tuple[DorisClient, DorisClient]]:
    """A server of these settings with a table `d.t`: root's client, and that of a user holding LOAD_PRIV on it."""
    from app.main import create_app
    from app.settings import Settings

    config = Settings(data_dir=tmp_path, mysql_port=0, compaction_interval_seconds=0, **settings)
    with serving(create_app(config, spark=spark), settings=config) as (url,):
        root = DorisClient(url)
        root.sql("d", "CREATE DATABASE d")
        root.sql("d", "CREATE TABLE t (k INT, v VARCHAR(8)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
        root.sql("d", "CREATE USER 'loader'@'%' IDENTIFIED BY 'pw'; GRANT LOAD_PRIV ON d.t TO 'loader'@'%'")
        yield root, DorisClient(url, auth=("loader", "pw"))


def group_commit_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("group-commit"))


def test_grouped_loads_of_many_shapes_take_a_bounded_number_of_threads(spark: Any, tmp_path: Path) -> None:
    from spark_runner import group_commit

    with one_table_loader(spark, tmp_path, group_commit_interval_ms=20) as (root, loader):
        before = group_commit_threads()
        peak = [0]
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], group_commit_threads() - before)
                time.sleep(0.01)

        def load(i: int) -> dict[str, Any]:
            headers = {"column_separator": ",", "group_commit": "sync_mode", "where": f"k < {i + 100}"}
            body: dict[str, Any] = loader.stream_load("d", "t", f"{i},x\n", headers).json()
            return body

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        with ThreadPoolExecutor(SHAPES) as pool:
            replies = list(pool.map(load, range(SHAPES)))
        done.set()
        watcher.join()
        assert [r["Status"] for r in replies] == ["Success"] * SHAPES, replies
        assert root.rows("d", "SELECT count(*) FROM t") == [[SHAPES]]
        # one table: one group at a time (its round and its job, which may be handed to a second job thread)
        assert peak[0] <= 4, f"{peak[0]} group-commit threads for one table's loads"
        assert group_commit_threads() - before <= 2 * group_commit.INSERT_THREADS


def test_group_rounds_run_on_at_most_insert_threads_threads_and_all_run() -> None:
    from spark_runner.group_commit import _Rounds

    rounds = _Rounds("test-round", 3)
    release = threading.Event()
    ran: list[int] = []
    lock = threading.Lock()

    def task(i: int) -> None:
        release.wait()
        with lock:
            ran.append(i)

    for i in range(50):
        rounds.submit(lambda i=i: task(i))  # type: ignore[misc]
    assert rounds.threads() == 3
    release.set()
    deadline = time.monotonic() + 10
    while len(ran) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(ran) == list(range(50)) and rounds.threads() == 3


def test_a_user_cannot_leave_more_precommitted_loads_than_the_running_transaction_bound(
    spark: Any, tmp_path: Path
) -> None:
    """A precommitted two-phase load holds its files until committed, aborted or `SL_PRECOMMIT_TIMEOUT_SECONDS`;
    a user with LOAD_PRIV on one table left as many as it liked. As Doris's FE, a database holds at most
    `max_running_txn_num_per_db` unfinished transactions when a two-phase load begins."""
    with one_table_loader(spark, tmp_path, max_running_txn_num_per_db=2) as (root, loader):
        headers = {"column_separator": ",", "two_phase_commit": "true"}
        first = loader.precommit("d", "t", b"1,a\n", headers)
        loader.precommit("d", "t", b"2,b\n", headers)
        refused = loader.stream_load("d", "t", b"3,c\n", headers).json()
        assert refused["Status"] == "Fail", refused
        assert "current running txns on db d is 2, larger than limit 2" in refused["Message"], refused
        plain = loader.stream_load("d", "t", b"4,d\n", {"column_separator": ","}).json()
        assert plain["Status"] == "Success", plain  # one-phase loads are not refused
        loader.commit_txn("d", first)
        loader.precommit("d", "t", b"3,c\n", headers)  # room again
        assert sorted(r[0] for r in root.rows("d", "SELECT k FROM t")) == [1, 4]
