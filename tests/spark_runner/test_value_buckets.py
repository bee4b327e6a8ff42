"""A small load's keys get their buckets in the server's process (`buckets.value_buckets`): Spark's `hash` in
Python must give Spark's bucket for every value (`buckets.bucket_sql`, what the bulk writer files rows by), or a
merge-on-write pairing would skip the file that holds the stored row of a key."""

from __future__ import annotations

import logging
import random
import re
from typing import Any

import pytest

from spark_runner.buckets import bucket_sql, value_buckets
from tests.helpers import DorisClient, table_handle


def values_of(kind: str) -> list[Any]:
    rng = random.Random(19)
    if kind.startswith("VARCHAR"):
        alphabet = "abcXYZ019 é€𝄞"
        return [
            "",
            "a",
            "ab",
            "abc",
            "abcd",
            "abcde",
            *("".join(rng.choices(alphabet, k=rng.randrange(1, 12))) for _ in range(300)),
        ]
    bits = {"TINYINT": 7, "SMALLINT": 15, "INT": 31, "BIGINT": 63}[kind]
    edges = [0, 1, -1, (1 << bits) - 1, -(1 << bits)]
    return edges + [rng.randrange(-(1 << bits), 1 << bits) for _ in range(300)]


@pytest.mark.parametrize("kind", ["TINYINT", "SMALLINT", "INT", "BIGINT", "VARCHAR(16)"])
def test_value_buckets_are_sparks(doris: DorisClient, db: str, server_settings: Any, spark: Any, kind: str) -> None:
    doris.sql(db, f"CREATE TABLE t (k {kind} NOT NULL, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 7")
    table = table_handle(server_settings, db, "t").definition
    values = values_of(kind)
    frame = spark.createDataFrame([(v,) for v in values], f"k {'STRING' if kind.startswith('VARCHAR') else kind}")
    sparks = [row[0] for row in frame.selectExpr(bucket_sql(table, per_bucket=True)).collect()]
    found = value_buckets(table, values)
    assert found is not None
    assert [found[v] for v in values] == sparks
    assert value_buckets(table, [*values[:3], None]) is None  # a NULL key: no bucket to name


def test_a_one_row_load_reads_only_the_file_of_its_keys_bucket(
    doris: DorisClient,
    db: str,
    server_settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A small load into a large table of several buckets is paired with the stored rows of its keys: of the
    files of one bucket each (a bulk load's), only the file of its key's bucket is decoded, and the answers are
    Doris's (a higher sequence wins, a lower one loses, a new key is added)."""
    from spark_runner import mow, service

    monkeypatch.setattr(service, "DRIVER_RECHECK_ROWS", 0)  # paired by key, as into a large table
    monkeypatch.setattr(mow, "DRIVER_RECHECK_ROWS", 0)
    doris.sql(
        db,
        "CREATE TABLE b (k INT NOT NULL, s INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 4 "
        'PROPERTIES ("function_column.sequence_col" = "s")',
    )
    body = "".join(f'{{"k": {k}, "s": 5, "v": "v{k}"}}\n' for k in range(400))  # JSON: Spark writes the files
    reply = doris.stream_load(db, "b", body, {"format": "json", "read_json_by_line": "true"}).json()
    assert reply["Status"] == "Success", reply
    files = table_handle(server_settings, db, "b").data_files()
    assert len(files) == 4  # one per bucket
    csv = {"column_separator": ","}
    with caplog.at_level(logging.DEBUG, logger="spark_runner.queries"):
        for row in ("17,9,won", "18,1,lost", "1000,1,new"):
            assert doris.stream_load(db, "b", row + "\n", csv).json()["Status"] == "Success"
    reads = [r.getMessage() for r in caplog.records if "read in this process" in r.getMessage()]
    # the first two keys are in the bulk files' range: one row group of one of them is decoded, not four
    assert len(reads) == 3 and all(re.search(r"of \d+ files read in this process \(1 row groups", m) for m in reads[:2])
    assert doris.rows(db, "SELECT k, s, v FROM b WHERE k IN (17, 18, 1000) ORDER BY k") == [
        [17, 9, "won"],
        [18, 5, "v18"],
        [1000, 1, "new"],
    ]
    assert doris.rows(db, "SELECT count(*) FROM b") == [[401]]


def test_a_load_into_a_table_keyed_by_another_type_keeps_its_lookup_in_the_job(
    doris: DorisClient, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stored rows are read by key in the server's process for integer and string keys only: a small load into a
    large table keyed by a date is decided by its job's lookup (Spark's reader skips row groups by the keys as
    literals), never by a pairing that would fall back to a Spark join of the whole table."""
    from spark_runner import service

    monkeypatch.setattr(service, "DRIVER_RECHECK_ROWS", 0)  # as into a large table
    paired: list[Any] = []
    real = service.pair_rows

    def spy(*args: Any) -> Any:
        paired.append(args[0].definition.name)
        return real(*args)

    monkeypatch.setattr(service, "pair_rows", spy)
    doris.sql(
        db,
        "CREATE TABLE d (k DATE NOT NULL, s INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
        'PROPERTIES ("function_column.sequence_col" = "s")',
    )
    doris.sql(
        db,
        "CREATE TABLE i (k INT NOT NULL, s INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
        'PROPERTIES ("function_column.sequence_col" = "s")',
    )
    csv = {"column_separator": ","}
    for table, key in (("d", "2026-01-0"), ("i", "")):
        for body in ("1,5,a\n2,5,b\n", "1,9,won\n", "2,1,lost\n"):
            rows = "".join(f"{key}{line}\n" for line in body.splitlines())
            assert doris.stream_load(db, table, rows, csv).json()["Status"] == "Success"
    assert paired == ["i", "i"]  # the date-keyed table's loads were looked up in their jobs
    assert doris.rows(db, "SELECT CAST(k AS STRING), s, v FROM d ORDER BY k") == [
        ["2026-01-01", 9, "won"],
        ["2026-01-02", 5, "b"],
    ]
    assert doris.rows(db, "SELECT k, s, v FROM i ORDER BY k") == [[1, 9, "won"], [2, 5, "b"]]
