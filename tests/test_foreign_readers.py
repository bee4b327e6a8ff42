"""Foreign Iceberg readers (issue 18): DuckDB's iceberg extension and pyiceberg apply Iceberg v2 position deletes,
and both read a merge-on-write table exactly as `SELECT * FROM t` answers.

The first tests check the storage of merge-on-write tables: pyiceberg 0.12 reads position deletes but has no
public API to write them, so it writes a position delete file and commits it in a DELETES manifest through
pyiceberg's lower-level writers (`tables/row_delta.py`), and checks that both readers leave the deleted rows out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import parquet_file_to_data_file, schema_to_pyarrow
from pyiceberg.manifest import (
    DataFile,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, NestedField, StringType

from tables import row_delta
from tests.foreign_readers import arrow_rows, as_reply, duckdb_connection, duckdb_rows, pyiceberg_rows
from tests.helpers import DorisClient, assert_doris_result

# --- position delete files committed with the production writer (`tables/row_delta.py`) ---------------------------


def write_position_deletes(directory: Path, data_file: str, positions: Sequence[int]) -> DataFile:
    """A position delete file naming `positions` of `data_file`, and its manifest entry.

    `data_file` must be the data file's path exactly as its manifest records it (`file:///...` for pyiceberg's
    writes): both readers match the two strings, and a plain path against a `file:` URI deletes nothing.
    """
    path = row_delta.write_position_deletes(directory, row_delta.positions_table(data_file, positions))
    assert path is not None
    return row_delta.delete_file_entry(path)


def _commit(table: Table, *, data: Sequence[DataFile] = (), deletes: Sequence[DataFile]) -> None:
    with table.transaction() as txn, row_delta.RowDelta(txn, {}) as delta:
        for added in (*data, *deletes):
            delta.add(added)


def _spike_table(tmp_path: Path) -> tuple[Table, str]:
    """A v2 table in a fresh SqlCatalog holding ten rows `(k, 'r<k>')` in one Parquet data file."""
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("d")
    schema = Schema(NestedField(1, "k", IntegerType(), required=False), NestedField(2, "v", StringType()))
    table = catalog.create_table("d.t", schema, properties={"format-version": "2"})
    table.append(pa.table({"k": pa.array(range(10), pa.int32()), "v": [f"r{i}" for i in range(10)]}))
    (task,) = table.scan().plan_files()
    return table, task.file.file_path


def test_duckdb_and_pyiceberg_apply_position_deletes(tmp_path: Path) -> None:
    table, data_file = _spike_table(tmp_path)
    deletes = write_position_deletes(tmp_path / "wh", data_file, [7, 1, 4])
    _commit(table, deletes=[deletes])

    table = table.refresh()
    summary = table.current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None and summary["total-position-deletes"] == "3", summary
    live = [(k, f"r{k}") for k in (0, 2, 3, 5, 6, 8, 9)]
    assert sorted(arrow_rows(table.scan().to_arrow())) == live
    con = duckdb_connection()
    assert sorted(con.execute("SELECT k, v FROM iceberg_scan(?)", [table.metadata_location]).fetchall()) == live


def _data_file(table: Table, path: Path, rows: pa.Table) -> DataFile:
    """A Parquet data file written with the table's field ids, and its manifest entry (pyiceberg reads its stats)."""
    pq.write_table(rows.cast(schema_to_pyarrow(table.schema())), str(path))
    return parquet_file_to_data_file(table.io, table.metadata, f"file://{path}")


def test_deletes_apply_to_data_files_added_in_the_same_snapshot(tmp_path: Path) -> None:
    """A load's commit: new rows, and position deletes for stored rows and for rows of its own files, in one
    snapshot (equal sequence numbers: the spec applies position deletes to data files of a sequence <= theirs)."""
    table, first = _spike_table(tmp_path)
    rows = pa.table({"k": pa.array(range(10, 14), pa.int32()), "v": [f"r{i}" for i in range(10, 14)]})
    second = _data_file(table, tmp_path / "wh" / "second.parquet", rows)
    deletes = [
        write_position_deletes(tmp_path / "wh", first, [0, 9]),
        write_position_deletes(tmp_path / "wh", second.file_path, [2]),
    ]
    _commit(table, data=[second], deletes=deletes)

    table = table.refresh()
    live = [(k, f"r{k}") for k in (*range(1, 9), 10, 11, 13)]
    assert sorted(arrow_rows(table.scan().to_arrow())) == live
    con = duckdb_connection()
    assert sorted(con.execute("SELECT k, v FROM iceberg_scan(?)", [table.metadata_location]).fetchall()) == live


def test_a_delete_file_naming_a_plain_path_deletes_nothing(tmp_path: Path) -> None:
    """Both readers match `file_path` to the manifest's path as a string: `/x` is not `file:///x`."""
    table, data_file = _spike_table(tmp_path)
    deletes = write_position_deletes(tmp_path / "wh", data_file.removeprefix("file://"), [1])
    _commit(table, deletes=[deletes])

    table = table.refresh()
    assert len(table.scan().to_arrow()) == 10
    con = duckdb_connection()
    assert con.execute("SELECT count(*) FROM iceberg_scan(?)", [table.metadata_location]).fetchone() == (10,)


# --- a server's tables, read by the foreign readers ------------------------------------------------------------------

MOW_DDL = """CREATE TABLE {name} (k INT, d DATE, v VARCHAR(20), price DECIMAL(10, 2), score DOUBLE, seq INT)
UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2
PROPERTIES ("replication_num" = "1", "function_column.sequence_col" = "seq"{extra})"""

# overlapping loads: later loads rewrite some keys with higher and lower sequences, one deletes a key
LOADS = [
    "1,2024-01-01,a,1.50,0.25,1\n2,2024-01-02,b,2.00,0.5,1\n3,2024-01-03,c,3.25,1.5,1\n4,2024-01-04,d,4.00,2,1\n",
    "2,2024-02-02,b2,20.00,5.5,2\n3,2024-02-03,c-old,30.00,6,0\n5,2024-02-05,e,5.55,7.75,1\n",
    "1,2024-03-01,a3,10.10,8,3\n2,2024-03-02,b-old,21.00,9,1\n6,2024-03-06,f,6.60,\\N,1\n",
]


def _load(doris: DorisClient, db: str, table: str, data: str, **headers: str) -> None:
    reply = doris.stream_load(db, table, data, headers={"column_separator": ",", **headers})
    assert_doris_result(reply)


def _fill(doris: DorisClient, db: str, table: str) -> None:
    for data in LOADS:
        _load(doris, db, table, data)
    _load(doris, db, table, "4,2024-04-04,x,0,0,5\n", merge_type="DELETE")
    _load(doris, db, table, "4,2024-05-04,late,0,0,3\n")  # a lower sequence than the delete's: 4 stays deleted


def _update(doris: DorisClient, db: str, table: str) -> None:
    """The other write paths: a partial-column load and a DELETE statement."""
    _load(doris, db, table, "5,e-partial\n", columns="k,v", partial_columns="true")
    doris.sql(db, f"DELETE FROM {table} WHERE k = 6")


def test_foreign_readers_read_a_merge_on_write_table_as_select_does(
    doris: DorisClient, db: str, server_settings: Any
) -> None:
    # Issue 18: fails wherever merge-on-write tables are stored merge-on-read (before storage format 2 the foreign
    # readers see superseded and delete-marked rows). Never skip it: it is the proof.
    doris.sql(db, MOW_DDL.format(name="t", extra=""))
    _fill(doris, db, "t")
    _update(doris, db, "t")
    answer = as_reply(doris.rows(db, "SELECT * FROM t"))
    assert [row[0] for row in answer] == [1, 2, 3, 5]
    assert answer[3][2] == "e-partial"
    data_dir = server_settings.resolved_data_dir
    assert pyiceberg_rows(data_dir, db, "t") == answer
    assert duckdb_rows(data_dir, db, "t") == answer


def test_foreign_readers_read_a_merge_on_read_table(doris: DorisClient, db: str, server_settings: Any) -> None:
    """A merge-on-read table keeps superseded rows in its files, merged by each query: the foreign readers see more
    rows than SELECT and nothing is asserted about them; they read the table without failing."""
    doris.sql(db, MOW_DDL.format(name="t", extra=', "enable_unique_key_merge_on_write" = "false"'))
    _fill(doris, db, "t")
    doris.sql(db, "DELETE FROM t WHERE k = 6")
    data_dir = server_settings.resolved_data_dir
    pyiceberg_rows(data_dir, db, "t")
    duckdb_rows(data_dir, db, "t")


TYPES_DDL = """CREATE TABLE t (k INT, d DATE, ts DATETIME(6), v VARCHAR(20), price DECIMAL(10, 2), score DOUBLE,
f FLOAT, big BIGINT, b BOOLEAN, tiny TINYINT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"""
TYPES_ROWS = (
    "1,2024-01-01,2024-01-01 12:34:56,a,1.50,0.25,1.1,9007199254740993,1,-5\n"
    "2,1999-12-31,2024-06-30 23:59:59.123456,é,-0.01,1e300,-2.5,-1,0,127\n"
    "3,\\N,\\N,\\N,\\N,\\N,\\N,\\N,\\N,\\N\n"
)


@pytest.mark.parametrize("reader", [pyiceberg_rows, duckdb_rows])
def test_foreign_readers_render_values_as_the_sql_reply(
    reader: Any, doris: DorisClient, db: str, server_settings: Any
) -> None:
    """Dates, datetimes, decimals, floats, booleans and NULLs compare equal to what `/api/query` shows."""
    doris.sql(db, TYPES_DDL)
    _load(doris, db, "t", TYPES_ROWS)
    answer = as_reply(doris.rows(db, "SELECT * FROM t"))
    assert reader(server_settings.resolved_data_dir, db, "t") == answer
