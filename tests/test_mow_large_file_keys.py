"""Merge-on-write re-check of a small load against a large stored file (`spark_runner.mow._keyed_rows_of_keys`):
only the rows holding the load's keys are read, and they must be found exactly as the whole-file read found them."""

from __future__ import annotations

from tests.helpers import DorisClient

CSV = {"column_separator": ","}


def test_null_and_multi_column_keys_of_a_large_file_are_superseded(doris: DorisClient, db: str) -> None:
    """NULL keys, a DATETIME and a VARCHAR with a trailing space in the key: compared as the table compares them
    (a NULL key is a key, `'c1 '` is not `'c1'`)."""
    from spark_runner import mow

    doris.sql(
        db,
        "CREATE TABLE t (k INT NULL, d DATETIME NULL, c VARCHAR(8) NULL, v VARCHAR(20)) UNIQUE KEY(k, d, c)"
        " DISTRIBUTED BY HASH(k) BUCKETS 1",
    )
    rows = mow.CACHED_FILE_ROWS + 500
    big = "".join(f"{k},2024-01-01 00:00:0{k % 10},c{k % 3} ,old\n" for k in range(rows))
    big += "\\N,\\N,\\N,null_old\n\\N,2024-01-01 00:00:01,x,null_old2\n"
    assert doris.stream_load(db, "t", big, headers=CSV).json()["Status"] == "Success"
    lines = ("7,2024-01-01 00:00:07,c1 ,new\n8,2024-01-01 00:00:08,c2,other\n", "\\N,\\N,\\N,null_new\n")
    for body in lines:
        reply = doris.stream_load(db, "t", body, headers=CSV).json()
        assert reply["Status"] == "Success", reply
    assert doris.rows(db, "SELECT count(*) FROM t") == [[rows + 3]]  # `8 ... c2` is a new key (`c2 ` is stored)
    assert doris.rows(db, "SELECT v FROM t WHERE k IS NULL ORDER BY v") == [["null_new"], ["null_old2"]]
    assert doris.rows(db, "SELECT v FROM t WHERE k IN (7, 8) ORDER BY k, v") == [["new"], ["old"], ["other"]]
