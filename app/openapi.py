"""The OpenAPI description of the HTTP interface, generated from the app (`make openapi` writes
`openapi/openapi.json`; a test fails when the committed file drifts from the code).

Handlers read headers and bodies raw, as Doris does, so the parts FastAPI cannot see are declared here: every
stream-load header as a parameter (type, enum, default), the load body as bytes, the FE envelope replies,
and HTTP Basic as the security scheme.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field

from loaders.headers import COMPRESS_TYPES, MAX_TIMEOUT_S
from tables.load_spec import GROUP_COMMIT_OMITS, LoadResult

SPEC_PATH = Path(__file__).resolve().parents[1] / "openapi" / "openapi.json"
BASIC = "basicAuth"


def _header(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": False, "description": description, "schema": schema}


def _bool(name: str, description: str) -> dict[str, Any]:
    return _header(name, description, {"type": "boolean", "default": False})


def _text(name: str, description: str, **schema: Any) -> dict[str, Any]:
    return _header(name, description, {"type": "string", **schema})


# Every header `loaders/headers.py` reads, as Doris documents it (contract §2); values are case-insensitive.
STREAM_LOAD_HEADERS: list[dict[str, Any]] = [
    _text(
        "label",
        "Unique label of the load within the database: a retried load with the same label is not applied twice. "
        "Default: a generated UUID.",
        pattern=r"^[-_A-Za-z0-9:]{1,128}$",
    ),
    _text(
        "format",
        "Payload format.",
        enum=["csv", "csv_with_names", "csv_with_names_and_types", "json", "parquet", "orc"],
        default="csv",
    ),
    # defaults only in the text: a raw newline cannot travel in a header, and openapi-python-client 0.29
    # escapes a backslash in a default twice, so a generated SDK would send `\\\\n`
    _text("column_separator", "CSV column separator, any length; `\\t`, `\\n`, `\\xNN` escapes. Default: tab."),
    _text("line_delimiter", "CSV line delimiter, any length; `\\t`, `\\n`, `\\xNN` escapes. Default: newline."),
    _header(
        "skip_lines", "CSV lines skipped at the start of the payload.", {"type": "integer", "minimum": 0, "default": 0}
    ),
    _text("enclose", "CSV enclosing character (one byte): separators inside it are data."),
    _text("escape", "CSV escape character (one byte) inside enclosed fields."),
    _bool("trim_double_quotes", "Strip the outer double quotes of each CSV field."),
    _bool("empty_field_as_null", "Read empty CSV fields as NULL."),
    _text("compress_type", "Compression of the payload.", enum=sorted(COMPRESS_TYPES)),
    _text(
        "Content-Encoding",
        "HTTP compression of the payload, used when `compress_type` is not set.",
        enum=["identity", "gzip", "lz4", "zstd", "deflate"],
    ),
    _text("columns", "Column mapping, e.g. `k, tmp, v = upper(tmp)`: payload fields in order, derived columns after."),
    _text("hidden_columns", "Hidden columns the payload carries, e.g. `__DORIS_DELETE_SIGN__`."),
    _text("where", "Filter: rows not matching it are counted as unselected."),
    _text(
        "merge_type",
        "APPEND adds rows, DELETE deletes their keys, MERGE decides per row by `delete`.",
        enum=["APPEND", "DELETE", "MERGE"],
        default="APPEND",
    ),
    _text("delete", "Condition marking rows as deletes; required with merge_type MERGE, refused otherwise."),
    _text("function_column.sequence_col", "Column whose value is the row's sequence (tables with sequence_type)."),
    _header(
        "max_filter_ratio",
        "Largest fraction of rows that may be filtered for bad data before the load fails.",
        {"type": "number", "minimum": 0, "maximum": 1, "default": 0},
    ),
    _bool("strict_mode", "Reject rows whose values do not convert, instead of loading NULL."),
    _header(
        "timeout",
        "Seconds the load may take.",
        {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S, "default": MAX_TIMEOUT_S},
    ),
    _text("timezone", "Time zone of the load (name or offset such as +08:00); default: the server's session zone."),
    _text("time_zone", "Alias of `timezone` (timezone wins)."),
    _text("comment", "Comment echoed in the reply."),
    _bool("strip_outer_array", "JSON: the payload is one array of rows (at most SL_MAX_JSON_BODY_BYTES)."),
    _bool(
        "read_json_by_line",
        "JSON: one row per line (the default when neither this nor strip_outer_array is sent); false reads "
        "the payload as one document (at most SL_MAX_JSON_BODY_BYTES).",
    ),
    _text("jsonpaths", 'JSON: where each column is found, e.g. `["$.id", "$.name"]`.'),
    _text("json_root", "JSON: the path of the rows inside each document."),
    _bool("partial_columns", "Partial-column update of a merge-on-write unique table (same as UPDATE_FIXED_COLUMNS)."),
    _text(
        # no declared default: a sent UPSERT would override `partial_columns`
        "unique_key_update_mode",
        "Unique-key update mode; when absent, UPSERT unless `partial_columns` is true.",
        enum=["UPSERT", "UPDATE_FIXED_COLUMNS"],
    ),
    _text(
        "partial_update_new_key_behavior",
        "Partial update of a key not in the table: APPEND inserts it, ERROR fails the load.",
        enum=["APPEND", "ERROR"],
        default="APPEND",
    ),
    _text("group_commit", "Group commit mode; only `off_mode` is built.", enum=["off_mode"], default="off_mode"),
    _text("two_phase_commit", "Two-phase commit; not built yet, so only `false`.", enum=["false"], default="false"),
    _bool("negative", "Negative load (aggregate SUM tables); not built yet, so only false."),
]


def stream_load_operation() -> dict[str, Any]:
    """The `openapi_extra` of the stream-load route: header parameters and the payload."""
    return {
        "parameters": STREAM_LOAD_HEADERS,
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
