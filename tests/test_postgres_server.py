"""A server on a PostgreSQL catalog (`SL_CATALOG_URI=postgresql+psycopg://...`): the Iceberg catalog and the store
(labels, two-phase state, accounts, broker-load jobs) live in that database, and answer the same after a restart of
the server; a restart of the database under the running server fails loads clearly while it is down, and the next
load after it is back works without restarting the server. One server process serves the module (a JVM start is
the expensive part); `make test-full` restarts it once (`full`: a second JVM start)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.helpers import AUTH
from tests.postgres import PostgresServer
from tests.server_process import ServerProcess

DB = "pg"
DDL = "CREATE TABLE t (k INT NOT NULL, v VARCHAR(32)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("broker-files")


@pytest.fixture(scope="module")
def server(postgres_uri: str, files: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("pg-server") / "data"
    proc = ServerProcess(
        data_dir,
        data_dir.parent / "server.log",
        SL_CATALOG_URI=postgres_uri,
        SL_BROKER_ALLOWED_ROOTS=json.dumps([str(files)]),
        SL_COMPACTION_INTERVAL_SECONDS="0",
    )
    proc.start()
    yield proc
    proc.kill()


def rows(server: ServerProcess) -> list[list[object]]:
    return [list(r) for r in server.sql(DB, "SELECT k, v FROM t ORDER BY k")["data"]]


def two_phase(server: ServerProcess, operation: str, txn_id: int) -> dict[str, object]:
    resp = httpx.put(
        f"{server.base_url}/api/{DB}/_stream_load_2pc",
        headers={"txn_operation": operation, "txn_id": str(txn_id)},
        auth=AUTH,
        timeout=60,
    )
    return resp.json()  # type: ignore[no-any-return]


def show_load(server: ServerProcess, label: str) -> dict[str, object]:
    data = server.sql(DB, f"SHOW LOAD WHERE LABEL = '{label}'")
    names = [c["name"] for c in data["meta"]]
    (row,) = data["data"]
    return dict(zip(names, row, strict=True))


def load_as_loader(server: ServerProcess, label: str, data: bytes) -> dict[str, object]:
    resp = httpx.put(
        f"{server.base_url}/api/{DB}/t/_stream_load",
        content=data,
        headers={"label": label, "column_separator": ","},
        auth=("loader", "secret"),
        timeout=60,
    )
    return resp.json()  # type: ignore[no-any-return]


def test_loads_two_phase_accounts_and_broker_jobs_live_in_postgresql(server: ServerProcess, files: Path) -> None:
    server.sql("information_schema", f"CREATE DATABASE {DB}")
    server.sql(DB, DDL)
    assert server.load(DB, "t", b"1,a\n2,b\n", label="first")["Status"] == "Success"
    committed = server.load(DB, "t", b"3,c\n", label="committed", two_phase_commit="true")
    assert committed["Status"] == "Success", committed
    assert server.label_state(DB, "committed") == "PRECOMMITTED"
    reply = two_phase(server, "commit", int(str(committed["TxnId"])))
    assert reply["status"] == "Success", reply
    kept = server.load(DB, "t", b"5,e\n", label="kept", two_phase_commit="true")  # committed after a restart
    assert kept["Status"] == "Success", kept
    (files / "rows.csv").write_text("4,d\n")
    server.sql(DB, f'LOAD LABEL {DB}.broker (DATA INFILE("{files}/rows.csv") INTO TABLE t COLUMNS TERMINATED BY ",")')
    server.sql(DB, "CREATE USER 'loader'@'%' IDENTIFIED BY 'secret'")
    server.sql(DB, f"GRANT LOAD_PRIV, SELECT_PRIV ON {DB}.* TO 'loader'@'%'")
    deadline = time.monotonic() + 60
    while show_load(server, "broker")["State"] != "FINISHED":
        assert time.monotonic() < deadline, show_load(server, "broker")
        time.sleep(0.2)
    by_loader = load_as_loader(server, "by_loader", b"6,f\n")
    assert by_loader["Status"] == "Success", by_loader
    assert rows(server) == [[1, "a"], [2, "b"], [3, "c"], [4, "d"], [6, "f"]]
    assert (server.label_state(DB, "committed"), server.label_state(DB, "kept")) == ("VISIBLE", "PRECOMMITTED")
    assert not (server.data_dir / "transactions.db").exists()  # the store is PostgreSQL, not a file
    assert not (server.data_dir / "catalog.db").exists()


@pytest.mark.full  # 32 loads at once: ~10-15 s
def test_32_concurrent_loads_stay_within_the_servers_connection_pool(
    server: ServerProcess, postgres: PostgresServer, postgres_uri: str
) -> None:
    """`SL_CATALOG_POOL_SIZE` (default 10) bounds the server's connections to PostgreSQL: 32 loads at once into
    two tables all succeed, and pg_stat_activity never shows more than 10 connections to the database."""
    import psycopg

    database = postgres_uri.rsplit("/", 1)[1]
    server.sql("information_schema", f"CREATE DATABASE IF NOT EXISTS {DB}")
    for table in ("p1", "p2"):
        server.sql(DB, DDL.replace("TABLE t", f"TABLE {table}"))
    seen: list[int] = []
    done = threading.Event()

    def sample() -> None:
        with psycopg.connect(postgres.dsn(), autocommit=True) as conn:  # the `postgres` database: not counted
            while not done.is_set():
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)).fetchone()
                seen.append(int(row[0]) if row else 0)
                time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(32) as pool:
            replies = list(pool.map(lambda i: server.load(DB, f"p{i % 2 + 1}", f"{i},v{i}\n".encode()), range(32)))
    finally:
        done.set()
        sampler.join()
    assert [r["Status"] for r in replies] == ["Success"] * 32, [r for r in replies if r["Status"] != "Success"]
    counts = [server.sql(DB, f"SELECT count(*) FROM p{n}")["data"][0][0] for n in (1, 2)]
    assert counts == [16, 16]
    assert len(seen) > 10 and max(seen) <= 10, (max(seen), seen)


@pytest.mark.full  # a second JVM start (~25 s on a busy machine)
def test_all_of_it_after_a_restart_of_the_server(server: ServerProcess) -> None:
    server.kill()  # SIGKILL: nothing of the server survives but the database and the warehouse
    server.start()
    assert (server.label_state(DB, "first"), server.label_state(DB, "committed")) == ("VISIBLE", "VISIBLE")
    assert server.label_state(DB, "kept") == "PRECOMMITTED"  # its state survived: commit it now
    precommitted = server.sql(DB, "SHOW TRANSACTION WHERE LABEL = 'kept'")
    assert precommitted["data"], precommitted
    txn_id = next(int(r[0]) for r in precommitted["data"])
    reply = two_phase(server, "commit", txn_id)
    assert reply["status"] == "Success", reply
    assert server.label_state(DB, "kept") == "VISIBLE"
    assert show_load(server, "broker")["State"] == "FINISHED"
    again = server.load(DB, "t", b"1,z\n", label="first")
    assert again["Status"] == "Label Already Exists", again
    by_loader = load_as_loader(server, "by_loader_again", b"7,g\n")
    assert by_loader["Status"] == "Success", by_loader
    assert rows(server) == [[1, "a"], [2, "b"], [3, "c"], [4, "d"], [5, "e"], [6, "f"], [7, "g"]]


def test_a_database_restart_under_the_server_fails_loads_clearly_and_is_survived(
    server: ServerProcess, postgres: PostgresServer
) -> None:
    postgres.stop()
    try:
        down = server.load(DB, "t", b"8,h\n", label="while_down")
        assert down["Status"] == "Fail", down
        assert str(down["Message"]).startswith("[INTERNAL_ERROR]catalog database unavailable: "), down
    finally:
        postgres.start()
    assert server.label_state(DB, "while_down") == "UNKNOWN"  # nothing of it was claimed
    back = server.load(DB, "t", b"8,h\n", label="after_restart")
    assert back["Status"] == "Success", back
    assert rows(server)[-1] == [8, "h"]
