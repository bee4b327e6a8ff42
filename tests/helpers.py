"""Helpers every HTTP test uses: a real server in a thread, SQL over HTTP, stream loads, and the Doris reply
assertion."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

DORIS_LOAD_KEYS = [
    "TxnId",
    "Label",
    "Comment",
    "TwoPhaseCommit",
    "Status",
    "Message",
    "NumberTotalRows",
    "NumberLoadedRows",
    "NumberFilteredRows",
    "NumberUnselectedRows",
    "LoadBytes",
    "LoadTimeMs",
    "BeginTxnTimeMs",
    "StreamLoadPutTimeMs",
    "ReadDataTimeMs",
    "WriteDataTimeMs",
    "ReceiveDataTimeMs",
    "CommitAndPublishTimeMs",
]
AUTH = ("root", "")


def assert_doris_result(
    resp: httpx.Response | dict[str, Any],
    *,
    status: str = "Success",
    message_contains: str | None = None,
    **counts: int,
) -> dict[str, Any]:
    """Check a stream-load reply: HTTP 200, Doris's keys, the Status, an optional Message part, row counts."""
    if isinstance(resp, httpx.Response):
        assert resp.status_code == 200, resp.text
        assert resp.reason_phrase == "OK"
        body: dict[str, Any] = resp.json()
    else:
        body = resp
    for key in DORIS_LOAD_KEYS:
        assert key in body, f"missing {key} in {body}"
    assert body["Status"] == status, body
    if message_contains is not None:
        assert message_contains in body["Message"], body
    names = {
        "total": "NumberTotalRows",
        "loaded": "NumberLoadedRows",
        "filtered": "NumberFilteredRows",
        "unselected": "NumberUnselectedRows",
    }
    for short, value in counts.items():
        assert body[names[short]] == value, f"{names[short]}: {body}"
    return body


class DorisClient:
    """A thin client for one server: SQL statements and stream loads, as a Doris user sends them."""

    def __init__(self, base_url: str, auth: tuple[str, str] = AUTH) -> None:
        self.base_url = base_url
        self.http = httpx.Client(base_url=base_url, auth=auth, timeout=120)

    def sql_raw(self, db: str, stmt: str) -> dict[str, Any]:
        resp = self.http.post(f"/api/query/default_cluster/{db}", json={"stmt": stmt})
        assert resp.status_code == 200, resp.text
        return resp.json()

    def sql(self, db: str, stmt: str) -> dict[str, Any]:
        """Run statements that must succeed; returns the `data` of the reply."""
        body = self.sql_raw(db, stmt)
        assert body["code"] == 0, body
        return body["data"]

    def rows(self, db: str, stmt: str) -> list[list[Any]]:
        return self.sql(db, stmt)["data"]

    def sql_error(self, db: str, stmt: str) -> str:
        body = self.sql_raw(db, stmt)
        assert body["code"] == 1 and body["msg"] == "Error", body
        return str(body["data"])

    def stream_load(
        self, db: str, table: str, data: bytes | str, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> httpx.Response:
        content = data.encode() if isinstance(data, str) else data
        return self.http.put(f"/api/{db}/{table}/_stream_load", content=content, headers=headers or {}, **kwargs)

    def precommit(self, db: str, table: str, data: bytes, headers: dict[str, str]) -> int:
        """A two-phase stream load (`two_phase_commit: true`) that must reach PRECOMMITTED; returns its txn id."""
        reply = self.stream_load(db, table, data, {**headers, "two_phase_commit": "true"}).json()
        assert reply["Status"] == "Success", reply
        return int(reply["TxnId"])

    def commit_txn(self, db: str, txn_id: int) -> None:
        """`_stream_load_2pc` commit of a precommitted load, which must succeed."""
        headers = {"txn_id": str(txn_id), "txn_operation": "commit"}
        done = self.http.put(f"/api/{db}/_stream_load_2pc", headers=headers).json()
        assert done["status"] == "Success", done

    def curl_load(self, db: str, table: str, path: str, headers: dict[str, str]) -> dict[str, Any]:
        """Load a file the way the Doris docs do: `curl --location-trusted -u root: -H ... -T file`."""
        return curl_stream_load(f"{self.base_url}/api/{db}/{table}/_stream_load", headers, path=path)


def curl_stream_load(
    url: str, headers: dict[str, str], *, path: str | None = None, stdin: str | None = None
) -> dict[str, Any]:
    """`curl --location-trusted -u root: -H ... -T <file | ->`; stdin makes curl send the body chunked."""
    import json

    cmd = ["curl", "-sS", "--location-trusted", "-u", "root:"]
    for name, value in headers.items():
        cmd += ["-H", f"{name}: {value}"]
    cmd += ["-T", path if path is not None else "-", url]
    out = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def loopback_socket() -> socket.socket:
    """A listening-ready socket on 127.0.0.1 and a free port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def serving(app: Any, *sockets: socket.socket, settings: Any = None) -> Iterator[list[str]]:
    """A real uvicorn serving `app` in a daemon thread, with the server's connection bounds (of `settings`, or
    the defaults), on the given sockets (one new loopback socket when none); yields their base URLs."""
    import uvicorn

    from app.connections import server_config
    from app.settings import Settings

    socks = list(sockets) or [loopback_socket()]
    server = uvicorn.Server(server_config(app, settings or Settings(), log_level="warning"))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    thread = threading.Thread(target=server.run, kwargs={"sockets": socks}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.05)
    try:
        yield [f"http://127.0.0.1:{sock.getsockname()[1]}" for sock in socks]
    finally:
        server.should_exit = True
        thread.join(timeout=30)


class SeededTables:
    """One fresh database; each group of cases gets a table (made from `ddl`) holding one good row, so a case
    can check the table is unchanged after a refused load."""

    def __init__(self, doris: DorisClient, *, ddl: str, good_line: str, headers: dict[str, str]) -> None:
        self.doris = doris
        self.ddl = ddl
        self.good_line = good_line
        self.headers = headers
        self.db = f"db_{uuid.uuid4().hex[:12]}"
        doris.sql(self.db, f"CREATE DATABASE {self.db}")
        self.tables: set[str] = set()

    def table(self, name: str) -> str:
        if name not in self.tables:
            self.doris.sql(self.db, self.ddl.format(name=name))
            assert_doris_result(self.doris.stream_load(self.db, name, self.good_line, headers=self.headers), loaded=1)
            self.tables.add(name)
        return name

    def load(self, table: str, data: bytes | str, headers: dict[str, Any]) -> httpx.Response:
        return self.doris.stream_load(self.db, self.table(table), data, headers=headers)


def table_handle(server_settings: Any, db: str, table: str) -> Any:
    """The server's own view of a table (`tables.catalog.TableHandle`), opened on its catalog."""
    from tables.catalog import Catalog

    catalog = Catalog(uri=server_settings.resolved_catalog_uri, warehouse=server_settings.resolved_warehouse)
    return catalog.load(db, table)
