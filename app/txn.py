"""Two-phase commit, phase two: `PUT /api/{db}/_stream_load_2pc` (and the table form), contract §1.5.

The FE's checks come first with its `{"status": "FAILED", "msg": ...}` shape; the BE's answer is
`{"status": "Success", "msg": "... commit successfully."}` or a Doris status code with its message,
pretty-printed with 4 spaces as rapidjson's PrettyWriter does. Always HTTP 200.

Privileges: the route needs LOAD in the database (on it or on one of its tables; the table form: on its table),
and the transaction, once resolved by id or label, must be one the user may load into (LOAD on its own table, as
Doris's FE checks in `loadTxn2PC`) and, in the table form, one of the URL's table. A transaction that fails
either check is answered as one that does not exist, so a user cannot probe the transactions of tables it has no
LOAD on.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from app.auth import login, require_db
from app.deps import Services, ServicesDep
from app.responses import txn_reply
from tables.accounts import Priv, Privileges
from tables.leases import PRECOMMIT_TIMEOUTS
from tables.transactions import Txn

router = APIRouter()
log = logging.getLogger(__name__)


async def _operate(db: str, request: Request, services: Services, table: str | None = None) -> Response:
    privileges = login(request, services.accounts)
    # Doris's FE checks the password here and LOAD on the transaction's own tables later (`_may_operate`): a user
    # with LOAD on one table commits its transactions by either form; one without LOAD in the database is refused
    if not (privileges.holds_in(Priv.LOAD, db) if table is None else privileges.allows(Priv.LOAD, db, table)):
        require_db(privileges, Priv.LOAD, db)
    txn_id, label = request.headers.get("txn_id"), request.headers.get("label")
    operation = request.headers.get("txn_operation")
    if not txn_id and not label:
        return JSONResponse({"status": "FAILED", "msg": "No transaction id or label selected."})
    if not operation:
        return JSONResponse({"status": "FAILED", "msg": "No transaction operation('commit' or 'abort') selected."})
    assert services.two_phase is not None
    operate = partial(
        services.two_phase.operate,
        db,
        txn_id=txn_id,
        label=label,
        operation=operation.strip(),
        may_operate=partial(_may_operate, privileges, table),
    )
    return txn_reply("Success", await run_in_threadpool(operate))  # a refusal: TxnOperationError, rendered


def _may_operate(privileges: Privileges, table: str | None, txn: Txn) -> bool:
    """LOAD on the transaction's own table (root and admin hold it everywhere); the table form: its table only."""
    if table is not None and txn.table != table:
        return False
    return privileges.allows(Priv.LOAD, txn.db, txn.table)


@router.put("/api/{db}/_stream_load_2pc")
async def stream_load_2pc(db: str, request: Request, services: ServicesDep) -> Response:
    return await _operate(db, request, services)


@router.put("/api/{db}/{table}/_stream_load_2pc")
async def table_stream_load_2pc(db: str, table: str, request: Request, services: ServicesDep) -> Response:
    return await _operate(db, request, services, table)


async def precommit_timeout_loop(services: Services) -> None:
    """Abort transactions left PRECOMMITTED past `precommit_timeout_seconds`."""
    settings = services.settings
    interval = max(0.2, min(settings.precommit_timeout_seconds / 4, 30.0))
    while True:
        await asyncio.sleep(interval)
        if services.two_phase is None or not services.leases.leads(PRECOMMIT_TIMEOUTS):  # another server runs it
            continue
        try:
            aborted = await run_in_threadpool(services.two_phase.abort_expired, settings.precommit_timeout_seconds)
            if aborted:
                log.info("aborted %d precommitted transactions past their timeout", aborted)
        except Exception:  # housekeeping must never take the server down
            log.exception("precommit timeout pass failed")
