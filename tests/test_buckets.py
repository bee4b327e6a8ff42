"""Issue 18: the bucket in the Iceberg partition spec (storage format 3, `spark_runner.buckets`).

Every data file of a bucketed table holds the rows of one bucket, named by its Iceberg partition (an identity field
on the hidden `__DORIS_BUCKET__` column), or of any bucket (NULL: a tiny load's one file); each position delete
file sits in the partition of the data files it names, as Iceberg readers match them. Loads of a few keys look
them up in their buckets' files only, and so does a query whose filter pins the distribution columns: the answers
must be those of a read of every file, which the foreign readers (pyiceberg, DuckDB) give.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from spark_runner import service
from tests.foreign_readers import as_reply, duckdb_rows, load_table, pyiceberg_rows
from tests.helpers import DorisClient, assert_doris_result

BUCKET = "__DORIS_BUCKET__"
DDL = """CREATE TABLE t (k INT, v VARCHAR(20), s INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 4
PROPERTIES ("function_column.sequence_col" = "s")"""


def _load(doris: DorisClient, db: str, table: str, lines: list[str], **headers: str) -> None:
    body = "".join(f"{line}\n" for line in lines)
    assert_doris_result(doris.stream_load(db, table, body, headers={"column_separator": ",", **headers}))


def _partition_of_files(data_dir: Any, db: str, table: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The live data files' bucket partitions by path, and the live delete files (path, partition)."""
    files = load_table(data_dir, db, table).inspect.files().to_pylist()
    data = {f["file_path"]: f["partition"][BUCKET] for f in files if f["content"] == 0}
    deletes = [{"path": f["file_path"], "bucket": f["partition"][BUCKET]} for f in files if f["content"] == 1]
    return data, deletes


def test_every_file_holds_one_bucket_and_every_delete_file_sits_with_the_files_it_names(
    doris: DorisClient, db: str, server_settings: Any
) -> None:
    doris.sql(db, DDL)
    expected = {k: [k, f"v{k}", 1] for k in range(3000)}
    # bodies of more than 256 lines go through Spark's writer: one file per bucket
    _load(doris, db, "t", [f"{k},v{k},1" for k in range(3000)])
    _load(doris, db, "t", [f"{k},w{k},{2 if k % 2 else 0}" for k in range(0, 3000, 3)])
    expected.update({k: [k, f"w{k}", 2] for k in range(0, 3000, 3) if k % 2})
    # a tiny load (one file of any bucket) that wins, one that loses, a partial update and a DELETE
    _load(doris, db, "t", ["7,t7,3", "12,t12,5"])
    expected.update({7: [7, "t7", 3], 12: [12, "t12", 5]})
    _load(doris, db, "t", ["8,lost,0"])
    _load(doris, db, "t", ["11,p11"], columns="k,v", partial_columns="true")
    expected[11] = [11, "p11", expected[11][2]]
    doris.sql(db, "DELETE FROM t WHERE k = 10")
    del expected[10]

    assert doris.rows(db, "SELECT count(*) FROM t") == [[len(expected)]]
    answer = as_reply(doris.rows(db, "SELECT * FROM t WHERE k < 100 ORDER BY k"))  # a reply holds 1,000 rows
    assert answer == as_reply([expected[k] for k in sorted(expected) if k < 100])
    data_dir = server_settings.resolved_data_dir
    every_row = as_reply([expected[k] for k in sorted(expected)])
    assert pyiceberg_rows(data_dir, db, "t") == every_row
    assert duckdb_rows(data_dir, db, "t") == every_row

    spec = load_table(data_dir, db, "t").spec()
    assert [(f.name, str(f.transform)) for f in spec.fields] == [(BUCKET, "identity")]
    data, deletes = _partition_of_files(data_dir, db, "t")
    buckets_of_key: dict[int, set[Any]] = defaultdict(set)
    for path, bucket in data.items():
        stored = pq.read_table(path.removeprefix("file://"), columns=["k", BUCKET])
        assert pc.unique(stored.column(BUCKET)).to_pylist() == [bucket], path  # the file's partition is its rows'
        if bucket is not None:
            for k in stored.column("k").to_pylist():
                buckets_of_key[k].add(bucket)
    assert {b for b in data.values() if b is not None} == {0, 1, 2, 3}
    assert all(len(b) == 1 for b in buckets_of_key.values()), "a key is in one bucket"
    assert None in data.values(), "the tiny loads' files hold any bucket"
    assert deletes, "the second load superseded rows"
    for delete in deletes:
        named = pc.unique(pq.read_table(delete["path"], columns=["file_path"]).column(0)).to_pylist()
        assert {data.get(p, "gone") for p in named} == {delete["bucket"]}, delete


COMPOSITE = """CREATE TABLE c (k VARCHAR(10), d DATE, n BIGINT, v INT) UNIQUE KEY(k, d, n)
DISTRIBUTED BY HASH(k, n) BUCKETS 3"""


def test_lookups_and_point_queries_read_their_buckets_and_answer_as_a_full_read(doris: DorisClient, db: str) -> None:
    """A string and a BIGINT distribution column (hashed in their storage types): tiny loads of some keys supersede
    their stored rows (found in their buckets' files), and point queries answer what a full read does."""
    doris.sql(db, COMPOSITE)
    _load(doris, db, "c", [f"a{i},2024-01-0{1 + i % 9},{i},{i}" for i in range(600)])
    _load(doris, db, "c", ["a5,2024-01-06,5,50", "a17,2024-01-09,17,170"])  # the same keys: replaced
    _load(doris, db, "c", ["a600,2024-02-01,600,6000"])  # a new key
    assert doris.rows(db, "SELECT count(*) FROM c") == [[601]]
    full = {tuple(r[:3]): r[3] for r in doris.rows(db, "SELECT * FROM c")}
    assert full[("a5", "2024-01-06", 5)] == 50 and full[("a17", "2024-01-09", 17)] == 170
    queries = {
        "k = 'a5' AND n = 5": [["a5", "2024-01-06", 5, 50]],
        "n = 17 AND k = 'a17' AND v > 0": [["a17", "2024-01-09", 17, 170]],
        "k IN ('a1', 'a2', 'a600') AND n IN (1, 2, 600)": [
            ["a1", "2024-01-02", 1, 1],
            ["a2", "2024-01-03", 2, 2],
            ["a600", "2024-02-01", 600, 6000],
        ],
        "k = 'a5' AND n = 6": [],  # pinned to a bucket, no such key
        "k = 'a5'": [["a5", "2024-01-06", 5, 50]],  # n not pinned: every bucket
        "(k = 'a9') AND n = 9 OR k = 'a8'": [["a8", "2024-01-09", 8, 8], ["a9", "2024-01-01", 9, 9]],
        # past the cap of values a filter prunes by: every file is read, the answer is the same
        f"k = 'a5' AND n IN ({', '.join(str(i) for i in range(5, 20005))})": [["a5", "2024-01-06", 5, 50]],
    }
    for where, rows in queries.items():
        assert doris.rows(db, f"SELECT * FROM c WHERE {where} ORDER BY k") == rows, where
    # the same through a subquery and an UPDATE that reads its target back
    doris.sql(db, "UPDATE c SET v = 51 WHERE k = 'a5' AND n = 5")
    assert doris.rows(db, "SELECT * FROM (SELECT k, v FROM c WHERE k = 'a5' AND n = 5) x") == [["a5", 51]]
    assert doris.rows(db, "SELECT count(*) FROM c") == [[601]]


def test_a_big_load_writes_one_file_per_bucket(
    doris: DorisClient, db: str, server_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loads over `PARTITION_BYTES` run one Spark partition per bucket: into an empty table the repartition is the
    plan's only exchange and each task writes its bucket's file as is; a later load's lookup joins reshuffle, and
    Spark's writer splits by bucket. Either way a file holds one bucket (a bigger threshold keeps the test small)."""
    monkeypatch.setattr(service, "PARTITION_BYTES", 1)
    doris.sql(db, DDL)
    _load(doris, db, "t", [f"{k},v{k},1" for k in range(3000)])
    data, _ = _partition_of_files(server_settings.resolved_data_dir, db, "t")
    assert sorted(data.values()) == [0, 1, 2, 3], "one file per bucket"
    _load(doris, db, "t", [f"{k},w{k},2" for k in range(0, 3000, 2)])
    data, deletes = _partition_of_files(server_settings.resolved_data_dir, db, "t")
    for path, bucket in data.items():
        stored = pq.read_table(path.removeprefix("file://"), columns=[BUCKET])
        assert pc.unique(stored.column(BUCKET)).to_pylist() == [bucket], path
    assert len(deletes) == 4
    expected = as_reply([[k, f"w{k}" if k % 2 == 0 else f"v{k}", 2 if k % 2 == 0 else 1] for k in range(3000)])
    assert pyiceberg_rows(server_settings.resolved_data_dir, db, "t") == expected
    assert doris.rows(db, "SELECT count(*) FROM t WHERE v LIKE 'w%'") == [[1500]]
