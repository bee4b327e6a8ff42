"""pyiceberg's SQL catalog on PostgreSQL (`Catalog` with a `postgresql+psycopg://` URI), two instances on one
database as two servers have: both see what one created, a commit from a stale table fails with
CommitFailedException (the writer retries it), and a database restart is survived without a new catalog."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.table.update import AssertRefSnapshotId, SetPropertiesUpdate
from pyiceberg.types import LongType, NestedField

from tables.catalog import Catalog
from tables.errors import StoreUnavailable
from tests.postgres import PostgresServer

SCHEMA = Schema(NestedField(1, "k", LongType(), required=False))


def test_two_catalogs_on_one_database_see_each_other_and_a_stale_commit_fails(
    postgres_uri: str, tmp_path: Path
) -> None:
    one = Catalog(uri=postgres_uri, warehouse=tmp_path / "warehouse")
    other = Catalog(uri=postgres_uri, warehouse=tmp_path / "warehouse")
    one.create_database("shared")
    assert other.database_exists("shared")
    one._iceberg.create_table(("shared", "t"), SCHEMA)
    first, stale = one._iceberg.load_table(("shared", "t")), other._iceberg.load_table(("shared", "t"))
    first.append(pa.table({"k": pa.array([1], pa.int64())}))
    # a commit planned on the table before that append: its requirement (no snapshot yet) no longer holds
    with pytest.raises(CommitFailedException):
        other._iceberg.commit_table(
            stale, (AssertRefSnapshotId(ref="main", snapshot_id=None),), (SetPropertiesUpdate(updates={"x": "1"}),)
        )
    fresh = other._iceberg.load_table(("shared", "t"))
    fresh.append(pa.table({"k": pa.array([2], pa.int64())}))  # the retry, on the table as it is now
    assert sorted(one._iceberg.load_table(("shared", "t")).scan().to_arrow()["k"].to_pylist()) == [1, 2]


def test_the_catalog_reports_a_lost_database_and_reconnects(
    postgres: PostgresServer, postgres_uri: str, tmp_path: Path
) -> None:
    catalog = Catalog(uri=postgres_uri, warehouse=tmp_path / "warehouse")
    catalog.create_database("before")
    postgres.stop()
    try:
        with pytest.raises(StoreUnavailable, match="catalog database unavailable"):
            catalog.database_exists("before")
    finally:
        postgres.start()
    assert catalog.database_exists("before")  # the pool pinged, dropped the dead connections, connected again


def test_servers_starting_together_on_a_new_database_all_start(postgres: PostgresServer, tmp_path: Path) -> None:
    uri = postgres.create_database()  # no catalog tables yet: each start would create them
    started: list[Catalog] = []
    errors: list[BaseException] = []
    go = threading.Barrier(4)

    def start(n: int) -> None:
        go.wait()
        try:
            started.append(Catalog(uri=uri, warehouse=tmp_path / "warehouse"))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(started) == 4
    started[0].create_database("seen")
    assert all(catalog.database_exists("seen") for catalog in started)
