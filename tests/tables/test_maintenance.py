"""Housekeeping on a real catalog and warehouse: what is removed, and what must never be."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tables.maintenance import run_maintenance
from tables.transactions import TransactionStore


@pytest.fixture
def services(spark, tmp_path: Path):  # type: ignore[no-untyped-def]
    from app.main import build_services
    from app.settings import Settings

    svc = build_services(Settings(data_dir=tmp_path / "data"), spark)
    svc.sql.execute_script(
        "CREATE DATABASE m; CREATE TABLE m.t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1",
        _session(),
    )
    yield svc
    svc.txns.close()


def _session():  # type: ignore[no-untyped-def]
    from sql.session import Session
    from tables.accounts import ALL_PRIVS, Grant, Identity, Privileges, Scope

    return Session(db="m", privileges=Privileges(Identity("root"), (Grant(Scope(), ALL_PRIVS),)))


def _age(path: Path, seconds: float) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


def _rows(services) -> list:  # type: ignore[no-untyped-def,type-arg]
    return services.sql.execute("SELECT k, v FROM t ORDER BY k", _session()).rows


def _maintain(services, **kw):  # type: ignore[no-untyped-def]
    settings = services.settings
    return run_maintenance(
        services.catalog,
        services.txns,
        staging=settings.resolved_data_dir / "staging",
        grace_seconds=kw.pop("grace", 60),
        snapshot_keep_seconds=kw.pop("keep", 60),
        **kw,
    )


def test_orphans_go_but_live_young_and_unresolved_files_stay(services) -> None:  # type: ignore[no-untyped-def]
    services.sql.execute("INSERT INTO t VALUES (1, 1)", _session())
    table_dir = services.catalog.load("m", "t").location / "data"
    live = sorted(table_dir.rglob("*.parquet"))
    assert len(live) == 1
    orphan_dir = table_dir / "txn_999999"
    orphan_dir.mkdir()
    orphan = orphan_dir / "part-0.parquet"
    orphan.write_bytes(b"left by a crash")
    spark_temporary = orphan_dir / "_temporary" / "0" / "_temporary" / "attempt_1" / "part-1.parquet"
    spark_temporary.parent.mkdir(parents=True)
    spark_temporary.write_bytes(b"a task's output, its job killed before the commit")
    young_dir = table_dir / "txn_999998"
    young_dir.mkdir()
    young = young_dir / "part-0.parquet"
    young.write_bytes(b"a load still writing")
    pending_id = services.txns.begin("m", "t", "pending_label")
    pending_dir = table_dir / f"txn_{pending_id}"
    pending_dir.mkdir()
    pending = pending_dir / "part-0.parquet"
    pending.write_bytes(b"a load in PREPARE")
    staged_orphan = services.settings.resolved_data_dir / "staging" / "txn_999997.dat"
    staged_orphan.parent.mkdir(parents=True, exist_ok=True)
    staged_orphan.write_bytes(b"body")
    for path in (orphan, orphan_dir / "_temporary", pending, staged_orphan, *live):
        _age(path, 3600)

    report = _maintain(services, grace=600)

    assert not orphan.exists() and not staged_orphan.exists() and not (orphan_dir / "_temporary").exists()
    assert young.exists() and pending.exists() and all(p.exists() for p in live)
    assert report.files_removed == 3
    assert _rows(services) == [[1, 1]]


def test_snapshot_expiry_keeps_answers_and_stops_at_unresolved_transactions(services) -> None:  # type: ignore[no-untyped-def]
    services.txns.begin("m", "t", "still_running")  # older than every snapshot: none may expire
    time.sleep(0.01)
    for i in range(4):
        services.sql.execute(f"INSERT INTO t VALUES ({i}, {i})", _session())
    handle = services.catalog.load("m", "t")
    assert len(handle.iceberg.snapshots()) == 4
    report = _maintain(services, keep=0, now=time.time() + 10)
    assert report.snapshots_expired == 0
    assert len(services.catalog.load("m", "t").iceberg.snapshots()) == 4


def test_snapshot_expiry_then_orphan_removal_keep_the_current_rows(services) -> None:  # type: ignore[no-untyped-def]
    for i in range(3):
        services.sql.execute(f"INSERT INTO t VALUES ({i}, {i})", _session())
    services.sql.execute("TRUNCATE TABLE t", _session())
    services.sql.execute("INSERT INTO t VALUES (7, 7)", _session())
    later = time.time() + 7200
    report = _maintain(services, keep=0, grace=0, now=later)
    assert report.snapshots_expired >= 4
    handle = services.catalog.load("m", "t")
    assert len(handle.iceberg.snapshots()) == 1
    assert len(list((handle.location / "data").rglob("*.parquet"))) == 1  # truncated rows' files are gone
    assert _rows(services) == [[7, 7]]


def test_finished_labels_are_forgotten_after_the_keep_time(tmp_path: Path) -> None:
    txns = TransactionStore(tmp_path / "t.db", label_keep_seconds=0.2)
    first = txns.begin("db", "t", "l1")
    txns.set_state(first, "VISIBLE")
    assert txns.label_state("db", "l1") == "VISIBLE"
    time.sleep(0.3)
    assert txns.label_state("db", "l1") == "UNKNOWN"
    second = txns.begin("db", "t", "l1")  # the label is free again
    assert second != first
    assert txns.forget_expired() == 1
    txns.close()


def test_a_label_held_by_a_running_load_is_not_reusable(tmp_path: Path) -> None:
    from tables.errors import LabelAlreadyExists

    txns = TransactionStore(tmp_path / "t.db")
    txn = txns.begin("db", "t", "busy")
    with pytest.raises(LabelAlreadyExists) as info:
        txns.begin("db", "other_table", "busy")
    assert info.value.existing_job_status == "RUNNING" and info.value.txn_id == txn
    txns.set_state(txn, "ABORTED")
    txns.begin("db", "t", "busy")
    txns.close()


def test_snapshot_count_is_bounded_by_maintenance_and_by_the_commit_itself(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Commit time grows with the snapshots a table keeps: past twice `snapshot_keep_count` a commit trims them
    back; maintenance keeps at most that many; neither changes an answer."""
    from app.main import build_services
    from app.settings import Settings

    svc = build_services(Settings(data_dir=tmp_path / "data", snapshot_keep_count=2), spark)
    svc.sql.execute_script(
        "CREATE DATABASE m; CREATE TABLE m.t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1",
        _session(),
    )
    counts = []
    for i in range(6):
        svc.sql.execute(f"INSERT INTO t VALUES ({i}, {i})", _session())
        counts.append(len(svc.catalog.load("m", "t").iceberg.snapshots()))
    assert counts == [1, 2, 3, 4, 2, 3]  # the fifth commit found 5 > 2 * 2 and kept the newest 2
    report = _maintain(svc, keep=3600, snapshot_keep_count=2)
    assert report.snapshots_expired == 1
    assert len(svc.catalog.load("m", "t").iceberg.snapshots()) == 2
    assert _rows(svc) == [[i, i] for i in range(6)]
    # an unresolved transaction stops the trim at its start: a snapshot after it may be the one recovery
    # looks for; the two older ones still go
    svc.txns.begin("m", "t", "still_running")
    time.sleep(0.01)
    for i in range(6, 10):
        svc.sql.execute(f"INSERT INTO t VALUES ({i}, {i})", _session())
    assert len(svc.catalog.load("m", "t").iceberg.snapshots()) == 4
    assert _rows(svc) == [[i, i] for i in range(10)]
    svc.txns.close()
