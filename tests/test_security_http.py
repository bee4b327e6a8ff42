"""Credentials on every route: `/`, `/api/health` and `/metrics` answer anyone (connectors and Prometheus probe
them); every other route of the app refuses a request without valid credentials before it reads a body or
touches a table, in the route's own Doris shape. The routes are read from the app itself, so a new route
without the check fails here."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from tests.helpers import DorisClient

OPEN = {("GET", "/"), ("GET", "/api/health"), ("GET", "/metrics")}


def flat(routes: list[Any]) -> list[APIRoute]:
    """The app's routes, through included routers (FastAPI keeps each as a wrapper of its original router)."""
    out: list[APIRoute] = []
    for route in routes:
        if isinstance(route, APIRoute):
            out.append(route)
        elif (router := getattr(route, "original_router", None)) is not None:
            out += flat(router.routes)
    return out


def app_routes(app: Any) -> list[tuple[str, str]]:
    return sorted(
        (method, route.path) for route in flat(app.routes) for method in route.methods if method not in ("HEAD",)
    )


def refused(resp: httpx.Response) -> bool:
    """The reply says the credentials were refused, in whatever shape the route answers."""
    if resp.status_code == 401:
        return True
    try:
        body = resp.json()
    except json.JSONDecodeError:
        return False
    text = json.dumps(body)
    if body.get("code") == 401 and body.get("msg") == "Unauthorized":  # the FE envelope
        return True
    return body.get("Status") == "Fail" and bool(re.search(r"Access denied|authorization", text))  # a load reply


@pytest.fixture(scope="module")
def table(doris: DorisClient, db: str) -> tuple[str, str]:
    doris.sql(db, "CREATE TABLE t (k INT, v STRING) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    return db, "t"


@pytest.fixture(scope="module")
def db(doris: DorisClient) -> str:  # one database for the module (the conftest one is per test)
    import uuid

    name = f"db_{uuid.uuid4().hex[:12]}"
    doris.sql(name, f"CREATE DATABASE {name}")
    return name


def test_the_open_routes_are_exactly_the_probes(served_app: Any, base_url: str) -> None:
    routes = app_routes(served_app)
    assert OPEN <= set(routes)
    for method, path in OPEN:
        assert httpx.request(method, base_url + path, timeout=30).status_code == 200
    # nothing else is served: no interactive docs or schema route beside the committed openapi/openapi.json
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(base_url + path, timeout=30).status_code == 404


@pytest.mark.parametrize(
    "auth", [pytest.param(None, id="no credentials"), pytest.param(("root", "wrong"), id="a wrong password")]
)
def test_every_other_route_refuses_requests_without_valid_credentials(
    served_app: Any, base_url: str, doris: DorisClient, table: tuple[str, str], auth: tuple[str, str] | None
) -> None:
    db, name = table
    doris.stream_load(db, name, "1,kept\n", headers={"column_separator": ","})
    values = {"db": db, "table": name, "ns": "default_cluster"}
    checked = []
    for method, path in app_routes(served_app):
        if (method, path) in OPEN:
            continue
        url = base_url + re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)
        resp = httpx.request(
            method,
            url,
            auth=auth,
            params={"label": "x", "file": "x", "tablet_id": "1", "compact_type": "base"},
            headers={"column_separator": ",", "txn_operation": "abort", "label": "x", "Expect": "100-continue"},
            content=b'{"stmt": "DROP TABLE t"}' if method == "POST" else b"2,loaded\n",
            timeout=60,
        )
        assert refused(resp), (method, path, resp.status_code, resp.text)
        checked.append(path)
    assert len(checked) >= 10, checked
    # nothing a refused request asked for happened
    assert doris.rows(db, "SELECT k, v FROM t ORDER BY k") == [[1, "kept"]]


@pytest.mark.parametrize(
    "method, path, kwargs",
    [
        pytest.param(
            "POST", "/api/query/default_cluster/{db}", {"json": {"stmt": "SELECT 1", "limit": "x"}}, id="sql limit"
        ),
        pytest.param(
            "POST",
            "/api/query/default_cluster/{db}",
            {"json": {"stmt": "SELECT 1", "limit": 1e300}},
            id="sql huge limit",
        ),
        pytest.param("POST", "/api/query/default_cluster/{db}", {"content": b"\xff\xfe{"}, id="sql body not UTF-8"),
        pytest.param("POST", "/api/query/default_cluster/{db}", {"json": [1, 2]}, id="sql body a list"),
        pytest.param("POST", "/api/query/default_cluster/{db}", {"json": {"stmt": 7}}, id="sql stmt a number"),
        pytest.param("GET", "/api/{db}/get_load_state", {"params": {"label": "x" * 5000}}, id="load state long label"),
        pytest.param(
            "PUT",
            "/api/{db}/_stream_load_2pc",
            {"headers": {"txn_id": "1e999", "txn_operation": "commit"}},
            id="2pc txn id",
        ),
        pytest.param(
            "PUT",
            "/api/{db}/_stream_load_2pc",
            {"headers": {"txn_id": "-1", "txn_operation": "drop"}},
            id="2pc operation",
        ),
        pytest.param("GET", "/api/compaction/show", {"params": {"tablet_id": "9" * 40}}, id="tablet id overflow"),
        pytest.param(
            "POST", "/api/compaction/run", {"params": {"tablet_id": "1", "compact_type": "x" * 300}}, id="compact type"
        ),
        pytest.param("GET", "/api/{db}/%2e%2e/_schema", {}, id="schema of a dot-dot table"),
        pytest.param(
            "PUT",
            "/api/{db}/t/_stream_load",
            {"headers": {"timeout": "1e400", "max_filter_ratio": "nan"}},
            id="load odd numbers",
        ),
        pytest.param("PUT", "/api/{db}/t/_stream_load", {"headers": {"columns": "(" * 2000}}, id="load deep columns"),
    ],
)
def test_odd_requests_get_a_doris_shaped_answer_never_a_500(
    base_url: str, table: tuple[str, str], method: str, path: str, kwargs: dict[str, Any]
) -> None:
    db, _ = table
    resp = httpx.request(
        method,
        base_url + path.replace("{db}", db),
        auth=("root", ""),
        timeout=60,
        content=kwargs.pop("content", b"1,a\n") if method == "PUT" else kwargs.pop("content", None),
        **kwargs,
    )
    assert resp.status_code < 500, (resp.status_code, resp.text)
    body = resp.json()
    assert ("Status" in body and "Message" in body) or ("msg" in body) or ("status" in body), body


def test_a_sql_body_over_the_limit_is_refused_from_its_length_or_as_it_arrives(
    base_url: str, table: tuple[str, str]
) -> None:
    from app.settings import Settings

    db, _ = table
    cap = Settings().sql_max_body_bytes
    url = f"{base_url}/api/query/default_cluster/{db}"
    # a Content-Length over the limit: refused from the header, the body never read
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            f"POST /api/query/default_cluster/{db} HTTP/1.1\r\nHost: x\r\nAuthorization: Basic cm9vdDo=\r\n"
            f"Content-Type: application/json\r\nContent-Length: {cap + 1}\r\n\r\n".encode()
        )
        received = b""
        while b'"code"' not in received or not received.rstrip().endswith(b"}"):
            data = sock.recv(65536)  # the head and the body may arrive in separate packets
            if not data:
                break
            received += data
        reply = received.decode()
    assert "SL_SQL_MAX_BODY_BYTES" in reply and '"code": 403' in reply, reply

    def chunks() -> Iterator[bytes]:  # chunked: no length to refuse from, so it is counted as it arrives
        yield b'{"stmt": "SELECT 1", "pad": "'
        for _ in range(cap // (1 << 20) + 1):
            yield b"x" * (1 << 20)
        yield b'"}'

    body = httpx.post(url, content=chunks(), auth=("root", ""), timeout=120).json()
    assert body["code"] == 403 and "SL_SQL_MAX_BODY_BYTES" in body["data"], body
    assert httpx.post(url, json={"stmt": "SELECT 1"}, auth=("root", ""), timeout=30).json()["code"] == 0
