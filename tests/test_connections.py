"""HTTP connections as the server's uvicorn accepts them (the request-head deadline and the connection bound are
tested on `python -m app` itself: tests/test_server_process.py)."""

from __future__ import annotations

import http.client
import time
from urllib.parse import urlsplit


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
