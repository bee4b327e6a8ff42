"""Merge-on-write unique tables in Iceberg's own terms (storage format 2): one live row per key in the files.

What a user sees: Doris's answers through every load path, a deleted key that keeps its sequence, compaction
that applies the deletes, and any Iceberg reader (pyiceberg's scan here; DuckDB in tests/test_foreign_readers.py)
returning exactly `SELECT *`'s rows.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.helpers import DorisClient, assert_doris_result, table_handle

DDL = (
    "CREATE TABLE {name} (k INT, v VARCHAR(20), s INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS {buckets}"
    ' PROPERTIES ("function_column.sequence_col" = "s"{extra})'
)
CSV = {"column_separator": ",", "columns": "k,v,s"}


def scanned(server_settings: Any, db: str, table: str) -> list[list[Any]]:
    """The table as an Iceberg reader sees it (data files minus position deletes), visible columns only."""
    rows = table_handle(server_settings, db, table).iceberg.scan().to_arrow().to_pylist()
    return sorted([[r["k"], r["v"], r["s"]] for r in rows])


def answer(doris: DorisClient, db: str, table: str) -> list[list[Any]]:
    return doris.rows(db, f"SELECT k, v, s FROM {table} ORDER BY k")


def test_loads_supersede_by_position_and_any_reader_sees_the_answer(
    doris: DorisClient, db: str, server_settings: Any
) -> None:
    doris.sql(db, DDL.format(name="t", buckets=2, extra=""))
    json_lines = {"format": "json", "read_json_by_line": "true"}

    def as_json(rows: list[tuple[int, str, int]]) -> str:
        return "".join(f'{{"k": {k}, "v": "{v}", "s": {s}}}\n' for k, v, s in rows)

    # JSON bodies are not inline sources: their rows are paired with the stored ones by Spark after their write;
    # the CSV ones are re-checked at their commit in the server's process (small loads into a small table)
    first = as_json([(k, f"v{k}", 1) for k in range(1, 601)])
    assert_doris_result(doris.stream_load(db, "t", first, json_lines).json(), loaded=600)
    assert_doris_result(doris.stream_load(db, "t", as_json([(1, "a", 5), (2, "b", 5), (3, "c", 5)]), json_lines).json())
    # 1 loses (lower sequence), 2 wins its tie (the later load)
    second = as_json([(1, "older", 4), (2, "tie", 5), (4, "d", 1)])
    assert_doris_result(doris.stream_load(db, "t", second, json_lines).json())
    assert_doris_result(doris.stream_load(db, "t", "5,csv,3\n6,low,0\n", CSV).json())
    assert_doris_result(doris.stream_load(db, "t", "3,x,9\n", {**CSV, "merge_type": "DELETE"}).json())
    expected = [[1, "a", 5], [2, "tie", 5], [4, "d", 1], [5, "csv", 3], [6, "v6", 1]]  # 6 lost its sequence
    expected += [[k, f"v{k}", 1] for k in range(7, 601)]
    assert doris.rows(db, "SELECT count(*) FROM t") == [[len(expected)]]
    assert answer(doris, db, "t") == expected
    assert scanned(server_settings, db, "t") == expected
    handle = table_handle(server_settings, db, "t")
    assert handle.definition.positional
    # the stored rows hold no duplicate live key: deleted by position, not merged away at read time
    from tables.row_delta import live_delete_files

    assert live_delete_files(handle.iceberg), "superseded rows are named in position delete files"


def test_a_deleted_key_keeps_its_sequence_on_every_path(doris: DorisClient, db: str, server_settings: Any) -> None:
    """Delete with sequence 10, then load sequence 5: still deleted (stream load, INSERT, group commit,
    two-phase commit, after a compaction); sequence 11 brings it back."""
    doris.sql(db, DDL.format(name="t", buckets=1, extra=""))
    assert_doris_result(doris.stream_load(db, "t", "1,a,1\n2,b,1\n", CSV).json())
    assert_doris_result(doris.stream_load(db, "t", "1,x,10\n", {**CSV, "merge_type": "DELETE"}).json())
    assert answer(doris, db, "t") == [[2, "b", 1]]

    assert_doris_result(doris.stream_load(db, "t", "1,stream,5\n", CSV).json())
    doris.sql(db, "INSERT INTO t (k, v, s) VALUES (1, 'insert', 5)")
    sync = doris.stream_load(db, "t", "1,group,5\n", {**CSV, "group_commit": "sync_mode"}).json()
    assert sync["Status"] == "Success", sync
    doris.commit_txn(db, doris.precommit(db, "t", b"1,twophase,5\n", {**CSV, "label": f"l2pc_{db}"}))
    assert answer(doris, db, "t") == [[2, "b", 1]]
    assert scanned(server_settings, db, "t") == [[2, "b", 1]]

    doris.sql(db, "ADMIN COMPACT TABLE t WHERE TYPE = 'BASE'")
    assert_doris_result(doris.stream_load(db, "t", "1,after-compaction,5\n", CSV).json())
    assert answer(doris, db, "t") == [[2, "b", 1]]
    hidden = doris.rows(db, "SET show_hidden_columns = true; SELECT k, __DORIS_DELETE_SIGN__ FROM t ORDER BY k")
    assert [1, 1] in hidden, hidden  # the delete row is still there for show_hidden_columns

    assert_doris_result(doris.stream_load(db, "t", "1,back,11\n", CSV).json())
    assert answer(doris, db, "t") == [[1, "back", 11], [2, "b", 1]]
    assert scanned(server_settings, db, "t") == [[1, "back", 11], [2, "b", 1]]


def test_concurrent_loads_of_one_table_leave_one_live_row_per_key(
    doris: DorisClient, db: str, server_settings: Any
) -> None:
    """Loads whose lookups saw an older version than the one they commit on re-check the keys written in
    between: never two live rows for a key; the largest sequence wins, a tie goes to the later commit."""
    doris.sql(db, DDL.format(name="t", buckets=2, extra=""))

    def load(i: int) -> dict[str, Any]:
        body = "".join(f"{k},c{i},{(i * 7 + k) % 5}\n" for k in range(10))
        return doris.stream_load(db, "t", body, CSV).json()

    with ThreadPoolExecutor(6) as pool:
        replies = list(pool.map(load, range(12)))
    for reply in replies:
        assert reply["Status"] == "Success", reply
    rows = answer(doris, db, "t")
    assert [r[0] for r in rows] == list(range(10))
    assert scanned(server_settings, db, "t") == rows
    for k, _, s in rows:
        assert s == max((i * 7 + k) % 5 for i in range(12))


def test_compaction_applies_the_deletes(doris: DorisClient, db: str, server_settings: Any) -> None:
    doris.sql(db, DDL.format(name="t", buckets=1, extra=""))
    for i in range(4):
        assert_doris_result(doris.stream_load(db, "t", f"1,r{i},{i}\n2,r{i},{i}\n", CSV).json())
    before = answer(doris, db, "t")
    doris.sql(db, "ADMIN COMPACT TABLE t WHERE TYPE = 'BASE'")
    handle = table_handle(server_settings, db, "t")
    from tables.row_delta import live_delete_files
    from tables.rowsets import live_data_files

    data = live_data_files(handle.iceberg)
    assert len(data) == 1 and data[0].record_count == 2  # no superseded row left in the files
    assert live_delete_files(handle.iceberg) == []
    assert answer(doris, db, "t") == before == scanned(server_settings, db, "t")
    assert sum(pq.read_metadata(Path(f.file_path)).num_rows for f in data) == 2


def test_a_small_load_supersedes_rows_of_a_large_file_by_reading_only_its_keys(
    doris: DorisClient, db: str, server_settings: Any, monkeypatch: Any
) -> None:
    """A small load into a small table is re-checked at its commit in the server's process against every data
    file; of a file of more than `CACHED_FILE_ROWS` rows (one load's, or a compaction's) only the rows holding its
    keys are read. The stored row it supersedes is position-deleted, a later sequence wins and an earlier loses,
    and any reader sees one row per key."""
    from spark_runner import mow

    rows = mow.CACHED_FILE_ROWS + 500
    doris.sql(db, DDL.format(name="t", buckets=1, extra=""))
    big = "".join(f"{k},old,10\n" for k in range(rows))
    assert doris.stream_load(db, "t", big, headers=CSV).json()["Status"] == "Success"
    read_whole: list[int] = []
    whole = mow._read_keyed_rows

    def reading(path: str, *args: Any) -> Any:
        read_whole.append(mow._row_count(path))
        return whole(path, *args)

    monkeypatch.setattr(mow, "_read_keyed_rows", reading)
    for line in ("7,newer,11\n", f"{rows - 1},older,9\n", f"{rows + 3},fresh,1\n"):
        assert doris.stream_load(db, "t", line, headers=CSV).json()["Status"] == "Success"
    expected = [[k, "newer" if k == 7 else "old", 11 if k == 7 else 10] for k in range(rows)] + [[rows + 3, "fresh", 1]]
    assert doris.rows(db, "SELECT count(*) FROM t") == [[rows + 1]]
    picked = f"SELECT k, v, s FROM t WHERE k IN (6, 7, {rows - 1}, {rows + 3}) ORDER BY k"
    assert doris.rows(db, picked) == [expected[6], expected[7], expected[rows - 1], expected[rows]]
    assert scanned(server_settings, db, "t") == expected
    assert read_whole and max(read_whole) <= mow.CACHED_FILE_ROWS  # the small loads' files, never the large one
