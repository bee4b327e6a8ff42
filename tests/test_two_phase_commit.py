"""Two-phase commit driven the way the Flink connector drives it (contract §1.5): precommit with a label,
the empty-body label probe, commit and abort by txn id or label, Doris's exact replies, the precommit
timeout, and a precommitted transaction that outlives a server kill."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import AUTH, DorisClient, assert_doris_result, serving

DDL = "CREATE TABLE t (k INT NOT NULL, v VARCHAR(16)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2"
# the Flink connector's pattern for the transaction behind a used label
LABEL_EXIST_PATTERN = re.compile(
    r"errCode = 2, detailMessage = Label \[(.*)\] has already been used, relate to txn \[(\d+)\]"
)


def precommit(http: httpx.Client, db: str, label: str, body: str) -> dict:  # type: ignore[type-arg]
    resp = http.put(
        f"/api/{db}/t/_stream_load",
        content=body.encode(),
        headers={"label": label, "two_phase_commit": "true", "column_separator": ",", "Expect": "100-continue"},
    )
    return resp.json()  # type: ignore[no-any-return]


def operate(
    http: httpx.Client, db: str, operation: str | None, *, txn_id: int | None = None, label: str | None = None
) -> dict:  # type: ignore[type-arg]
    headers = {}
    if operation is not None:
        headers["txn_operation"] = operation
    if txn_id is not None:
        headers["txn_id"] = str(txn_id)
    if label is not None:
        headers["label"] = label
    resp = http.put(f"/api/{db}/_stream_load_2pc", headers=headers)
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


def load_state(http: httpx.Client, db: str, label: str) -> str:
    return str(http.get(f"/api/{db}/get_load_state", params={"label": label}).json()["data"])


def test_precommitted_load_is_invisible_until_commit_and_commit_order_decides_ties(doris: DorisClient, db: str) -> None:
    doris.sql(db, DDL)
    first = assert_doris_result(precommit(doris.http, db, "flink_0_1", "1,two-phase\n2,only-2pc\n"), loaded=2)
    assert first["TwoPhaseCommit"] == "true" and first["TxnId"] > 0
    assert doris.rows(db, "SELECT k, v FROM t ORDER BY k") == []
    assert load_state(doris.http, db, "flink_0_1") == "PRECOMMITTED"

    again = precommit(doris.http, db, "flink_0_1", "9,x\n")
    assert_doris_result(again, status="Label Already Exists")
    assert again["ExistingJobStatus"] == "PRECOMMITTED" and again["TwoPhaseCommit"] == "true"
    match = LABEL_EXIST_PATTERN.search(again["Message"])
    assert match and match.groups() == ("flink_0_1", str(first["TxnId"]))

    # a plain load of key 1 commits while the two-phase one waits: the later commit wins the tie
    assert_doris_result(doris.stream_load(db, "t", "1,plain\n", {"column_separator": ","}))
    reply = operate(doris.http, db, "commit", txn_id=first["TxnId"])
    assert reply == {"status": "Success", "msg": f"transaction [{first['TxnId']}] commit successfully."}
    assert doris.rows(db, "SELECT k, v FROM t ORDER BY k") == [[1, "two-phase"], [2, "only-2pc"]]
    assert load_state(doris.http, db, "flink_0_1") == "VISIBLE"

    # a later plain load still wins over the committed one
    assert_doris_result(doris.stream_load(db, "t", "1,latest\n", {"column_separator": ","}))
    assert doris.rows(db, "SELECT v FROM t WHERE k = 1") == [["latest"]]

    txn = first["TxnId"]
    assert operate(doris.http, db, "commit", txn_id=txn) == {
        "status": "ANALYSIS_ERROR",
        "msg": f"TStatus: errCode = 2, detailMessage = transaction [{txn}] is already visible, not pre-committed.",
    }
    assert operate(doris.http, db, "abort", txn_id=txn)["msg"].endswith(
        f"transaction [{txn}] is already VISIBLE, could not abort."
    )


def test_abort_by_label_discards_the_rows_and_frees_the_label(doris: DorisClient, db: str) -> None:
    doris.sql(db, DDL)
    txn = assert_doris_result(precommit(doris.http, db, "lbl_abort", "5,gone\n"))["TxnId"]
    reply = operate(doris.http, db, "abort", label="lbl_abort")
    assert reply == {"status": "Success", "msg": "label [lbl_abort] abort successfully."}
    assert load_state(doris.http, db, "lbl_abort") == "ABORTED"
    assert operate(doris.http, db, "commit", txn_id=txn)["msg"] == (
        f"TStatus: errCode = 2, detailMessage = transaction [{txn}] is already aborted. abort reason: User Abort"
    )
    assert operate(doris.http, db, "abort", txn_id=txn)["msg"].endswith(
        f"transaction [{txn}] is already aborted, abort reason: User Abort"
    )
    assert doris.rows(db, "SELECT k FROM t") == []
    # an aborted label is free again; commit by label and txn id together names both in the reply
    txn2 = assert_doris_result(precommit(doris.http, db, "lbl_abort", "6,kept\n"))["TxnId"]
    both = operate(doris.http, db, "commit", label="lbl_abort", txn_id=txn2)
    assert both == {"status": "Success", "msg": f"label [lbl_abort] transaction [{txn2}] commit successfully."}
    assert doris.rows(db, "SELECT k, v FROM t") == [[6, "kept"]]


def test_commit_after_a_schema_change_aborts_the_precommitted_load(doris: DorisClient, db: str) -> None:
    doris.sql(db, DDL)
    assert_doris_result(doris.stream_load(db, "t", "1,kept\n", {"column_separator": ","}))
    txn = assert_doris_result(precommit(doris.http, db, "before_alter", "2,old-schema\n"))["TxnId"]
    doris.sql(db, "ALTER TABLE t ADD COLUMN n INT DEFAULT '7'")
    reply = operate(doris.http, db, "commit", txn_id=txn)
    assert reply["status"] == "ANALYSIS_ERROR"
    assert reply["msg"].startswith(f"TStatus: errCode = 2, detailMessage = transaction [{txn}] is already aborted.")
    assert "changed after the load was precommitted" in reply["msg"]
    assert load_state(doris.http, db, "before_alter") == "ABORTED"
    assert doris.rows(db, "SELECT k, v, n FROM t ORDER BY k") == [[1, "kept", 7]]
    # a load precommitted on the new schema commits
    txn2 = assert_doris_result(precommit(doris.http, db, "after_alter", "3,new-schema,5\n"))["TxnId"]
    assert operate(doris.http, db, "commit", txn_id=txn2)["status"] == "Success"
    assert doris.rows(db, "SELECT k, v, n FROM t ORDER BY k") == [[1, "kept", 7], [3, "new-schema", 5]]


@pytest.mark.parametrize(
    "operation, txn_id, label, status, msg",
    [
        pytest.param("commit", None, None, "FAILED", "No transaction id or label selected.", id="no-id-or-label"),
        pytest.param(None, 7, None, "FAILED", "No transaction operation('commit' or 'abort') selected.", id="no-op"),
        pytest.param(
            "Commit",
            7,
            None,
            "INTERNAL_ERROR",
            "transaction operation should be 'commit' or 'abort'",
            id="case-sensitive",
        ),
        pytest.param(
            "commit",
            987654321,
            None,
            "ANALYSIS_ERROR",
            "TStatus: errCode = 2, detailMessage = transaction [987654321] not found",
            id="unknown-txn",
        ),
        pytest.param(
            "commit",
            None,
            "nobody",
            "ANALYSIS_ERROR",
            "TStatus: errCode = 2, detailMessage = transaction not found, label=nobody",
            id="unknown-label",
        ),
    ],
)
def test_refused_operations_answer_as_doris(  # type: ignore[no-untyped-def]
    doris: DorisClient, db: str, operation, txn_id, label, status, msg
) -> None:
    assert operate(doris.http, db, operation, txn_id=txn_id, label=label) == {"status": status, "msg": msg}


def test_flink_label_probe_with_empty_body(doris: DorisClient, db: str) -> None:
    """`abortPreCommit`: an empty 2PC load per label; a fresh label precommits 0 rows and is aborted, a
    label held by a precommitted load answers Label Already Exists whose message names the txn to abort."""
    doris.sql(db, DDL)
    held = assert_doris_result(precommit(doris.http, db, "job_0_7", "1,a\n"))["TxnId"]
    probe = precommit(doris.http, db, "job_0_7", "")
    assert probe["TwoPhaseCommit"] == "true" and probe["Status"] == "Label Already Exists"
    match = LABEL_EXIST_PATTERN.search(probe["Message"])
    assert match is not None and int(match.group(2)) == held
    assert operate(doris.http, db, "abort", txn_id=held)["status"] == "Success"

    fresh = assert_doris_result(precommit(doris.http, db, "job_0_8", ""), total=0, loaded=0)
    assert fresh["TwoPhaseCommit"] == "true"
    assert operate(doris.http, db, "abort", txn_id=fresh["TxnId"])["status"] == "Success"
    assert doris.rows(db, "SELECT k FROM t") == []


@pytest.fixture
def short_timeout_server(spark, tmp_path: Path) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    """A second in-process server (same SparkSession) whose precommit timeout is one second."""
    from app.main import create_app
    from app.settings import Settings

    settings = Settings(data_dir=tmp_path / "data", precommit_timeout_seconds=1.0, mysql_port=0)
    with serving(create_app(settings, spark=spark), settings=settings) as (url,):
        with httpx.Client(base_url=url, auth=AUTH, timeout=60) as client:
            yield client


def test_precommitted_transaction_times_out_and_aborts(short_timeout_server: httpx.Client) -> None:
    http = short_timeout_server
    assert http.post("/api/query/default_cluster/x", json={"stmt": "CREATE DATABASE tdb"}).json()["code"] == 0
    assert http.post("/api/query/default_cluster/tdb", json={"stmt": DDL}).json()["code"] == 0
    txn = assert_doris_result(precommit(http, "tdb", "slow", "1,a\n"))["TxnId"]
    deadline = time.monotonic() + 15
    while load_state(http, "tdb", "slow") != "ABORTED":
        assert time.monotonic() < deadline, "the precommitted transaction never timed out"
        time.sleep(0.2)
    assert operate(http, "tdb", "commit", txn_id=txn)["msg"].endswith(
        f"transaction [{txn}] is already aborted. abort reason: timeout by txn manager"
    )
