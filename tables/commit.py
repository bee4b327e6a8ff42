"""The single writer: the only code that commits table data or marks a label visible.

Loads to one table are serialised by a per-table lock held from version allocation to commit, so a
load's version is its commit order and the version written into its rows never lies. The commit
happens only on a clean exit of `TableWriter.write`; any exception aborts the transaction and
removes the rowset's files, so a failed load leaves no trace.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tables.catalog import VERSION_PROPERTY, Catalog, TableHandle
from tables.pause import PausePoints
from tables.transactions import ABORTED, VISIBLE, TransactionStore


@dataclass
class PendingRowset:
    """A rowset being written: where its files go and the version its rows carry."""

    handle: TableHandle
    txn_id: int
    label: str
    version: int
    directory: Path
    files: list[str] = field(default_factory=list)


class TableWriter:
    """Per-table serialised commits of rowsets into Iceberg, with their label and version."""

    def __init__(self, catalog: Catalog, txns: TransactionStore, *, pauses: PausePoints | None = None) -> None:
        self._catalog = catalog
        self._txns = txns
        self.pauses = pauses or PausePoints()
        self._locks: dict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
        self._guard = threading.Lock()

    def table_lock(self, db: str, table: str) -> threading.Lock:
        with self._guard:
            return self._locks[(db, table.lower())]

    @contextmanager
    def write(self, db: str, table: str, *, txn_id: int, label: str) -> Iterator[PendingRowset]:
        """Allocate the next version, let the caller write a rowset, then commit it and mark the label VISIBLE."""
        with self.table_lock(db, table):
            handle = self._catalog.load(db, table)
            version = handle.current_version() + 1
            pending = PendingRowset(
                handle=handle,
                txn_id=txn_id,
                label=label,
                version=version,
                directory=handle.location / "data" / f"txn_{txn_id}",
            )
            try:
                yield pending
                if pending.files:
                    _fsync_files(pending.files, pending.directory)
                    self.pauses.hit("before_commit", handle.definition.name)
                    handle.iceberg.add_files(
                        pending.files,
                        snapshot_properties={
                            "doris.label": label,
                            "doris.txn_id": str(txn_id),
                            VERSION_PROPERTY: str(version),
                        },
                        check_duplicate_files=False,
                    )
                    self.pauses.hit("after_commit", handle.definition.name)
            except BaseException:
                shutil.rmtree(pending.directory, ignore_errors=True)
                self._txns.set_state(txn_id, ABORTED)
                raise
            self._txns.set_state(txn_id, VISIBLE)

    def truncate(self, db: str, table: str) -> None:
        """Remove every row of a table in one snapshot, keeping its schema and version counter."""
        with self.table_lock(db, table):
            handle = self._catalog.load(db, table)
            if handle.iceberg.current_snapshot() is None:
                return
            version = handle.current_version() + 1
            handle.iceberg.delete(delete_filter="True", snapshot_properties={VERSION_PROPERTY: str(version)})


def _fsync_files(files: list[str], directory: Path) -> None:
    """Make the rowset durable before it is referenced: Spark does not fsync what it writes."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover_prepared(catalog: Catalog, txns: TransactionStore) -> tuple[int, int]:
    """Resolve transactions left PREPARE by a crash: VISIBLE if their snapshot committed, else ABORTED.

    Returns (made visible, aborted).
    """
    visible = aborted = 0
    for txn in txns.in_state("PREPARE"):
        committed = False
        try:
            handle = catalog.load(txn.db, txn.table)
        except Exception:  # the table is gone: nothing of the load can be visible
            handle = None
        if handle is not None:
            for snap in handle.iceberg.snapshots():
                props = snap.summary.additional_properties if snap.summary else {}
                if props.get("doris.txn_id") == str(txn.txn_id):
                    committed = True
                    break
            if not committed:
                shutil.rmtree(handle.location / "data" / f"txn_{txn.txn_id}", ignore_errors=True)
        txns.set_state(txn.txn_id, VISIBLE if committed else ABORTED)
        visible += committed
        aborted += not committed
    return visible, aborted
