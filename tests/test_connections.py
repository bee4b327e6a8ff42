"""HTTP connections and requests as the server's uvicorn and FastAPI handle them (the request-head deadline and the
connection bound are tested on `python -m app` itself: tests/test_server_process.py)."""

from __future__ import annotations

import http.client
import time
from typing import Any
from urllib.parse import urlsplit

import anyio.to_thread
import httpx
import pytest

from tests.helpers import AUTH


def test_replies_on_a_kept_alive_connection_are_not_held_back_by_delayed_acks(base_url: str) -> None:
    # A reply's head and body are two writes. Without TCP_NODELAY on the accepted socket the body waits until the
    # client acknowledges the head, and a client that does not read the head at once (this one: a thread of the
    # server's own process, as a busy client would be) lets Linux delay that ACK by 40 ms: every reply on a
    # kept-alive connection took 40 ms or more, whatever its work.
    url = urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    took = []
    try:
        for _ in range(12):
            started = time.perf_counter()
            conn.request("GET", "/api/health")
            reply = conn.getresponse()
            assert reply.status == 200 and reply.read().startswith(b"{")
            took.append(time.perf_counter() - started)
    finally:
        conn.close()
    assert min(took[1:]) < 0.035, f"every reply on the reused connection took 40 ms or more: {took}"


def test_a_request_reaches_the_servers_services_without_a_worker_thread(
    base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FastAPI runs a plain `def` dependency in the thread pool: the services every handler asks for cost each
    # request a thread hop, and under concurrent loads a wait for the GIL on the way back (~5-15 ms each)
    hops: list[str] = []
    real = anyio.to_thread.run_sync

    async def counting(func: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(func, "__name__", repr(func)))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting)
    resp = httpx.get(f"{base_url}/api/backends", auth=AUTH, timeout=30)
    assert resp.status_code == 200 and resp.json()["data"]["backends"], resp.text
    assert hops == [], hops


def _raw(base_url: str, request: bytes) -> bytes:
    """`request` sent as is on a fresh connection; everything the server sends back until it closes it."""
    import socket

    url = urlsplit(base_url)
    with socket.create_connection((url.hostname or "127.0.0.1", url.port or 80), timeout=30) as sock:
        try:
            sock.sendall(request)
        except ConnectionError:  # the server closed the connection while the head was still being sent
            pass
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionError:
            pass
    return received


def test_a_request_head_past_64_kib_is_refused_and_its_connection_closed(base_url: str) -> None:
    """The parser keeps a request head until it is complete: past 64 KiB the server answers 400 and closes the
    connection, so connections trickling megabytes of header cannot fill the server's memory. A head under the
    bound is served, and the server goes on serving."""
    from app.connections import MAX_HEAD_BYTES

    def head(header_bytes: int) -> bytes:
        return (
            b"GET /api/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Filler: "
            + b"a" * header_bytes
            + b"\r\n\r\n"
        )

    served = _raw(base_url, head(MAX_HEAD_BYTES - 1024))
    assert served.startswith(b"HTTP/1.1 200 "), served[:200]
    refused = _raw(base_url, head(16 * MAX_HEAD_BYTES))  # read in several pieces: the bound is checked per piece
    assert refused.startswith(b"HTTP/1.1 400 ") and b"connection: close" in refused.lower(), refused[:200]
    endless = _raw(base_url, b"GET /api/health HTTP/1.1\r\nX-Filler: " + b"a" * (16 << 20))
    assert endless.startswith(b"HTTP/1.1 400 "), endless[:200]
    assert httpx.get(f"{base_url}/api/health", timeout=30).status_code == 200


def test_a_stream_load_logs_its_own_line_and_no_access_line(base_url: str, doris: Any, db: str) -> None:
    """A stream load is logged once, by `app.load` (label, txn id, status, rows, bytes, time); uvicorn's access
    line, which would say less, is left out for it and kept for every other request."""
    import logging

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(f"{record.name} {record.getMessage()}")

    doris.sql(db, "CREATE TABLE t (k INT, v INT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    keep = Keep()
    loggers = [logging.getLogger(name) for name in ("uvicorn.access", "app.load")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(keep)
        logger.setLevel(logging.INFO)
    try:
        assert httpx.get(f"{base_url}/api/health").status_code == 200
        reply = httpx.put(
            f"{base_url}/api/{db}/t/_stream_load",
            content=b"1,2\n",
            headers={"label": "logged_once", "column_separator": ","},
            auth=AUTH,
            timeout=300,
        ).json()
        assert reply["Status"] == "Success", reply
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(keep)
            logger.setLevel(level)
    assert any(line.startswith("uvicorn.access") and "/api/health" in line for line in lines), lines
    assert not any(line.startswith("uvicorn.access") and "_stream_load" in line for line in lines), lines
    assert [line for line in lines if line.startswith("app.load") and '"logged_once"' in line], lines


def test_a_client_cannot_name_its_own_address_with_x_forwarded_for(base_url: str, doris: Any, db: str) -> None:
    """The client address is the connection's peer: uvicorn's default trusted `X-Forwarded-For` from loopback, so a
    local client could log in as a user allowed only from `10.1.%` (and pick the address its failed logins count
    against). A proxy is trusted only when named in `SL_FORWARDED_ALLOW_IPS`."""
    user = f"subnet_{db[-6:]}"
    doris.sql(db, f"CREATE USER '{user}'@'10.1.%' IDENTIFIED BY 'pw'")
    doris.sql(db, f"GRANT SELECT_PRIV ON {db}.* TO '{user}'@'10.1.%'")
    reply = httpx.post(
        f"{base_url}/api/query/default_cluster/{db}",
        json={"stmt": "SELECT 1"},
        auth=(user, "pw"),
        headers={"X-Forwarded-For": "10.1.2.3"},
        timeout=60,
    )
    assert reply.status_code == 401 or reply.json().get("code") != 0, reply.text
    assert "Access denied" in reply.text, reply.text
