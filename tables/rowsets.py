"""Rowsets of a table: each load commits one, compaction folds many into one (the `/metrics` gauge)."""

from __future__ import annotations

from tables.catalog import Catalog, TableHandle
from tables.errors import DorisError

_DELETED = 2  # Iceberg manifest entry status: the file left the table in that snapshot


def rowset_count(handle: TableHandle) -> int:
    """Live rowsets of the current snapshot: distinct data sequence numbers of its live data files."""
    if handle.iceberg.current_snapshot() is None:
        return 0
    entries = handle.iceberg.inspect.entries().select(["status", "sequence_number"]).to_pylist()
    return len({e["sequence_number"] for e in entries if e["status"] != _DELETED})


def rowsets_per_table(catalog: Catalog) -> dict[tuple[str, str], int]:
    """`(db, table) → live rowsets` for every table of the catalog."""
    counts: dict[tuple[str, str], int] = {}
    for db in catalog.list_databases():
        for table in catalog.list_tables(db):
            try:
                counts[(db, table)] = rowset_count(catalog.load(db, table))
            except DorisError:  # dropped while the scrape ran
                continue
    return counts
