"""HTTP SQL: `POST /api/query/{ns}/{db}` with `{"stmt": ...}`, non-stream reply shape (contract §1.10)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from app.auth import login
from app.deps import ServicesDep
from app.openapi import QueryReply, query_operation, reply
from app.responses import fe_bad_request, fe_json
from app.settings import Settings
from loaders.staging import timed_chunks
from sql.results import ResultSet, StatementResult
from sql.session import Session
from tables.errors import BadRequest, SqlError

router = APIRouter()


@router.post(
    "/api/query/{ns}/{db}",
    operation_id="query",
    summary="Run SQL statements in the database (FE HTTP SQL interface)",
    responses=reply(QueryReply, "FE envelope; `data` is a result set, an exec status or the error text."),
    openapi_extra=query_operation(),
)
async def query(ns: str, db: str, request: Request, services: ServicesDep) -> Response:
    privileges = login(request, services.accounts)
    raw = await read_body(request, services.settings)  # its errors and the statements' render as the FE does
    try:
        # a body may be 100 MiB: decoded off the event loop when large
        body: Any = json.loads(raw) if len(raw) < 65536 else await run_in_threadpool(json.loads, raw)
    except (ValueError, RecursionError):  # nesting deeper than Python's recursion limit: not a statement either
        body = None
    stmt = body.get("stmt") if isinstance(body, dict) else None
    if not isinstance(stmt, str) or not stmt.strip():
        return fe_bad_request("Missing statement request body")
    limit = body.get("limit")
    session = Session(db=db, privileges=privileges)
    run = partial(services.sql.execute_script, stmt, session, limit=_row_limit(limit))
    result = await _run_watched(request, session, run)
    if isinstance(result, ResultSet):
        data = {
            "type": "result_set",
            "meta": [{"name": name, "type": type_name} for name, type_name in result.columns],
            "data": result.rows,
            "time": result.time_ms,
        }
    else:
        data = {
            "type": "exec_status",
            "status": {"affectedRows": result.affected_rows, **result.info},
            "time": result.time_ms,
        }
    return fe_json(data)


async def read_body(request: Request, settings: Settings) -> bytes:
    """The request body, at most `SL_SQL_MAX_BODY_BYTES` (Doris's jetty_server_max_http_post_size), arriving
    within the body timeouts: a client cannot make the server hold an unbounded statement in memory.

    Raises:
        BadRequest: the body is larger than the limit (from its Content-Length, or as it arrives).
        LoadTimeout: the body stalled or trickled past its deadline.
    """
    cap = settings.sql_max_body_bytes
    too_large = BadRequest(f"request body is larger than {cap} bytes (SL_SQL_MAX_BODY_BYTES)")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > cap:
        raise too_large
    deadline = time.monotonic() + settings.body_total_timeout_seconds
    chunks = timed_chunks(
        request.stream(),
        idle_seconds=settings.body_idle_timeout_seconds,
        deadline=deadline,
        deadline_text=f"request body not received within {settings.body_total_timeout_seconds:g} s",
    )
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > cap:
            raise too_large
    return bytes(body)


# how often a running request looks whether its client is still connected
CLIENT_POLL_SECONDS = 0.25


def _row_limit(value: Any) -> int | None:
    """The body's `limit`: a positive integer (Spark's LIMIT takes a Java int).

    Raises:
        SqlError: any other value.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit():
        raise SqlError(f"Invalid limit: {str(value)[:40]}")
    return min(int(value), 2**31 - 1)


async def _run_watched(request: Request, session: Session, run: Callable[[], StatementResult]) -> StatementResult:
    """Run the statements in a worker thread; if the client disconnects meanwhile, their Spark jobs are cancelled."""
    task = asyncio.ensure_future(run_in_threadpool(run))
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=CLIENT_POLL_SECONDS)
            if not task.done() and await request.is_disconnected():
                session.interrupt("the client closed the connection")
    except asyncio.CancelledError:
        session.interrupt("the request was cancelled")
        raise
    return await task
