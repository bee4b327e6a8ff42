"""Load integrity (issue 15): a load commits only into the table it was planned against, DROP during loads
follows Doris (refused while a transaction is COMMITTED unless FORCE; unfinished loads aborted), and an
acknowledged async group-commit load survives a failed group job.

Every case checks what the attack or the fault would have hit: the re-created table holds nothing of the old
load and stays loadable, the refused DROP left the table readable, the acknowledged rows become visible.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pymysql
import pytest

from tests.helpers import AUTH, DorisClient, assert_doris_result

DDL = "CREATE TABLE t (k INT NOT NULL, v VARCHAR(16)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"
DROPPED = "unknown table, tableId="
COMMITTED_REFUSAL = (
    "There are still some transactions in the COMMITTED state waiting to be completed. The {what} cannot be "
    'dropped. If you want to forcibly drop(cannot be recovered), please use "{statement}".'
)


def load_state(doris: DorisClient, db: str, label: str) -> str:
    return str(doris.http.get(f"/api/{db}/get_load_state", params={"label": label}).json()["data"])


def wait_for(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class TrickledLoad:
    """A stream load whose body stops after its first line until `finish()`: the load is PREPARE and
    receiving its body meanwhile."""

    def __init__(self, base_url: str, db: str, label: str, headers: dict[str, str]) -> None:
        self.release = threading.Event()
        self.reply: httpx.Response | None = None

        def body() -> Iterator[bytes]:
            yield b"1,old-table\n"
            self.release.wait(30)
            yield b"2,old-table\n"

        def send() -> None:
            with httpx.Client(base_url=base_url, auth=AUTH, timeout=60) as http:
                self.reply = http.put(
                    f"/api/{db}/t/_stream_load",
                    content=body(),
                    headers={"label": label, "column_separator": ",", **headers},
                )

        self.thread = threading.Thread(target=send, daemon=True)
        self.thread.start()

    def finish(self) -> httpx.Response:
        self.release.set()
        self.thread.join(60)
        assert self.reply is not None
        return self.reply


def group_commit_ddl(mode: str) -> str:
    """The table's `group_commit_mode` puts its loads through group commit and, unlike the header, keeps
    the client's label (so a test can follow the load's state)."""
    return f'{DDL} PROPERTIES ("group_commit_mode" = "{mode}")'


@pytest.mark.parametrize(
    "ddl, drop",
    [
        pytest.param(DDL, "DROP TABLE t", id="plain-load-fails-after-drop-and-recreate"),
        pytest.param(group_commit_ddl("sync_mode"), "DROP TABLE t FORCE", id="sync-group-commit-load-fails"),
        pytest.param(group_commit_ddl("async_mode"), "DROP TABLE t", id="async-group-commit-load-is-not-acknowledged"),
    ],
)
def test_a_load_receiving_its_body_while_its_table_is_dropped_and_recreated_fails_and_leaves_nothing(
    doris: DorisClient, db: str, base_url: str, ddl: str, drop: str
) -> None:
    doris.sql(db, ddl)
    load = TrickledLoad(base_url, db, "old_table_load", {})
    wait_for(lambda: load_state(doris, db, "old_table_load") == "PREPARE", "the load to be planned")
    doris.sql(db, drop)  # no COMMITTED transaction: Doris drops, the running load is aborted
    doris.sql(db, ddl)
    reply = load.finish().json()  # a group-commit reply has GroupCommit keys instead of TwoPhaseCommit
    assert reply["Status"] == "Fail" and DROPPED in reply["Message"], reply
    assert load_state(doris, db, "old_table_load") == "ABORTED"
    time.sleep(0.3)  # longer than a group-commit interval: nothing of the old load lands late
    assert doris.rows(db, "SELECT k, v FROM t") == []
    reply = doris.stream_load(db, "t", "3,new-table\n", headers={"column_separator": ","}).json()
    assert reply["Status"] == "Success" and reply["NumberLoadedRows"] == 1, reply
    wait_for(lambda: doris.rows(db, "SELECT k, v FROM t") == [[3, "new-table"]], "the new table's row")


def precommit(doris: DorisClient, db: str, label: str, body: str) -> int:
    reply = doris.stream_load(
        db, "t", body, headers={"label": label, "two_phase_commit": "true", "column_separator": ","}
    )
    return int(assert_doris_result(reply, loaded=1)["TxnId"])


def commit(doris: DorisClient, db: str, txn_id: int) -> dict[str, Any]:
    resp = doris.http.put(f"/api/{db}/_stream_load_2pc", headers={"txn_id": str(txn_id), "txn_operation": "commit"})
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


def test_a_precommitted_load_cannot_be_committed_into_a_recreated_table(doris: DorisClient, db: str) -> None:
    doris.sql(db, DDL)
    txn_id = precommit(doris, db, "flink_old_table", "1,old-table\n")
    doris.sql(db, "DROP TABLE t")
    doris.sql(db, DDL)
    reply = commit(doris, db, txn_id)
    assert reply["status"] == "ANALYSIS_ERROR" and DROPPED in reply["msg"], reply
    assert load_state(doris, db, "flink_old_table") == "ABORTED"
    assert doris.rows(db, "SELECT k, v FROM t") == []
    assert_doris_result(doris.stream_load(db, "t", "2,new-table\n", headers={"column_separator": ","}), loaded=1)
    assert doris.rows(db, "SELECT k, v FROM t") == [[2, "new-table"]]


def mysql_error(port: int, db: str, stmt: str) -> str:
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=db)
    try:
        with pytest.raises(pymysql.MySQLError) as caught, conn.cursor() as cur:
            cur.execute(stmt)
        return str(caught.value)
    finally:
        conn.close()


def test_drop_is_refused_while_a_transaction_is_committed_and_force_aborts_it(
    doris: DorisClient, db: str, mysql_port: int, server_settings: Any
) -> None:
    doris.sql(db, DDL)
    txn_id = precommit(doris, db, "flink_committed", "1,committed\n")
    # a real publish failure: the precommitted files are damaged, so the commit stops after COMMITTED
    damaged = list(Path(server_settings.resolved_warehouse).glob(f"**/txn_{txn_id}/*.parquet"))
    assert damaged
    for path in damaged:
        path.write_bytes(b"")
    assert commit(doris, db, txn_id)["status"] != "Success"
    assert load_state(doris, db, "flink_committed") == "COMMITTED"

    table_refusal = COMMITTED_REFUSAL.format(what="table [t]", statement="DROP table FORCE")
    db_refusal = COMMITTED_REFUSAL.format(what=f"database [{db}]", statement="DROP database FORCE")
    assert table_refusal in doris.sql_error(db, "DROP TABLE t")
    assert table_refusal in mysql_error(mysql_port, db, "DROP TABLE t")
    assert db_refusal in doris.sql_error(db, f"DROP DATABASE {db}")
    assert doris.rows(db, "SELECT k FROM t") == []  # the refused drops left the table in place

    doris.sql(db, "DROP TABLE t FORCE")
    assert load_state(doris, db, "flink_committed") == "ABORTED"
    doris.sql(db, DDL)
    assert_doris_result(doris.stream_load(db, "t", "2,after-force\n", headers={"column_separator": ","}), loaded=1)
    assert doris.rows(db, "SELECT k, v FROM t") == [[2, "after-force"]]


def table_location(server_settings: Any, db: str, table: str) -> Path:
    from tables.catalog import Catalog

    catalog = Catalog(uri=server_settings.resolved_catalog_uri, warehouse=server_settings.resolved_warehouse)
    return catalog.load(db, table).location


def test_an_acknowledged_async_load_whose_group_job_fails_is_replayed_until_visible(
    doris: DorisClient, db: str, server_settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    doris.sql(db, group_commit_ddl("async_mode"))
    # a real disk fault: the table's data directory cannot be created, so the group's job fails
    blocker = table_location(server_settings, db, "t") / "data"
    blocker.write_text("not a directory")
    caplog.set_level(logging.WARNING, logger="spark_runner.group_commit")
    headers = {"label": "async_survives", "column_separator": ","}
    reply = doris.stream_load(db, "t", "1,acknowledged\n", headers=headers).json()
    assert reply["Status"] == "Success" and reply["GroupCommitMode"] == "async_mode", reply
    wait_for(lambda: any("replay 1 in" in r.getMessage() for r in caplog.records), "the group job to fail")
    assert doris.rows(db, "SELECT k FROM t") == []
    assert load_state(doris, db, "async_survives") == "PREPARE"  # still owed, not aborted

    blocker.unlink()  # the fault is repaired: the replay commits the acknowledged rows
    wait_for(lambda: doris.rows(db, "SELECT k, v FROM t") == [[1, "acknowledged"]], "the replayed rows")
    assert load_state(doris, db, "async_survives") == "VISIBLE"
