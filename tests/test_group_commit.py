"""Group commit: concurrent small loads to one table share one Spark job and one snapshot, each load keeps
its own reply, label and counts; sync_mode answers once visible, async_mode once the payload is durable
in the write-ahead directory, which start-up replays after a crash."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tests.helpers import AUTH, DorisClient

CLIENTS = 32
LOADS_PER_CLIENT = (
    6  # 192 loads: the 32 x 50 scaled down to keep the suite short (bench/group_commit.py runs 32 x 50)
)
DDL = (
    "CREATE TABLE {name} (k INT NOT NULL, v VARCHAR(32)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2"
    ' PROPERTIES ("group_commit_mode" = "{mode}")'
)
GROUP_KEYS = ("GroupCommit", "GroupCommitMode", "LoadId")


def assert_group_reply(body: dict[str, Any], *, mode: str, status: str = "Success", loaded: int | None = None) -> None:
    """Doris's group-commit reply: GroupCommit fields replace TwoPhaseCommit and the txn timings."""
    assert body["Status"] == status, body
    assert body["GroupCommit"] is True and body["GroupCommitMode"] == mode, body
    for absent in ("TwoPhaseCommit", "BeginTxnTimeMs", "CommitAndPublishTimeMs"):
        assert absent not in body, body
    if loaded is not None:
        assert body["NumberLoadedRows"] == loaded, body


def snapshot_count(server_settings: Any, db: str, table: str) -> int:
    from tables.catalog import Catalog

    catalog = Catalog(uri=server_settings.resolved_catalog_uri, warehouse=server_settings.resolved_warehouse)
    return len(catalog.load(db, table).iceberg.snapshots())


def test_concurrent_one_row_loads_share_jobs_and_snapshots(doris: DorisClient, db: str, server_settings: Any) -> None:
    doris.sql(db, DDL.format(name="t", mode="sync_mode"))
    labels: list[str] = []

    def client(c: int) -> list[dict[str, Any]]:
        out = []
        with httpx.Client(base_url=doris.base_url, auth=AUTH, timeout=120) as http:
            for i in range(LOADS_PER_CLIENT):
                label = f"gc_{c}_{i}"
                labels.append(label)
                resp = http.put(
                    f"/api/{db}/t/_stream_load",
                    content=f"{c * 1000 + i},v{c}_{i}\n".encode(),
                    headers={"column_separator": ",", "label": label},
                )
                out.append(resp.json())
        return out

    started = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        replies = [r for rs in pool.map(client, range(CLIENTS)) for r in rs]
    elapsed = time.monotonic() - started
    loads = CLIENTS * LOADS_PER_CLIENT
    for body in replies:
        assert_group_reply(body, mode="sync_mode", loaded=1)
    assert sorted(b["Label"] for b in replies) == sorted(labels)
    assert len({b["TxnId"] for b in replies}) == loads
    rows = doris.rows(db, "SELECT k, v FROM t ORDER BY k")
    assert rows == sorted([c * 1000 + i, f"v{c}_{i}"] for c in range(CLIENTS) for i in range(LOADS_PER_CLIENT))
    snapshots = snapshot_count(server_settings, db, "t")
    assert snapshots <= loads / 8, f"{snapshots} snapshots for {loads} loads: the loads were not grouped"
    print(f"group commit: {loads} loads in {elapsed:.1f} s = {loads / elapsed:.0f} loads/s, {snapshots} snapshots")
    assert doris.http.get(f"/api/{db}/get_load_state", params={"label": "gc_3_4"}).json()["data"] == "VISIBLE"


def test_loads_of_one_group_apply_in_arrival_order_and_fail_alone(doris: DorisClient, db: str) -> None:
    """Async loads fired back to back land in one group: the later one wins the key. A load over its
    filter ratio fails with its own error log while the others of its group commit."""
    doris.sql(db, DDL.format(name="t", mode="off_mode"))
    headers = {"column_separator": ",", "group_commit": "async_mode"}
    for i in range(6):
        body = doris.stream_load(db, "t", f"1,round{i}\n2,r{i}\n", headers).json()
        assert_group_reply(body, mode="async_mode", loaded=2)

    def sync_load(data: str) -> dict[str, Any]:
        ratio = {"max_filter_ratio": "0.5"} if data.startswith("y") else {}
        headers = {"column_separator": ",", "group_commit": "sync_mode", **ratio}
        return doris.stream_load(db, "t", data, headers).json()

    with ThreadPoolExecutor(4) as pool:
        good, bad, other, within = pool.map(sync_load, ["3,ok\n", "x,bad\n4,fine\n", "5,ok\n", "y,bad\n6,ok\n"])
    assert_group_reply(good, mode="sync_mode", loaded=1)
    assert_group_reply(other, mode="sync_mode", loaded=1)
    assert_group_reply(bad, mode="sync_mode", status="Fail", loaded=0)
    assert bad["Message"] == "[DATA_QUALITY_ERROR]too many filtered rows" and bad["NumberFilteredRows"] == 1
    assert "x,bad" in doris.http.get(bad["ErrorURL"]).text
    # within its filter ratio: loaded, and its filtered row in its own error log (contract: on success too)
    assert_group_reply(within, mode="sync_mode", loaded=1)
    assert within["NumberFilteredRows"] == 1 and "ErrorURL" not in good, (within, good)
    assert "y,bad" in (log := doris.http.get(within["ErrorURL"]).text) and "x,bad" not in log
    deadline = time.monotonic() + 30
    while doris.rows(db, "SELECT count(*) FROM t") != [[5]]:
        assert time.monotonic() < deadline, doris.rows(db, "SELECT * FROM t")
        time.sleep(0.2)
    expected = [[1, "round5"], [2, "r5"], [3, "ok"], [5, "ok"], [6, "ok"]]
    assert doris.rows(db, "SELECT k, v FROM t ORDER BY k") == expected


def test_a_label_used_twice_in_one_group_is_refused_once(doris: DorisClient, db: str) -> None:
    doris.sql(db, DDL.format(name="t", mode="sync_mode"))
    label = f"dup_{uuid.uuid4().hex[:8]}"
    barrier = threading.Barrier(2)

    def load(k: int) -> dict[str, Any]:
        barrier.wait()
        return doris.stream_load(db, "t", f"{k},x\n", {"column_separator": ",", "label": label}).json()

    with ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(load, [1, 2]))
    statuses = sorted(r["Status"] for r in replies)
    assert statuses == ["Label Already Exists", "Success"], replies
    assert len(doris.rows(db, "SELECT k FROM t")) == 1


def test_an_idle_group_worker_is_forgotten_and_a_later_load_makes_another(
    doris: DorisClient, db: str, served_app: Any, monkeypatch: Any
) -> None:
    """A table's group-commit worker (its queue) is forgotten once idle (here after 0.5 s, noticed by the next
    grouped load of any table): workers of dropped tables do not pile up in a long-running server, and the next
    grouped load of a table of that name is served by a new one. No thread is a table's own: groups run on at
    most `INSERT_THREADS` threads over every table."""
    from spark_runner import group_commit

    monkeypatch.setattr(group_commit, "IDLE_EXIT_S", 0.5)
    committer = served_app.state.services.group_commit
    doris.sql(db, DDL.format(name="other", mode="sync_mode"))
    for round_ in range(2):
        doris.sql(db, DDL.format(name="idle", mode="sync_mode"))
        reply = doris.stream_load(db, "idle", f"{round_},v\n", headers={"column_separator": ","}).json()
        assert_group_reply(reply, mode="sync_mode", loaded=1)
        assert doris.rows(db, "SELECT k FROM idle") == [[round_]]
        assert (db.lower(), "idle") in committer._workers
        doris.sql(db, "DROP TABLE idle")
        time.sleep(1.1)  # idle past IDLE_EXIT_S, and past the once-a-second sweep
        reply = doris.stream_load(db, "other", f"{round_},v\n", headers={"column_separator": ","}).json()
        assert_group_reply(reply, mode="sync_mode", loaded=1)
        assert (db.lower(), "idle") not in committer._workers
    assert committer.rounds.threads() <= group_commit.INSERT_THREADS
    assert not [t for t in threading.enumerate() if t.name.startswith(f"group-commit-{db}")]


def test_an_async_load_whose_table_is_dropped_while_its_body_comes_in_fails_and_is_not_owed(
    doris: DorisClient, db: str, served_app: Any
) -> None:
    """Its label is claimed when its head is in; the table is dropped before the rest of its body comes: the load
    is not acknowledged (its transaction's state is read with its step batch's, after its WAL record is synced)
    and its record is not owed (the WAL holds nothing of it)."""
    import base64
    import socket
    from urllib.parse import urlsplit

    doris.sql(db, DDL.format(name="gone", mode="async_mode"))
    body = b"1,a\n2,b\n"
    url = urlsplit(doris.base_url)
    auth = base64.b64encode(f"{AUTH[0]}:{AUTH[1]}".encode()).decode()
    head = (
        f"PUT /api/{db}/gone/_stream_load HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Basic {auth}\r\n"
        f"label: gone_1\r\ncolumn_separator: ,\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    backlog = served_app.state.services.group_commit.backlog
    with socket.create_connection((url.hostname, url.port), timeout=120) as sock:
        sock.sendall(head + body[:3])
        deadline = time.monotonic() + 60
        while doris.sql(db, "SHOW TRANSACTION WHERE LABEL = 'gone_1'").get("data") in (None, []):
            assert time.monotonic() < deadline, "the load never claimed its label"
            time.sleep(0.05)
        doris.sql(db, "DROP TABLE gone")
        sock.sendall(body[3:])
        reply = b""
        while not reply.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    import json

    answer = json.loads(reply.split(b"\r\n\r\n", 1)[1])
    assert answer["Status"] == "Fail" and "is already aborted" in answer["Message"], answer
    assert backlog.size() == (0, 0)
