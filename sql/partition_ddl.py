"""Doris's partition clauses: `PARTITION BY RANGE|LIST (...) (...)` of CREATE TABLE and the partition descriptions
of `ALTER TABLE ... ADD [TEMPORARY] PARTITION`, read with the token cursor and checked as Doris checks them.

    PARTITION BY RANGE(k1[, k2]) (
        PARTITION p1 VALUES LESS THAN ("2024-01-01") | LESS THAN MAXVALUE | LESS THAN ("10", MAXVALUE),
        PARTITION p2 VALUES [("2024-01-01"), ("2024-02-01")),
        FROM ("2024-01-01") TO ("2024-03-01") INTERVAL 1 DAY | WEEK | MONTH | YEAR | HOUR  (or INTERVAL n: integers)
    )
    PARTITION BY LIST(k1[, k2]) (PARTITION p1 VALUES IN ("a", "b") | IN (("a", "1"), ("b", "2")))
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import TokenType

from sql.tokens import Cursor
from tables.errors import SqlError
from tables.model import ColumnDef, KeysType
from tables.partitions import (
    AUTO_UNITS,
    LIST_TYPES,
    MAXVALUE,
    MINVALUE,
    RANGE_TYPES,
    PartitionDef,
    PartitionIndex,
    Partitioning,
    PartitionKind,
    canonical,
    check_new,
    least,
    less_than_lower,
    parse_value,
    temporary_partitioning,
)
from tables.types import DorisType

# partitions CREATE TABLE and ALTER TABLE ADD [TEMPORARY] PARTITION may leave a table with: Doris documents 4096 per
# table by default (its `max_multi_partition_num`); each statement's checks compare every partition with the others
MAX_TABLE_PARTITIONS = 4096
MAX_BATCH_PARTITIONS = 4096  # Doris FE config max_multi_partition_num: the partitions FROM .. TO .. INTERVAL makes


@dataclass(frozen=True)
class PartitionDesc:
    """One partition as written: `LESS THAN (upper)`, `[(lower), (upper))` or `IN (values)`."""

    name: str
    less_than: tuple[str, ...] | None = None
    lower: tuple[str, ...] | None = None
    upper: tuple[str, ...] | None = None
    values: tuple[tuple[str | None, ...], ...] = ()


@dataclass(frozen=True)
class BatchDesc:
    """`FROM (start) TO (end) INTERVAL n [unit]`: fixed ranges of n units from start to end."""

    start: str
    end: str
    interval: int
    unit: str | None


@dataclass(frozen=True)
class PartitionClause:
    kind: PartitionKind
    columns: tuple[str, ...]
    items: tuple[PartitionDesc | BatchDesc, ...]
    auto: bool = False  # AUTO PARTITION BY
    auto_unit: str | None = None  # RANGE: the `date_trunc` unit


def _value(cur: Cursor) -> str | None:
    """One bound or list value: a string, a number (signed), MAXVALUE or NULL."""
    if cur.accept("MAXVALUE"):
        return MAXVALUE
    if cur.accept("NULL"):
        return None
    negative = cur.accept_type(TokenType.DASH) is not None
    tok = cur.next()
    if tok.token_type not in (TokenType.STRING, TokenType.NUMBER):
        cur.i -= 1
        raise cur.error("a partition value")
    return ("-" if negative else "") + tok.text


def _tuple(cur: Cursor) -> tuple[str | None, ...]:
    cur.expect_type(TokenType.L_PAREN, "(")
    values = [_value(cur)]
    while cur.accept_type(TokenType.COMMA):
        values.append(_value(cur))
    cur.expect_type(TokenType.R_PAREN, ")")
    return tuple(values)


def _bound(cur: Cursor) -> tuple[str, ...]:
    values = _tuple(cur)
    if any(v is None for v in values):
        raise SqlError("Range partition value can not be NULL")
    return tuple(v for v in values if v is not None)


def parse_partition_desc(cur: Cursor) -> PartitionDesc:
    """`PARTITION [IF NOT EXISTS] name VALUES ...` (the word PARTITION read already), then per-partition
    properties or a DISTRIBUTED BY, which are read and not kept. Whether the form fits the table's kind is
    checked when the partition is added (`add_partition`)."""
    cur.accept("IF", "NOT", "EXISTS")
    name = cur.name()
    if not cur.accept("VALUES"):
        raise SqlError(f"Partition {name} has no VALUES: a default partition is not supported")
    desc: PartitionDesc
    if cur.accept("LESS", "THAN"):
        if cur.accept("MAXVALUE"):
            desc = PartitionDesc(name=name, less_than=(MAXVALUE,))
        else:
            desc = PartitionDesc(name=name, less_than=_bound(cur))
    elif cur.accept_type(TokenType.L_BRACKET):
        lower = _bound(cur)
        cur.expect_type(TokenType.COMMA, ",")
        upper = _bound(cur)
        cur.expect_type(TokenType.R_PAREN, ")")
        desc = PartitionDesc(name=name, lower=lower, upper=upper)
    elif cur.accept("IN"):
        cur.expect_type(TokenType.L_PAREN, "(")
        values: list[tuple[str | None, ...]] = []
        while True:
            if cur.at(TokenType.L_PAREN):
                values.append(_tuple(cur))
            else:
                values.append((_value(cur),))
            if not cur.accept_type(TokenType.COMMA):
                break
        cur.expect_type(TokenType.R_PAREN, ")")
        desc = PartitionDesc(name=name, values=tuple(values))
    else:
        raise cur.error("LESS THAN, [ or IN")
    if cur.at(TokenType.L_PAREN):  # ("replication_num" = "1") and the like
        cur.skip_parens()
    if cur.accept("DISTRIBUTED", "BY"):
        if cur.accept("HASH"):
            cur.skip_parens()
        else:
            cur.expect("RANDOM")
        if cur.accept("BUCKETS"):
            cur.next()
    return desc


def parse_partition_clause(cur: Cursor) -> PartitionClause:
    """`RANGE|LIST (columns) (items)`, after `PARTITION BY`."""
    if cur.accept("RANGE"):
        kind = PartitionKind.RANGE
    elif cur.accept("LIST"):
        kind = PartitionKind.LIST
    else:
        raise cur.error("RANGE or LIST")
    columns = _columns(cur)
    return PartitionClause(kind=kind, columns=columns, items=_items(cur, kind))


def parse_auto_clause(cur: Cursor) -> PartitionClause:
    """`RANGE (date_trunc(col, 'unit')) (items)` or `LIST (columns) (items)`, after `AUTO PARTITION BY`.

    Raises: SqlError with Doris's text for a function other than date_trunc or a unit it does not take.
    """
    if cur.accept("LIST"):
        columns = _columns(cur)
        return PartitionClause(PartitionKind.LIST, columns, _items(cur, PartitionKind.LIST), auto=True)
    cur.expect("RANGE")
    wrapped = cur.accept_type(TokenType.L_PAREN) is not None
    function = cur.name()
    if function.lower() != "date_trunc":
        raise SqlError("auto create partition only support date_trunc function of RANGE partition.")
    cur.expect_type(TokenType.L_PAREN, "(")
    column = cur.name()
    cur.expect_type(TokenType.COMMA, ",")
    unit = cur.string().upper()
    cur.expect_type(TokenType.R_PAREN, ")")
    if wrapped:
        cur.expect_type(TokenType.R_PAREN, ")")
    if unit not in AUTO_UNITS:
        raise SqlError(f"auto create partition only support {', '.join(u.lower() for u in AUTO_UNITS)} date_trunc unit")
    items = _items(cur, PartitionKind.RANGE)
    return PartitionClause(PartitionKind.RANGE, (column,), items, auto=True, auto_unit=unit)


def _columns(cur: Cursor) -> tuple[str, ...]:
    cur.expect_type(TokenType.L_PAREN, "(")
    columns = [cur.name()]
    while cur.accept_type(TokenType.COMMA):
        columns.append(cur.name())
    cur.expect_type(TokenType.R_PAREN, ")")
    return tuple(columns)


def _items(cur: Cursor, kind: PartitionKind) -> tuple[PartitionDesc | BatchDesc, ...]:
    cur.expect_type(TokenType.L_PAREN, "(")
    items: list[PartitionDesc | BatchDesc] = []
    while not cur.accept_type(TokenType.R_PAREN):
        if cur.accept("PARTITION"):
            items.append(parse_partition_desc(cur))
        elif cur.accept("FROM"):
            if kind is not PartitionKind.RANGE:
                raise SqlError("Batch partitions (FROM ... TO ... INTERVAL) are only for RANGE partitions")
            items.append(parse_batch(cur))
        else:
            raise cur.error("PARTITION or FROM")
        if not cur.accept_type(TokenType.COMMA) and not cur.at(TokenType.R_PAREN):
            raise cur.error(", or )")
    return tuple(items)


def parse_batch(cur: Cursor) -> BatchDesc:
    """`(start) TO (end) INTERVAL n [unit]`, after FROM."""
    start = _bound(cur)
    cur.expect("TO")
    end = _bound(cur)
    cur.expect("INTERVAL")
    interval = cur.expect_type(TokenType.NUMBER, "an interval").text
    unit = cur.next().text.upper() if not cur.at_end() and not cur.at(TokenType.COMMA, TokenType.R_PAREN) else None
    if len(start) != 1 or len(end) != 1:
        raise SqlError("Batch partitions support one partition column only")
    return BatchDesc(start=start[0], end=end[0], interval=int(interval), unit=unit)


def partition_columns(
    clause: PartitionClause, columns: Sequence[ColumnDef], keys_type: KeysType
) -> tuple[tuple[str, ...], tuple[DorisType, ...]]:
    """The partition columns as declared, and their types, checked as Doris checks them.

    Raises: SqlError with Doris's text.
    """
    by_name = {c.name.lower(): c for c in columns}
    names: list[str] = []
    types: list[DorisType] = []
    for name in clause.columns:
        col = by_name.get(name.lower())
        if col is None:
            raise SqlError(f"Partition column[{name}] does not exist in column list.")
        if col.name in names:
            raise SqlError(f"Duplicated partition column {col.name}")
        if keys_type is not KeysType.DUPLICATE and not col.is_key:
            raise SqlError(
                "The partition column could not be aggregated column and unique table's partition column must be "
                "key column"
            )
        if col.type.name in ("FLOAT", "DOUBLE"):
            raise SqlError("Floating point type column can not be partition column")
        allowed = RANGE_TYPES if clause.kind is PartitionKind.RANGE else LIST_TYPES
        if col.type.name not in allowed:
            raise SqlError(
                f"Column[{col.name}] type[{col.type.sql().upper()}] cannot be a "
                f"{clause.kind.value.lower()} partition key."
            )
        names.append(col.name)
        types.append(col.type)
    return tuple(names), tuple(types)


def build_partitioning(
    clause: PartitionClause, columns: Sequence[ColumnDef], keys_type: KeysType, created: str
) -> Partitioning:
    """The table's partitioning from its CREATE TABLE clause.

    Raises: SqlError with Doris's text for a bad column, value, overlap or name.
    """
    names, types = partition_columns(clause, columns, keys_type)
    if clause.auto and clause.kind is PartitionKind.RANGE:
        column = next(c for c in columns if c.name == names[0])
        if types[0].name not in ("DATE", "DATETIME"):
            raise SqlError("partition expr date_trunc is illegal! Only support DATE and DATETIME column")
        if column.nullable:
            raise SqlError("AUTO RANGE PARTITION doesn't support NULL column")
        if clause.auto_unit == "HOUR" and types[0].name == "DATE":
            raise SqlError("date_trunc by hour needs a DATETIME partition column")
    partitioning = Partitioning(kind=clause.kind, columns=names, auto=clause.auto, auto_unit=clause.auto_unit)
    index = PartitionIndex()
    for item in clause.items:
        descs = expand_batch(item, types[0]) if isinstance(item, BatchDesc) else [item]
        for desc in descs:
            check_partition_count(len(partitioning.partitions) + 1)
            partitioning = add_partition(partitioning, desc, types, created=created, index=index)
    return partitioning


def check_partition_count(count: int) -> None:
    """Raises: SqlError when a table would have more than `MAX_TABLE_PARTITIONS` partitions."""
    if count > MAX_TABLE_PARTITIONS:
        raise SqlError(f"Too many partitions: {count}. Limit: {MAX_TABLE_PARTITIONS}")


def add_partition(
    partitioning: Partitioning,
    desc: PartitionDesc,
    types: Sequence[DorisType],
    *,
    created: str,
    temporary: bool = False,
    index: PartitionIndex | None = None,
) -> Partitioning:
    """`partitioning` with one more partition (the next id). `index`: see `check_new`.

    Raises: SqlError with Doris's text for a value of the wrong arity or type, an overlap or a taken name.
    """
    width = len(types)
    check_partition_name(desc.name)
    new = PartitionDef(id=partitioning.next_id, name=desc.name, temporary=temporary, create_time=created)
    if partitioning.kind is PartitionKind.RANGE:
        if desc.values:
            raise SqlError("List partition desc is not allowed in a RANGE partitioned table")
        if desc.less_than is not None:
            upper = _full(desc.less_than, width, fill=MAXVALUE if desc.less_than == (MAXVALUE,) else MINVALUE)
            upper = tuple(_canon(v, t) for v, t in zip(upper, types, strict=True))
            # a temporary partition's lower bound comes from the temporary partitions alone (Doris)
            source = partitioning if not temporary else temporary_partitioning(partitioning)
            lower = less_than_lower(source, upper, types, index if not temporary else None)
            new = new.model_copy(update={"lower": lower, "upper": upper})
        else:
            assert desc.lower is not None and desc.upper is not None
            if len(desc.lower) != len(desc.upper):
                raise SqlError("Lower range and upper range should have the same number of values")
            # the type's least value is the open end (SHOW CREATE TABLE prints MINVALUE so)
            lower = tuple(
                MINVALUE if v == least(t) else _canon(v, t)
                for v, t in zip(_full(desc.lower, width, MINVALUE), types, strict=True)
            )
            upper = tuple(_canon(v, t) for v, t in zip(_full(desc.upper, width, MINVALUE), types, strict=True))
            new = new.model_copy(update={"lower": lower, "upper": upper, "fixed": True})
    else:
        if desc.less_than is not None or desc.lower is not None:
            raise SqlError("Range partition desc is not allowed in a LIST partitioned table")
        values = []
        for value in desc.values:
            if len(value) != width:
                raise SqlError(f"partition item's size out of partition columns: {len(value)} vs {width}")
            values.append(tuple(None if v is None else canonical(v, t) for v, t in zip(value, types, strict=True)))
        new = new.model_copy(update={"values": tuple(values)})
    check_new(partitioning, new, types, index)
    return partitioning.model_copy(
        update={"partitions": (*partitioning.partitions, new), "next_id": partitioning.next_id + 1}
    )


_PARTITION_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,63}$")  # Doris's FeNameFormat rule for partition names


def check_partition_name(name: str) -> None:
    """Raises: SqlError with Doris's text for a name outside its rule (a letter, then letters, digits, _ or -)."""
    if not _PARTITION_NAME.match(name):
        raise SqlError(f"Incorrect partition name '{name}'")


def _full(values: Sequence[str], width: int, fill: str) -> tuple[str, ...]:
    if len(values) > width:
        raise SqlError(f"Partition values number is more than partition column number: {', '.join(values)}")
    return tuple(values) + (fill,) * (width - len(values))


def _canon(text: str, t: DorisType) -> str:
    return text if text in (MINVALUE, MAXVALUE) else canonical(text, t)


_UNITS = ("HOUR", "DAY", "WEEK", "MONTH", "YEAR")


def expand_batch(batch: BatchDesc, t: DorisType) -> list[PartitionDesc]:
    """`FROM (start) TO (end) INTERVAL n unit` as fixed ranges named as Doris names them (`p_20240101` by day,
    `p_202401` by month, `p_2024` by year, `p_2024010100` by hour, `p_2024_01` by week, `p_<start>` for numbers).

    Raises: SqlError for a unit the column type cannot step by, a non-positive interval or too many partitions.
    """
    if batch.interval <= 0:
        raise SqlError("Batch partition interval must be greater than 0")
    out: list[PartitionDesc] = []
    if t.is_integer:
        if batch.unit is not None:
            raise SqlError(f"Batch partition on column type {t.sql()} takes no time unit: {batch.unit}")
        start, end = int(parse_value(batch.start, t)), int(parse_value(batch.end, t))
        value = start
        while value < end:
            upper = min(value + batch.interval, end)
            out.append(PartitionDesc(name=f"p_{value}", lower=(str(value),), upper=(str(upper),)))
            value = upper
            _bounded(out)
        return out
    if t.name not in ("DATE", "DATETIME") or batch.unit not in _UNITS:
        raise SqlError(f"Batch partition on column type {t.sql()} needs a time unit in {', '.join(_UNITS)}")
    begin = _as_datetime(parse_value(batch.start, t))
    finish = _as_datetime(parse_value(batch.end, t))
    if batch.unit == "HOUR" and t.name == "DATE":
        raise SqlError("Batch partition by HOUR needs a DATETIME column")
    current = begin
    while current < finish:
        following = min(step(current, batch.unit, batch.interval), finish)
        out.append(
            PartitionDesc(name=unit_name(current, batch.unit), lower=(_show(current, t),), upper=(_show(following, t),))
        )
        current = following
        _bounded(out)
    return out


def _bounded(out: list[PartitionDesc]) -> None:
    if len(out) > MAX_BATCH_PARTITIONS:
        raise SqlError(f"The number of batch partitions exceeds {MAX_BATCH_PARTITIONS}")


def _as_datetime(value: dt.date) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime(value.year, value.month, value.day)


def _show(value: dt.datetime, t: DorisType) -> str:
    return value.date().isoformat() if t.name == "DATE" else value.strftime("%Y-%m-%d %H:%M:%S")


def step(value: dt.datetime, unit: str, n: int) -> dt.datetime:
    """`value` plus n time units (months and years by the calendar)."""
    if unit == "HOUR":
        return value + dt.timedelta(hours=n)
    if unit == "DAY":
        return value + dt.timedelta(days=n)
    if unit == "WEEK":
        return value + dt.timedelta(weeks=n)
    months = value.month - 1 + (n if unit == "MONTH" else 12 * n)
    year = value.year + months // 12
    return value.replace(year=year, month=months % 12 + 1, day=min(value.day, 28) if value.day > 28 else value.day)


def unit_name(value: dt.datetime, unit: str) -> str:
    """Doris's name of a partition starting at `value` by `unit`."""
    if unit == "HOUR":
        return value.strftime("p_%Y%m%d%H")
    if unit == "DAY":
        return value.strftime("p_%Y%m%d")
    if unit == "WEEK":
        return f"p_{value.isocalendar().year}_{value.isocalendar().week:02d}"
    if unit == "MONTH":
        return value.strftime("p_%Y%m")
    return value.strftime("p_%Y")
