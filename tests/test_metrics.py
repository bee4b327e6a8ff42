"""`GET /metrics` as Prometheus scrapes it, and the log line every stream load leaves."""

from __future__ import annotations

import json
import logging
import os

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import AUTH, DorisClient, assert_doris_result


def scrape(base_url: str, auth: tuple[str, str] | None = None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of one scrape; the per-table rowset gauge comes only with credentials (`auth`)."""
    resp = httpx.get(f"{base_url}/metrics", auth=auth, timeout=30)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_count_loads_rows_bytes_latency_and_rowsets(
    doris: DorisClient, db: str, base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    doris.sql(db, "CREATE TABLE m (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    before = scrape(base_url)
    with caplog.at_level(logging.INFO, logger="app.load"):
        first = assert_doris_result(
            doris.stream_load(
                db, "m", "1,1\n2,2\nx,3\n", {"column_separator": ",", "max_filter_ratio": "0.5", "strict_mode": "true"}
            ),
            loaded=2,
            filtered=1,
        )
        assert_doris_result(
            doris.stream_load(db, "m", "3,3\n", {"column_separator": ",", "label": first["Label"]}),
            status="Label Already Exists",
        )
        assert_doris_result(doris.stream_load(db, "m", "4,4\n", {"column_separator": ","}), loaded=1)
    after = scrape(base_url, AUTH)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("doris_load_total", status="Success") == 2
    assert delta("doris_load_total", status="Label Already Exists") == 1
    assert delta("doris_load_rows_total", kind="loaded") == 3
    assert delta("doris_load_rows_total", kind="filtered") == 1
    assert delta("doris_load_bytes_total") == len("1,1\n2,2\nx,3\n") + len("4,4\n")
    assert delta("doris_load_duration_seconds_count") == 3
    assert delta("doris_load_duration_seconds_bucket", le="+Inf") == 3
    assert after[("doris_table_rowsets", (("db", db), ("table", "m")))] == 2
    assert after[("doris_max_table_rowsets", ())] >= 2
    anonymous = scrape(base_url)  # Prometheus without credentials: no database or table names
    assert not any(name == "doris_table_rowsets" for name, _ in anonymous)
    assert anonymous[("doris_max_table_rowsets", ())] >= 2
    assert ("doris_compaction_runs_total", ()) in after

    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "app.load"]
    ours = [line for line in lines if line["db"] == db]
    assert [(line["status"], line["label"] == first["Label"]) for line in ours] == [
        ("Success", True),
        ("Label Already Exists", True),
        ("Success", False),
    ]
    assert ours[0]["txn_id"] == first["TxnId"] and ours[0]["loaded_rows"] == 2
    assert "message" in ours[1]


def test_compaction_counter_counts_recorded_runs() -> None:
    from app.metrics import LoadMetrics

    metrics = LoadMetrics()
    metrics.record_compaction()
    metrics.record_compaction()
    text = metrics.render().decode()
    assert "doris_compaction_runs_total 2.0" in text


def test_fastapi_opentelemetry_is_off_unless_the_process_is_set_up_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """FastAPI's own instrumentation costs every request three environment lookups: on only where OpenTelemetry
    is configured (as `opentelemetry-instrument` does, through `OTEL_*` variables)."""
    from fastapi import FastAPI

    from app.metrics import telemetry_options

    for name in [n for n in os.environ if n.startswith(("OTEL_", "FASTAPI_OTEL_"))]:
        monkeypatch.delenv(name)
    options = telemetry_options()
    if options:  # a FastAPI with native telemetry: built with it off
        assert options == {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
        assert not FastAPI(**options)._native_telemetry.enabled()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "stream-load")
    assert telemetry_options() == {}
