"""Shared fixtures: one SparkSession per run, one real server on a free loopback port, a database per test."""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import DorisClient, serving

# the documents the project comes from, copied into the repo (tests/data/README.md says where from)
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No SL_* or PYICEBERG_* setting of the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith(("SL_", "PYICEBERG_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path_factory.getbasetemp() / "pyiceberg-home"))


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    from spark_runner.session import build_session

    session = build_session(
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"},
        app_name="tests",
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def server_settings(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from app.settings import Settings

    # routine load tests end batches by a few rows (Doris's 200000-row floor stays the default elsewhere);
    # background compaction off: tests that count rowsets run it themselves (tests/test_compaction.py);
    # broker loads read under one folder, Kafka certificates from another (tests/test_security_sources.py)
    return Settings(
        data_dir=tmp_path_factory.mktemp("server-data"),
        mysql_port=0,
        routine_load_min_batch_rows=1,
        compaction_interval_seconds=0,
        broker_allowed_roots=[str(tmp_path_factory.mktemp("broker-files"))],
        kafka_cert_dir=tmp_path_factory.mktemp("kafka-certs"),
    )


@pytest.fixture(scope="session")
def served_app(spark, server_settings):  # type: ignore[no-untyped-def]
    from app.main import create_app

    return create_app(server_settings, spark=spark)


@pytest.fixture(scope="session")
def base_url(served_app, server_settings) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A real uvicorn serving the app on 127.0.0.1:<free port>, sharing the test run's SparkSession."""
    with serving(served_app, settings=server_settings) as (url,):
        yield url


@pytest.fixture(scope="session")
def mysql_port(base_url: str, served_app) -> int:  # type: ignore[no-untyped-def]
    """The MySQL-protocol port of the test server (started by the app's lifespan on a free port)."""
    return int(served_app.state.mysql_port)


@pytest.fixture(scope="session")
def doris(base_url: str) -> DorisClient:
    return DorisClient(base_url)


@pytest.fixture
def db(doris: DorisClient) -> str:
    """A fresh database for one test."""
    name = f"db_{uuid.uuid4().hex[:12]}"
    doris.sql(name, f"CREATE DATABASE {name}")
    return name


def pytest_configure(config: pytest.Config) -> None:
    # pyspark emits DeprecationWarnings from its own modules on import; ours must stay clean
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="pyspark")
