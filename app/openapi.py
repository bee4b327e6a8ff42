"""The OpenAPI description of the HTTP interface, generated from the app (`make openapi` writes
`openapi/openapi.json`; a test fails when the committed file drifts from the code).

Handlers read headers and bodies raw, as Doris does, so the parts FastAPI cannot see are declared here: every
stream-load header as a parameter (type, enum, default: generated from the option table, `loaders/options.py`),
the load body as bytes, the FE envelope replies, and HTTP Basic as the security scheme.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field

from loaders.options import LOAD_OPTIONS, LoadOption
from tables.load_spec import GROUP_COMMIT_OMITS, LoadResult

SPEC_PATH = Path(__file__).resolve().parents[1] / "openapi" / "openapi.json"
BASIC = "basicAuth"


def _schema(option: LoadOption) -> dict[str, Any]:
    """The JSON schema of one option's header: its type, allowed values, bounds and documented default."""
    schema: dict[str, Any] = {"type": option.kind}
    if option.pattern:
        schema["pattern"] = option.pattern
    if option.documented_values and option.kind != "boolean":
        schema["enum"] = list(option.documented_values)
    if option.minimum is not None:
        schema["minimum"] = option.minimum
    if option.maximum is not None:
        schema["maximum"] = option.maximum
    if option.documented_default is not None:
        schema["default"] = option.documented_default
    return schema


def _header(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": False, "description": description, "schema": schema}


def stream_load_headers() -> list[dict[str, Any]]:
    """Every load option as a header parameter, generated from the option table so the two cannot drift; an
    alias is a parameter of its own."""
    params = []
    for option in LOAD_OPTIONS:
        params.append(_header(option.name, option.description, _schema(option)))
        params += [
            _header(alias, f"Alias of `{option.name}` ({option.name} wins).", {"type": option.kind})
            for alias in option.aliases
        ]
    return params


def stream_load_operation() -> dict[str, Any]:
    """The `openapi_extra` of the stream-load route: header parameters and the payload."""
    return {
        "parameters": stream_load_headers(),
        "requestBody": {
            "required": True,
            "description": "The payload: CSV or JSON text, or Parquet/ORC bytes, possibly compressed.",
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        },
    }


class QueryRequest(BaseModel):
    stmt: str = Field(description="One or more `;`-separated Doris SQL statements; the reply is the last one's.")
    limit: int | None = Field(None, description="Row limit of a result set (default SL_SQL_ROW_LIMIT).")


class ColumnMeta(BaseModel):
    name: str
    type: str = Field(description="MySQL type name, e.g. BIGINT, VARCHAR, DATE.")


class QueryResultSet(BaseModel):
    type: Literal["result_set"]
    meta: list[ColumnMeta]
    data: list[list[Any]]
    time: int = Field(description="Milliseconds.")


class QueryExecStatus(BaseModel):
    type: Literal["exec_status"]
    status: dict[str, Any] = Field(description="`affectedRows`, and for INSERT `label` and `txnId`.")
    time: int


class FeReply(BaseModel):
    """The FE REST envelope: HTTP 200 whatever the outcome; `code` 0 is success, `data` the error otherwise."""

    msg: str = Field(description="`success`, `Error`, `Unauthorized` or `Bad Request`.")
    code: int = Field(description="0 success, 1 error, 401 unauthorized, 403 bad request.")
    data: Any
    count: int = 0


class QueryReply(FeReply):
    data: QueryResultSet | QueryExecStatus | str


class LoadStateReply(FeReply):
    data: Literal["UNKNOWN", "PREPARE", "COMMITTED", "VISIBLE", "ABORTED"] | str


class SchemaColumn(BaseModel):
    name: str
    type: str
    comment: str
    aggregation_type: str
    precision: str | None = None
    scale: str | None = None


class TableSchema(BaseModel):
    status: int
    keysType: str  # noqa: N815 - Doris's field name
    properties: list[SchemaColumn]


class SchemaReply(FeReply):
    data: TableSchema | str


class Health(BaseModel):
    online_backend_num: int
    total_backend_num: int


class HealthReply(FeReply):
    data: Health


def query_operation() -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/QueryRequest"}}},
        }
    }


def reply(model: type[BaseModel], description: str) -> dict[int | str, dict[str, Any]]:
    return {200: {"model": model, "description": description}}


LOAD_REPLY = reply(LoadResult, "Doris's stream-load reply, always HTTP 200.")
PUBLIC_PATHS = frozenset({"/", "/api/health", "/api/backends", "/api/_load_error_log", "/metrics"})


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document plus the request schemas handlers read raw and the Basic auth scheme."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {})
    defs = components.setdefault("schemas", {})
    defs["QueryRequest"] = QueryRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    components["securitySchemes"] = {
        BASIC: {"type": "http", "scheme": "basic", "description": "Users root and admin, password SL_ROOT_PASSWORD."}
    }
    # Doris always sends these reply fields (but a group-commit reply lacks a few); the optional ones
    # (ErrorURL, ...) only when they have a value
    defs["LoadResult"]["required"] = [
        f.alias for f in LoadResult.model_fields.values() if f.default is not None and f.alias not in GROUP_COMMIT_OMITS
    ]
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            operation["security"] = [] if path in PUBLIC_PATHS else [{BASIC: []}]
            # handlers validate nothing FastAPI-side: errors are Doris-shaped replies, never 422
            operation.get("responses", {}).pop("422", None)
    for unused in ("HTTPValidationError", "ValidationError"):
        defs.pop(unused, None)
    app.openapi_schema = schema
    return schema


def install(app: FastAPI) -> None:
    app.openapi = lambda: build_openapi(app)  # type: ignore[method-assign]


def render(app: FastAPI) -> str:
    return json.dumps(app.openapi(), indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def main() -> None:
    """`python -m app.openapi`: write openapi/openapi.json from the app."""
    from app.main import create_app

    SPEC_PATH.parent.mkdir(exist_ok=True)
    SPEC_PATH.write_text(render(create_app()))
    print(f"wrote {SPEC_PATH}")


if __name__ == "__main__":
    main()
