"""`SHOW [TEMPORARY] PARTITIONS FROM [db.]t`: one row per partition, in Doris's columns.

The figures come from the Iceberg metadata (no data is read): a partition's files are those whose identity field on
`__DORIS_PARTITION__` holds its id; `VisibleVersion` is the version of the last load that wrote rows into it (the
largest `__DORIS_VERSION_COL__` bound of its files; 1 for an empty partition, as Doris starts partitions at 1).
An unpartitioned table is one partition named as the table, as in Doris.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import sqlglot
from pyiceberg.conversions import from_bytes
from pyiceberg.types import LongType
from sqlglot import exp
from sqlglot.errors import ParseError

from sql.context import SqlContext
from sql.dynamic_partition import dynamic_spec
from sql.information_schema import visible_tables
from sql.privileges import require_visible_db, require_visible_table
from sql.results import ResultSet
from sql.session import Session
from sql.tokens import Cursor, Target
from tables.accounts import like
from tables.catalog import VERSION_PROPERTY, TableHandle
from tables.errors import SqlError
from tables.model import VERSION_COL, TableDef
from tables.partitions import PartitionDef, describe
from tables.row_delta import live_delete_files
from tables.rowsets import file_partition, live_data_files

PARTITION_COLUMNS = (
    "PartitionId",
    "PartitionName",
    "VisibleVersion",
    "VisibleVersionTime",
    "State",
    "PartitionKey",
    "Range",
    "DistributionKey",
    "Buckets",
    "ReplicationNum",
    "StorageMedium",
    "CooldownTime",
    "RemoteStoragePolicy",
    "LastConsistencyCheckTime",
    "DataSize",
    "IsInMemory",
    "ReplicaAllocation",
    "IsMutable",
    "SyncWithBaseTables",
    "UnsyncTables",
    "CommittedVersion",
    "RowCount",
)


@dataclass(frozen=True)
class ShowPartitions:
    target: Target
    temporary: bool = False
    tail: exp.Select | None = None  # WHERE / ORDER BY / LIMIT over the result's columns


def parse_show_partitions(cur: Cursor, current_db: str) -> ShowPartitions:
    """`SHOW [TEMPORARY] PARTITIONS FROM [db.]t [WHERE ...] [ORDER BY ...] [LIMIT n [OFFSET m]]`; the WHERE takes
    AND-ed comparisons and LIKE of a column with a literal, as Doris does."""
    cur.i = 1
    temporary = cur.accept("TEMPORARY")
    cur.expect("PARTITIONS")
    cur.expect("FROM")
    target = cur.table(current_db)
    tail = None
    if not cur.at_end():
        rest = cur.text[cur.tokens[cur.i].start :]
        try:
            parsed = sqlglot.parse_one(f"SELECT * FROM partitions {rest}", dialect="doris")
        except ParseError:
            raise SqlError(f"Syntax error in SHOW PARTITIONS near: {rest[:80]}") from None
        if not isinstance(parsed, exp.Select):
            raise SqlError("Syntax error in SHOW PARTITIONS")
        tail = parsed
    return ShowPartitions(target=target, temporary=temporary, tail=tail)


_COMPARE: dict[type[exp.Expr], Any] = {
    exp.EQ: lambda a, b: a == b,
    exp.NEQ: lambda a, b: a != b,
    exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b,
    exp.LT: lambda a, b: a < b,
    exp.LTE: lambda a, b: a <= b,
}


def _keep(row: dict[str, Any], condition: exp.Expr) -> bool:
    """Raises: SqlError for a predicate form SHOW PARTITIONS does not take (Doris's limits)."""
    if isinstance(condition, exp.Paren):
        return _keep(row, condition.this)
    if isinstance(condition, exp.And):
        return _keep(row, condition.left) and _keep(row, condition.right)
    left, right = condition.args.get("this"), condition.args.get("expression")
    if not isinstance(left, exp.Column) or not isinstance(right, exp.Literal):
        raise SqlError("Only the columns of SHOW PARTITIONS compared with a literal are supported, joined by AND")
    name = next((c for c in row if c.lower() == left.name.lower()), None)
    if name is None:
        raise SqlError(f"Unknown column '{left.name}' in SHOW PARTITIONS")
    value = row[name]
    literal: Any = right.this if right.is_string else float(right.this)
    if not right.is_string:
        try:
            value = float(value)
        except (TypeError, ValueError):
            return False
    else:
        value = str(value)
    if isinstance(condition, exp.Like):
        # matched in linear steps per character pair: a pattern compiled into a regex of `.*` runs backtracks
        # polynomially in its number of `%` (`LIKE '%%%...%X'` held the GIL, and so the whole server, for hours)
        return like(str(literal).lower(), str(value).lower())
    compare = _COMPARE.get(type(condition))
    if compare is None:
        raise SqlError("Only =, !=, <, <=, >, >= and LIKE are supported in SHOW PARTITIONS")
    return bool(compare(value, literal))


def _sort_key(column: str) -> Any:
    def key(row: dict[str, Any]) -> tuple[bool, Any]:
        return isinstance(row[column], str), row[column]

    return key


def _apply_tail(rows: list[list[Any]], tail: exp.Select) -> list[list[Any]]:
    named = [dict(zip(PARTITION_COLUMNS, r, strict=True)) for r in rows]
    where = tail.args.get("where")
    if isinstance(where, exp.Where):
        named = [r for r in named if _keep(r, where.this)]
    order = tail.args.get("order")
    if isinstance(order, exp.Order):
        for item in reversed(order.expressions):
            column = item.this
            if not isinstance(column, exp.Column):
                raise SqlError("ORDER BY of SHOW PARTITIONS takes column names")
            key = next((c for c in PARTITION_COLUMNS if c.lower() == column.name.lower()), None)
            if key is None:
                raise SqlError(f"Unknown column '{column.name}' in SHOW PARTITIONS")
            named.sort(key=_sort_key(key), reverse=bool(item.args.get("desc")))
    offset, limit = tail.args.get("offset"), tail.args.get("limit")
    start = int(offset.expression.this) if isinstance(offset, exp.Offset) else 0
    if isinstance(limit, exp.Limit):
        named = named[start : start + int(limit.expression.this)]
    else:
        named = named[start:]
    return [[r[c] for c in PARTITION_COLUMNS] for r in named]


@dataclass
class _Figures:
    version: int = 1
    rows: int = 0
    deleted: int = 0
    size: int = 0


def _figures(handle: TableHandle) -> dict[int | None, _Figures]:
    """Per partition id (None: an unpartitioned table's): last version, live rows and bytes."""
    table = handle.iceberg
    out: dict[int | None, _Figures] = {}
    field_id = handle.field_id(VERSION_COL)
    for f in live_data_files(table):
        fig = out.setdefault(file_partition(table, f), _Figures())
        fig.rows += f.record_count
        fig.size += f.file_size_in_bytes
        upper = (f.upper_bounds or {}).get(field_id)
        if upper is not None:
            fig.version = max(fig.version, int(from_bytes(LongType(), upper)))
    for f in live_delete_files(table):
        fig = out.setdefault(file_partition(table, f), _Figures())
        fig.deleted += f.record_count
        fig.size += f.file_size_in_bytes
    return out


def _version_times(handle: TableHandle) -> dict[int, str]:
    """The commit time of each version that wrote a snapshot."""
    out = {}
    for snap in handle.iceberg.metadata.snapshots:
        version = (snap.summary.additional_properties if snap.summary else {}).get(VERSION_PROPERTY)
        if version is not None:
            moment = dt.datetime.fromtimestamp(snap.timestamp_ms / 1000)
            out[int(version)] = moment.strftime("%Y-%m-%d %H:%M:%S")
    return out


def data_size(n: int) -> str:
    """Doris's `DebugUtil.getPrettyStringBytes` as SHOW PARTITIONS prints it: `0.000 `, `2.352 KB`."""
    value = float(n)
    for unit in ("", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.3f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def show_partitions(ctx: SqlContext, stmt: ShowPartitions, session: Session) -> ResultSet:
    target = stmt.target
    require_visible_table(session.privileges, "SHOW PARTITIONS", target.db, target.table)
    handle = ctx.catalog.load(target.db, target.table)
    table = handle.definition
    if stmt.temporary and table.partitioning is not None:
        # the rows of temporary partitions are in the table's companion (`tables.catalog.Catalog.temporary`)
        handle = ctx.catalog.temporary(handle) or handle
    figures = _figures(handle)
    times = _version_times(handle)
    rows: list[list[Any]] = []
    if table.partitioning is None:
        if not stmt.temporary:
            rows.append(_row(table, None, figures.get(None, _Figures()), times))
    else:
        for p in table.partitioning.partitions:
            if p.temporary == stmt.temporary:
                rows.append(_row(table, p, figures.get(p.id, _Figures()), times))
    if stmt.tail is not None:
        rows = _apply_tail(rows, stmt.tail)
    return ResultSet(columns=[(c, "VARCHAR") for c in PARTITION_COLUMNS], rows=rows)


def _row(table: TableDef, p: PartitionDef | None, fig: _Figures, times: dict[int, str]) -> list[Any]:
    partitioning = table.partitioning
    if p is None or partitioning is None:
        pid, name, key, shown, created = 0, table.name, "", "", ""
    else:
        pid, name, created = p.id, p.name, p.create_time
        key = ", ".join(partitioning.columns)
        shown = describe(p, partitioning.kind, table.partition_types())
    distribution = ", ".join(table.bucket_columns) if table.bucket_columns else "RANDOM"
    return [
        pid,
        name,
        fig.version,
        times.get(fig.version, created),
        "NORMAL",
        key,
        shown,
        distribution,
        table.buckets,
        1,
        "HDD",
        "9999-12-31 23:59:59",
        "",
        "NULL",
        data_size(fig.size),
        "false",
        "tag.location.default: 1",
        "true",
        "true",
        "NULL",
        fig.version,
        max(fig.rows - fig.deleted, 0),
    ]


DYNAMIC_COLUMNS = (
    "TableName",
    "Enable",
    "TimeUnit",
    "Start",
    "End",
    "Prefix",
    "Buckets",
    "ReplicationNum",
    "ReplicaAllocation",
    "StartOf",
    "LastUpdateTime",
    "LastSchedulerTime",
    "State",
    "LastCreatePartitionMsg",
    "LastDropPartitionMsg",
    "ReservedHistoryPeriods",
)


def parse_show_dynamic(cur: Cursor, current_db: str) -> Target:
    """`SHOW DYNAMIC PARTITION TABLES [FROM | IN db]`."""
    cur.i = 4
    if cur.accept("FROM") or cur.accept("IN"):
        return Target(db=cur.name())
    return Target(db=current_db)


def show_dynamic(ctx: SqlContext, target: Target, session: Session) -> ResultSet:
    """The database's tables with dynamic partition properties the user may see, in Doris's columns."""
    require_visible_db(session.privileges, target.db)
    rows: list[list[Any]] = []
    for name in visible_tables(ctx.catalog, session.privileges, target.db):
        table = ctx.catalog.load(target.db, name).definition
        spec = dynamic_spec(table.properties)
        if spec is None:
            continue
        start_of = {"WEEK": f"WEEK {spec.start_day_of_week}", "MONTH": f"MONTH {spec.start_day_of_month}"}
        rows.append(
            [
                name,
                str(spec.enable).lower(),
                spec.time_unit,
                str(spec.start),
                str(spec.end),
                spec.prefix,
                table.properties.get("dynamic_partition.buckets", str(table.buckets)),
                "1",
                "tag.location.default: 1",
                start_of.get(spec.time_unit, "NULL"),
                "NULL",
                "NULL",
                "NORMAL",
                "NULL",
                "NULL",
                table.properties.get("dynamic_partition.reserved_history_periods", "NULL"),
            ]
        )
    return ResultSet(columns=[(c, "VARCHAR") for c in DYNAMIC_COLUMNS], rows=rows)
