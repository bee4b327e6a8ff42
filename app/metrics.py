"""`GET /metrics` in Prometheus's text format, and one structured log line per stream load.

The registry belongs to the app (no module-level collectors): loads by status, rows and bytes loaded, the
load latency histogram, compaction runs (`record_compaction`), rowsets read from the catalog at scrape time, the
group-commit WAL backlog (acknowledged async loads not visible yet) and group-commit counts.

`/metrics` answers without credentials (Prometheus scrapes it so), and then names no database or table: the
rowsets are one gauge, the most any table has (`doris_max_table_rowsets`). The per-table gauge
`doris_table_rowsets{db,table}` comes only with HTTP Basic credentials, for the tables that user may see (any
privilege on the table, as `SHOW TABLES`); wrong credentials are refused as on every other route.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from app.auth import login
from tables.load_spec import LoadResult

OPENTELEMETRY_ENV = ("OTEL_", "FASTAPI_OTEL_")


def telemetry_options() -> dict[str, Any]:
    """`FastAPI(**...)`: its own OpenTelemetry instrumentation off unless the process is set up for OpenTelemetry
    (an `OTEL_*` or `FASTAPI_OTEL_*` variable, as `opentelemetry-instrument` sets). Left on, FastAPI (0.165 on)
    asks the global providers whether they are set on every request: three environment lookups, each raising
    `KeyError`, 7% of the event loop's samples under 16 async clients (py-spy `--gil`). Older FastAPI: nothing."""
    if "telemetry" not in inspect.signature(FastAPI).parameters:
        return {}
    if any(name.startswith(OPENTELEMETRY_ENV) for name in os.environ):
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}


router = APIRouter()
load_log = logging.getLogger("app.load")
log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


Visible = Callable[[str, str], bool]


class RowsetCollector(Collector):
    """The rowset gauges of one scrape, computed from the catalog: `doris_max_table_rowsets` always,
    `doris_table_rowsets{db,table}` for the tables `visible` lets through (none without it)."""

    def __init__(self, rowsets: Callable[[], dict[tuple[str, str], int]], visible: Visible | None = None) -> None:
        self.rowsets = rowsets
        self.visible = visible

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            counts = self.rowsets()
        except Exception:  # the catalog itself failing must not take the counters down with it
            log.exception("the rowset gauge could not be computed")
            counts = {}
        yield GaugeMetricFamily(
            "doris_max_table_rowsets",
            "Live rowsets of the table that has the most",
            value=max(counts.values(), default=0),
        )
        if self.visible is None:  # no credentials: no database or table names
            return
        family = GaugeMetricFamily("doris_table_rowsets", "Live rowsets of a table", labels=["db", "table"])
        for (db, table), count in sorted(counts.items()):
            if self.visible(db, table):
                family.add_metric([db, table], count)
        yield family


class _Scrape(Collector):
    """The app's registry and one scrape's rowset gauges, as `generate_latest` reads one registry."""

    def __init__(self, *collectors: Collector) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Any]:
        for collector in self.collectors:
            yield from collector.collect()


class WalCollector(Collector):
    """`doris_group_commit_wal_loads` and `doris_group_commit_wal_bytes`: the acknowledged async loads whose rows
    are not visible yet, read on each scrape."""

    def __init__(self, size: Callable[[], tuple[int, int]]) -> None:
        self.size = size

    def collect(self) -> Iterator[GaugeMetricFamily]:
        loads, size = self.size()
        yield GaugeMetricFamily(
            "doris_group_commit_wal_loads", "Acknowledged async group-commit loads not visible yet", value=loads
        )
        yield GaugeMetricFamily("doris_group_commit_wal_bytes", "Bytes of those loads in the WAL", value=size)


class GroupCommitCollector(Collector):
    """`doris_group_commit_*_total`: groups run, loads in them, their Spark jobs, and the async loads' WAL appends
    and the fsyncs they shared (`spark_runner.group_commit.WalLog`), read on each scrape."""

    HELP = {
        "groups": "Group-commit groups run (one job and at most one snapshot each)",
        "loads": "Loads in those groups",
        "spark_jobs": "Spark jobs the groups ran",
        "inline_groups": "Groups whose loads were one inline source (split by the server: no file scan)",
        "wal_appends": "Async group-commit loads appended to the WAL log",
        "wal_fsyncs": "fsyncs of the WAL log (each makes every append before it durable)",
    }

    def __init__(self, stats: Callable[[], dict[str, int]]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        stats = self.stats()
        for name, text in self.HELP.items():
            yield CounterMetricFamily(f"doris_group_commit_{name}", text, value=stats.get(name, 0))


class LoadMetrics:
    """The server's Prometheus registry and the counters loads and compaction update."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.loads = Counter("doris_load", "Stream loads by Doris status", ["status"], registry=self.registry)
        self.rows = Counter("doris_load_rows", "Rows of stream loads by outcome", ["kind"], registry=self.registry)
        self.bytes = Counter(
            "doris_load_bytes", "Payload bytes received by successful stream loads", registry=self.registry
        )
        self.latency = Histogram(
            "doris_load_duration_seconds", "Stream load latency", buckets=LATENCY_BUCKETS, registry=self.registry
        )
        self.compactions = Counter("doris_compaction_runs", "Compaction runs that committed", registry=self.registry)
        self.rowsets: Callable[[], dict[tuple[str, str], int]] | None = None
        # each label's child looked up once: `labels()` costs a lock and a tuple key per call, four calls a load
        self._by_status = {
            s: self.loads.labels(status=s) for s in ("Success", "Publish Timeout", "Label Already Exists", "Fail")
        }
        self._loaded, self._filtered, self._unselected = (
            self.rows.labels(kind=kind) for kind in ("loaded", "filtered", "unselected")
        )

    def watch_rowsets(self, rowsets: Callable[[], dict[tuple[str, str], int]]) -> None:
        """Rowset counts per `(db, table)`, read on each scrape (not a registry collector: what a scrape shows
        of them depends on its credentials, `render`)."""
        self.rowsets = rowsets

    def watch_wal(self, size: Callable[[], tuple[int, int]]) -> None:
        self.registry.register(WalCollector(size))

    def watch_group_commit(self, stats: Callable[[], dict[str, int]]) -> None:
        self.registry.register(GroupCommitCollector(stats))

    def observe_load(self, db: str, table: str, result: LoadResult, seconds: float) -> None:
        """Count one finished stream load and log it as one JSON line with its label and txn id."""
        counter = self._by_status.get(result.status)
        (counter if counter is not None else self.loads.labels(status=result.status)).inc()
        self.latency.observe(seconds)
        if result.status == "Success":
            self._loaded.inc(result.number_loaded_rows)
            self._filtered.inc(result.number_filtered_rows)
            self._unselected.inc(result.number_unselected_rows)
            self.bytes.inc(result.load_bytes)
        record = {
            "event": "stream_load",
            "db": db,
            "table": table,
            "label": result.label,
            "txn_id": result.txn_id,
            "status": result.status,
            "loaded_rows": result.number_loaded_rows,
            "filtered_rows": result.number_filtered_rows,
            "load_bytes": result.load_bytes,
            "ms": int(seconds * 1000),
        }
        if result.status != "Success":
            record["message"] = result.message
        load_log.info(json.dumps(record, ensure_ascii=False))

    def observe_redirect(self, db: str, table: str, label: str, status: int, seconds: float) -> None:
        """Log a stream load the FE port answered without running it (front-end mode: the 307 to the BE listener,
        or the refusal before it) as one JSON line; the Location is left out (it holds the client's password)."""
        record = {"event": "stream_load_redirect", "db": db, "table": table, "label": label, "http_status": status}
        load_log.info(json.dumps(record | {"ms": int(seconds * 1000)}, ensure_ascii=False))

    def record_compaction(self) -> None:
        """Count one committed compaction run."""
        self.compactions.inc()

    def render(self, visible: Visible | None = None) -> bytes:
        """The scrape's text; `visible(db, table)`: the tables whose own rowset gauge it shows (None: none)."""
        if self.rowsets is None:
            return generate_latest(self.registry)
        return generate_latest(_Scrape(self.registry, RowsetCollector(self.rowsets, visible)))


@router.get(
    "/metrics",
    operation_id="metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}}},
)
async def metrics(request: Request) -> Response:
    # open to anyone; the per-table rowset gauge only to a client that logs in, for the tables it may see
    registry: LoadMetrics = request.app.state.metrics
    visible: Visible | None = None
    if "authorization" in request.headers:  # wrong credentials: NotAuthorized, the FE envelope as elsewhere
        visible = login(request, request.app.state.services.accounts).sees_table
    body = await run_in_threadpool(registry.render, visible)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
