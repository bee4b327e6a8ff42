"""Small FE/BE endpoints clients probe: `/`, health, backends, load state, error log, table schema."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import PlainTextResponse, Response

from app.auth import login, require_db, require_table
from app.deps import ServicesDep
from app.openapi import HealthReply, LoadStateReply, SchemaReply, reply
from app.responses import fe_bad_request, fe_json
from tables.accounts import Priv
from tables.errors import DatabaseNotFound

router = APIRouter()


@router.get("/", operation_id="root", summary="Liveness probe")
async def root() -> PlainTextResponse:
    return PlainTextResponse("Doris-compatible stream load service\n")


def backend_alive(request: Request) -> bool:
    """The one backend is the Spark JVM: alive unless it stopped and its replacement is not running yet.
    Before the lifespan has built the services the server does not answer at all, so that case is moot."""
    services = getattr(request.app.state, "services", None)
    return services is None or services.spark is None or services.spark.alive


@router.get("/api/health", operation_id="health", summary="Backends alive", responses=reply(HealthReply, "FE envelope"))
async def health(request: Request) -> Response:
    # Doris's FE answers 200 either way; the count says whether a backend can take loads
    return fe_json({"online_backend_num": int(backend_alive(request)), "total_backend_num": 1})


@router.get("/api/backends", operation_id="backends", summary="Backend list, as connectors probe it")
async def backends(request: Request, services: ServicesDep, is_alive: str | None = None) -> Response:
    login(request, services.accounts)
    host = request.url.hostname or services.settings.host
    port = request.url.port or services.settings.port
    alive = backend_alive(request)
    # `?is_alive=true` lists only live backends; Doris's FE reads the flag with Boolean.parseBoolean
    only_alive = (is_alive or "").lower() == "true"
    listed = [{"ip": host, "http_port": port, "is_alive": alive}] if alive or not only_alive else []
    return fe_json({"backends": listed})


@router.get(
    "/api/{db}/get_load_state",
    operation_id="get_load_state",
    summary="State of the load with this label",
    responses=reply(LoadStateReply, "FE envelope; `data` is UNKNOWN, PREPARE, VISIBLE or ABORTED"),
)
async def get_load_state(db: str, request: Request, services: ServicesDep, label: str | None = None) -> Response:
    require_db(login(request, services.accounts), Priv.LOAD, db)
    if not label:
        return fe_bad_request("No label selected")
    if not services.catalog.database_exists(db):
        raise DatabaseNotFound(db)
    return fe_json(services.txns.label_state(db, label))


@router.get(
    "/api/_load_error_log",
    operation_id="load_error_log",
    summary="Rejected rows of a load (the reply's ErrorURL)",
    response_class=PlainTextResponse,
    responses={401: {"description": "No valid credentials"}, 404: {"description": "No such error log"}},
)
async def load_error_log(request: Request, services: ServicesDep, file: str = "") -> Response:
    # rejected rows are table data: credentials as for every route (a BE serves this without them);
    # refused with 401 and a Basic challenge (`app.responses.doris_error`)
    login(request, services.accounts)
    text = services.loads.error_log(file)
    if text is None:
        return PlainTextResponse("error log not found\n", status_code=404)
    return PlainTextResponse(text)


@router.get(
    "/api/{db}/{table}/_schema",
    operation_id="table_schema",
    summary="Table schema, as the Flink/Spark connectors read it",
    responses=reply(SchemaReply, "FE envelope"),
)
async def table_schema(db: str, table: str, request: Request, services: ServicesDep) -> Response:
    privileges = login(request, services.accounts)
    if not privileges.sees_table(db, table):  # Doris's SHOW predicate: any privilege on the table
        require_table(privileges, Priv.SELECT, "SHOW", db, table)
    handle = await run_in_threadpool(services.catalog.load, db, table)  # a DorisError: the FE envelope
    definition = handle.definition
    props = []
    for col in definition.columns:
        entry = {
            "name": col.name,
            "type": col.type.schema_name(),
            "comment": col.comment,
            "aggregation_type": "" if col.is_key else (col.aggregation or "NONE"),
        }
        if col.type.name == "DECIMAL":
            entry["precision"] = str(col.type.precision)
            entry["scale"] = str(col.type.scale)
        props.append(entry)
    return fe_json({"status": 200, "keysType": definition.keys_type.value, "properties": props})
