"""The FastAPI application: `create_app(settings, spark=...)` builds everything once, in the lifespan."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from app import admin, compaction, memory, metrics, openapi, query, stream_load, txn
from app.deps import Services
from app.lifecycle import LoadGate
from app.mysql_server import bound_port, start_mysql_server
from app.responses import install_error_handlers
from app.settings import Settings
from tables.leases import DYNAMIC_PARTITIONS, MAINTENANCE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_runner.compaction import CompactionResult
    from spark_runner.scratch import ScratchWatch

log = logging.getLogger("app")


def build_services(
    settings: Settings,
    spark: SparkSession | None,
    *,
    gate: LoadGate | None = None,
    on_compaction: Callable[[CompactionResult], None] | None = None,
) -> Services:
    """Create the SparkSession (unless given), catalog, transaction table, writer and every service, recover
    what a stop left unfinished, and return them as the one `Services`."""
    import sqlalchemy

    from loaders.headers import parse_load_request
    from spark_runner.cluster import ClusterProblem, ExecutorWatch, check_cluster, is_local, master_problem
    from spark_runner.compaction import CompactionPolicy, Compactor
    from spark_runner.group_commit import GroupCommitter
    from spark_runner.routine_load import RoutineLoadManager
    from spark_runner.scratch import LOCAL_DIR, clear, scratch_conf
    from spark_runner.service import LoadService
    from spark_runner.session import build_session
    from spark_runner.supervisor import SparkHandle
    from spark_runner.takeover import Takeover
    from sql.broker_load import BrokerLoads
    from sql.context import QueryLimits
    from sql.executor import SqlExecutor
    from tables.accounts import AccountStore, LoginThrottle, SharedLoginThrottle
    from tables.catalog import Catalog
    from tables.commit import TableWriter, recover_prepared
    from tables.leases import Leases, LeaseTable
    from tables.model import STORAGE_FORMAT
    from tables.paths import remove_tree
    from tables.pause import PausePoints
    from tables.routine_load import STORE_FORMAT, RoutineLoadStore
    from tables.rowsets import keep_uris
    from tables.source_paths import SourcePolicy
    from tables.store import PoolSizes, Store, is_postgresql, pool_options
    from tables.transactions import TransactionStore
    from tables.twophase import TwoPhase
    from tables.versions import SharedVersions

    # the data dir is the server's alone (SQLite catalog and stores, error logs): only this process reads it;
    # the shared dir holds every file a Spark executor reads or writes (on a cluster, every node mounts it)
    data_dir = settings.resolved_data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    shared_dir = settings.resolved_shared_dir
    shared_dir.mkdir(parents=True, exist_ok=True)

    # Spark's shuffles and spills go to a folder of the data dir, emptied before each JVM (spark_runner/scratch.py)
    spark_local = data_dir / "spark-local"
    spark_conf = scratch_conf(spark_local, dict(settings.spark_conf))

    def new_session() -> SparkSession:
        if (problem := master_problem(settings.spark_master)) is not None:
            raise ClusterProblem(problem)
        if spark_conf[LOCAL_DIR] == str(spark_local):
            clear(spark_local)  # what the JVM before this one left (a killed JVM removes nothing)
        return build_session(master=settings.spark_master, conf=spark_conf)

    on_cluster = not is_local(settings.spark_master)
    # every service gets the handle: a JVM that stops is replaced under them (spark_runner/supervisor.py); on a
    # cluster, so is a session the cluster lost (its master restarted) (spark_runner/cluster.py)
    handle = SparkHandle(
        spark if spark is not None else new_session(),
        new_session,
        probe=ExecutorWatch(settings.spark_cluster_check_timeout_seconds) if on_cluster else None,
        wedged_after=settings.spark_wedged_after_seconds,
    )
    if on_cluster:
        try:
            check_cluster(handle.current(), shared_dir, timeout=settings.spark_cluster_check_timeout_seconds)
        except ClusterProblem as exc:
            log.error("Spark cluster check failed: %s", exc.message)
            raise
        log.info("Spark cluster check passed: %s, shared dir %s", settings.spark_master, shared_dir)
    spark = cast("SparkSession", handle)
    on_postgresql = is_postgresql(settings.resolved_catalog_uri)
    # on PostgreSQL, at most `catalog_pool_size` connections in all, shared out among the engines
    pools = PoolSizes.of(settings.catalog_pool_size) if on_postgresql else None
    # a warehouse through pyarrow.fs records URIs, which the rowset code then keeps as they are (tables/warehouse.py)
    warehouse = settings.warehouse_storage()
    keep_uris(not warehouse.is_local)
    catalog = Catalog(
        uri=settings.resolved_catalog_uri,
        warehouse=warehouse,
        pool_size=pools.catalog if pools is not None else None,
    )
    # the store of everything the server remembers (tables/store.py): SQLite files in the data dir, or the
    # catalog's PostgreSQL database, which every server on that catalog shares
    shared_store = None
    if pools is not None:
        shared_store = Store(
            settings.resolved_catalog_uri, pool_size=pools.writes, read_pool_size=pools.reads, bounded=True
        )
    store = shared_store or Store.sqlite(data_dir / "transactions.db")
    # several servers share a PostgreSQL store: which one runs each background duty, and each table's version order
    coordination = sqlalchemy.create_engine(
        settings.resolved_store_uri,
        pool_pre_ping=True,
        **(pool_options(pools.coordination, bounded=True) if pools is not None else {}),
    )
    leases = Leases(LeaseTable(coordination), server_name=settings.server_name, period=settings.lease_seconds)
    leases.start()  # waits while a survivor is still resolving what this server's last run left unfinished
    owner = leases.server_name if shared_store is not None else None
    versions = None
    if shared_store is not None:
        versions = SharedVersions(coordination, leases.server_name, lambda name: name in leases.live_servers())
        versions.forget_holder(leases.server_name)  # places in version orders this server's last run held
    txns = TransactionStore(store, label_keep_seconds=settings.label_keep_seconds, owner=owner)
    throttle = (  # several servers count failed logins together, in the store
        LoginThrottle(settings.login_max_failures, settings.login_lock_seconds)
        if shared_store is None
        else SharedLoginThrottle(settings.login_max_failures, settings.login_lock_seconds, store=shared_store)
    )
    accounts = AccountStore(store, throttle)
    accounts.bootstrap(settings.root_password.get_secret_value())  # root's password: at the first start only
    visible, aborted = recover_prepared(catalog, txns, owner=owner)  # several servers: this server's own only
    if visible or aborted:
        log.info("recovered unfinished loads: %d visible, %d aborted", visible, aborted)
    # nothing is in flight at start-up: every staged body belongs to a load that did not finish (an earlier
    # release staged under the data dir)
    for staging in dict.fromkeys([settings.staging_dir, data_dir / "staging"]):
        remove_tree(staging, [data_dir, shared_dir])
    writer = TableWriter(
        catalog,
        txns,
        pauses=PausePoints(settings.pause_at),
        snapshot_keep_count=settings.snapshot_keep_count,
        versions=versions,
    )
    # error logs are written by the driver (from rows collected to it) under the shared dir, so every server of a
    # deployment serves every load's ErrorURL; those an earlier release wrote in the data dir are served too
    loads = LoadService(
        spark=spark,
        catalog=catalog,
        txns=txns,
        writer=writer,
        error_log_dir=shared_dir / "error_log",
        old_error_log_dirs=[data_dir / "error_log"],
    )
    policy = CompactionPolicy(
        min_rowsets=settings.compaction_min_rowsets,
        promotion_bytes=settings.compaction_promotion_bytes,
        base_min_rowsets=settings.compaction_base_min_rowsets,
    )
    compactor = Compactor(spark=spark, catalog=catalog, writer=writer, policy=policy, on_compaction=on_compaction)
    if converted := compactor.convert_storage():  # merge-on-write tables an earlier release wrote
        log.info("converted %d merge-on-write tables to storage format %d", converted, STORAGE_FORMAT)
    routine_store = RoutineLoadStore(store)
    if migrated := routine_store.migrate(parse_load_request):  # jobs an earlier release stored as raw headers
        log.info("routine load store migrated to format %d: %d jobs", STORE_FORMAT, migrated)
    routine_loads = RoutineLoadManager(
        loads=loads,
        store=routine_store,
        txns=txns,
        staging_dir=settings.staging_dir,
        min_batch_rows=settings.routine_load_min_batch_rows,
        cert_dir=settings.kafka_cert_dir,
        owner=owner,
    )
    routine_loads.start()  # after recover_prepared: batches a crash left undecided are resolved first
    # never read by a broker load, even under an allowed root: the server's data and the Kafka private keys
    server_roots = [
        data_dir,
        shared_dir,
        *([settings.resolved_warehouse] if settings.warehouse_uri is None else []),
        *([settings.kafka_cert_dir] if settings.kafka_cert_dir else []),
    ]
    broker_loads = BrokerLoads(
        loads=loads,
        data_dir=data_dir,
        store=shared_store,  # none: data_dir/load_jobs.db
        sources=SourcePolicy.build(settings.broker_allowed_roots, server_roots),
        max_waiting_jobs=settings.broker_max_waiting_jobs,
        concurrency=settings.broker_load_concurrency,
        owner=owner,
    )

    def group_committer(scratch: Path) -> GroupCommitter:
        return GroupCommitter(
            loads=loads,
            # Spark reads the group's payloads: hard links to staged bodies and WAL files, one filesystem
            data_dir=scratch,
            interval_ms=settings.group_commit_interval_ms,
            max_loads=settings.group_commit_max_loads,
            retry_num=settings.group_commit_replay_wal_retry_num,
            retry_interval_s=settings.group_commit_replay_wal_retry_interval_seconds,
            wal_max_loads_per_table=settings.group_commit_max_wal_num_per_table,
            wal_max_disk_limit=settings.group_commit_wal_max_disk_limit,
        )

    # several servers: what a dead one left unfinished is resolved by a survivor (spark_runner/takeover.py)
    takeover = None
    if shared_store is not None:
        takeover = Takeover(
            leases=leases,
            catalog=catalog,
            txns=txns,
            versions=versions,
            servers_dir=settings.scratch_dir.parent,
            committer=group_committer,
            adopt_jobs=lambda name: routine_loads.adopt(name) + broker_loads.adopt(name),
        )
    group_commit = group_committer(settings.scratch_dir)
    services = Services(
        settings=settings,
        spark=handle,
        catalog=catalog,
        txns=txns,
        pauses=writer.pauses,
        loads=loads,
        group_commit=group_commit,
        stream_loads=stream_load.stream_loads(settings, loads, group_commit),
        input_limits=settings.input_limits(),
        two_phase=TwoPhase(catalog=catalog, txns=txns, writer=writer),
        accounts=accounts,
        compactor=compactor,
        routine_loads=routine_loads,
        broker_loads=broker_loads,
        sql=SqlExecutor(
            spark=spark,
            catalog=catalog,
            loads=loads,
            writer=writer,
            row_limit=settings.sql_row_limit,
            routine_loads=routine_loads,
            broker_loads=broker_loads,
            accounts=accounts,
            compactor=compactor,
            address=f"{settings.host}:{settings.port}",
            limits=QueryLimits(
                max_string_bytes=settings.sql_max_string_bytes,
                max_generated_rows=settings.sql_max_generated_rows,
                max_result_bytes=settings.sql_max_result_bytes,
            ),
            max_statements=settings.sql_max_statements,
        ),
        gate=gate or LoadGate(),
        leases=leases,
        takeover=takeover,
    )
    recover(services)
    return services


def recover(services: Services) -> None:
    """Finish what the last stop interrupted: committed 2PC loads, broker load jobs, acknowledged async
    group-commit loads (in this order, after `recover_prepared` and the routine loads' start)."""
    services.two_phase.recover_committed()
    resumed, cancelled = services.broker_loads.recover()
    if resumed or cancelled:
        log.info("broker loads interrupted by the stop: %d resumed, %d cancelled", resumed, cancelled)
    if replayed := services.group_commit.replay_wal():
        log.info("replaying %d acknowledged async group-commit loads", replayed)


async def maintenance_loop(services: Services) -> None:
    """Forget old labels, expire snapshots and remove orphan files, every interval."""
    import time

    from tables.error_logs import expire_error_logs
    from tables.maintenance import run_maintenance

    settings = services.settings
    while True:
        await asyncio.sleep(settings.maintenance_interval_seconds)
        if not services.leases.leads(MAINTENANCE):  # another server runs it; this one's own old error logs expire
            for folder in services.loads.error_log_dirs[1:]:
                keep = services.txns.label_keep_seconds
                await run_in_threadpool(expire_error_logs, folder, keep_seconds=keep, now=time.time())
            continue
        try:
            report = await run_in_threadpool(
                run_maintenance,
                services.catalog,
                services.txns,
                staging=settings.staging_dir,
                error_logs=services.loads.error_log_dirs,
                commit_lock=services.loads.writer.commit_lock,
                grace_seconds=settings.orphan_grace_seconds,
                snapshot_keep_seconds=settings.snapshot_keep_seconds,
                snapshot_keep_count=settings.snapshot_keep_count,
            )
            log.info("maintenance: %s", report)
        except Exception:  # housekeeping must never take the server down
            log.exception("maintenance pass failed")


async def takeover_loop(services: Services) -> None:
    """Several servers: every lease interval, resolve what servers that are gone left unfinished."""
    takeover = services.takeover
    while takeover is not None:
        await asyncio.sleep(services.leases.interval)
        try:
            await run_in_threadpool(takeover.run_pass)
        except Exception:  # the next pass tries again
            log.exception("takeover pass failed")


async def dynamic_partition_loop(services: Services) -> None:
    """Create dynamic partitions ahead and drop those past their window, every interval (`sql.dynamic_partition`)."""
    from sql.dynamic_partition import schedule_all

    interval = services.settings.dynamic_partition_check_interval_seconds
    while interval > 0:
        await asyncio.sleep(interval)
        if not services.leases.leads(DYNAMIC_PARTITIONS):  # another server runs it
            continue
        try:
            await run_in_threadpool(schedule_all, services.catalog, services.compactor.writer)
        except Exception:  # a scheduler pass must never take the server down
            log.exception("dynamic partition pass failed")


def watch_scratch(settings: Settings, services: Services) -> ScratchWatch | None:
    """The watch on Spark's scratch folder (spark_runner/scratch.py), started; None when it is unbounded or the
    operator's own `spark.local.dir` replaces it."""
    from spark_runner.columns import java_class
    from spark_runner.queries import JobGuard
    from spark_runner.scratch import LOCAL_DIR, ScratchWatch

    folder = settings.resolved_data_dir / "spark-local"
    if settings.spark_scratch_max_bytes <= 0 or LOCAL_DIR in settings.spark_conf:
        return None
    watch = ScratchWatch(
        folder,
        settings.spark_scratch_max_bytes,
        cancel=JobGuard.cancel_all,
        collect=lambda: java_class("java.lang.System").gc(),
    )
    watch.start()
    return watch


def create_app(settings: Settings | None = None, *, spark: Any = None) -> FastAPI:
    """The application; `spark` is a seam for tests that share one SparkSession."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from tables.rowsets import rowsets_per_table  # imports pyiceberg: not when the app module is imported

        services = await run_in_threadpool(
            partial(
                build_services,
                settings,
                spark,
                gate=app.state.gate,
                on_compaction=lambda _result: app.state.metrics.record_compaction(),
            )
        )
        app.state.metrics.watch_rowsets(lambda: rowsets_per_table(services.catalog))
        app.state.metrics.watch_wal(services.group_commit.backlog.size)
        app.state.metrics.watch_group_commit(services.group_commit.stats)
        app.state.services = services
        mysql = await start_mysql_server(
            services.sql,
            host=settings.host,
            port=settings.mysql_port,
            accounts=services.accounts,
            max_rows=settings.mysql_max_result_rows,
            max_statements=settings.sql_max_statements,
            max_connections=settings.mysql_max_connections,
            handshake_timeout=settings.mysql_handshake_timeout_seconds,
        )
        app.state.mysql_port = bound_port(mysql)
        log.info("MySQL protocol on %s:%d", settings.host, app.state.mysql_port)
        services.spark.watch()
        scratch = watch_scratch(settings, services)
        warm_up = None
        if settings.warm_up_seconds > 0:
            from app.warm_up import WarmUp

            gate = app.state.gate
            warm_up = WarmUp(
                cast("SparkSession", services.spark),
                settings.scratch_dir / "warm_up",
                seconds=settings.warm_up_seconds,
                busy=lambda: gate.used,
                roots=[settings.resolved_data_dir, settings.resolved_shared_dir],
            )
            warm_up.start()
        app.state.warm_up = warm_up
        task = asyncio.create_task(maintenance_loop(services))
        timeouts = asyncio.create_task(txn.precommit_timeout_loop(services))
        compacting = asyncio.create_task(compaction.compaction_loop(services))
        partitioning = asyncio.create_task(dynamic_partition_loop(services))
        taking_over = asyncio.create_task(takeover_loop(services))
        trimming = asyncio.create_task(memory.trim_loop())
        try:
            yield
        finally:
            if warm_up is not None:
                await run_in_threadpool(warm_up.close)
            trimming.cancel()
            if scratch is not None:
                await run_in_threadpool(scratch.close)
            task.cancel()
            partitioning.cancel()
            taking_over.cancel()
            mysql.close()
            timeouts.cancel()
            await run_in_threadpool(services.routine_loads.close)
            compacting.cancel()
            await run_in_threadpool(services.spark.close)
            await run_in_threadpool(services.leases.close)  # the others take over this server's duties at once
            services.txns.store.close()  # the accounts and routine-load jobs are in it too

    app = FastAPI(
        title="Doris-compatible stream load on Spark",
        version="0.1.0",
        lifespan=lifespan,
        description="Apache Doris stream-load and HTTP SQL interfaces, with the data pipeline on Apache Spark.",
        # the description is the committed openapi/openapi.json; the server serves only Doris's routes
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        **metrics.telemetry_options(),
    )
    openapi.install(app)
    # every error in Doris's shape, per route family (app/responses.py)
    install_error_handlers(app)
    app.add_middleware(stream_load.DirectStreamLoads)  # stream loads skip FastAPI's routing (app/stream_load.py)
    app.state.gate = LoadGate()
    app.state.metrics = metrics.LoadMetrics()
    app.include_router(stream_load.router)
    app.include_router(query.router)
    app.include_router(admin.router)
    app.include_router(metrics.router)
    app.include_router(txn.router)
    app.include_router(compaction.router)
    return app
