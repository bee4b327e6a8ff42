"""A tiny load's rowset file, written from the Spark job's rows, is the file Spark itself would write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from spark_runner import service, small_rowset
from tables.catalog import Catalog
from tests.helpers import DorisClient, assert_doris_result

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

    def spy(out: Any, directory: Any, *, version: int, decision: Any = (), decide: Any = None) -> Any:
        files, positions = real(out, directory, version=version, decision=decision, decide=decide)
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
