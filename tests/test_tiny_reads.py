"""Reads of a merge-on-write table made of many small loads.

Tiny data files are read in the server's process, their position deletes applied there, and the relation is
kept for the next query of the same files (`spark_runner.queries.scan_files`). What a user sees: each query,
asked twice in a row, answers the table as it is now, after a load, a DELETE, a compaction, a schema change or
a two-phase commit, or with a new Spark JVM; deleted keys keep their sequence and `show_hidden_columns` still
shows them; pyiceberg's scan of the table agrees. Each table mixes files Spark reads (over 1,000 rows) with
tiny ones.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.helpers import DorisClient, assert_doris_result, table_handle
from tests.server_process import ServerProcess

DDL = (
    "CREATE TABLE t (k INT, v VARCHAR(20), s INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"
    ' PROPERTIES ("function_column.sequence_col" = "s")'
)
CSV = {"column_separator": ",", "columns": "k,v,s"}


@dataclass
class Model:
    """Doris's answer, kept in Python: per key its value, sequence and whether its last winner was a delete
    (a higher or equal sequence wins, a tie going to the later load)."""

    rows: dict[int, tuple[str, int, bool]] = field(default_factory=dict)

    def load(self, rows: list[tuple[int, str, int]], *, delete: bool = False) -> str:
        for k, v, s in rows:
            old = self.rows.get(k)
            if old is None or s >= old[1]:
                self.rows[k] = (v, s, delete)
        return "".join(f"{k},{v},{s}\n" for k, v, s in rows)

    def live(self, touched: Any = lambda k: True) -> list[list[Any]]:
        return sorted([k, v, s] for k, (v, s, gone) in self.rows.items() if not gone and touched(k))


def load(doris: DorisClient, db: str, body: str, headers: dict[str, str] | None = None) -> None:
    assert_doris_result(doris.stream_load(db, "t", body, {**CSV, **(headers or {})}).json())


def check(
    doris: DorisClient, db: str, model: Model, server_settings: Any, *, touched_below: int, scan: bool = True
) -> None:
    """The table answers as the model, asked twice (the second answer comes from the kept relation), and
    pyiceberg's scan holds the same rows."""
    live = model.live()
    totals = [[len(live), sum(r[0] for r in live), sum(r[2] for r in live)]]
    touched = model.live(lambda k: k < touched_below)
    for _ in range(2):
        assert doris.rows(db, "SELECT count(*), sum(k), sum(s) FROM t") == totals
        assert doris.rows(db, f"SELECT k, v, s FROM t WHERE k < {touched_below} ORDER BY k") == touched
    if scan:
        rows = table_handle(server_settings, db, "t").iceberg.scan().to_arrow().to_pylist()
        assert sorted([r["k"], r["v"], r["s"]] for r in rows) == live


def test_repeated_queries_of_small_loads_answer_each_change(doris: DorisClient, db: str, server_settings: Any) -> None:
    doris.sql(db, DDL)
    model = Model()
    below = 20  # the keys the small loads touch; the rows of a large first load cover 20..1199 too
    load(doris, db, model.load([(k, f"v{k}", 1) for k in range(1200)]))  # one file Spark reads
    check(doris, db, model, server_settings, touched_below=below)

    for i in range(12):  # each supersedes rows of the large file and of earlier small ones
        load(doris, db, model.load([(i, f"t{i}", 2 + i), (i + 5, f"t{i}", 2 + i), (1200 + i % 4, f"t{i}", 2 + i)]))
        if i % 4 == 3:
            check(doris, db, model, server_settings, touched_below=below, scan=i == 11)

    doris.sql(db, "DELETE FROM t WHERE k = 3")
    model.rows[3] = (*model.rows[3][:2], True)
    check(doris, db, model, server_settings, touched_below=below)
    load(doris, db, model.load([(1201, "x", 100)], delete=True), {"merge_type": "DELETE"})
    check(doris, db, model, server_settings, touched_below=below)
    load(doris, db, model.load([(1201, "low", 50), (2, "two", 50)]))  # 1201 stays deleted: its sequence is 100
    assert model.rows[1201][2]
    check(doris, db, model, server_settings, touched_below=below)
    hidden = doris.rows(db, "SET show_hidden_columns = true; SELECT k, __DORIS_DELETE_SIGN__ FROM t WHERE k = 1201")
    assert hidden == [[1201, 1]]
    # one statement reading the table twice reads one kept relation twice
    pairs = doris.rows(db, "SELECT count(*), sum(a.s + b.s) FROM t a JOIN t b ON a.k = b.k + 1 WHERE a.k < 30")
    live = dict((k, s) for k, _, s in model.live())
    joined = [live[k] + live[k - 1] for k in live if k < 30 and k - 1 in live]
    assert pairs == [[len(joined), sum(joined)]]
    assert doris.rows(db, "SELECT count(*) FROM (SELECT k FROM t UNION ALL SELECT k FROM t) u") == [[2 * len(live)]]

    doris.sql(db, "ADMIN COMPACT TABLE t WHERE TYPE = 'CUMULATIVE'")
    check(doris, db, model, server_settings, touched_below=below)
    load(doris, db, model.load([(4, "after-compaction", 60), (1201, "back", 101)]))
    check(doris, db, model, server_settings, touched_below=below)

    doris.sql(db, 'ALTER TABLE t ADD COLUMN w INT DEFAULT "7"')
    for _ in range(2):
        assert doris.rows(db, "SELECT k, w FROM t WHERE k IN (4, 1000) ORDER BY k") == [[4, 7], [1000, 7]]

    txn_id = doris.precommit(db, "t", b"1202,twophase,200\n", {**CSV, "label": f"tiny2pc_{db}"})
    check(doris, db, model, server_settings, touched_below=below)  # not visible before its commit
    doris.commit_txn(db, txn_id)
    model.load([(1202, "twophase", 200)])
    check(doris, db, model, server_settings, touched_below=below)
    versions = doris.rows(db, "SET show_hidden_columns = true; SELECT __DORIS_VERSION_COL__ FROM t WHERE k = 1202")
    assert versions[0][0] > 0, versions  # the commit's version, stamped into the file in place

    doris.sql(db, "ADMIN COMPACT TABLE t WHERE TYPE = 'BASE'")
    check(doris, db, model, server_settings, touched_below=below)


def test_small_loads_over_many_deleted_rows_answer_each_change(
    doris: DorisClient, db: str, server_settings: Any
) -> None:
    """Over 20,000 deleted positions are joined by Spark, not read in the server's process: tiny files' rows
    then carry their positions to the join."""
    doris.sql(db, DDL)
    model = Model()
    load(doris, db, model.load([(k, "a", 1) for k in range(21000)]))
    load(doris, db, model.load([(k, "b", 2) for k in range(21000)]))  # 21,000 positions deleted
    check(doris, db, model, server_settings, touched_below=10)
    for i in range(4):
        load(doris, db, model.load([(i, f"t{i}", 3 + i), (i + 2, f"t{i}", 3 + i)]))
        check(doris, db, model, server_settings, touched_below=10)
    load(doris, db, model.load([(5, "x", 10)], delete=True), {"merge_type": "DELETE"})
    load(doris, db, model.load([(5, "low", 5), (6, "six", 5)]))  # 5 stays deleted: its sequence is 10
    check(doris, db, model, server_settings, touched_below=10)
    hidden = doris.rows(db, "SET show_hidden_columns = true; SELECT k, __DORIS_DELETE_SIGN__ FROM t WHERE k = 5")
    assert hidden == [[5, 1]]


def jvm_pids(server: ServerProcess) -> list[int]:
    return [pid for pid in server.children() if b"java" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def backend_alive(server: ServerProcess) -> bool:
    return bool(httpx.get(f"{server.base_url}/api/health", timeout=10).json()["data"]["online_backend_num"])


def test_a_table_of_small_loads_answers_after_its_jvm_was_replaced(tmp_path: Path) -> None:
    """The relation kept for a query lives in the JVM: a new JVM (`spark_runner.supervisor`) reads the files
    again."""
    server = ServerProcess(tmp_path / "data", tmp_path / "server.log")
    server.start(SL_COMPACTION_INTERVAL_SECONDS="0")
    try:
        server.sql("x", "CREATE DATABASE tiny")
        server.sql("tiny", DDL)
        model = Model()
        for i in range(3):
            reply = server.load("tiny", "t", model.load([(i, f"t{i}", i), (i + 1, f"t{i}", i)]).encode(), **CSV)
            assert_doris_result(reply)
        expected = [[k, v, s] for k, v, s in model.live()]
        for _ in range(2):
            assert server.sql("tiny", "SELECT k, v, s FROM t ORDER BY k")["data"] == expected

        old = jvm_pids(server)
        assert len(old) == 1, old
        os.kill(old[0], signal.SIGKILL)
        deadline = time.monotonic() + 180
        # one scan per round: a JVM being torn down after SIGKILL shows no command line before it can be reaped,
        # so a second scan could see none while the server has not yet seen it die (its health still online)
        while not ((pids := jvm_pids(server)) and pids != old and backend_alive(server)):
            assert time.monotonic() < deadline, "the server never started a new Spark session"
            time.sleep(0.2)
        assert server.sql("tiny", "SELECT k, v, s FROM t ORDER BY k")["data"] == expected
    finally:
        server.kill()
