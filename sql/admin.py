"""Compaction on demand and tablet views: `ADMIN COMPACT TABLE`, `SHOW TABLETS FROM`, and the BE's
`/api/compaction/run` and `/api/compaction/show` answers (one tablet per bucket; the tablets of a table share
its rowsets, so a tablet's compaction compacts the table)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from spark_runner.compaction import CompactionType, Compactor, NothingToCompact, cumulative_point
from spark_runner.queries import rows_per_bucket
from sql.context import SqlContext
from sql.privileges import require_admin
from sql.results import ExecStatus, ResultSet
from sql.session import Session
from sql.tokens import Cursor, Target
from tables.catalog import TableHandle
from tables.errors import DorisError, SqlError
from tables.rowsets import BACKEND_ID, RowsetsChanged, bucket_of_tablet, schema_hash, tablet_ids

TABLET_COLUMNS = (
    "TabletId",
    "ReplicaId",
    "BackendId",
    "SchemaHash",
    "Version",
    "LstSuccessVersion",
    "LstFailedVersion",
    "LstFailedTime",
    "LocalDataSize",
    "RemoteDataSize",
    "RowCount",
    "State",
    "LstConsistencyCheckTime",
    "CheckVersion",
    "VisibleVersionCount",
    "VersionCount",
    "QueryHits",
    "PathHash",
    "Path",
    "MetaUrl",
    "CompactionStatus",
    "CooldownReplicaId",
    "CooldownMetaId",
)


@dataclass(frozen=True)
class CompactTable:
    target: Target
    kind: CompactionType


def parse_admin_compact(cur: Cursor, current_db: str) -> CompactTable:
    """`ADMIN COMPACT TABLE [db.]t [PARTITION p] WHERE TYPE = 'BASE' | 'CUMULATIVE'`."""
    cur.i = 0
    cur.expect("ADMIN", "COMPACT", "TABLE")
    target = cur.table(current_db)
    if cur.accept("PARTITION"):
        cur.name()
    cur.expect("WHERE")
    if cur.word() != "TYPE":
        raise SqlError("Compaction type must be specified: WHERE TYPE = 'BASE' | 'CUMULATIVE'")
    cur.next()
    cur.expect("=")
    kind = cur.string().lower()
    if kind not in ("base", "cumulative"):
        raise SqlError(f"Compaction type must be BASE or CUMULATIVE, got '{kind.upper()}'")
    return CompactTable(target=target, kind=CompactionType(kind))


def admin_compact(ctx: SqlContext, stmt: CompactTable, session: Session) -> ExecStatus:
    """Runs the compaction now; like Doris it answers OK also when there was nothing to compact."""
    require_admin(session.privileges)
    handle = ctx.compactor.catalog.load(stmt.target.db, stmt.target.table)
    run_compaction(ctx.compactor, handle, stmt.kind)
    return ExecStatus()


def run_compaction(compactor: Compactor, handle: TableHandle, kind: CompactionType) -> bool:
    """Compact now; a compaction that gave way to a concurrent one is retried once. False: nothing to do."""
    table = handle.definition
    for attempt in range(2):
        try:
            compactor.compact(table.db, table.name, kind)
            return True
        except NothingToCompact:
            return False
        except RowsetsChanged:
            if attempt == 1:
                raise
    return False


def find_tablet(compactor: Compactor, tablet_id: int) -> tuple[TableHandle, int] | None:
    """The table and bucket of a tablet id, or None."""
    catalog = compactor.catalog
    for db in catalog.list_databases():
        for name in catalog.list_tables(db):
            handle = catalog.load(db, name)
            bucket = bucket_of_tablet(handle.iceberg.metadata.table_uuid, handle.definition.buckets, tablet_id)
            if bucket is not None:
                return handle, bucket
    return None


def parse_show_tablets(cur: Cursor, current_db: str) -> Target:
    """`SHOW TABLETS FROM [db.]t`."""
    cur.i = 1
    if not (cur.accept("TABLETS") or cur.accept("TABLET")):
        raise SqlError("Syntax error in SHOW TABLETS")
    cur.expect("FROM")
    return cur.table(current_db)


def show_tablets(ctx: SqlContext, target: Target, session: Session) -> ResultSet:
    """One row per bucket, with the stored rows of that bucket."""
    require_admin(session.privileges)
    compactor = ctx.compactor
    handle = compactor.catalog.load(target.db, target.table)
    table = handle.definition
    rowsets = handle.rowsets()
    version = handle.current_version()
    rows_by_bucket = rows_per_bucket(compactor.spark, handle)
    total_rows = sum(rows_by_bucket.values()) or 1
    total_bytes = sum(r.data_size for r in rowsets)
    table_uuid = handle.iceberg.metadata.table_uuid
    out: list[list[Any]] = []
    for bucket, tablet_id in enumerate(tablet_ids(table_uuid, table.buckets)):
        rows = rows_by_bucket.get(bucket, 0)
        out.append(
            [
                tablet_id,
                tablet_id + 1,
                BACKEND_ID,
                schema_hash(table_uuid),
                version,
                version,
                -1,
                "NULL",
                total_bytes * rows // total_rows,  # a bucket's share of the table's files
                0,
                rows,
                "NORMAL",
                "NULL",
                -1,
                len(rowsets),
                len(rowsets),
                0,
                -1,
                str(handle.place),
                f"http://{ctx.address}/api/meta/header/{tablet_id}",
                f"http://{ctx.address}/api/compaction/show?tablet_id={tablet_id}",
                -1,
                "",
            ]
        )
    return ResultSet(columns=[(c, "VARCHAR") for c in TABLET_COLUMNS], rows=out)


# -- the BE's compaction endpoints -------------------------------------------------------------------
def _time(ms: int) -> str:
    moment = dt.datetime.fromtimestamp(ms / 1000)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


def _size(n: int) -> str:
    """Doris's PrettyPrinter for bytes: `574.00 B`, `68.61 MB`."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def compaction_status(compactor: Compactor, tablet_id: int) -> dict[str, Any]:
    """`GET /api/compaction/show?tablet_id=`: Doris's JSON, plus `rowsets_detail` with rows and sizes."""
    found = find_tablet(compactor, tablet_id)
    if found is None:
        return {"status": "Fail", "msg": "Tablet not found"}
    handle, _ = found
    rowsets = handle.rowsets()
    history = compactor.history(handle)
    point = cumulative_point(rowsets, compactor.policy)
    base, cumu = CompactionType.BASE, CompactionType.CUMULATIVE
    last = rowsets[-1].end_version if rowsets else 1
    return {
        "cumulative policy type": "SIZE_BASED",
        "cumulative point": rowsets[point].start_version if point < len(rowsets) else last + 1,
        "last cumulative failure time": _time(history.get(cumu, "failure")),
        "last base failure time": _time(history.get(base, "failure")),
        "last cumulative success time": _time(history.get(cumu, "success")),
        "last base success time": _time(history.get(base, "success")),
        "rowsets": [
            f"{r.version} {len(r.files)} DATA {'OVERLAPPING' if len(r.files) > 1 else 'NONOVERLAPPING'} "
            f"{r.start_version:016x}{r.end_version:016x} {_size(r.data_size)}"
            for r in rowsets
        ],
        "missing_rowsets": [],  # versions without rows (schema changes, TRUNCATE) are not missing data
        "stale_rowsets": [],
        "stale version path": [],
        "rowsets_detail": [
            {"version": r.version, "rows": r.rows, "data_size": r.data_size, "files": len(r.files)} for r in rowsets
        ],
    }


def trigger_compaction(compactor: Compactor, tablet_id: int, compact_type: str) -> dict[str, Any]:
    """`POST /api/compaction/run?tablet_id=&compact_type=`: runs the compaction of the tablet's table."""
    if compact_type not in ("base", "cumulative"):
        return {"status": "Fail", "msg": f"The compaction type '{compact_type}' is not supported"}
    found = find_tablet(compactor, tablet_id)
    if found is None:
        return {"status": "Fail", "msg": "Tablet not found"}
    handle, _ = found
    try:
        done = run_compaction(compactor, handle, CompactionType(compact_type))
    except DorisError as exc:
        return {"status": "Fail", "msg": f"fail to execute compaction, error = {exc.message}"}
    if not done:
        return {"status": "Fail", "msg": f"fail to execute compaction, error = no suitable versions for {compact_type}"}
    return {"status": "Success", "msg": "compaction task is successfully triggered."}
