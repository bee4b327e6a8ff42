"""Broker load as in the seeds: `LOAD LABEL ... ORDER BY seq` and `MERGE DATA INFILE ... DELETE ON`, run
asynchronously over local files and followed with SHOW LOAD; CANCEL LOAD; SHOW TRANSACTION ... LIKE."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DorisClient, assert_doris_result

SHOW_LOAD_STATE = 2


@pytest.fixture
def files(server_settings: Any) -> Path:
    """A fresh folder under the server's allowed broker-load root (SL_BROKER_ALLOWED_ROOTS)."""
    path = Path(server_settings.broker_allowed_roots[0]) / uuid.uuid4().hex[:12]
    path.mkdir()
    return path


def wait_for_job(doris: DorisClient, db: str, label: str, timeout: float = 60) -> dict[str, Any]:
    data = doris.sql(db, f'SHOW LOAD WHERE LABEL = "{label}"')
    names = [m["name"] for m in data["meta"]]
    deadline = time.monotonic() + timeout
    while True:
        rows = doris.sql(db, f'SHOW LOAD WHERE LABEL = "{label}"')["data"]
        assert len(rows) == 1, rows
        job = dict(zip(names, rows[0], strict=True))
        if job["State"] in ("FINISHED", "CANCELLED"):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.2)


def test_seed_order_by_load_keeps_the_highest_sequence_per_key(doris: DorisClient, db: str, files: Path) -> None:
    """002: `ORDER BY source_sequence` maps the hidden sequence; a glob over two files, later rows with a
    lower sequence lose."""
    doris.sql(
        db,
        "CREATE TABLE tbl1 (k1 INT, k2 INT, v1 VARCHAR(16), v2 INT) UNIQUE KEY(k1, k2) "
        'DISTRIBUTED BY HASH(k1) BUCKETS 2 PROPERTIES ("function_column.sequence_type" = "int")',
    )
    for part, text in (("a", "1,1,5,five,5\n2,2,1,one,1\n"), ("b", "1,1,3,three,3\n2,2,9,nine,9\n3,3,1,x,1\n")):
        (files / part).mkdir()
        (files / part / "test.txt").write_text(text)
    doris.sql(
        db,
        f"""LOAD LABEL {db}.label1
        (
            DATA INFILE("{files}/*/test.txt")
            INTO TABLE `tbl1`
            COLUMNS TERMINATED BY ","
            (k1,k2,source_sequence,v1,v2)
            ORDER BY source_sequence
        )
        WITH BROKER 'broker'
        (
            "username"="user",
            "password"="pass"
        )
        PROPERTIES
        (
            "timeout" = "3600"
        )""",
    )
    job = wait_for_job(doris, db, "label1")
    assert job["State"] == "FINISHED" and job["Type"] == "BROKER" and job["Progress"] == "100.00% (1/1)", job
    assert job["EtlInfo"] == "unselected.rows=0; dpp.abnorm.ALL=0; dpp.norm.ALL=5"
    assert doris.rows(db, "SELECT k1, v1, v2 FROM tbl1 ORDER BY k1") == [[1, "five", 5], [2, "nine", 9], [3, "x", 1]]
    txns = doris.rows(db, f"SHOW TRANSACTION FROM {db} WHERE LABEL LIKE 'label%'")
    assert [(r[0], r[1], r[3]) for r in txns] == [(job["TransactionId"], "label1", "VISIBLE")]
    assert "has already been used" in doris.sql_error(
        db,
        f'LOAD LABEL {db}.label1 (DATA INFILE("{files}/a/test.txt") INTO TABLE tbl1 (k1,k2,source_sequence,v1,v2))',
    )


def test_seed_merge_load_deletes_rows_matching_delete_on(doris: DorisClient, db: str, files: Path) -> None:
    """004: `MERGE DATA INFILE ... DELETE ON delete_label=1` upserts the other rows."""
    doris.sql(
        db,
        "CREATE TABLE example_tbl (order_id BIGINT, order_type VARCHAR(8), order_status VARCHAR(32)) "
        "UNIQUE KEY(order_id) DISTRIBUTED BY HASH(order_id) BUCKETS 2",
    )
    assert_doris_result(doris.stream_load(db, "example_tbl", "1,a,NEW\n2,b,NEW\n3,c,NEW\n", {"column_separator": ","}))
    path = files / "file1"
    path.write_text("1,a,PAID,0\n2,b,NEW,1\n4,d,NEW,0\n")
    doris.sql(
        db,
        f'LOAD LABEL {db}.my_label ( MERGE DATA INFILE("{path}") INTO TABLE example_tbl COLUMNS TERMINATED BY "," '
        "(order_id, order_type, order_status, delete_label) DELETE ON delete_label=1 ) WITH BROKER 'bos' "
        '( "k" = "v" );',
    )
    assert wait_for_job(doris, db, "my_label")["State"] == "FINISHED"
    assert doris.rows(db, "SELECT order_id, order_status FROM example_tbl ORDER BY order_id") == [
        [1, "PAID"],
        [3, "NEW"],
        [4, "NEW"],
    ]


def test_failed_job_is_cancelled_with_its_reason_and_changes_nothing(doris: DorisClient, db: str, files: Path) -> None:
    doris.sql(db, "CREATE TABLE t (k INT NOT NULL, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    path = files / "bad.csv"
    path.write_text("1,1\nx,2\n3,3\n")
    stmt = f'LOAD LABEL bad (DATA INFILE("{path}") INTO TABLE t COLUMNS TERMINATED BY "," (k, tmp) SET (v = tmp * 10)) '
    doris.sql(db, stmt)
    job = wait_for_job(doris, db, "bad")
    assert job["State"] == "CANCELLED"
    assert job["ErrorMsg"] == "type:ETL_RUN_FAIL; msg:[DATA_QUALITY_ERROR]too many filtered rows", job
    assert "x,2" in doris.http.get(job["URL"]).text
    assert doris.rows(db, "SELECT k FROM t") == []
    # a cancelled label is free; the ratio now tolerates the bad row, and SET derives v
    doris.sql(db, stmt + 'PROPERTIES ("max_filter_ratio" = "0.5")')
    rows = doris.sql(db, 'SHOW LOAD WHERE LABEL = "bad"')["data"]
    assert len(rows) == 2
    deadline = time.monotonic() + 60
    while doris.rows(db, "SELECT k, v FROM t ORDER BY k") != [[1, 10], [3, 30]]:
        assert time.monotonic() < deadline
        time.sleep(0.2)


@pytest.mark.parametrize(
    "stmt, message",
    [
        pytest.param('LOAD LABEL l1 (DATA INFILE("/x") INTO TABLE nope)', "Unknown table 'nope'", id="unknown-table"),
        pytest.param(
            'LOAD LABEL l2 (DATA INFILE("/x") INTO TABLE t (k, v) WHERE sleep(1) > 0)',
            "function sleep is not allowed",
            id="expression-allow-list",
        ),
        pytest.param('LOAD LABEL l3 (DATA INFILE("/x") INTO TABLE t BOGUS)', "Syntax error", id="syntax"),
    ],
)
def test_bad_load_statements_fail_at_once(doris: DorisClient, db: str, stmt: str, message: str) -> None:
    doris.sql(db, "CREATE TABLE t (k INT NOT NULL, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    assert message in doris.sql_error(db, stmt)
    assert doris.rows(db, "SHOW LOAD") == []


def test_cancel_load_never_half_applies(doris: DorisClient, db: str, files: Path) -> None:
    doris.sql(db, "CREATE TABLE t (k INT NOT NULL, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2")
    path = files / "big.csv"
    path.write_text("".join(f"{i},{i}\n" for i in range(200_000)))
    doris.sql(db, f'LOAD LABEL big (DATA INFILE("{path}") INTO TABLE t COLUMNS TERMINATED BY "," (k, v))')
    reply = doris.sql_raw(db, 'CANCEL LOAD WHERE LABEL = "big"')
    job = wait_for_job(doris, db, "big")
    count = doris.rows(db, "SELECT count(*) FROM t")[0][0]
    if reply["code"] == 0:  # the cancel came in time
        assert job["State"] == "CANCELLED" and job["ErrorMsg"] == "type:USER_CANCEL; msg:user cancel", job
        assert count == 0
    else:  # the job had finished (or was committing): all of it is there
        assert job["State"] == "FINISHED" and count == 200_000
    assert "already finished" in doris.sql_error(db, 'CANCEL LOAD WHERE LABEL = "big"')
