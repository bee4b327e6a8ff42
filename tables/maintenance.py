"""Housekeeping that keeps the data directory and commit latency bounded, never touching live work.

forget labels       finished labels older than the keep time
expire snapshots    older than the keep time or past the newest `keep_count`, but never newer than the
                    oldest unresolved transaction (commit time grows with the snapshots a table keeps)
remove orphans      staging files and rowset files no snapshot references, except files of a
                    transaction still PREPARE / PRECOMMITTED, and files younger than the grace period

Every removal goes through `tables.paths`: a table's files only when its location lies strictly inside the
warehouse and overlaps no other table's (an old table named `.` sits on its whole database), staging files
only inside the staging directory. A table that cannot be read is logged and skipped.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from tables.catalog import BrokenTable, Catalog, TableHandle, _plain_path
from tables.error_logs import expire_error_logs
from tables.errors import DatabaseNotFound, TableNotFound
from tables.paths import UnsafePath, removable_path, remove_file, remove_tree
from tables.transactions import COMMITTED, PRECOMMITTED, PREPARE, TransactionStore
from tables.warehouse import WarehouseStorage

log = logging.getLogger(__name__)

# the table's commit lock, held over a metadata-only commit (`tables.commit.TableWriter.commit_lock`)
CommitLock = Callable[[TableHandle], AbstractContextManager[None]]


@dataclass
class MaintenanceReport:
    labels_forgotten: int = 0
    snapshots_expired: int = 0
    files_removed: int = 0


def _txn_id_of(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    if stem.startswith("txn_") and stem[4:].isdigit():
        return int(stem[4:])
    return None


def _unresolved(txns: TransactionStore) -> list:  # type: ignore[type-arg]
    # COMMITTED too: a 2PC commit a crash interrupted is finished by looking for its snapshot
    return txns.in_state(PREPARE) + txns.in_state(PRECOMMITTED) + txns.in_state(COMMITTED)


def expire_snapshots(
    handle: TableHandle,
    txns: TransactionStore,
    *,
    keep_seconds: float,
    now: float,
    keep_count: int | None = None,
) -> int:
    """Expire the snapshots of one table older than `keep_seconds` or past the newest `keep_count`;
    returns how many went. Metadata only: files stay until orphan removal."""
    horizon = now - keep_seconds
    if keep_count is not None:
        stamps = sorted((s.timestamp_ms for s in handle.iceberg.snapshots()), reverse=True)
        if len(stamps) > keep_count:
            horizon = max(horizon, stamps[max(keep_count, 1) - 1] / 1000)
    pending = [t.created for t in _unresolved(txns) if t.db == handle.definition.db]
    if pending:
        horizon = min(horizon, min(pending))
    current = handle.iceberg.current_snapshot()
    old = [
        s
        for s in handle.iceberg.snapshots()
        if s.timestamp_ms / 1000 < horizon and (current is None or s.snapshot_id != current.snapshot_id)
    ]
    if not old:
        return 0
    handle.iceberg.maintenance.expire_snapshots().older_than(dt.datetime.fromtimestamp(horizon, tz=dt.UTC)).commit()
    return len(old)


def referenced_files(handle: TableHandle) -> set[str]:
    """Every data or position delete file some snapshot still references."""
    if handle.iceberg.current_snapshot() is None:
        return set()
    table = handle.iceberg.inspect.all_files()
    return {_plain_path(p) for p in table.column("file_path").to_pylist()}


def remove_orphans(
    handle: TableHandle,
    protected: set[int],
    *,
    grace_seconds: float,
    now: float,
    root: Path | None = None,
    companion: TableHandle | None = None,
) -> int:
    """Remove rowset files of this table that no snapshot references; returns how many.

    Only files strictly inside `root` (the table's location once the caller checked it) are removed. The files of
    its temporary partitions' companions (`temporary/<uuid>/data`, `tables.catalog.Catalog.create_temporary`) go
    when neither the table nor its current `companion` references them: a REPLACE PARTITION moved some into the
    table, and a compaction or a DROP PARTITION later left them.
    """
    if handle.storage is not None and not handle.storage.is_local:
        return _remove_orphans_in_storage(handle, handle.storage, protected, grace_seconds, now, companion)
    root = root or handle.location
    referenced = referenced_files(handle)
    if companion is not None:
        referenced |= referenced_files(companion)
    data_dirs = [handle.location / "data", *sorted((handle.location / "temporary").glob("*/data"))]
    return sum(
        _remove_unreferenced(d, referenced, protected, grace_seconds=grace_seconds, now=now, root=root)
        for d in data_dirs
        if d.is_dir()
    )


def _remove_unreferenced(
    data_dir: Path, referenced: set[str], protected: set[int], *, grace_seconds: float, now: float, root: Path
) -> int:
    removed = 0
    for txn_dir in data_dir.iterdir():
        txn_id = _txn_id_of(txn_dir.name)
        if not txn_dir.is_dir() or txn_id is None or txn_id in protected:
            continue
        for path in txn_dir.iterdir():
            if path.name.startswith(".") and path.name.endswith(".crc"):
                live = str(path.with_name(path.name[1:-4])) in referenced
            else:
                live = str(path) in referenced
            if live or now - path.stat().st_mtime < grace_seconds:
                continue
            if path.is_dir() and not path.is_symlink():  # Spark's `_temporary` of a write killed before its commit
                removed += remove_tree(path, [root])
                continue
            removed += remove_file(path, [root])
        if not any(txn_dir.iterdir()) and now - txn_dir.stat().st_mtime >= grace_seconds:
            remove_file(txn_dir, [root])
    return removed


def _remove_orphans_in_storage(
    handle: TableHandle,
    storage: WarehouseStorage,
    protected: set[int],
    grace_seconds: float,
    now: float,
    companion: TableHandle | None,
) -> int:
    """`remove_orphans` for a warehouse reached through pyarrow (`tables.warehouse`): the same walk, on URIs.
    Every delete goes through the storage's guard (strictly inside the warehouse)."""
    referenced: set[str] = set()
    for table in [handle] if companion is None else [handle, companion]:
        if table.iceberg.current_snapshot() is not None:
            paths = table.iceberg.inspect.all_files().column("file_path").to_pylist()
            referenced |= {str(storage.location(p)) for p in paths}
    location = handle.place
    temporary = [e.location for e in storage.entries(storage.child(location, "temporary")) if e.is_dir]
    removed = 0
    for data_dir in [storage.child(location, "data"), *(storage.child(t, "data") for t in temporary)]:
        for txn_dir in storage.entries(data_dir):
            txn_id = _txn_id_of(txn_dir.name)
            if not txn_dir.is_dir or txn_id is None or txn_id in protected:
                continue
            files = storage.entries(txn_dir.location)
            for entry in files:
                name = entry.name[1:-4] if entry.name.startswith(".") and entry.name.endswith(".crc") else entry.name
                if str(storage.child(txn_dir.location, name)) in referenced or now - entry.mtime < grace_seconds:
                    continue
                if entry.is_dir:  # Spark's `_temporary` of a write killed before its commit
                    storage.remove_tree(entry.location)
                    removed += 1
                    continue
                removed += storage.remove_file(entry.location)
            # an object store has no empty directories: one with no files left is gone with them
            if not storage.entries(txn_dir.location) and now - txn_dir.mtime >= grace_seconds:
                storage.remove_tree(txn_dir.location)
    return removed


def remove_staging_orphans(staging: Path, protected: set[int], *, grace_seconds: float, now: float) -> int:
    if not staging.is_dir():
        return 0
    removed = 0
    for path in staging.iterdir():
        txn_id = _txn_id_of(path.name)
        if txn_id in protected or now - path.stat().st_mtime < grace_seconds:
            continue
        removed += remove_file(path, [staging])
    return removed


def run_maintenance(
    catalog: Catalog,
    txns: TransactionStore,
    *,
    staging: Path,
    error_logs: Path | Sequence[Path] | None = None,
    grace_seconds: float,
    snapshot_keep_seconds: float,
    snapshot_keep_count: int | None = None,
    now: float | None = None,
    commit_lock: CommitLock | None = None,
) -> MaintenanceReport:
    """One pass over every table; safe to run while loads are in flight. `commit_lock` (the writer's
    `TableWriter.commit_lock`) is held over each table's snapshot expiry, so it never races a load's or a
    compaction's commit on any server; `error_logs`: the folders of error logs (the data dir's by default)."""
    now = time.time() if now is None else now
    report = MaintenanceReport(labels_forgotten=txns.forget_expired())
    protected = {t.txn_id for t in _unresolved(txns)}
    locations = catalog.table_locations()
    for db, name in sorted(locations):
        try:
            handle = catalog.load(db, name)
            with commit_lock(handle) if commit_lock is not None else nullcontext():
                handle.iceberg.refresh()  # under the lock: the last commit of any server
                report.snapshots_expired += expire_snapshots(
                    handle, txns, keep_seconds=snapshot_keep_seconds, now=now, keep_count=snapshot_keep_count
                )
            handle = catalog.load(db, name)
            others = [loc for key, loc in locations.items() if key != (db, name)]
            root = None
            if catalog.storage.root.local is not None and catalog.storage.is_local:
                local = [loc for loc in others if isinstance(loc, Path)]
                root = removable_path(handle.location, [catalog.storage.root.local], others=local)
            else:
                catalog.storage.check_removable(str(handle.place), others=others)
            companion = catalog.temporary(handle) if handle.definition.partitioned else None
            report.files_removed += remove_orphans(
                handle, protected, grace_seconds=grace_seconds, now=now, root=root, companion=companion
            )
        except (DatabaseNotFound, TableNotFound):
            continue  # dropped while the pass ran
        except BrokenTable:
            continue  # unreadable: the catalog logged it, and there is nothing to tidy that can be trusted
        except UnsafePath as exc:
            log.warning("orphan files of %s.%s are not removed: %s", db, name, exc.message)
        except Exception:  # one broken table must not stop the others' housekeeping
            log.exception("maintenance of %s.%s failed", db, name)
    report.files_removed += remove_staging_orphans(staging, protected, grace_seconds=grace_seconds, now=now)
    error_logs = error_logs or staging.parent / "error_log"  # the data dir's (staging may be on the shared dir)
    for folder in dict.fromkeys([error_logs] if isinstance(error_logs, Path) else error_logs):
        report.files_removed += expire_error_logs(folder, keep_seconds=txns.label_keep_seconds, now=now)
    return report
