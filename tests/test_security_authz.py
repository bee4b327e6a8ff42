"""Privileges reach what they name and nothing else (red-team audit of the HTTP load surface, findings 1, 6, 7).

- 2PC: a user with LOAD on one table decides only that table's transactions, whichever route, txn id or label
  it names; another table's transaction is answered as one that does not exist (its state stays unknown).
- Table names are case-sensitive, as in Doris: a grant on `d.T2` (no such table) reaches nothing, not `d.t2`.
- `/metrics` answers without credentials but names no database or table; the per-table gauge needs a login and
  shows the tables that user may see.

Users and grants are made with Doris's account statements, as root; every request goes to the real server.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.helpers import AUTH, DorisClient, assert_doris_result

PASSWORD = "p1"
TABLE = "(k INT, v VARCHAR(16)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"
CSV = {"column_separator": ",", "Expect": "100-continue"}


@dataclass(frozen=True)
class World:
    base_url: str
    db: str
    user: str  # LOAD on {db}.t1 only

    def as_user(self) -> DorisClient:
        return DorisClient(self.base_url, auth=(self.user, PASSWORD))


@pytest.fixture
def world(doris: DorisClient, db: str, base_url: str) -> World:
    doris.sql(db, f"CREATE TABLE t1 {TABLE}; CREATE TABLE t2 {TABLE}")
    user = f"u1_{uuid.uuid4().hex[:6]}"
    doris.sql(db, f"CREATE USER '{user}'@'%' IDENTIFIED BY '{PASSWORD}'; GRANT LOAD_PRIV ON {db}.t1 TO '{user}'@'%'")
    return World(base_url, db, user)


def two_phase(client: DorisClient, path: str, operation: str, **headers: str) -> dict[str, Any]:
    resp = client.http.put(path, headers={"txn_operation": operation, **headers})
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def not_found(text: str) -> dict[str, str]:
    return {"status": "ANALYSIS_ERROR", "msg": f"TStatus: errCode = 2, detailMessage = {text}"}


def precommit(client: DorisClient, db: str, table: str, label: str, body: str) -> int:
    headers = {**CSV, "label": label, "two_phase_commit": "true"}
    reply = assert_doris_result(client.stream_load(db, table, body, headers))
    return int(reply["TxnId"])


def load_state(doris: DorisClient, db: str, label: str) -> str:
    return str(doris.http.get(f"/api/{db}/get_load_state", params={"label": label}).json()["data"])


# -- 2PC -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["commit", "abort"])
def test_a_one_table_user_cannot_decide_another_tables_transaction_by_txn_id(
    doris: DorisClient, world: World, operation: str
) -> None:
    db, u1 = world.db, world.as_user()
    txn = precommit(doris, db, "t2", f"victim_{operation}", "1,root\n")
    # the reply is the one for a transaction that never existed: nothing tells u1 the id is taken
    assert two_phase(u1, f"/api/{db}/t1/_stream_load_2pc", operation, txn_id=str(txn)) == not_found(
        f"transaction [{txn}] not found"
    )
    assert two_phase(u1, f"/api/{db}/t1/_stream_load_2pc", operation, txn_id="987654321") == not_found(
        "transaction [987654321] not found"
    )
    assert load_state(doris, db, f"victim_{operation}") == "PRECOMMITTED"
    assert doris.rows(db, "SELECT count(*) FROM t2") == [[0]]
    # root still decides it, by the database form
    assert two_phase(doris, f"/api/{db}/_stream_load_2pc", "commit", txn_id=str(txn)) == {
        "status": "Success",
        "msg": f"transaction [{txn}] commit successfully.",
    }
    assert doris.rows(db, "SELECT k, v FROM t2") == [[1, "root"]]


@pytest.mark.parametrize("operation", ["commit", "abort"])
def test_a_one_table_user_cannot_decide_another_tables_transaction_by_label(
    doris: DorisClient, world: World, operation: str
) -> None:
    db, u1 = world.db, world.as_user()
    label = f"victim_label_{operation}"
    txn = precommit(doris, db, "t2", label, "2,root\n")
    assert two_phase(u1, f"/api/{db}/t1/_stream_load_2pc", operation, label=label) == not_found(
        f"transaction not found, label={label}"
    )
    assert two_phase(u1, f"/api/{db}/t1/_stream_load_2pc", operation, label="never_used") == not_found(
        "transaction not found, label=never_used"
    )
    assert load_state(doris, db, label) == "PRECOMMITTED"
    assert two_phase(doris, f"/api/{db}/t2/_stream_load_2pc", "abort", label=label) == {
        "status": "Success",
        "msg": f"label [{label}] abort successfully.",
    }
    assert load_state(doris, db, label) == "ABORTED"
    # a decided transaction of another table does not give its state away either
    assert two_phase(u1, f"/api/{db}/t1/_stream_load_2pc", "abort", txn_id=str(txn)) == not_found(
        f"transaction [{txn}] not found"
    )


def test_a_one_table_user_cannot_abort_another_users_running_load(
    doris: DorisClient, world: World, base_url: str
) -> None:
    """A plain (not 2PC) load of t2 still receiving its body is PREPARE: abort by label accepts that state."""
    db, u1 = world.db, world.as_user()
    label = f"running_{uuid.uuid4().hex[:6]}"
    release = threading.Event()
    replies: list[dict[str, Any]] = []

    def body() -> Iterator[bytes]:
        yield b"3,slow\n"
        release.wait(60)
        yield b"4,slow\n"

    def send() -> None:
        with httpx.Client(base_url=base_url, auth=AUTH, timeout=120) as http:
            resp = http.put(f"/api/{db}/t2/_stream_load", content=body(), headers={**CSV, "label": label})
            replies.append(resp.json())

    sender = threading.Thread(target=send)
    sender.start()
    try:
        deadline = time.monotonic() + 60
        while load_state(doris, db, label) != "PREPARE":
            assert time.monotonic() < deadline, "the load never began"
            time.sleep(0.1)
        assert two_phase(u1, f"/api/{db}/t1/_stream_load_2pc", "abort", label=label) == not_found(
            f"transaction not found, label={label}"
        )
    finally:
        release.set()
        sender.join(120)
    assert_doris_result(replies[0], loaded=2)
    assert doris.rows(db, "SELECT k FROM t2 ORDER BY k") == [[3], [4]]


def test_the_table_form_decides_only_the_transactions_of_its_own_table(doris: DorisClient, world: World) -> None:
    """Even root: `/api/db/t1/_stream_load_2pc` names t1, so t2's transaction is not found there."""
    db, u1 = world.db, world.as_user()
    other = precommit(doris, db, "t2", "root_t2", "5,root\n")
    assert two_phase(doris, f"/api/{db}/t1/_stream_load_2pc", "commit", txn_id=str(other)) == not_found(
        f"transaction [{other}] not found"
    )
    assert two_phase(doris, f"/api/{db}/t2/_stream_load_2pc", "commit", txn_id=str(other))["status"] == "Success"
    # u1's own transaction, through its table's URL: by id and by label
    own = precommit(u1, db, "t1", "own_1", "6,u1\n")
    assert two_phase(u1, f"/api/{db}/t1/_stream_load_2pc", "commit", txn_id=str(own)) == {
        "status": "Success",
        "msg": f"transaction [{own}] commit successfully.",
    }
    precommit(u1, db, "t1", "own_2", "7,u1\n")
    assert two_phase(u1, f"/api/{db}/t1/_stream_load_2pc", "abort", label="own_2") == {
        "status": "Success",
        "msg": "label [own_2] abort successfully.",
    }
    assert doris.rows(db, "SELECT k FROM t1 ORDER BY k") == [[6]]
    assert doris.rows(db, "SELECT k FROM t2 ORDER BY k") == [[5]]


# -- case-sensitive table names ------------------------------------------------------------------------------------


def test_a_grant_on_another_case_of_a_table_name_reaches_nothing(doris: DorisClient, db: str, base_url: str) -> None:
    doris.sql(db, f"CREATE TABLE t2 {TABLE}")
    user = f"u2_{uuid.uuid4().hex[:6]}"
    doris.sql(db, f"CREATE USER '{user}'@'%' IDENTIFIED BY '{PASSWORD}'")
    doris.sql(db, f"GRANT LOAD_PRIV, SELECT_PRIV ON {db}.T2 TO '{user}'@'%'")  # no table T2: Doris accepts it
    u2 = DorisClient(base_url, auth=(user, PASSWORD))

    reply = u2.stream_load(db, "T2", "1,x\n", CSV).json()
    assert reply["Status"] == "Fail" and "T2" in reply["Message"], reply
    schema = u2.http.get(f"/api/{db}/T2/_schema").json()
    assert schema["code"] != 0 and "properties" not in str(schema.get("data")), schema
    assert "T2" in u2.sql_error(db, f"INSERT INTO {db}.T2 VALUES (1, 'x')")
    assert "T2" in u2.sql_error(db, f"SELECT * FROM {db}.T2")
    assert doris.rows(db, "SELECT count(*) FROM t2") == [[0]]
    # root too: T2 is not t2, as in Doris with `lower_case_table_names` = 0
    assert "T2" in doris.sql_error(db, "SELECT * FROM T2")
    assert doris.stream_load(db, "T2", "1,x\n", CSV).json()["Status"] == "Fail"
    assert_doris_result(doris.stream_load(db, "t2", "1,x\n", CSV), loaded=1)


def test_tables_differing_only_in_case_are_two_tables(doris: DorisClient, db: str) -> None:
    doris.sql(db, f"CREATE TABLE t {TABLE}; CREATE TABLE T {TABLE}")
    assert_doris_result(doris.stream_load(db, "T", "1,upper\n", CSV), loaded=1)
    assert_doris_result(doris.stream_load(db, "t", "2,lower\n", CSV), loaded=1)
    assert doris.rows(db, "SELECT k, v FROM T") == [[1, "upper"]]
    assert doris.rows(db, "SELECT k, v FROM t") == [[2, "lower"]]


# -- /metrics --------------------------------------------------------------------------------------------------


def test_metrics_without_credentials_name_no_database_or_table(doris: DorisClient, world: World, base_url: str) -> None:
    db = world.db
    for _ in range(2):
        assert_doris_result(doris.stream_load(db, "t2", "1,x\n", CSV), loaded=1)
    anonymous = httpx.get(f"{base_url}/metrics", timeout=30)
    assert anonymous.status_code == 200
    assert db not in anonymous.text and "doris_table_rowsets" not in anonymous.text
    maximum = [line for line in anonymous.text.splitlines() if line.startswith("doris_max_table_rowsets ")]
    assert len(maximum) == 1 and float(maximum[0].split()[1]) >= 2, maximum

    as_root = httpx.get(f"{base_url}/metrics", auth=AUTH, timeout=30).text
    assert f'doris_table_rowsets{{db="{db}",table="t2"}} 2.0' in as_root
    assert f'doris_table_rowsets{{db="{db}",table="t1"}} 0.0' in as_root
    as_user = httpx.get(f"{base_url}/metrics", auth=(world.user, PASSWORD), timeout=30).text
    assert f'doris_table_rowsets{{db="{db}",table="t1"}} 0.0' in as_user  # the table it holds a privilege on
    assert 'table="t2"' not in as_user

    wrong = httpx.get(f"{base_url}/metrics", auth=(world.user, "nope"), timeout=30)
    assert wrong.json()["code"] == 401 and "Access denied for user" in wrong.json()["data"]
    assert db not in wrong.text


def test_a_one_table_user_decides_its_own_transactions_by_the_database_form(doris: DorisClient, world: World) -> None:
    """Doris's FE checks the password at `/api/{db}/_stream_load_2pc` and LOAD on the transaction's tables later:
    the form the Flink and Spark connectors commit with works for a user granted one table, for its table only."""
    db, u1 = world.db, world.as_user()
    mine = precommit(u1, db, "t1", "mine_by_db_form", "1,u1\n")
    theirs = precommit(doris, db, "t2", "theirs_by_db_form", "2,root\n")
    assert two_phase(u1, f"/api/{db}/_stream_load_2pc", "commit", txn_id=str(mine)) == {
        "status": "Success",
        "msg": f"transaction [{mine}] commit successfully.",
    }
    assert two_phase(u1, f"/api/{db}/_stream_load_2pc", "abort", txn_id=str(theirs)) == not_found(
        f"transaction [{theirs}] not found"
    )
    assert doris.rows(db, "SELECT k, v FROM t1") == [[1, "u1"]]
    assert load_state(doris, db, "theirs_by_db_form") == "PRECOMMITTED"
