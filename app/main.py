"""The FastAPI application: `create_app(settings, spark=...)` builds everything once, in the lifespan."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from app import admin, compaction, query, stream_load
from app.deps import Services
from app.lifecycle import LoadGate
from app.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("app")


def build_services(settings: Settings, spark: SparkSession | None) -> Services:
    """Create the SparkSession (unless given), catalog, transaction table, writer and services."""
    from spark_runner.compaction import CompactionPolicy, Compactor
    from spark_runner.service import LoadService
    from spark_runner.session import build_session
    from sql.executor import SqlExecutor
    from tables.catalog import Catalog
    from tables.commit import TableWriter, recover_prepared
    from tables.pause import PausePoints
    from tables.transactions import TransactionStore

    data_dir = settings.resolved_data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    if spark is None:
        spark = build_session(master=settings.spark_master, conf=settings.spark_conf)
    catalog = Catalog(uri=settings.resolved_catalog_uri, warehouse=settings.resolved_warehouse)
    txns = TransactionStore(data_dir / "transactions.db", label_keep_seconds=settings.label_keep_seconds)
    visible, aborted = recover_prepared(catalog, txns)
    if visible or aborted:
        log.info("recovered unfinished loads: %d visible, %d aborted", visible, aborted)
    # nothing is in flight at start-up: every staged body belongs to a load that did not finish
    shutil.rmtree(data_dir / "staging", ignore_errors=True)
    writer = TableWriter(catalog, txns, pauses=PausePoints(settings.pause_at))
    loads = LoadService(spark=spark, catalog=catalog, txns=txns, writer=writer, error_log_dir=data_dir / "error_log")
    policy = CompactionPolicy(
        min_rowsets=settings.compaction_min_rowsets,
        promotion_bytes=settings.compaction_promotion_bytes,
        base_min_rowsets=settings.compaction_base_min_rowsets,
    )
    compactor = Compactor(spark=spark, catalog=catalog, writer=writer, policy=policy)
    executor = SqlExecutor(
        spark=spark,
        catalog=catalog,
        loads=loads,
        writer=writer,
        row_limit=settings.sql_row_limit,
        compactor=compactor,
        address=f"{settings.host}:{settings.port}",
    )
    return Services(settings=settings, catalog=catalog, txns=txns, loads=loads, sql=executor, pauses=writer.pauses)


async def maintenance_loop(services: Services) -> None:
    """Forget old labels, expire snapshots and remove orphan files, every interval."""
    from tables.maintenance import run_maintenance

    settings = services.settings
    while True:
        await asyncio.sleep(settings.maintenance_interval_seconds)
        try:
            report = await run_in_threadpool(
                run_maintenance,
                services.catalog,
                services.txns,
                staging=settings.resolved_data_dir / "staging",
                grace_seconds=settings.orphan_grace_seconds,
                snapshot_keep_seconds=settings.snapshot_keep_seconds,
            )
            log.info("maintenance: %s", report)
        except Exception:  # housekeeping must never take the server down
            log.exception("maintenance pass failed")


def create_app(settings: Settings | None = None, *, spark: Any = None) -> FastAPI:
    """The application; `spark` is a seam for tests that share one SparkSession."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = await run_in_threadpool(build_services, settings, spark)
        services.gate = app.state.gate
        app.state.services = services
        task = asyncio.create_task(maintenance_loop(services))
        compacting = asyncio.create_task(compaction.compaction_loop(services))
        try:
            yield
        finally:
            task.cancel()
            compacting.cancel()
            services.txns.close()

    app = FastAPI(
        title="Doris-compatible stream load on Spark",
        version="0.1.0",
        lifespan=lifespan,
        description="Apache Doris stream-load and HTTP SQL interfaces, with the data pipeline on Apache Spark.",
    )
    app.state.gate = LoadGate()
    app.include_router(stream_load.router)
    app.include_router(query.router)
    app.include_router(admin.router)
    app.include_router(compaction.router)
    return app
