"""Doris-shaped replies: the stream-load JSON and the FE's `{msg, code, data, count}` envelope."""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from tables.load_spec import LoadResult, render_load

log = logging.getLogger(__name__)


class DorisLoadResponse(Response):
    """Stream-load replies: HTTP 200, JSON pretty-printed with 4 spaces and a trailing newline, as the BE sends."""

    def __init__(self, result: LoadResult) -> None:
        body = json.dumps(result.to_doris(), indent=4, ensure_ascii=False) + "\n"
        super().__init__(content=body.encode(), status_code=200, media_type="application/json")


def fe_json(data: Any, *, msg: str = "success", code: int = 0, with_count: bool = True) -> Response:
    """The FE REST envelope; HTTP 200 whatever the outcome (Doris's RestApiStatusCode lives in `code`)."""
    payload: dict[str, Any] = {"msg": msg, "code": code, "data": data}
    if with_count:
        payload["count"] = 0
    return Response(json.dumps(payload, ensure_ascii=False), status_code=200, media_type="application/json")


def fe_error(reason: str) -> Response:
    return fe_json(reason, msg="Error", code=1)


def fe_unauthorized(reason: str) -> Response:
    return fe_json(reason, msg="Unauthorized", code=401)


def fe_bad_request(reason: str) -> Response:
    return fe_json(reason, msg="Bad Request", code=403)


def unexpected_error(request: Request, exc: Exception) -> Response:
    """The last resort for an exception no route caught (a bug): a Doris-shaped failure, never a bare 500.

    A stream load answers the load JSON with `Status: Fail`; every other route the FE envelope. The trace
    goes to the log only: an error text may carry internals a client has no business seeing.
    """
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    reason = f"internal error ({type(exc).__name__}); the server log has the details"
    if request.url.path.endswith(("/_stream_load", "/_stream_load_2pc")):
        label = request.headers.get("label", "")
        return DorisLoadResponse(render_load(RuntimeError(reason), label=label))
    return fe_error(reason)
