"""Stream load: `PUT /api/{db}/{table}/_stream_load` (contract §1.2, §1.3, §3)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.auth import basic_credentials, login, require_table
from app.deps import Services, ServicesDep
from app.openapi import LOAD_REPLY, stream_load_operation
from app.responses import DorisLoadResponse, unexpected_error
from loaders.headers import decode_headers, parse_load_request
from loaders.staging import BodyLimits, body_length
from loads.lifecycle import StreamLoads, refused
from loads.steps import StepThreads
from tables.accounts import Priv
from tables.errors import NotAuthorized, ServiceUnavailable
from tables.load_spec import LoadResult, render_load

if TYPE_CHECKING:  # they load pyspark: the services are built in the lifespan
    from app.settings import Settings
    from spark_runner.group_commit import GroupCommitter
    from spark_runner.service import LoadService

router = APIRouter()


def stream_loads(settings: Settings, loads: LoadService, group_commit: GroupCommitter) -> StreamLoads:
    """The lifecycle owner of this server's stream loads, with the body bounds of its settings (same names); built
    once with the services (`Services.stream_loads`): the staging dir resolves paths on the disk."""
    limits = BodyLimits(**{bound.name: getattr(settings, bound.name) for bound in fields(BodyLimits)})
    steps = StepThreads("stream-load-step", batch_scope=loads.catalog.shared_reads)
    return StreamLoads(loads, group_commit, settings.staging_dir, limits, steps)


async def execute_stream_load(db: str, table: str, request: Request, services: Services) -> LoadResult:
    """Parse the request (credentials, body framing, headers), then one call runs the load: every outcome is a
    `LoadResult`."""
    headers: Mapping[str, str] = request.headers
    try:
        headers = decode_headers(request.headers.raw)
        privileges = login(request, services.accounts, headers)
        require_table(privileges, Priv.LOAD, "LOAD", db, table)  # before a byte of the body is read
        expected = body_length(headers, services.settings.max_body_bytes)
        load = parse_load_request(db, table, headers, limits=services.input_limits)
    except Exception as exc:
        return refused(exc, label=headers.get("label", ""), comment=headers.get("comment", ""))
    return await services.stream_loads.run(load, request.stream(), expected=expected)


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
        db, table = request.path_params["db"], request.path_params["table"]
        require_table(login(request, services.accounts), Priv.LOAD, "LOAD", db, table)  # before redirecting
        user, given = basic_credentials(request.headers)
    except NotAuthorized as exc:
        return DorisLoadResponse(render_load(exc, label=request.headers.get("label", "")))
    if "expect" not in request.headers:
        return JSONResponse({"status": "FAILED", "msg": "There is no 100-continue header"})
    password = quote(given, safe="")  # the client's own credentials, as Doris's FE puts them in the Location
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
    started = time.monotonic()
    if (redirect := fe_redirect(request, services)) is not None:
        label = request.headers.get("label", "")
        request.app.state.metrics.observe_redirect(db, table, label, redirect.status_code, time.monotonic() - started)
        return redirect
    if not services.gate.enter():  # draining for shutdown: refused before anything
        result = render_load(SHUTTING_DOWN, label=request.headers.get("label", ""))
    else:
        try:
            result = patched(await execute_stream_load(db, table, request, services), request)
        finally:
            services.gate.exit()
    request.app.state.metrics.observe_load(db, table, result, time.monotonic() - started)
    return DorisLoadResponse(result)


def patched(result: LoadResult, request: Request) -> LoadResult:
    """The reply as this request sees it: `TwoPhaseCommit` echoes the header even on early failures (the Flink
    connector's label probe checks it on `Label Already Exists`); an error log's path becomes a full URL."""
    if request.headers.get("two_phase_commit") == "true" and result.two_phase_commit != "true":
        result = result.model_copy(update={"two_phase_commit": "true"})
    if result.error_url and result.error_url.startswith("/"):
        result = result.model_copy(update={"error_url": str(request.base_url).rstrip("/") + result.error_url})
    return result


_ROUTE = re.compile(r"/api/([^/]+)/([^/]+)/_stream_load")  # the route's path, its parameters as FastAPI matches them


class DirectStreamLoads:
    """ASGI middleware: a stream load (`PUT /api/{db}/{table}/_stream_load`) goes to `stream_load` straight away.

    FastAPI's routing, dependency solving and exception wrapping around the route cost about a tenth of the
    server's Python under concurrent small loads (py-spy `--gil`, 16 async clients); the route itself does all
    of a load's work and renders every outcome (`LoadResult`), so nothing between adds to it. The route stays
    registered (the OpenAPI description, and a path under a `root_path`, which FastAPI resolves); a bug is
    answered as the app's handlers answer it (`unexpected_error`). Installed inside Starlette's outermost
    error middleware, so `scope["app"]` is the app.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = None
        if scope["type"] == "http" and scope["method"] == "PUT" and not scope.get("root_path"):
            found = _ROUTE.fullmatch(scope["path"])
        if found is None:
            await self.app(scope, receive, send)
            return
        db, table = found[1], found[2]
        scope["path_params"] = {"db": db, "table": table}
        request = Request(scope, receive)
        try:
            response = await stream_load(db, table, request, request.app.state.services)
        except Exception as exc:  # a bug: the load JSON with Status Fail, as the app's handlers answer it
            response = unexpected_error(request, exc)
        await response(scope, receive, send)
