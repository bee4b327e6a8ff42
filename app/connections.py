"""Bounds on HTTP connections: how many at once, and how long a client may take to send its request head.

uvicorn bounds concurrency (`limit_concurrency`: past it, a request is answered 503) but starts no timer before
a request's head is complete, so a client that opens connections and trickles header bytes would hold them
forever and, once the bound is reached, lock every other client out. `guarded_http` adds that timer: a
connection whose request head is not complete `header_timeout` seconds after it opened (or after its previous
response) is closed. Bodies are bounded where they are read (stream load: idle and total deadlines).

Requests are parsed by httptools (llhttp, in C), not h11 (pure Python): h11 took a tenth of the server's Python
time under 16 clients of one-row async loads (its per-request event objects and header checks), and the server's
Python is what bounds small loads (docs/design.md has the figures).

Every connection sends without Nagle's delay (`TCP_NODELAY`). asyncio sets it only on sockets whose protocol
number is TCP's, and the listening sockets `python -m app` hands uvicorn are made with protocol 0: a reply's
head and body went out as two segments, the body held back until the client acknowledged the head, which a
client on a kept-alive connection delays by 40 ms (Linux's delayed ACK). Every reply on a reused connection
took 40 ms more than its work: a one-row load, an async group-commit acknowledgement, a health probe.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

if TYPE_CHECKING:
    from app.settings import Settings


# The largest request head (request line and headers) read: 64 KiB (a `columns` header of a few thousand columns),
# so that 1,000 connections in their head hold at most 64 MiB
MAX_HEAD_BYTES = 64 * 1024
STREAM_LOAD_SUFFIX = "/_stream_load"  # `PUT /api/{db}/{table}/_stream_load`


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (the llhttp parser, in C) with a deadline and a size bound on each request head."""

    header_timeout: float = 30.0
    _head_timer: asyncio.TimerHandle | None = None
    _in_head = True  # the bytes that come next are a request head's
    _head_bytes = 0  # of the head being read, fed to the parser so far
    _heads = 0  # request heads completed on this connection

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A request with both Content-Length and chunked reaches the stream load, which refuses it as Doris does
        # ("please do not set both content_length and transfer-encoding"); llhttp would answer a bare 400. The
        # body is framed as chunked, Content-Length ignored (h11's rule too), so the connection stays in step.
        self.parser.set_dangerous_leniencies(lenient_chunked_length=True)

    def data_received(self, data: bytes) -> None:
        """The parser keeps a head's bytes until the head is complete, with no bound of its own (h11 refused a
        head past 16 KiB): a head still incomplete after `MAX_HEAD_BYTES` (counted per piece read, so at most a
        piece more) is answered 400 and its connection closed."""
        reading_head, heads = self._in_head, self._heads
        super().data_received(data)
        if reading_head and self._heads == heads and not self.transport.is_closing():  # the head goes on
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self.send_400_response("Request head too large.")

    def on_message_complete(self) -> None:
        self._in_head, self._head_bytes = True, 0
        super().on_message_complete()

    def on_headers_complete(self) -> None:
        self._in_head, self._heads = False, self._heads + 1
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is None or cycle.scope is not self.scope:  # no cycle made for this head (an upgrade)
            return
        names = {name for name, _ in self.headers}
        if b"content-length" in names and b"transfer-encoding" in names:
            # RFC 9112 6.1: whatever the reply, the connection closes after it (a proxy in front may have framed
            # the body by its Content-Length: what follows could be a smuggled request)
            cycle.keep_alive = False
        if self.scope["method"] == "PUT" and self.scope["path"].endswith(STREAM_LOAD_SUFFIX):
            # a stream load logs its own line (`app.load`: label, txn id, status, rows, bytes, time); uvicorn's
            # access line would say less, at ~20 µs of the event loop per load
            cycle.access_log = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        no_delay(transport)
        super().connection_made(transport)
        self._arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        if not self.transport.is_closing():
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_deadline)

    def _head_deadline(self) -> None:
        cycle: Any = getattr(self, "cycle", None)
        waiting_for_head = cycle is None or cycle.response_complete
        if waiting_for_head and not self.transport.is_closing():
            self.transport.close()


def no_delay(transport: asyncio.BaseTransport) -> None:
    """Turn Nagle's algorithm off on a TCP connection's socket (a no-op on other sockets)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # the peer is already gone: the connection closes on its own
            pass


def guarded_http(header_timeout: float) -> type[GuardedHttpToolsProtocol]:
    """The protocol class uvicorn's `Config(http=...)` takes, with this deadline on request heads."""
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {"header_timeout": header_timeout})


def server_config(app: Any, settings: Settings, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's configuration for the app, with the connection bounds of the settings."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=kwargs.pop("log_level", settings.log_level),
        http=guarded_http(settings.http_header_timeout_seconds),
        limit_concurrency=settings.http_max_connections,
        # the client address is the peer's unless a proxy the operator named says otherwise: uvicorn's default
        # trusts `X-Forwarded-For` from 127.0.0.1, so any local client chose the address logins are throttled and
        # host-restricted users (`'u'@'10.1.%'`) are matched by
        proxy_headers=bool(settings.forwarded_allow_ips),
        forwarded_allow_ips=settings.forwarded_allow_ips or None,
        **kwargs,
    )
