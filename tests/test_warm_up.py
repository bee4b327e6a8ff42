"""The JVM warm-up at start (`warm_up_seconds`): private loads that leave nothing a user can see, and that stop
at the first user load."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from app import warm_up
from tests.helpers import DorisClient, assert_doris_result, serving


@contextmanager
def warming_server(spark: Any, data_dir: Path, seconds: float) -> Iterator[tuple[DorisClient, Any]]:
    from app.main import create_app
    from app.settings import Settings

    settings = Settings(data_dir=data_dir, mysql_port=0, compaction_interval_seconds=0, warm_up_seconds=seconds)
    app = create_app(settings, spark=spark)
    with serving(app, settings=settings) as (url,):
        yield DorisClient(url), app


@pytest.fixture
def small_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm_up, "BULK_ROWS", 20_000)  # the default's 1.2M rows take seconds a test need not spend


def test_the_warm_up_runs_loads_at_start_and_leaves_nothing_behind(
    spark: Any, tmp_path: Path, small_bulk: None
) -> None:
    with warming_server(spark, tmp_path / "data", seconds=3) as (doris, app):
        run = app.state.warm_up
        assert run.done.wait(120), "the warm-up did not end"
        assert run.outcome == "done"
        # two bulk loads, then one-row loads and sync group commits until its seconds were spent
        assert run.groups >= 1 and run.bulk_loads == 2
        assert run.loads >= 2 + (warm_up.GROUP_EVERY - 1) + warm_up.GROUP_LOADS
        databases = [row[0] for row in doris.rows("information_schema", "SHOW DATABASES")]
        assert warm_up.DB not in databases
        assert not (tmp_path / "data" / "warm_up").exists()
        # the server loads as usual after it
        doris.sql("d", "CREATE DATABASE d")
        doris.sql("d", "CREATE TABLE t (k INT NOT NULL, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
        assert_doris_result(doris.stream_load("d", "t", "1,2\n", headers={"column_separator": ","}), loaded=1)
        assert doris.rows("d", "SELECT k, v FROM t") == [[1, 2]]


def test_a_user_load_stops_the_warm_up(spark: Any, tmp_path: Path, small_bulk: None) -> None:
    with warming_server(spark, tmp_path / "data", seconds=600) as (doris, app):
        run = app.state.warm_up
        doris.sql("d", "CREATE DATABASE d")
        doris.sql("d", "CREATE TABLE t (k INT NOT NULL, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
        assert_doris_result(doris.stream_load("d", "t", "1,2\n", headers={"column_separator": ","}), loaded=1)
        assert run.done.wait(60), "the warm-up went on after a user's load"
        assert run.outcome == "stopped for a user's load"
        assert not (tmp_path / "data" / "warm_up").exists()
        assert doris.rows("d", "SELECT k, v FROM t") == [[1, 2]]


def test_no_warm_up_when_its_seconds_are_zero(spark: Any, tmp_path: Path) -> None:
    with warming_server(spark, tmp_path / "data", seconds=0) as (_doris, app):
        assert app.state.warm_up is None


def test_the_warm_up_bulk_load_runs_the_plan_of_a_big_load() -> None:
    """The bulk load warms what a user's big load runs: past `PARTITION_BYTES` a load is one Spark partition per
    bucket, with a shuffle; below it, one partition and no shuffle (the code a big load needs stays cold)."""
    from spark_runner.service import PARTITION_BYTES, write_partitions

    body = warm_up.bulk_csv(warm_up.BULK_ROWS)
    assert len(body) > PARTITION_BYTES
    assert write_partitions(8, len(body)) == 8  # the warm-up table's buckets: one partition each
