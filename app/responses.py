"""Doris-shaped replies, and the one place errors become replies.

Every route family answers in its own Doris shape, always HTTP 200 (contract §1.4):
    stream load     the load JSON (`DorisLoadResponse`), `Status: Fail`
    2PC             `{"status": ..., "msg": ...}` pretty-printed (`txn_reply`)
    FE routes       the `{msg, code, data, count}` envelope (`fe_json`); /api/query words SQL errors its way
A route raises a `DorisError`; `install_error_handlers` renders it for the route's family, and anything else
(a bug) through `unexpected_error`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from tables.errors import BadRequest, DorisError, LoadTimeout, NotAuthorized, SqlError, TxnOperationError
from tables.load_spec import LoadResult, render_load

log = logging.getLogger(__name__)


class DorisLoadResponse(Response):
    """Stream-load replies: HTTP 200, JSON pretty-printed with 4 spaces and a trailing newline, as the BE sends."""

    def __init__(self, result: LoadResult) -> None:
        # pydantic's serializer writes what `json.dumps(result.to_doris(), indent=4, ensure_ascii=False)` does
        # (tests/test_stream_load.py compares them), ~5x faster: Python's own encoder is pure Python when indenting
        body = result.model_dump_json(by_alias=True, exclude_none=True, indent=4) + "\n"
        super().__init__(content=body.encode(), status_code=200, media_type="application/json")


def txn_reply(status: str, msg: str) -> Response:
    """The BE's 2PC answer, pretty-printed with 4 spaces as rapidjson's PrettyWriter does."""
    body = json.dumps({"status": status, "msg": msg}, indent=4, ensure_ascii=False)
    return Response(body, status_code=200, media_type="application/json")


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


ERROR_LOG_PATH = "/api/_load_error_log"
QUERY_PREFIX = "/api/query/"


def doris_error(request: Request, exc: Exception) -> Response:
    """A `DorisError` a route raised, in the shape of the route's family (chosen by the path; a 2PC refusal by
    its class). One the family does not word is a bug to that route: `unexpected_error`."""
    path = request.url.path
    if isinstance(exc, TxnOperationError):
        return txn_reply(exc.status, exc.msg)
    if path.endswith("/_stream_load"):  # the route renders every load failure itself (metrics, 2PC echo)
        return unexpected_error(request, exc)
    if isinstance(exc, NotAuthorized):
        if path == ERROR_LOG_PATH:  # a browser opening the ErrorURL asks for credentials
            return PlainTextResponse(
                f"{exc.text}\n", status_code=401, headers={"WWW-Authenticate": 'Basic realm="doris"'}
            )
        return fe_unauthorized(exc.text)
    if path.startswith(QUERY_PREFIX):
        if isinstance(exc, SqlError):
            return fe_error(f"Failed to execute sql: {exc.doris_message}")
        if isinstance(exc, BadRequest | LoadTimeout):  # the body: too large, or too slow
            return fe_bad_request(exc.text)
        return unexpected_error(request, exc)
    if isinstance(exc, DorisError):
        return fe_error(exc.message)
    return unexpected_error(request, exc)


def install_error_handlers(app: FastAPI) -> None:
    """The app's error handlers: Doris errors by route family, and the last resort for everything else."""
    app.add_exception_handler(DorisError, doris_error)
    app.add_exception_handler(Exception, unexpected_error)
