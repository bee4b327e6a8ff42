"""A tiny load's rowset file, written from the Spark job's rows, is the file Spark itself would write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from spark_runner import load_job, service, small_rowset
from tables.catalog import Catalog
from tests.helpers import AUTH, DorisClient, assert_doris_result

COLUMNS = (
    "k INT NOT NULL, a TINYINT, b SMALLINT, c BIGINT, l LARGEINT, f FLOAT, g DOUBLE, d1 DECIMAL(5,2), "
    "d2 DECIMAL(15,3), d3 DECIMAL(20,3), dt DATE, ts DATETIME, ch CHAR(3), vc VARCHAR(10), s STRING, bo BOOLEAN"
)
BODY = (
    "2,1,2,3,12345678901234567890,1.5,2.25,123.45,123456789012.125,12345678901234567.125,2024-02-29,"
    "2024-02-29 12:34:56,ab,hello,world,true\n"
    "1,\\N,\\N,\\N,\\N,\\N,\\N,\\N,\\N,\\N,\\N,\\N,\\N,\\N,\\N,\\N\n"
    "3,x,1,1,1,1,1,1,1,1,1,1,1,1,1,1\n"
)


def location(server_settings: Any, db: str, table: str) -> Path:
    """The table's directory (the server chooses it): asked of the catalog."""
    catalog = Catalog(uri=server_settings.resolved_catalog_uri, warehouse=server_settings.resolved_warehouse)
    return catalog.load(db, table).location


def rowset(server_settings: Any, db: str, table: str) -> pq.ParquetFile:
    files = list(location(server_settings, db, table).glob("data/*/*.parquet"))
    assert len(files) == 1
    return pq.ParquetFile(files[0])


def layout(file: pq.ParquetFile) -> list[str]:
    """Physical types, logical types, repetition and field id of every column (the root's name aside)."""
    return str(file.schema).splitlines()[2:]


def test_small_rowset_matches_sparks_file(
    doris: DorisClient, db: str, server_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: dict[Path, list[str]] = {}
    real = small_rowset.write_collected

    def spy(out: Any, directory: Any, **options: Any) -> Any:
        files, positions = real(out, directory, **options)
        written[directory.parent.parent] = files
        return files, positions

    monkeypatch.setattr(small_rowset, "write_collected", spy)
    is_small = small_rowset.is_small
    for table, direct in (("by_spark", False), ("direct", True)):
        monkeypatch.setattr(small_rowset, "is_small", is_small if direct else lambda source: False)
        # one bucket: Spark's writer splits a rowset of several buckets into a file per bucket
        doris.sql(db, f"CREATE TABLE {table} ({COLUMNS}) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
        reply = doris.stream_load(
            db, table, BODY, headers={"column_separator": ",", "label": table, "max_filter_ratio": "1"}
        )
        assert_doris_result(reply, total=3, loaded=3)
    assert list(written) == [location(server_settings, db, "direct")]  # only the small path wrote its own file
    spark_file, direct_file = rowset(server_settings, db, "by_spark"), rowset(server_settings, db, "direct")
    assert layout(direct_file) == layout(spark_file)
    assert direct_file.read().column("k").to_pylist() == [1, 2, 3]  # sorted by key
    assert spark_file.read().equals(direct_file.read().cast(spark_file.schema_arrow))
    assert doris.rows(db, "select * from direct order by k") == doris.rows(db, "select * from by_spark order by k")
    doris.sql(db, "INSERT INTO direct (k, vc) VALUES (5, 'v')")
    assert doris.rows(db, "select k, vc from direct where k = 5") == [[5, "v"]]


@pytest.mark.parametrize("keyed_rows", [1000, 0], ids=["paired", "in_job"])
def test_a_small_load_whose_rows_all_lose_writes_no_empty_file(
    doris: DorisClient, db: str, server_settings: Any, monkeypatch: pytest.MonkeyPatch, keyed_rows: int
) -> None:
    """A one-row load beaten by the stored row's sequence value loads its row (Doris counts it loaded) but leaves
    nothing to write: no empty rowset file joins the table (pyiceberg warned for each of its columns, and every
    such file was one more for reads and compaction to open)."""
    # decided before the write, as into a table of more than DRIVER_RECHECK_ROWS rows (not the commit's re-check):
    # paired by key in the server's process (`mow.pair_rows`), or looked up in the load's job
    monkeypatch.setattr(service, "DRIVER_RECHECK_ROWS", 0)
    monkeypatch.setattr(service, "KEYED_RECHECK_ROWS", keyed_rows)
    doris.sql(
        db,
        "CREATE TABLE lose (k INT NOT NULL, seq INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
        'PROPERTIES ("function_column.sequence_col" = "seq")',
    )
    headers = {"column_separator": ","}
    assert_doris_result(doris.stream_load(db, "lose", "1,100,kept\n2,100,old\n", headers=headers), loaded=2)
    files = sorted(location(server_settings, db, "lose").glob("data/*/*.parquet"))
    assert_doris_result(doris.stream_load(db, "lose", "1,5,lost\n", headers=headers), total=1, loaded=1)
    assert sorted(location(server_settings, db, "lose").glob("data/*/*.parquet")) == files
    assert_doris_result(doris.stream_load(db, "lose", "2,500,new\n", headers=headers), total=1, loaded=1)
    assert all(
        pq.ParquetFile(f).metadata.num_rows for f in location(server_settings, db, "lose").glob("data/*/*.parquet")
    )
    assert doris.rows(db, "select k, seq, v from lose order by k") == [[1, 100, "kept"], [2, 500, "new"]]


def test_a_one_row_load_runs_no_spark_job_and_writes_the_file_its_job_would(
    doris: DorisClient, db: str, server_settings: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-row load's rowset is a chain of projections and filters over its row, which Spark's optimizer folds
    into one in-memory row that the driver hands out (`load_job._folded_load`): no Spark job runs (a job was most
    of a one-row load's Spark time). Its file is the one its counted job writes, for every type. A row the load
    filters out runs the counted job, which counts it and names it in the error log. An INSERT of one row folds
    too (its values are an in-memory relation, as a small body's fields)."""
    headers = {"column_separator": ","}
    rows = BODY.splitlines(keepends=True)[:2]  # every type with a value, then every type NULL

    def jobs(reply: Any) -> int:
        return len(spark.sparkContext.statusTracker().getJobIdsForGroup(f"load_txn_{reply.json()['TxnId']}"))

    ran: dict[str, list[int]] = {}
    for table, folds in (("by_job", False), ("folded", True)):
        with monkeypatch.context() as patch:
            if not folds:
                patch.setattr(load_job, "collect_local", lambda frame: None)  # as a plan Spark does not fold
            doris.sql(db, f"CREATE TABLE {table} ({COLUMNS}) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
            replies = [doris.stream_load(db, table, row, headers=headers) for row in rows]
        for reply in replies:
            assert_doris_result(reply, total=1, loaded=1)
        ran[table] = [jobs(reply) for reply in replies]
    assert ran == {"by_job": [1, 1], "folded": [0, 0]}

    def files(table: str) -> list[pq.ParquetFile]:
        found = [pq.ParquetFile(f) for f in location(server_settings, db, table).glob("data/*/*.parquet")]
        return sorted(found, key=lambda f: f.read().column("k").to_pylist())

    for by_job, folded in zip(files("by_job"), files("folded"), strict=True):
        assert layout(folded) == layout(by_job)
        assert folded.read().equals(by_job.read())
    assert doris.rows(db, "select * from folded order by k") == doris.rows(db, "select * from by_job order by k")
    inserted = doris.sql(db, "INSERT INTO folded (k, vc) VALUES (7, 'i')")  # an INSERT of one row as well
    txn = inserted["status"]["txnId"]
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup(f"load_txn_{txn}")) == 0, inserted
    assert doris.rows(db, "select k, vc from folded where k = 7") == [[7, "i"]]

    bad = doris.stream_load(
        db, "folded", "x" + BODY.splitlines()[0][1:] + "\n", headers={**headers, "max_filter_ratio": "1"}
    )
    assert_doris_result(bad, total=1, filtered=1, loaded=0)
    assert jobs(bad) > 0  # the counted job (and the one that reads its error line)
    assert "x,1,2,3" in httpx.get(bad.json()["ErrorURL"], auth=AUTH).text
