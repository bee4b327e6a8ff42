"""A small load's merge-on-write lookup, read in the server's process (`spark_runner.queries._keyed_parts`).

The stored rows of the load's keys are read with pyarrow: the row groups whose key statistics may hold them, a
file of one bucket by its own bucket's keys, rows superseded since skipped unless they are tombstones. What a user
sees: partial-column loads into a table whose rows are spread over several files of several row groups each update
exactly their keys (the position deletes name the right rows), a deleted key keeps its sequence, and pyiceberg's
scan agrees with `SELECT`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq
import pytest

from tables.row_delta import live_delete_files
from tests.helpers import DorisClient, assert_doris_result, table_handle

DDL = (
    "CREATE TABLE t (k {key}, v VARCHAR(20), s INT, w INT DEFAULT '0') UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2"
    ' PROPERTIES ("function_column.sequence_col" = "s")'
)
JSON = {"format": "json", "read_json_by_line": "true"}  # not an inline source: Spark writes the rowset
PARTIAL = {"column_separator": ",", "partial_columns": "true"}


@pytest.fixture
def small_row_groups(spark: Any) -> Iterator[None]:
    """Spark writes row groups of ~100 rows while the fixture is active (Parquet's `parquet.block.size`)."""
    spark.conf.set("parquet.block.size", "1024")
    try:
        yield
    finally:
        spark.conf.unset("parquet.block.size")


def as_json(rows: list[tuple[Any, str, int, int]]) -> str:
    return "".join(f'{{"k": "{k}", "v": "{v}", "s": {s}, "w": {w}}}\n' for k, v, s, w in rows)


@pytest.mark.parametrize("key", ["INT", "VARCHAR(8)"])
def test_partial_loads_update_their_keys_in_files_of_many_row_groups(
    doris: DorisClient,
    db: str,
    server_settings: Any,
    small_row_groups: None,
    caplog: pytest.LogCaptureFixture,
    key: str,
) -> None:
    doris.sql(db, DDL.format(key=key))
    # string keys zero-padded, so that they sort as the numbers do
    name: Any = int if key == "INT" else (lambda k: f"{k:05d}")
    model = {name(k): (f"v{k}", 1, k) for k in range(3000)}
    assert_doris_result(doris.stream_load(db, "t", as_json([(k, *r) for k, r in model.items()]), JSON).json())
    deleted = [name(k) for k in range(1000, 2000)]  # tombstones with sequence 10, in files of their own
    body = as_json([(k, "gone", 10, 0) for k in deleted])
    assert_doris_result(doris.stream_load(db, "t", body, {**JSON, "merge_type": "DELETE"}).json())
    for k in deleted:
        del model[k]
    handle = table_handle(server_settings, db, "t")
    groups = [pq.read_metadata(path).num_row_groups for path in handle.data_files()]
    assert len(groups) >= 4 and min(groups) > 1, groups  # the layout this test is about

    with caplog.at_level(logging.DEBUG, logger="spark_runner.queries"):
        # unlisted columns keep their stored values (the sequence too), in the first and last row groups
        body = "".join(f"{name(k)},p{k}\n" for k in (0, 5, 2500, 2998, 2999))
        assert_doris_result(doris.stream_load(db, "t", body, {**PARTIAL, "columns": "k,v"}).json(), loaded=5)
        for k in (0, 5, 2500, 2998, 2999):
            model[name(k)] = (f"p{k}", *model[name(k)][1:])
        # with the sequence listed: 1500 stays deleted (its tombstone's sequence is 10), 1600 comes back with
        # defaults, 6 loses (sequence 0 < 1), 2500 wins its tie, 7000 is new
        rows = [(1500, "low", 5), (1600, "high", 11), (6, "older", 0), (2500, "again", 1), (7000, "new", 3)]
        body = "".join(f"{name(k)},{v},{s}\n" for k, v, s in rows)
        assert_doris_result(doris.stream_load(db, "t", body, {**PARTIAL, "columns": "k,v,s"}).json(), loaded=5)
        model[name(1600)] = ("high", 11, 0)
        model[name(2500)] = ("again", 1, 2500)
        model[name(7000)] = ("new", 3, 0)
    reads = [r.getMessage() for r in caplog.records if "read in this process" in r.getMessage()]
    assert len(reads) == 2 and all(" 0 rows of " not in m for m in reads), reads

    expected = sorted([k, *r] for k, r in model.items())
    assert doris.rows(db, "SELECT count(*), sum(s), sum(w) FROM t") == [
        [len(expected), sum(r[2] for r in expected), sum(r[3] for r in expected)]
    ]
    touched = [name(k) for k in (0, 5, 6, 1500, 1600, 2500, 2998, 2999, 7000)]
    listed = ", ".join(repr(k) for k in touched)
    assert doris.rows(db, f"SELECT k, v, s, w FROM t WHERE k IN ({listed}) ORDER BY k") == [
        r for r in expected if r[0] in touched
    ]
    scanned = table_handle(server_settings, db, "t").iceberg.scan().to_arrow().to_pylist()
    assert sorted([r["k"], r["v"], r["s"], r["w"]] for r in scanned) == expected


def test_small_loads_decided_in_their_job_or_paired_by_key_match_those_decided_at_commit(
    doris: DorisClient, db: str, monkeypatch: pytest.MonkeyPatch, spark: Any, server_settings: Any
) -> None:
    """A small load into a large merge-on-write table is decided against the stored rows of its keys: a partial
    update (or a load of more rows than `KEYED_RECHECK_ROWS`) in its job (joined in one partition:
    `mow.LOCAL_JOIN`), a few rows in the server's process once its job has computed them, paired with the stored
    rows of their keys alone (`mow.pair_rows`); into a small one, at its commit. The same loads give the same rows every
    way: sequence wins and losses, ties, keys repeated in a load, new keys, deletes (the `delete` condition and
    the sign column), a key loaded again after its delete, and a partial update. Each load (a partial update too)
    runs one Spark job: its keys come from its in-memory rows without one, and its rows meet the stored winners
    in one partition (a job for the keys, a broadcast join and AQE's stages made 5). Decided at the commit by a
    Spark join (as a large load is, `mow.supersede_by_number`), the answers are the same, and each delete file
    names one data file, its positions in order."""
    from spark_runner import mow, service

    keyed: list[int] = []  # per pairing: the stored rows it position-deletes
    real = service.pair_rows

    def spy(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        keyed.append(-1 if found is None else found[1].num_rows)
        return found

    monkeypatch.setattr(service, "pair_rows", spy)
    numbered: list[int] = []  # per re-check by a Spark join: the delete files it wrote
    real_numbered = mow.supersede_by_number

    def numbered_spy(*args: Any, **kwargs: Any) -> Any:
        written = real_numbered(*args, **kwargs)
        numbered.append(-1 if written is None else len(written))
        return written

    monkeypatch.setattr(mow, "supersede_by_number", numbered_spy)
    loads = [
        ("1,10,a\n2,10,b\n3,10,c\n", {}),
        ("1,5,lost\n", {}),  # lower sequence: the stored row stays
        ("2,10,tie\n", {}),  # equal sequence: the later load wins
        ("3,20,x\n3,30,y\n3,25,z\n", {}),  # one key thrice in a load: the highest sequence
        ("4,1,new\n1,50,won\n", {}),
        ("2,99,gone\n", {"merge_type": "MERGE", "delete": "v = 'gone'"}),
        ("2,5,back\n", {}),  # below the delete's sequence: still deleted
        ("2,100,back\n", {}),
        ("5,7,e\n", {"merge_type": "DELETE"}),  # deleting a key the table lacks: its tombstone keeps sequence 7
        ("5,6,f\n", {}),  # below it: still deleted
        ("6,1,g\n", {"merge_type": "DELETE"}),
        ("6,2,h\n", {}),
        ("1000,1,far\n", {}),  # a key past every file's bounds: no stored row to read, nothing to join
        ("3,upd\n7,fresh\n", {"partial_columns": "true", "columns": "k,v"}),  # keeps 3's sequence; 7 is new
    ]
    answers = {}
    ways = {
        "in_job": (0, 0, 10**9),
        "paired_by_key": (0, 1000, 0),
        "at_commit": (10**9, 1000, 10**9),
        "joined_at_commit": (10**9, 1000, 0),
    }
    for table, (recheck_rows, keyed_rows, in_process_rows) in ways.items():
        monkeypatch.setattr(service, "DRIVER_RECHECK_ROWS", recheck_rows)
        monkeypatch.setattr(service, "KEYED_RECHECK_ROWS", keyed_rows)
        monkeypatch.setattr(mow, "DRIVER_RECHECK_ROWS", in_process_rows)
        monkeypatch.setattr(mow, "KEYED_RECHECK_ROWS", 0 if table == "joined_at_commit" else keyed_rows)
        doris.sql(
            db,
            f"CREATE TABLE {table} (k INT NOT NULL, s INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) "
            'BUCKETS 2 PROPERTIES ("function_column.sequence_col" = "s")',
        )
        seen = []
        jobs = []
        for body, headers in loads:
            reply = doris.stream_load(db, table, body, headers={"column_separator": ",", **headers}).json()
            assert reply["Status"] == "Success", reply
            jobs.append(len(spark.sparkContext.statusTracker().getJobIdsForGroup(f"load_txn_{reply['TxnId']}")))
            seen.append(doris.rows(db, f"SELECT k, s, v FROM {table} ORDER BY k"))
        answers[table] = seen
        if table != "at_commit":
            assert max(jobs[1:]) <= 1, str(jobs)  # the first load found the table empty: nothing to look up
        if table == "paired_by_key":  # the full-row loads after the first, each paired in this process
            assert len(keyed) == len(loads) - 2 and min(keyed) >= 0 and sum(keyed) > 0, keyed
    # the full-row loads after the first were re-checked by the join (none fell back), most superseding a row
    assert len(numbered) == len(loads) - 2 and min(numbered) >= 0 and sum(numbered) >= len(loads) // 2, numbered
    handle = table_handle(server_settings, db, "joined_at_commit")
    for delete_file in live_delete_files(handle.iceberg):
        rows = pq.read_table(delete_file.file_path.removeprefix("file:")).to_pydict()
        assert len(set(rows["file_path"])) == 1 and rows["pos"] == sorted(rows["pos"]), rows
    assert answers["in_job"] == answers["at_commit"] == answers["paired_by_key"] == answers["joined_at_commit"]
    final = [[1, 50, "won"], [2, 100, "back"], [3, 30, "upd"], [4, 1, "new"], [6, 2, "h"], [7, None, "fresh"]]
    final.append([1000, 1, "far"])
    assert answers["in_job"][-1] == final


def test_a_full_row_upsert_decodes_only_the_decision_columns_of_the_stored_rows(
    doris: DorisClient, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-row load into a large merge-on-write table reads the row group of its key in the server's process.
    A full-row upsert decides by key, sequence, version and sign, so only those columns are decoded (a row group
    decoded whole took ~50 ms for 500k rows); a partial update also decodes the values it keeps."""
    from spark_runner import mow, service

    monkeypatch.setattr(service, "DRIVER_RECHECK_ROWS", 0)  # paired by key, as into a large table
    monkeypatch.setattr(mow, "DRIVER_RECHECK_ROWS", 0)
    doris.sql(db, DDL.format(key="INT"))
    assert_doris_result(doris.stream_load(db, "t", as_json([(k, f"v{k}", 1, k) for k in range(3000)]), JSON).json())
    reads: list[list[str] | None] = []
    iter_batches = pq.ParquetFile.iter_batches

    def recording(self: pq.ParquetFile, *args: Any, columns: list[str] | None = None, **kwargs: Any) -> Any:
        reads.append(columns)
        return iter_batches(self, *args, columns=columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", recording)
    assert_doris_result(doris.stream_load(db, "t", "5,new,2,7\n6,old,0,8\n", {"column_separator": ","}).json())
    assert reads and all(columns is not None and not {"v", "w"} & set(columns) for columns in reads), reads
    assert doris.rows(db, "SELECT k, v, s, w FROM t WHERE k IN (5, 6) ORDER BY k") == [
        [5, "new", 2, 7],
        [6, "v6", 1, 6],
    ]

    reads.clear()  # a partial update fills `w` from the stored row: it decodes the values too
    assert_doris_result(doris.stream_load(db, "t", "7,newer,3\n", {**PARTIAL, "columns": "k,v,s"}).json())
    assert any(columns is None or "w" in columns for columns in reads), reads
    assert doris.rows(db, "SELECT k, v, s, w FROM t WHERE k = 7") == [[7, "newer", 3, 7]]


def test_a_row_group_larger_than_the_decode_bound_is_read_a_batch_at_a_time(
    doris: DorisClient, db: str, server_settings: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A table of one bucket that a bulk load wrote holds one file of one row group of all its rows (millions, in
    a large table). A small load still reads the stored rows of its keys in the server's process,
    decoding `KEYED_GROUP_ROWS` rows at a time (the bound of its memory), instead of a Spark scan of the whole
    file (~1 s for 2M rows): sequence wins and losses, a tombstone's sequence and a partial update come out right."""
    from spark_runner import mow, queries, service

    monkeypatch.setattr(service, "DRIVER_RECHECK_ROWS", 0)  # decided by key, as into a large table
    monkeypatch.setattr(mow, "DRIVER_RECHECK_ROWS", 0)
    monkeypatch.setattr(queries, "KEYED_GROUP_ROWS", 256)  # the row group below holds 3,000 rows
    doris.sql(db, DDL.format(key="INT").replace("BUCKETS 2", "BUCKETS 1"))
    assert_doris_result(doris.stream_load(db, "t", as_json([(k, f"v{k}", 5, k) for k in range(3000)]), JSON).json())
    files = table_handle(server_settings, db, "t").data_files()
    assert [pq.read_metadata(path).num_row_groups for path in files] == [1]  # the layout this test is about
    batches: list[int] = []
    iter_batches = pq.ParquetFile.iter_batches

    def recording(self: pq.ParquetFile, *args: Any, **kwargs: Any) -> Any:
        for batch in iter_batches(self, *args, **kwargs):
            batches.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", recording)
    csv = {"column_separator": ","}
    with caplog.at_level(logging.DEBUG, logger="spark_runner.queries"):
        assert_doris_result(doris.stream_load(db, "t", "7,new,6,1\n2900,old,4,1\n", csv).json(), loaded=2)
        assert_doris_result(doris.stream_load(db, "t", "1500,x,9,0\n", {**csv, "merge_type": "DELETE"}).json())
        assert_doris_result(doris.stream_load(db, "t", "1500,back,8,0\n", csv).json())  # below the tombstone
        assert_doris_result(doris.stream_load(db, "t", "2999,p,6\n", {**PARTIAL, "columns": "k,v,s"}).json())
    reads = [r.getMessage() for r in caplog.records if "read in this process" in r.getMessage()]
    # full-row loads are paired with the rows of their keys as stored (the third with 1500's row in the big file
    # and its tombstone); the partial update reads the live rows of its key in its job
    assert len(reads) == 4 and not any(" 0 rows of " in m for m in reads), reads
    assert batches and max(batches) <= 256, batches
    assert doris.rows(db, "SELECT k, v, s, w FROM t WHERE k IN (7, 1500, 2900, 2999) ORDER BY k") == [
        [7, "new", 6, 1],
        [2900, "v2900", 5, 2900],
        [2999, "p", 6, 2999],
    ]
    assert doris.rows(db, "SELECT count(*) FROM t") == [[2999]]


def test_a_bulk_load_writes_row_groups_a_lookup_decodes_one_of(
    doris: DorisClient, db: str, server_settings: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Spark writes row groups of at most 131,072 rows (`parquet.block.row.count.limit`), not Parquet's 128 MB: a
    one-row load into a table of one bucket decodes the key column of the one row group that may hold its key."""
    from spark_runner import service

    monkeypatch.setattr(service, "DRIVER_RECHECK_ROWS", 0)  # decided by key, as into a large table
    doris.sql(db, DDL.format(key="INT").replace("BUCKETS 2", "BUCKETS 1"))
    rows = 300_000
    body = "".join(f"{k},v,1,{k}\n" for k in range(rows))
    assert_doris_result(doris.stream_load(db, "t", body, {"column_separator": ","}).json(), loaded=rows)
    (path,) = table_handle(server_settings, db, "t").data_files()
    meta = pq.read_metadata(path)
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [131_072, 131_072, 37_856]
    with caplog.at_level(logging.DEBUG, logger="spark_runner.queries"):
        assert_doris_result(doris.stream_load(db, "t", "200000,new,2,7\n", {"column_separator": ","}).json())
    reads = [r.getMessage() for r in caplog.records if "read in this process" in r.getMessage()]
    assert reads == ["1 values of k: 1 rows of 1 files read in this process (1 row groups, 131072 keys decoded)"]
    assert doris.rows(db, "SELECT k, v, s, w FROM t WHERE k IN (199999, 200000) ORDER BY k") == [
        [199999, "v", 1, 199999],
        [200000, "new", 2, 7],
    ]


def test_a_partial_load_decided_in_its_job_writes_a_delete_file_per_data_file(
    doris: DorisClient, db: str, server_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partial update Spark reads (JSON) is decided in its job against the stored rows; the positions it
    supersedes are written by Spark in the job's partitions, one delete file per data file, in position order,
    so the commit files each in its data file's partition without rewriting it (`row_delta.only_target`)."""
    from spark_runner import load_job, service

    monkeypatch.setattr(service, "DRIVER_RECHECK_ROWS", 0)  # decided in the job, as into a large table
    written: list[int] = []
    real = load_job.write_deletes

    def spy(*args: Any, **kwargs: Any) -> Any:
        files = real(*args, **kwargs)
        written.append(len(files))
        return files

    monkeypatch.setattr(load_job, "write_deletes", spy)
    doris.sql(db, DDL.format(key="INT"))
    assert_doris_result(doris.stream_load(db, "t", as_json([(k, f"v{k}", 1, k) for k in range(400)]), JSON).json())
    data_files = table_handle(server_settings, db, "t").data_files()
    assert len(data_files) == 2  # one per bucket
    body = "".join(f'{{"k": {k}, "v": "p{k}"}}\n' for k in range(0, 400, 3))
    headers = {**JSON, "partial_columns": "true", "columns": "k,v"}
    assert_doris_result(doris.stream_load(db, "t", body, headers).json(), loaded=134)
    assert written and written[-1] == 2, written  # the updated keys' rows are in both buckets' files
    handle = table_handle(server_settings, db, "t")
    for delete_file in live_delete_files(handle.iceberg):
        rows = pq.read_table(delete_file.file_path.removeprefix("file:")).to_pydict()
        assert set(rows["file_path"]) <= set(data_files) and len(set(rows["file_path"])) == 1, rows["file_path"][:3]
        assert rows["pos"] == sorted(rows["pos"])
    expected = [[k, f"p{k}" if k % 3 == 0 else f"v{k}", 1, k] for k in range(400)]
    assert doris.rows(db, "SELECT k, v, s, w FROM t ORDER BY k") == expected


def test_a_partial_update_decided_in_its_job_shuffles_the_stored_rows_once_on_a_not_null_key(
    doris: DorisClient, db: str, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partial update Spark reads (JSON) meets the stored rows in its job: their semi-join with its keys, their
    merge per key and their join with its rows. On a NOT NULL key the joins compare with `=`, and the stored rows'
    partitioning by key serves all three (`mow.keys_match`); on `<=>` Spark partitions by expressions of the key
    and shuffles them again before the merge and the join. A nullable key keeps `<=>`: a NULL key is a key, its
    stored row filled and superseded."""
    from spark_runner import service

    monkeypatch.setattr(service, "DRIVER_RECHECK_ROWS", 0)  # decided in the job, as into a large table
    store = spark._jsparkSession.sharedState().statusStore()

    def plans_after(last: int) -> list[str]:
        """The physical plans of the SQL executions after execution `last` (the store keeps the latest ones,
        in execution order)."""
        runs = store.executionsList()
        plans = []
        for i in range(runs.size() - 1, -1, -1):
            if runs.apply(i).executionId() <= last:
                break
            plans.append(runs.apply(i).physicalPlanDescription())
        return plans

    shuffles: dict[str, int] = {}
    thresholds = ("spark.sql.autoBroadcastJoinThreshold", "spark.sql.adaptive.autoBroadcastJoinThreshold")
    try:
        for name in thresholds:
            spark.conf.set(name, "-1")  # as for large tables: no side is broadcast
        for table, key in (("strict", "INT NOT NULL"), ("nullable", "INT NULL")):
            doris.sql(db, DDL.format(key=key).replace("CREATE TABLE t ", f"CREATE TABLE {table} "))
            body = as_json([(k, f"v{k}", 1, k) for k in range(300)]) + '{"k": null, "v": "vnull", "s": 1, "w": 7}\n'
            reply = doris.stream_load(db, table, body, {**JSON, "max_filter_ratio": "0.5"}).json()
            assert_doris_result(reply, loaded=300 if key.endswith("NOT NULL") else 301)
            update = "".join(f'{{"k": {k}, "v": "p{k}"}}\n' for k in range(0, 300, 3)) + '{"k": null, "v": "pnull"}\n'
            headers = {**JSON, "partial_columns": "true", "columns": "k,v", "max_filter_ratio": "0.5"}
            runs = store.executionsList()
            last = runs.apply(runs.size() - 1).executionId() if runs.size() else -1
            reply = doris.stream_load(db, table, update, headers).json()
            assert_doris_result(reply, loaded=100 if key.endswith("NOT NULL") else 101)
            spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()  # the store hears of executions through it
            plans = plans_after(last)
            shuffles[table] = max(plan.split("\n\n")[0].count("Exchange") for plan in plans)
            expected = [[k, f"p{k}" if k % 3 == 0 else f"v{k}", 1, k] for k in range(300)]
            if table == "nullable":
                expected.insert(0, [None, "pnull", 1, 7])
            assert doris.rows(db, f"SELECT k, v, s, w FROM {table} ORDER BY k") == expected
    finally:
        for name in thresholds:
            spark.conf.unset(name)
    assert shuffles["strict"] < shuffles["nullable"], shuffles
