"""The BE's compaction endpoints (`/api/compaction/run`, `/api/compaction/show`) and the background loop."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from app.auth import login, require_admin
from app.deps import Services, ServicesDep
from tables.leases import COMPACTION

router = APIRouter()
log = logging.getLogger("app")


def be_json(payload: dict[str, Any]) -> Response:
    """The BE's replies: HTTP 200, pretty-printed JSON."""
    return Response(json.dumps(payload, indent=4), status_code=200, media_type="application/json")


def _tablet_id(raw: str | None) -> int | None:
    return int(raw) if raw is not None and raw.isdigit() else None


@router.post("/api/compaction/run")
async def run(
    request: Request, services: ServicesDep, tablet_id: str | None = None, compact_type: str = ""
) -> Response:
    require_admin(login(request, services.accounts))
    from sql.admin import trigger_compaction  # imports pyspark: not when the app module is imported

    tablet = _tablet_id(tablet_id)
    if tablet is None:
        return be_json({"status": "Fail", "msg": "invalid argument: tablet_id"})
    return be_json(await run_in_threadpool(trigger_compaction, services.compactor, tablet, compact_type.lower()))


@router.get("/api/compaction/show")
async def show(request: Request, services: ServicesDep, tablet_id: str | None = None) -> Response:
    require_admin(login(request, services.accounts))
    from sql.admin import compaction_status  # imports pyspark: not when the app module is imported

    tablet = _tablet_id(tablet_id)
    if tablet is None:
        return be_json({"status": "Fail", "msg": "invalid argument: tablet_id"})
    return be_json(await run_in_threadpool(compaction_status, services.compactor, tablet))


async def compaction_loop(services: Services) -> None:
    """Compact every table whose rowsets pass the thresholds, every `compaction_interval_seconds`.

    A pass waits while a bulk load's job runs (`LoadService.big_loads`), up to `compaction_defer_seconds`: on a
    small machine the two share the cores, and the load the user waits for took ~1 s longer beside a 1.4 s
    compaction (bench/README.md). Past that wait compaction runs anyway, so a stream of bulk loads cannot starve
    it."""
    interval = services.settings.compaction_interval_seconds
    defer = services.settings.compaction_defer_seconds
    waiting_since: float | None = None
    while interval > 0:
        await asyncio.sleep(interval)
        if not services.leases.leads(COMPACTION):  # another server runs it
            continue
        now = time.monotonic()
        if services.loads.big_loads and (waiting_since is None or now - waiting_since < defer):
            waiting_since = now if waiting_since is None else waiting_since
            continue
        waiting_since = None
        try:
            done = await run_in_threadpool(services.compactor.run_background_pass)
            if done:
                log.info("background compaction: %d tables compacted", len(done))
        except Exception:  # compaction must never take the server down
            log.exception("background compaction pass failed")
