"""Resources built in the lifespan, reached by handlers through `Annotated` dependencies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from app.lifecycle import LoadGate
from app.settings import Settings
from tables.accounts import AccountStore
from tables.load_spec import InputLimits

if TYPE_CHECKING:  # the services import pyspark: the app loads them in the lifespan, not at import time
    from loads.lifecycle import StreamLoads
    from spark_runner.compaction import Compactor
    from spark_runner.group_commit import GroupCommitter
    from spark_runner.routine_load import RoutineLoadManager
    from spark_runner.service import LoadService
    from spark_runner.supervisor import SparkHandle
    from spark_runner.takeover import Takeover
    from sql.broker_load import BrokerLoads
    from sql.executor import SqlExecutor
    from tables.catalog import Catalog
    from tables.leases import Leases
    from tables.pause import PausePoints
    from tables.transactions import TransactionStore
    from tables.twophase import TwoPhase


@dataclass(frozen=True)
class Services:
    """The server's one registry: every long-lived object, built together by `app.main.build_services` (nothing
    is attached later; the SQL executor gets its own dependencies at construction, not through here)."""

    settings: Settings
    spark: SparkHandle  # the replaceable Spark session; its JVM's state is the backend's health
    catalog: Catalog
    txns: TransactionStore
    pauses: PausePoints
    loads: LoadService
    group_commit: GroupCommitter
    stream_loads: StreamLoads  # the stream loads' lifecycle over `loads` and `group_commit`, with the body bounds
    input_limits: InputLimits  # `Settings.input_limits`, read once (a model dump on every load otherwise)
    two_phase: TwoPhase
    compactor: Compactor
    routine_loads: RoutineLoadManager
    broker_loads: BrokerLoads
    sql: SqlExecutor
    gate: LoadGate
    accounts: AccountStore  # users, roles and grants (`tables/accounts.py`)
    leases: Leases  # this server's liveness and the background duties it runs (`tables/leases.py`)
    takeover: Takeover | None  # several servers: resolving a dead one's unfinished work (`spark_runner/takeover.py`)


async def get_services(request: Request) -> Services:
    """Async, so FastAPI calls it on the event loop: a plain `def` dependency runs in the thread pool, a thread
    hop (and a wait for the GIL on the way back) on every request, ~5-15 ms under 16 concurrent loads."""
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]
