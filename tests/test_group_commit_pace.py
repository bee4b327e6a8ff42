"""Group commit at service pace: a group's loads are one Spark job, a worker whose loads queued while its
last group ran starts the next group at once (no second interval), sync clients that load again once answered
rejoin one group a round, concurrent async acknowledgements share
the WAL's fsyncs (`WalLog`, a log's group commit), and a small grouped body makes no file of its own."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DorisClient, serving
from tests.test_group_commit import assert_group_reply

DDL = (
    "CREATE TABLE t (k INT NOT NULL, v VARCHAR(16)) {kind} KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"
    ' PROPERTIES ("group_commit_mode" = "{mode}")'
)


@contextmanager
def group_server(
    spark: Any, tmp_path: Path, mode: str, kind: str = "DUPLICATE", **settings: Any
) -> Iterator[tuple[DorisClient, Any]]:
    """An in-process server (the session's Spark) with one table `d.t` of `kind` in `mode`; yields a client and
    the app."""
    from app.main import create_app
    from app.settings import Settings

    config = Settings(data_dir=tmp_path, mysql_port=0, compaction_interval_seconds=0, **settings)
    app = create_app(config, spark=spark)
    with serving(app, settings=config) as (url,):
        doris = DorisClient(url)
        doris.sql("d", "CREATE DATABASE d")
        doris.sql("d", DDL.format(kind=kind, mode=mode))
        yield doris, app


def counters(doris: DorisClient) -> dict[str, int]:
    """The server's `doris_group_commit_*_total` counters (GET /metrics), by name."""
    text = doris.http.get("/metrics").text
    return {m[0]: int(float(m[1])) for m in re.findall(r"^doris_group_commit_(\w+)_total (\S+)$", text, re.MULTILINE)}


def concurrent_loads(
    doris: DorisClient, bodies: list[str], *, table: str = "t", label: str = "load", **headers: str
) -> list[dict[str, Any]]:
    """One stream load per body into `d.<table>` (labels `<label>_<i>`, more `headers`), all sent at once."""
    barrier = threading.Barrier(len(bodies))

    def load(i: int) -> dict[str, Any]:
        barrier.wait()
        sent = {"column_separator": ",", "label": f"{label}_{i}", **headers}
        return dict(doris.stream_load("d", table, bodies[i], sent).json())

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(load, range(len(bodies))))


@pytest.mark.parametrize(
    "rows, jobs",
    [
        pytest.param(2, 0, id="a-small-group-is-folded-without-a-job"),
        pytest.param(600, 1, id="a-larger-one-is-one-job"),
    ],
)
def test_a_group_of_loads_is_one_spark_job(spark: Any, tmp_path: Path, rows: int, jobs: int) -> None:
    """A group's loads are read and merged together: a group of 16 rows by Spark's optimizer without a job
    (`load_job._folded_load`, rows of one key merged in the server's process), one of 4,800 rows (past
    `MAX_FOLDED_ROWS`) by one Spark job; the same rows land either way."""
    # a long interval: every load arrives while the group's first one waits for company; a unique-key table (the
    # default kind, merge-on-write) has the most to do
    with group_server(spark, tmp_path, "sync_mode", "UNIQUE", group_commit_interval_ms=3000) as (doris, _):
        stored = doris.stream_load(
            "d", "t", "0,stored\n5,stored\n", {"column_separator": ",", "group_commit": "off_mode"}
        )
        assert stored.json()["Status"] == "Success", stored.text
        # load i: keys i, i + 8, i + 16, ...; each load's last row repeats its first key, which it wins
        bodies = ["".join(f"{i + 8 * j},v{i}\n" for j in range(rows - 1)) + f"{i},last{i}\n" for i in range(8)]
        replies = concurrent_loads(doris, bodies)
        for body in replies:
            assert_group_reply(body, mode="sync_mode", loaded=rows)
        seen = counters(doris)
        assert seen["groups"] == 1 and seen["loads"] == 8, seen
        assert seen["spark_jobs"] == jobs, f"a group of 8 loads of {rows} rows ran {seen['spark_jobs']} Spark jobs"
        assert doris.rows("d", "SELECT count(*) FROM t") == [[8 * (rows - 1)]]  # keys 0 and 5 replaced
        assert doris.rows("d", "SELECT v FROM t WHERE k = 5") == [["last5"]]
        assert doris.rows("d", "SELECT count(*) FROM t WHERE v = 'v5'") == [[rows - 2]]


def test_a_group_of_one_one_row_load_runs_no_spark_job(spark: Any, tmp_path: Path) -> None:
    """A load alone in its group (one client in sync mode) counts its rows as a plain load does, so its one row
    takes the plain load's path without a Spark job (`load_job._folded_load`); a row it filters still runs the
    counted job, which counts and reports it."""
    with group_server(spark, tmp_path, "sync_mode", "UNIQUE") as (doris, _):
        for i in range(3):
            reply = doris.stream_load("d", "t", f"{i},v{i}\n", {"column_separator": ",", "label": f"one_{i}"})
            assert_group_reply(reply.json(), mode="sync_mode", loaded=1)
        seen = counters(doris)
        assert seen["groups"] == 3 and seen["loads"] == 3, seen
        assert seen["spark_jobs"] == 0, f"three one-row loads alone in their groups ran {seen['spark_jobs']} jobs"
        bad = doris.stream_load("d", "t", "x,bad\n", {"column_separator": ","}).json()
        assert_group_reply(bad, mode="sync_mode", status="Fail", loaded=0)
        assert bad["Message"] == "[DATA_QUALITY_ERROR]too many filtered rows", bad
        assert (bad["NumberTotalRows"], bad["NumberFilteredRows"]) == (1, 1), bad
        assert counters(doris)["spark_jobs"] > 0
        assert "x,bad" in doris.http.get(bad["ErrorURL"]).text
        # within its filter ratio a load succeeds, and its reply names its filtered rows' log (contract: on success too)
        kept = doris.stream_load("d", "t", "y,bad\n3,v3\n", {"column_separator": ",", "max_filter_ratio": "0.5"})
        assert_group_reply(kept.json(), mode="sync_mode", loaded=1)
        assert "y,bad" in doris.http.get(kept.json()["ErrorURL"]).text
        clean = doris.stream_load("d", "t", "4,v4\n", {"column_separator": ","}).json()
        assert "ErrorURL" not in clean, clean
        assert doris.rows("d", "SELECT k, v FROM t ORDER BY k") == [[i, f"v{i}"] for i in range(5)]


def test_loads_queued_while_a_group_runs_do_not_wait_the_interval_again(spark: Any, tmp_path: Path) -> None:
    interval = 8.0
    # groups of two: the first closes as soon as its second load comes, the third load waits alone
    settings = {"group_commit_interval_ms": interval * 1000, "group_commit_max_loads": 2}
    with group_server(spark, tmp_path, "sync_mode", **settings) as (doris, app):
        big = "".join(f"{k},big\n" for k in range(200_000))  # the first group's job lasts a while
        with ThreadPoolExecutor(3) as pool:
            first = [
                pool.submit(lambda body=body: doris.stream_load("d", "t", body, {"column_separator": ","}))
                for body in (big, "1,small\n")
            ]
            txns = app.state.services.txns
            deadline = time.monotonic() + 60
            while not any(t.label.startswith("group_commit_") for t in txns.in_state("PREPARE")):
                assert time.monotonic() < deadline, "the first group did not start"
                time.sleep(0.01)
            queued = pool.submit(lambda: doris.stream_load("d", "t", "2,queued\n", {"column_separator": ","}))
            replies = [f.result().json() for f in first]
            first_done = time.monotonic()
            last = queued.result().json()
            waited = time.monotonic() - first_done
        assert_group_reply(replies[0], mode="sync_mode", loaded=200_000)
        assert_group_reply(replies[1], mode="sync_mode", loaded=1)
        assert_group_reply(last, mode="sync_mode", loaded=1)
        assert waited < interval - 3, f"the queued load took {waited:.1f} s after the first group: it waited again"
        assert counters(doris)["groups"] == 2


def test_sync_clients_that_load_again_once_answered_rejoin_without_waiting_the_interval(
    spark: Any, tmp_path: Path
) -> None:
    interval = 4.0
    clients, rounds = 4, 3
    with group_server(spark, tmp_path, "sync_mode", group_commit_interval_ms=interval * 1000) as (doris, _):
        barrier = threading.Barrier(clients)

        def client(c: int) -> list[dict[str, Any]]:
            barrier.wait()
            out = []
            for r in range(rounds):  # the next load once the previous one is answered, as a sync client does
                body = f"{c * 10 + r},c{c}r{r}\n"
                out.append(dict(doris.stream_load("d", "t", body, {"column_separator": ","}).json()))
            return out

        started = time.monotonic()
        with ThreadPoolExecutor(clients) as pool:
            replies = [reply for chunk in pool.map(client, range(clients)) for reply in chunk]
        seconds = time.monotonic() - started
        for reply in replies:
            assert_group_reply(reply, mode="sync_mode", loaded=1)
        # the first round waits the interval for company; the next ones expect the clients of the group before
        # and close once they are back (a client slower than the grace, on a busy machine, makes a group of its
        # own, which does not wait the interval either)
        assert rounds <= counters(doris)["groups"] <= 2 * rounds
        assert seconds < 2 * interval, f"{rounds} rounds took {seconds:.1f} s: a later round waited the interval"
        assert doris.rows("d", "SELECT count(*) FROM t") == [[clients * rounds]]


def test_concurrent_async_acknowledgements_share_wal_fsyncs(spark: Any, tmp_path: Path) -> None:
    loads = 24
    with group_server(spark, tmp_path, "async_mode", group_commit_interval_ms=500) as (doris, _):
        replies = concurrent_loads(doris, [f"{i},a{i}\n" for i in range(loads)])
        for body in replies:
            assert_group_reply(body, mode="async_mode", loaded=1)
        seen = counters(doris)
        assert seen["wal_appends"] == loads, seen
        assert 0 < seen["wal_fsyncs"] <= loads, seen
        deadline = time.monotonic() + 60
        while doris.rows("d", "SELECT count(*) FROM t") != [[loads]]:
            assert time.monotonic() < deadline, doris.rows("d", "SELECT count(*) FROM t")
            time.sleep(0.1)
        while list((tmp_path / "wal").glob("txn_*")):  # a visible load's WAL entry goes
            assert time.monotonic() < deadline, list((tmp_path / "wal").iterdir())
            time.sleep(0.1)


def test_appends_made_while_an_fsync_runs_are_synced_together_and_recovered_after_a_crash(tmp_path: Path) -> None:
    from spark_runner.group_commit import WalLog

    wal = WalLog(tmp_path)
    threads = 16
    barrier = threading.Barrier(threads)

    def append(i: int) -> None:
        barrier.wait()
        wal.append(i, f'{{"load": {i}}}'.encode(), f"{i},payload\n".encode() * (i + 1))

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(append, range(threads)))
    assert wal.appends == threads
    assert wal.fsyncs <= threads // 2, f"{wal.fsyncs} fsyncs for {threads} concurrent appends"
    wal.release(3)

    segment = next(tmp_path.glob("log_*.wal"))
    with segment.open("ab") as torn:  # a crash in the middle of an append: that load was never acknowledged
        torn.write(WalLog.RECORD.pack(WalLog.MAGIC, 99, 10, 1000, 0) + b"partial")
    restored: dict[int, tuple[bytes, bytes]] = {}

    def write(txn_id: int, meta: bytes, payload: bytes) -> bool:
        restored[txn_id] = (meta, payload)
        return txn_id != 5  # committed before the crash: not owed

    again = WalLog(tmp_path)
    assert again.recover(write) == threads - 1
    assert sorted(restored) == list(range(threads))  # the released one is read too: its txn decides
    assert restored[7] == (b'{"load": 7}', b"7,payload\n" * 8)
    for txn_id in range(threads):
        again.release(txn_id)
    assert not list(tmp_path.glob("log_*.wal")), "a segment with no owed record is removed"


def test_a_group_past_one_loads_inline_band_is_still_one_inline_source(spark: Any, tmp_path: Path) -> None:
    # 30 loads of 10 lines: 300 lines, past the 256 lines a plain load hands to Spark inline; the group is still
    # one inline relation (no scan of 30 files), folded without a job (`MAX_FOLDED_ROWS`), and every load keeps
    # its own counts
    loads, lines = 30, 10
    with group_server(spark, tmp_path, "sync_mode", "UNIQUE", group_commit_interval_ms=3000) as (doris, _):
        bodies = ["".join(f"{i * lines + j},v{i}\n" for j in range(lines)) for i in range(loads)]
        replies = concurrent_loads(doris, bodies)
        for body in replies:
            assert body["Status"] == "Success", body
            assert body["NumberLoadedRows"] == lines and body["NumberTotalRows"] == lines, body
        seen = counters(doris)
        assert seen["groups"] == 1 and seen["loads"] == loads, seen
        assert seen["inline_groups"] == 1 and seen["spark_jobs"] == 0, seen
        assert doris.rows("d", "SELECT count(*) FROM t") == [[loads * lines]]


def test_sync_loads_waiting_for_their_group_hold_no_thread(spark: Any, tmp_path: Path) -> None:
    # more sync loads at once than the app's thread pool has threads (anyio's 40): a load waiting for its group
    # held one, so a group stopped at 40 and the other loads could not even be planned until it was done
    loads = 48
    with group_server(spark, tmp_path, "sync_mode", group_commit_interval_ms=4000) as (doris, _):
        replies = concurrent_loads(doris, [f"{i},v{i}\n" for i in range(loads)])
        for body in replies:
            assert_group_reply(body, mode="sync_mode", loaded=1)
        seen = counters(doris)
        assert seen["groups"] == 1 and seen["loads"] == loads, seen
        assert len(doris.rows("d", "SELECT k FROM t")) == loads


@contextmanager
def files_written_under(root: Path) -> Iterator[list[Path]]:
    """The files this process opens for writing or links under `root` while the block runs, from any thread
    (Python's audit events `open` and `os.link`: `open`, `os.open`, `Path.write_bytes`, `os.link`)."""
    written: list[Path] = []
    watching = [True]
    writing = os.O_WRONLY | os.O_RDWR

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if not watching[0] or event not in ("open", "os.link"):
            return
        path, flags = (args[1], writing) if event == "os.link" else (args[0], args[2])
        if isinstance(path, (str, os.PathLike)) and flags & writing and Path(path).is_relative_to(root):
            written.append(Path(path))

    sys.addaudithook(hook)  # an audit hook cannot be removed: it goes quiet when the block ends
    try:
        yield written
    finally:
        watching[0] = False


def test_small_grouped_bodies_stay_in_memory_and_make_no_file_of_their_own(spark: Any, tmp_path: Path) -> None:
    # a staged file per load (created, linked into wal/ and the group's directory, removed) cost the server more
    # than its request's own work at 100 loads/s here: ext4 without a journal searches the inodes it freed in the
    # last seconds on every create. A small grouped body is kept in memory; an async load's only write is its
    # record in the WAL's log, and its rows still become visible
    loads = 8
    with group_server(spark, tmp_path, "sync_mode", group_commit_interval_ms=300) as (doris, _):
        doris.sql("d", DDL.replace("TABLE t", "TABLE a").format(kind="DUPLICATE", mode="async_mode"))
        with files_written_under(tmp_path) as written:
            for body in concurrent_loads(doris, [f"{i},s{i}\n" for i in range(loads)]):
                assert_group_reply(body, mode="sync_mode", loaded=1)
            for body in concurrent_loads(doris, [f"{i},a{i}\n" for i in range(loads)], table="a", label="a"):
                assert_group_reply(body, mode="async_mode", loaded=1)
            deadline = time.monotonic() + 60
            while doris.rows("d", "SELECT count(*) FROM a") != [[loads]]:
                assert time.monotonic() < deadline, doris.rows("d", "SELECT count(*) FROM a")
                time.sleep(0.1)
        per_load = [
            p
            for p in written
            if p.is_relative_to(tmp_path / "staging")
            or p.is_relative_to(tmp_path / "group_commit")
            or (p.is_relative_to(tmp_path / "wal") and not p.name.startswith("log_"))
        ]
        assert not per_load, per_load
        assert any(p.parent == tmp_path / "wal" for p in written), "the async loads' records were not logged"
        assert doris.rows("d", "SELECT k, v FROM t ORDER BY k") == [[i, f"s{i}"] for i in range(loads)]
        assert doris.rows("d", "SELECT k, v FROM a ORDER BY k") == [[i, f"a{i}"] for i in range(loads)]

        # a group Spark must scan (quoted fields: only its CSV parser splits them) gets files written from memory
        quoted = concurrent_loads(doris, [f'{i},"q,{i}"\n' for i in range(10, 14)], label="q", enclose='"')
        for body in quoted:
            assert_group_reply(body, mode="sync_mode", loaded=1)
        assert doris.rows("d", "SELECT k, v FROM t WHERE k >= 10 ORDER BY k") == [[i, f"q,{i}"] for i in range(10, 14)]
        assert not list((tmp_path / "group_commit").glob("group_*")), "a group's directory outlived its commit"
