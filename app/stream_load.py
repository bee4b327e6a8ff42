"""Stream load: `PUT /api/{db}/{table}/_stream_load` (contract §1.2, §1.3, §3)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from app.auth import check_basic_auth
from app.deps import Services, ServicesDep
from app.openapi import LOAD_REPLY, stream_load_operation
from app.responses import DorisLoadResponse, load_error_result
from app.settings import Settings
from loaders.headers import decode_headers, parse_load_request
from loaders.staging import (
    LineGuard,
    body_too_large,
    decompress_staged,
    json_body_too_large,
    stage_payload,
    timed_chunks,
)
from tables.errors import BadRequest, DorisError, LoadError, NotAuthorized, ServiceUnavailable
from tables.load_spec import LoadRequest, LoadResult

router = APIRouter()
log = logging.getLogger(__name__)


def check_body_framing(headers: Mapping[str, str], max_bytes: int) -> int | None:
    """Exactly one of Content-Length and chunked (contract §1.3), within the size limit; returns the length.

    Raises:
        BadRequest.
    """
    length = headers.get("content-length")
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    if length is not None and chunked:
        raise BadRequest("please do not set both content_length and transfer-encoding")
    if length is None and not chunked:
        raise BadRequest(
            "content_length is empty and transfer-encoding!=chunked, please set content_length or "
            "transfer-encoding=chunked"
        )
    if length is not None and not length.strip().isdigit():  # the HTTP server checks it too; not to rely on
        raise BadRequest(f"Invalid Content-Length: {length}")
    if length is not None and int(length) > max_bytes:  # refused from the header, before the transaction
        raise BadRequest(body_too_large(max_bytes, int(length)), code="EXCEEDED_LIMIT")
    return int(length) if length is not None else None


def body_limit(load: LoadRequest, settings: Settings) -> tuple[int, Callable[[int, int | None], str]]:
    """The largest body of this load and the words for one past it: a JSON body read as one document
    (not line by line) has Doris's smaller `streaming_load_json_max_mb` limit."""
    if load.format == "json" and not load.read_json_by_line:
        return min(settings.max_json_body_bytes, settings.max_body_bytes), json_body_too_large
    return settings.max_body_bytes, body_too_large


def line_guard(load: LoadRequest, settings: Settings) -> LineGuard | None:
    """The line-length check of a body read line by line (CSV, JSON by line); a JSON body read whole is one
    document, bounded by its body limit, and Parquet / ORC have no lines."""
    if load.format == "csv" or (load.format == "json" and load.read_json_by_line and not load.strip_outer_array):
        return LineGuard(load.line_delimiter, settings.max_line_bytes)
    return None


def body_deadline(load: LoadRequest, started: float, settings: Settings) -> tuple[float, str]:
    """When the body must have arrived (`time.monotonic()`), and the words for one that has not."""
    if load.timeout_s <= settings.body_total_timeout_seconds:
        return started + load.timeout_s, f"load timed out after {load.timeout_s} s (timeout header)"
    seconds = settings.body_total_timeout_seconds
    return started + seconds, f"the body was still arriving after {seconds:g} s (SL_BODY_TOTAL_TIMEOUT_SECONDS)"


async def execute_stream_load(db: str, table: str, request: Request, services: Services) -> LoadResult:
    """Decide from the headers, then stage the body and run the load; every outcome is a `LoadResult`."""
    label = request.headers.get("label", "")
    comment = request.headers.get("comment", "")
    try:
        headers = decode_headers(request.headers.raw)
        label, comment = headers.get("label", ""), headers.get("comment", "")
        check_basic_auth(request.headers, services.settings.root_password.get_secret_value())
        expected = check_body_framing(headers, services.settings.max_body_bytes)
        load = parse_load_request(db, table, headers, limits=services.settings.input_limits())
        label = load.label
        max_bytes, too_large = body_limit(load, services.settings)
        if expected is not None and expected > max_bytes:
            raise BadRequest(too_large(max_bytes, expected), code="EXCEEDED_LIMIT")
        prepared = await run_in_threadpool(services.loads.prepare, load)
    except (LoadError, DorisError) as exc:
        return load_error_result(exc, label=label, comment=comment)
    except Exception as exc:  # a bug, not the user's fault: still a Doris-shaped Fail
        log.exception("stream load planning failed")
        return load_error_result(exc, label=label, comment=comment)
    settings = services.settings
    staging = settings.resolved_data_dir / "staging" / f"txn_{prepared.txn_id}.dat"
    received = time.monotonic()
    deadline, too_slow = body_deadline(prepared.request, prepared.started, settings)
    lines = line_guard(prepared.request, settings)

    async def body() -> AsyncIterator[bytes]:
        first = True
        async for chunk in request.stream():
            yield chunk
            if first:
                first = False
                await services.pauses.ahit("staging", prepared.plan.table.name)

    try:
        chunks = timed_chunks(
            body(), idle_seconds=settings.body_idle_timeout_seconds, deadline=deadline, deadline_text=too_slow
        )
        plain_lines = lines if prepared.request.compression is None else None  # else checked as it decompresses
        staged = await stage_payload(
            chunks, staging, max_bytes=max_bytes, expected=expected, too_large=too_large, lines=plain_lines
        )
    except LoadError as exc:
        services.loads.abort(prepared)
        return load_error_result(exc, label=label, comment=comment, txn_id=prepared.txn_id)
    except Exception as exc:  # the client went away mid-body: the load failed and its label is free
        services.loads.abort(prepared)
        return load_error_result(BadRequest(f"failed to receive body: {exc}"), label=label, txn_id=prepared.txn_id)
    try:
        staged = await run_in_threadpool(
            decompress_staged,
            staged,
            prepared.request.compression,
            max_bytes=min(max_bytes, settings.max_decompressed_bytes),
            max_ratio=settings.max_decompression_ratio,
            lines=lines,
        )
    except LoadError as exc:
        services.loads.abort(prepared)
        services.loads.cleanup_staged(staged.path)
        return load_error_result(exc, label=label, comment=comment, txn_id=prepared.txn_id)
    receive_ms = int((time.monotonic() - received) * 1000)
    try:
        run = services.group_commit.run if services.group_commit else services.loads.run_csv
        return await run_in_threadpool(run, prepared, Path(staged.path), load_bytes=staged.size, receive_ms=receive_ms)
    finally:
        services.loads.cleanup_staged(staged.path)


SHUTTING_DOWN = ServiceUnavailable("The server is shutting down; retry the load later")


def fe_redirect(request: Request, services: Services) -> Response | None:
    """In front-end mode, a load on the FE port is answered like a Doris FE: 307 to the BE listener.

    The body is never read, so curl `--location-trusted`, requests and the connectors re-send it to the
    `Location`, which carries the credentials as Doris's FE builds it (contract §1.2).
    """
    settings = services.settings
    server = request.scope.get("server") or ("", 0)
    if not settings.fe_redirect or server[1] == settings.be_port:
        return None
    try:
        user = check_basic_auth(request.headers, settings.root_password.get_secret_value())
    except NotAuthorized as exc:
        return DorisLoadResponse(load_error_result(exc, label=request.headers.get("label", "")))
    if "expect" not in request.headers:
        return JSONResponse({"status": "FAILED", "msg": "There is no 100-continue header"})
    password = quote(settings.root_password.get_secret_value(), safe="")
    host = request.url.hostname or settings.host
    query = f"?{request.url.query}" if request.url.query else ""
    location = f"http://{quote(user, safe='')}:{password}@{host}:{settings.be_port}{request.url.path}{query}"
    return Response(status_code=307, headers={"Location": location}, media_type="text/html;charset=utf-8")


@router.put(
    "/api/{db}/{table}/_stream_load",
    response_model=None,
    operation_id="stream_load",
    summary="Stream load: the body becomes one load into the table",
    responses=LOAD_REPLY,
    openapi_extra=stream_load_operation(),
)
async def stream_load(db: str, table: str, request: Request, services: ServicesDep) -> Response:
    if (redirect := fe_redirect(request, services)) is not None:
        return redirect
    started = time.monotonic()
    if not services.gate.enter():
        result = load_error_result(SHUTTING_DOWN, label=request.headers.get("label", ""))
        request.app.state.metrics.observe_load(db, table, result, time.monotonic() - started)
        return DorisLoadResponse(result)
    try:
        result = await execute_stream_load(db, table, request, services)
    finally:
        services.gate.exit()
    request.app.state.metrics.observe_load(db, table, result, time.monotonic() - started)
    if request.headers.get("two_phase_commit") == "true" and result.two_phase_commit != "true":
        # also on early failures: the Flink connector's label probe checks it on `Label Already Exists`
        result = result.model_copy(update={"two_phase_commit": "true"})
    if result.error_url and result.error_url.startswith("/"):
        result = result.model_copy(update={"error_url": str(request.base_url).rstrip("/") + result.error_url})
    return DorisLoadResponse(result)
