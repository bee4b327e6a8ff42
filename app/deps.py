"""Resources built in the lifespan, reached by handlers through `Annotated` dependencies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from app.lifecycle import LoadGate
from app.settings import Settings
from tables.pause import PausePoints

if TYPE_CHECKING:  # these load pyspark / pyiceberg: the app imports them only when it builds the services
    from spark_runner.group_commit import GroupCommitter
    from spark_runner.service import LoadService
    from spark_runner.supervisor import SparkHandle
    from sql.executor import SqlExecutor
    from tables.catalog import Catalog
    from tables.transactions import TransactionStore
    from tables.twophase import TwoPhase


@dataclass
class Services:
    settings: Settings
    catalog: Catalog
    txns: TransactionStore
    loads: LoadService
    sql: SqlExecutor
    pauses: PausePoints = field(default_factory=PausePoints)
    gate: LoadGate = field(default_factory=LoadGate)
    two_phase: TwoPhase | None = None
    group_commit: GroupCommitter | None = None
    spark: SparkHandle | None = None  # the replaceable Spark session; its JVM's state is the backend's health


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]
