"""Doris partitions: RANGE and LIST partitioning of a table, its partitions, and where each row goes.

A partition is a named range (`[lower, upper)`, lexicographic over the partition columns) or list of values. Its
id is stored with every row in `PARTITION_COL`, an Iceberg column no statement sees, the source of an identity
field of the table's partition spec: every data file holds the rows of one partition, so dropping or truncating
a partition removes its files in one commit, a read of some partitions opens only their files, and a foreign
Iceberg reader can prune by it. Bounds are kept as the text of their literals; `MINVALUE` / `MAXVALUE` are
the open ends (range partition columns are integers and dates, so no value is spelled so).
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from tables.errors import SqlError
from tables.types import DorisType

PARTITION_COL = "__DORIS_PARTITION__"
MINVALUE = "MINVALUE"
MAXVALUE = "MAXVALUE"
NO_PARTITION = "no partition for this tuple"  # the reason of a row no partition holds (Doris's text)
RANGE_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT", "LARGEINT", "DATE", "DATETIME")
LIST_TYPES = (*RANGE_TYPES, "BOOLEAN", "CHAR", "VARCHAR", "STRING")
FIRST_PARTITION_ID = 10001  # ids are per table; Doris's are catalog-wide numbers of this size
# AUTO PARTITION ids are a function of the partition (`auto_id_sql`), so concurrent loads that create the same
# partition agree on it, and a commit learns a new partition from its files alone: AUTO_ID_BASE plus the
# time unit's index since 1970 (RANGE), or a hash of the values (LIST)
AUTO_ID_BASE = 1_000_000_000
AUTO_UNITS = ("YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "HOUR")
_INT_RANGE = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INT": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
    "LARGEINT": (-(2**127), 2**127 - 1),
}


class PartitionKind(StrEnum):
    RANGE = "RANGE"
    LIST = "LIST"


class PartitionDef(BaseModel):
    """One partition: a range `[lower, upper)` of partition-column tuples, or the tuples of a list."""

    model_config = ConfigDict(frozen=True)

    id: int
    name: str
    lower: tuple[str, ...] = ()  # RANGE: one bound per partition column, MINVALUE where open
    upper: tuple[str, ...] = ()  # RANGE: MAXVALUE where open
    values: tuple[tuple[str | None, ...], ...] = ()  # LIST: each a tuple of the partition columns' values
    fixed: bool = False  # RANGE: declared `VALUES [(lower), (upper))` rather than `VALUES LESS THAN (upper)`
    temporary: bool = False
    create_time: str = ""


class Partitioning(BaseModel):
    """`PARTITION BY RANGE|LIST (columns) (...)`: the kind, the columns and the partitions, in creation order."""

    model_config = ConfigDict(frozen=True)

    kind: PartitionKind
    columns: tuple[str, ...]
    partitions: tuple[PartitionDef, ...] = ()
    next_id: int = FIRST_PARTITION_ID
    # AUTO PARTITION: a load creates the partitions its rows need (RANGE: one `auto_unit` of `date_trunc` each)
    auto: bool = False
    auto_unit: str | None = None

    def formal(self) -> tuple[PartitionDef, ...]:
        """The partitions queries and loads see (temporary ones aside)."""
        return tuple(p for p in self.partitions if not p.temporary)

    def find(self, name: str, *, temporary: bool = False) -> PartitionDef | None:
        """A partition by name, case-insensitively as Doris matches partition names."""
        lower = name.lower()
        return next((p for p in self.partitions if p.name.lower() == lower and p.temporary == temporary), None)

    def named(self, names: Iterable[str], *, temporary: bool = False) -> list[PartitionDef]:
        """The partitions of these names.

        Raises: SqlError with Doris's text for a name the table does not have.
        """
        out = []
        for name in names:
            found = self.find(name, temporary=temporary)
            if found is None:
                raise SqlError(f"Partition does not exist: {name}" if not temporary else f"Unknown partition: {name}")
            out.append(found)
        return out


# -- values ----------------------------------------------------------------------------------------


def parse_value(text: str, t: DorisType) -> Any:
    """A bound or list value as a Python value of the column's type (for ordering and checks).

    Raises: SqlError when the text is not a value of the type.
    """
    try:
        if t.name in _INT_RANGE:
            value = int(text.strip())
            low, high = _INT_RANGE[t.name]
            if not low <= value <= high:
                raise ValueError
            return value
        if t.name == "DATE":
            return dt.date.fromisoformat(text.strip()[:10]) if len(text.strip()) != 8 else _compact_date(text)
        if t.name == "DATETIME":
            stripped = text.strip()
            return dt.datetime.fromisoformat(stripped if len(stripped) != 8 else f"{_compact_date(stripped)}")
        if t.name == "BOOLEAN":
            lowered = text.strip().lower()
            if lowered not in ("true", "false", "1", "0"):
                raise ValueError
            return lowered in ("true", "1")
    except ValueError:
        raise SqlError(f"Invalid {t.sql()} value: '{text}' for a partition key") from None
    return text


def _compact_date(text: str) -> dt.date:
    return dt.date(int(text[:4]), int(text[4:6]), int(text[6:8]))


def canonical(text: str, t: DorisType) -> str:
    """The value as Doris prints it back (`2024-1-1` → `2024-01-01`; datetimes with seconds)."""
    return value_text(parse_value(text, t))


def value_text(value: object) -> str:
    """A partition column's Python value as the text of its literal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def _rank(bound: Sequence[str], types: Sequence[DorisType]) -> tuple[tuple[int, Any], ...]:
    """A range bound as a sortable tuple: MINVALUE below every value, MAXVALUE above."""
    return _ranker(types)(bound)


# (bound, type names) → rank. Adding a partition compares its bounds with every other partition's: parsing them
# again each time made a CREATE TABLE of 2000 partitions take 14 s of the server's CPU (parse_value reads only the
# type's name). Bounded: cleared when full.
_RANKS: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[tuple[int, Any], ...]] = {}
_MAX_RANKS = 1 << 16


def _ranker(types: Sequence[DorisType]) -> Callable[[Sequence[str]], tuple[tuple[int, Any], ...]]:
    """`_rank` for one table's partition column types, remembering the ranks it computes."""
    names = tuple(t.name for t in types)

    def rank(bound: Sequence[str]) -> tuple[tuple[int, Any], ...]:
        key = (tuple(bound), names)
        found = _RANKS.get(key)
        if found is None:
            if len(_RANKS) >= _MAX_RANKS:
                _RANKS.clear()
            found = _RANKS[key] = tuple(_value_rank(text, t) for text, t in zip(bound, types, strict=True))
        return found

    return rank


def _value_rank(text: str, t: DorisType) -> tuple[int, Any]:
    if text == MINVALUE:
        return (0, 0)
    if text == MAXVALUE:
        return (2, 0)
    return (1, parse_value(text, t))


def sorted_ranges(partitions: Iterable[PartitionDef], types: Sequence[DorisType]) -> list[PartitionDef]:
    """Range partitions in the order of their ranges."""
    return sorted(partitions, key=lambda p: _rank(p.upper, types))


def describe_bound(bound: Sequence[str], types: Sequence[DorisType]) -> str:
    """`types: [INT]; keys: [10]; ` as Doris prints a partition key (MINVALUE as the type's least value)."""
    keys = []
    for text, t in zip(bound, types, strict=True):
        if text == MINVALUE:
            keys.append(least(t))
        else:
            keys.append(text)
    return f"types: [{', '.join(t.schema_name() for t in types)}]; keys: [{', '.join(keys)}]; "


def least(t: DorisType) -> str:
    """The least value of a range partition column's type, as Doris prints an open lower bound."""
    if t.name in _INT_RANGE:
        return str(_INT_RANGE[t.name][0])
    if t.name == "DATE":
        return "0000-01-01"
    if t.name == "DATETIME":
        return "0000-01-01 00:00:00"
    return ""


def describe(partition: PartitionDef, kind: PartitionKind, types: Sequence[DorisType]) -> str:
    """The `Range` column of `SHOW PARTITIONS`, and the range of Doris's overlap error."""
    if kind is PartitionKind.RANGE:
        return f"[{describe_bound(partition.lower, types)}..{describe_bound(partition.upper, types)})"
    items = [
        f"types: [{', '.join(t.schema_name() for t in types)}]; keys: [{', '.join(v or 'NULL' for v in value)}]; "
        for value in partition.values
    ]
    return "[" + ", ".join(items) + "]"


@dataclass
class PartitionIndex:
    """The names and LIST values of the partitions added so far by one statement that adds many (CREATE TABLE), so
    that each `check_new` costs the new partition's values, not every partition's (4096 LIST partitions of 50
    values each were 400 million value parses)."""

    names: set[str] = field(default_factory=set)  # lower case: Doris matches partition names so
    values: dict[tuple[bool, tuple[Any, ...]], str] = field(default_factory=dict)  # (temporary, key) → name
    ranges: dict[bool, list[tuple[Any, ...]]] = field(default_factory=dict)  # temporary → sorted (low, high) ranks
    uppers: list[tuple[Any, ...]] = field(default_factory=list)  # formal partitions: sorted (upper rank, upper)


def check_new(
    partitioning: Partitioning, new: PartitionDef, types: Sequence[DorisType], index: PartitionIndex | None = None
) -> None:
    """Doris's checks of a partition joining the table (its temporary or its formal partitions). `index`: the
    names and values of every partition of `partitioning`, kept by the caller (the new one is added to it).

    Raises: SqlError on a duplicate name, an empty range, or a range or value another partition holds.
    """
    # a name is taken by a formal and a temporary partition alike (Doris's `checkPartitionNameExist`)
    if (
        new.name.lower() in index.names
        if index is not None
        else partitioning.find(new.name) is not None or partitioning.find(new.name, temporary=True) is not None
    ):
        raise SqlError(f"Duplicate partition name {new.name}")
    _check_values(partitioning, new, types, index)
    if index is not None:
        index.names.add(new.name.lower())
        index.values.update(((new.temporary, _list_key(v, types)), new.name) for v in new.values)
        if partitioning.kind is PartitionKind.RANGE:
            rank = _ranker(types)
            bisect.insort(index.ranges.setdefault(new.temporary, []), (rank(new.lower), rank(new.upper)))
            if not new.temporary:
                bisect.insort(index.uppers, (rank(new.upper), new.upper))


def _check_values(
    partitioning: Partitioning, new: PartitionDef, types: Sequence[DorisType], index: PartitionIndex | None
) -> None:
    others = [p for p in partitioning.partitions if p.temporary == new.temporary]
    if partitioning.kind is PartitionKind.RANGE:
        rank = _ranker(types)
        low, high = rank(new.lower), rank(new.upper)
        if low >= high:
            raise SqlError(
                f"Invalid range value format: lower bound {describe_bound(new.lower, types).strip()} is not less "
                f"than upper bound {describe_bound(new.upper, types).strip()}"
            )
        if index is not None:  # the others are disjoint: only the neighbours of the new range can meet it
            spans = index.ranges.get(new.temporary, [])
            at = bisect.bisect_left(spans, (low,))
            if not any(lo < high and low < hi for lo, hi in spans[max(at - 1, 0) : at + 1]):
                return
        for other in others:  # (without an index, or to name the partition it meets as Doris does)
            if rank(other.lower) < high and low < rank(other.upper):
                raise SqlError(
                    f"Range {describe(new, partitioning.kind, types)} is intersected with range: "
                    f"{describe(other, partitioning.kind, types)}"
                )
        return
    seen: dict[tuple[Any, ...], str] = {}
    if index is None:
        for other in others:
            for value in other.values:
                seen[_list_key(value, types)] = other.name
    mine: set[tuple[Any, ...]] = set()
    for value in new.values:
        key = _list_key(value, types)
        if key in seen or key in mine or (index is not None and (new.temporary, key) in index.values):
            shown = ", ".join(v or "NULL" for v in value)
            raise SqlError(f"The partition key[({shown})] in partition item[{new.name}] is conflict")
        mine.add(key)


def _list_key(value: Sequence[str | None], types: Sequence[DorisType]) -> tuple[Any, ...]:
    return tuple(None if v is None else parse_value(v, t) for v, t in zip(value, types, strict=True))


def less_than_lower(
    partitioning: Partitioning,
    upper: tuple[str, ...],
    types: Sequence[DorisType],
    index: PartitionIndex | None = None,
) -> tuple[str, ...]:
    """The lower bound of a `VALUES LESS THAN (upper)` partition: the greatest upper bound below it among the
    partitions (MINVALUE when none), as Doris computes it. `index`: see `check_new`."""
    rank = _ranker(types)
    target = rank(upper)
    if index is not None:
        at = bisect.bisect_left(index.uppers, (target,))
        return index.uppers[at - 1][1] if at else tuple(MINVALUE for _ in types)
    below = [p.upper for p in partitioning.partitions if not p.temporary and rank(p.upper) < target]
    if not below:
        return tuple(MINVALUE for _ in types)
    return max(below, key=rank)


# -- rows ------------------------------------------------------------------------------------------


def literal_sql(text: str, t: DorisType) -> str:
    """A bound or list value as a Spark SQL literal of the column's storage type."""
    value = parse_value(text, t)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"CAST({value} AS DECIMAL(38,0))" if t.name == "LARGEINT" else str(value)
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP_NTZ'{value.strftime('%Y-%m-%d %H:%M:%S')}'"
    if isinstance(value, dt.date):
        return f"DATE'{value.isoformat()}'"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def partition_sql(
    partitioning: Partitioning, columns: Sequence[str], types: Sequence[DorisType], ids: AbstractSet[int] | None = None
) -> str:
    """Spark SQL for a row's partition id over its (quoted) partition `columns`, NULL when no partition holds
    it; only partitions in `ids` when given (a load naming its partitions). A NULL value of a range column sorts
    below every value, as Doris places it."""
    parts = [p for p in partitioning.formal() if ids is None or p.id in ids]
    if partitioning.kind is PartitionKind.LIST:
        branches = []
        for p in parts:
            tests = []
            for value in p.values:
                tests.append(
                    " AND ".join(
                        f"{c} IS NULL" if v is None else f"{c} = {literal_sql(v, t)}"
                        for c, v, t in zip(columns, value, types, strict=True)
                    )
                )
            if tests:
                branches.append(f"WHEN {' OR '.join(f'({x})' for x in tests)} THEN {p.id}")
        return f"CAST(CASE {' '.join(branches)} END AS INT)" if branches else "CAST(NULL AS INT)"
    ordered = sorted_ranges(parts, types)
    if not ordered:
        return "CAST(NULL AS INT)"
    return f"CAST({_range_tree(ordered, 0, len(ordered) - 1, columns, types)} AS INT)"


def _range_tree(parts: list[PartitionDef], lo: int, hi: int, columns: Sequence[str], types: Sequence[DorisType]) -> str:
    """A balanced CASE over ranges sorted by upper bound: log2(n) comparisons a row."""
    if lo == hi:
        p = parts[lo]
        inside = f"NOT ({_less(columns, p.lower, types)}) AND {_less(columns, p.upper, types)}"
        return f"CASE WHEN {inside} THEN {p.id} END"
    mid = (lo + hi) // 2
    left = _range_tree(parts, lo, mid, columns, types)
    right = _range_tree(parts, mid + 1, hi, columns, types)
    return f"CASE WHEN {_less(columns, parts[mid].upper, types)} THEN {left} ELSE {right} END"


def _less(columns: Sequence[str], bound: Sequence[str], types: Sequence[DorisType]) -> str:
    """Never-NULL SQL: the row's tuple sorts below `bound` (NULL below every value, above MINVALUE's nothing)."""
    expr = "false"
    for c, text, t in reversed(list(zip(columns, bound, types, strict=True))):
        if text == MAXVALUE:
            less, equal = "true", "false"
        elif text == MINVALUE:
            less, equal = "false", f"{c} IS NULL"
        else:
            value = literal_sql(text, t)
            less, equal = f"({c} IS NULL OR {c} < {value})", f"coalesce({c} = {value}, false)"
        expr = less if expr == "false" else f"({less} OR ({equal} AND {expr}))"
    return expr


# -- a range partition column's values on a number line, for a binary search ---------------------
DOUBLE_EXACT = 2**53  # integers a double holds exactly


def range_splits(
    partitioning: Partitioning, types: Sequence[DorisType], ids: AbstractSet[int] | None = None
) -> tuple[list[float], list[int | None]] | None:
    """`_range_splits`, computed once per partitioning (a load asks twice; a thousand ranges take ~5 ms)."""
    return _range_splits(partitioning, tuple(types), frozenset(ids) if ids is not None else None)


@functools.lru_cache(maxsize=64)
def _range_splits(
    partitioning: Partitioning, types: tuple[DorisType, ...], ids: frozenset[int] | None
) -> tuple[list[float], list[int | None]] | None:
    """A one-column RANGE partitioning as Spark's `Bucketizer` splits: every bound as a number (`number_of`), with
    -inf and +inf at the ends, and the partition id of each interval between two splits (None: no partition, or
    one outside `ids`). None when the partitioning is not of that kind (LIST, several columns, a LARGEINT column or
    bounds a double cannot hold exactly): `partition_sql` serves those."""
    if partitioning.kind is not PartitionKind.RANGE or len(types) != 1 or types[0].name == "LARGEINT":
        return None
    t = types[0]
    parts = [p for p in partitioning.formal() if ids is None or p.id in ids]
    if not parts:
        return None
    edges: set[float] = set()
    spans: list[tuple[float, float, int]] = []
    for p in parts:
        low = float("-inf") if p.lower[0] == MINVALUE else number_of(parse_value(p.lower[0], t))
        high = float("inf") if p.upper[0] == MAXVALUE else number_of(parse_value(p.upper[0], t))
        if any(abs(x) != float("inf") and abs(x) > DOUBLE_EXACT for x in (low, high)):
            return None
        edges.update((low, high))
        spans.append((low, high, p.id))
    splits = sorted(edges | {float("-inf"), float("inf")})
    spans.sort()
    lows = [low for low, _, _ in spans]
    owners: list[int | None] = []
    for start in splits[:-1]:
        at = bisect.bisect_right(lows, start) - 1  # the span starting last at or below `start` (they do not overlap)
        owners.append(spans[at][2] if at >= 0 and start < spans[at][1] else None)
    return splits, owners


def number_of(value: Any) -> float:
    """A range partition value on the number line `range_splits` uses: days for dates, seconds for datetimes."""
    if isinstance(value, dt.datetime):
        return float((value - dt.datetime(1970, 1, 1)).total_seconds())
    if isinstance(value, dt.date):
        return float((value - dt.date(1970, 1, 1)).days)
    return float(value)


# -- AUTO PARTITION ---------------------------------------------------------------------------------
_EPOCH = dt.datetime(1970, 1, 1)
_MONDAY = dt.datetime(1970, 1, 5)


def auto_id_sql(partitioning: Partitioning, columns: Sequence[str], types: Sequence[DorisType]) -> str:
    """Spark SQL for the id of the AUTO partition a row needs (NULL for a NULL range value): `AUTO_ID_BASE` plus the
    index of its time unit since 1970 (`auto_range`), or plus a hash of its list values."""
    if partitioning.kind is PartitionKind.LIST:
        values = ", ".join(f"CAST({c} AS STRING)" for c in columns)
        return f"CAST({AUTO_ID_BASE} + pmod(hash({values}), {AUTO_ID_BASE}) AS INT)"
    c, unit = columns[0], partitioning.auto_unit
    days = f"unix_date(CAST({c} AS DATE))"
    index = {
        "DAY": days,
        "HOUR": f"{days} * 24 + hour({c})" if types[0].name == "DATETIME" else f"{days} * 24",
        "WEEK": f"CAST(floor(({days} - 4) / 7) AS INT)",
        "MONTH": f"(year({c}) - 1970) * 12 + month({c}) - 1",
        "QUARTER": f"(year({c}) - 1970) * 4 + quarter({c}) - 1",
        "YEAR": f"year({c}) - 1970",
    }[unit or "DAY"]
    return f"CAST({AUTO_ID_BASE} + {index} AS INT)"


def auto_range(partition_id: int, unit: str, t: DorisType) -> PartitionDef:
    """The AUTO RANGE partition of an id (`auto_id_sql`): one time unit, named as Doris names it
    (`p20240101000000`, the start as yyyyMMddHHmmss)."""
    index = partition_id - AUTO_ID_BASE
    if unit == "HOUR":
        low = _EPOCH + dt.timedelta(hours=index)
        high = low + dt.timedelta(hours=1)
    elif unit == "DAY":
        low = _EPOCH + dt.timedelta(days=index)
        high = low + dt.timedelta(days=1)
    elif unit == "WEEK":
        low = _MONDAY + dt.timedelta(weeks=index)
        high = low + dt.timedelta(weeks=1)
    else:
        months = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}[unit]
        low, high = _month_start(index * months), _month_start((index + 1) * months)

    def shown(moment: dt.datetime) -> str:
        return moment.date().isoformat() if t.name == "DATE" else moment.strftime("%Y-%m-%d %H:%M:%S")

    return PartitionDef(id=partition_id, name=low.strftime("p%Y%m%d%H%M%S"), lower=(shown(low),), upper=(shown(high),))


def _month_start(months: int) -> dt.datetime:
    return dt.datetime(1970 + months // 12, months % 12 + 1, 1)


def auto_list(partition_id: int, values: tuple[str | None, ...], taken: set[str]) -> PartitionDef:
    """The AUTO LIST partition of one tuple of values, named `p` and its letters and digits (its id when that
    name is taken or empty)."""
    name = "p" + "_".join("".join(ch for ch in (v or "null") if ch.isalnum()) for v in values)
    if name.lower() in taken or name == "p":
        name = f"p{partition_id}"
    return PartitionDef(id=partition_id, name=name, values=(values,))


# -- the time unit every partition is one of, for an Iceberg transform --------------------------------
TRANSFORM_UNITS = ("HOUR", "DAY", "MONTH", "YEAR")  # the units Iceberg has transforms for


def aligned_unit(partitioning: Partitioning, types: Sequence[DorisType], hint: str | None = None) -> str | None:
    """The time unit each formal partition of a one-column DATE / DATETIME RANGE partitioning is exactly one of
    (aligned: a day from midnight, a month from the 1st, ...), so Iceberg's `hour` / `day` / `month` / `year`
    transform of the column names each partition; None when there is none. `hint`: the unit of the partitions a
    table will get (AUTO, dynamic), for a table with none yet."""
    if partitioning.kind is not PartitionKind.RANGE or len(types) != 1 or types[0].name not in ("DATE", "DATETIME"):
        return None
    units = [u for u in TRANSFORM_UNITS if not (u == "HOUR" and types[0].name == "DATE")]
    parts = partitioning.formal()
    if not parts:
        return hint if hint in units else None
    for unit in [hint] if hint in units else units:
        if all(_one_unit(p, unit, types[0]) for p in parts):
            return unit
    return None


def _one_unit(p: PartitionDef, unit: str | None, t: DorisType) -> bool:
    if p.lower[0] in (MINVALUE, MAXVALUE) or p.upper[0] in (MINVALUE, MAXVALUE):
        return False
    low = _as_moment(parse_value(p.lower[0], t))
    high = _as_moment(parse_value(p.upper[0], t))
    if unit == "HOUR":
        start, step = low.replace(minute=0, second=0, microsecond=0), dt.timedelta(hours=1)
        return low == start and high == low + step
    if low.time() != dt.time(0):
        return False
    if unit == "DAY":
        return high == low + dt.timedelta(days=1)
    if unit == "MONTH":
        following = _month_start((low.year - 1970) * 12 + low.month)
        return low.day == 1 and high == following
    return low.month == 1 and low.day == 1 and high == low.replace(year=low.year + 1)


def _as_moment(value: Any) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime(value.year, value.month, value.day)


# -- temporary partitions ------------------------------------------------------------------------------
def temporary_partitioning(partitioning: Partitioning) -> Partitioning:
    """The partitioning a load into (or a read of) the table's temporary partitions routes by: its temporary
    partitions as the only partitions (their own ranges: Doris checks overlaps among them alone), nothing AUTO."""
    temps = tuple(p.model_copy(update={"temporary": False}) for p in partitioning.partitions if p.temporary)
    return partitioning.model_copy(update={"partitions": temps, "auto": False, "auto_unit": None})


def replace_with_temporary(
    partitioning: Partitioning,
    names: Sequence[str],
    temp_names: Sequence[str],
    types: Sequence[DorisType],
    *,
    strict_range: bool,
    use_temp_name: bool,
) -> tuple[Partitioning, list[PartitionDef], list[PartitionDef]]:
    """`REPLACE PARTITION (names) WITH TEMPORARY PARTITION (temp_names)`, as Doris's `OlapTable.replaceTempPartitions`:
    the new partitioning, the formal partitions replaced and the temporary ones that take their place (their ids
    kept: their files carry them). With `strict_range` the ranges (values) must cover exactly what the replaced
    partitions did; without, they must not meet the partitions that stay. The new formal partitions keep the
    replaced ones' names when as many replace as are replaced, unless `use_temp_name`.

    Raises: SqlError with Doris's texts.
    """
    formal: list[PartitionDef] = []
    for name in names:
        found = partitioning.find(name)
        if found is None:
            raise SqlError(f"Partition[{name}] does not exist")
        formal.append(found)
    temps: list[PartitionDef] = []
    for name in dict.fromkeys(temp_names):  # a name listed twice counts once, as in Doris
        found = partitioning.find(name, temporary=True)
        if found is None:
            raise SqlError(f"Temp partition[{name}] does not exist")
        temps.append(found)
    replaced_ids = {p.id for p in formal}
    staying = [p for p in partitioning.formal() if p.id not in replaced_ids]
    if partitioning.kind is PartitionKind.RANGE:
        if strict_range:
            _ranges_match(formal, temps, types)
        else:
            for t in sorted_ranges(temps, types):
                low, high = _rank(t.lower, types), _rank(t.upper, types)
                for other in staying:
                    if _rank(other.lower, types) < high and low < _rank(other.upper, types):
                        raise SqlError(f"Range: {_guava_range(t, types)} conflicts with existing range")
    else:
        mine = {_list_key(v, types): v for p in temps for v in p.values}
        if strict_range:
            theirs = {_list_key(v, types): v for p in formal for v in p.values}
            if set(mine) != set(theirs):
                shown = [_list_text(p.values) for p in formal], [_list_text(p.values) for p in temps]
                raise SqlError(f"2 partition key lists are not matched. {shown[0]} vs. {shown[1]}")
        else:
            for other in staying:
                for value in other.values:
                    if _list_key(value, types) in mine:
                        raise SqlError(
                            f"The partition key[({', '.join(v or 'NULL' for v in value)})] in partition item"
                            f"[{other.name}] is conflict"
                        )
    rename = not use_temp_name and len(formal) == len(temps)
    promoted = [
        t.model_copy(update={"temporary": False, **({"name": formal[i].name} if rename else {})})
        for i, t in enumerate(temps)
    ]
    temp_ids = {t.id for t in temps}
    kept = [p for p in partitioning.partitions if p.id not in replaced_ids and p.id not in temp_ids]
    return partitioning.model_copy(update={"partitions": (*kept, *promoted)}), formal, promoted


def _ranges_match(formal: list[PartitionDef], temps: list[PartitionDef], types: Sequence[DorisType]) -> None:
    """Doris's `RangeUtils.checkPartitionItemListsMatch`: both lists cover the same values, split anywhere."""
    ones = [(p.lower, p.upper) for p in sorted(formal, key=lambda p: _rank(p.lower, types))]
    twos = [(p.lower, p.upper) for p in sorted(temps, key=lambda p: _rank(p.lower, types))]
    i = j = 0
    one, two = ones[0], twos[0]
    while True:
        if _rank(one[0], types) != _rank(two[0], types):
            raise SqlError(
                f"2 range lists are not stricly matched. {_key_text(one[0], types)} vs. {_key_text(two[0], types)}"
            )
        upper_one, upper_two = _rank(one[1], types), _rank(two[1], types)
        if upper_one == upper_two:
            i, j = i + 1, j + 1
            if i == len(ones) or j == len(twos):
                break
            one, two = ones[i], twos[j]
        elif upper_one > upper_two:
            j += 1
            if j == len(twos):
                break
            one, two = (two[1], one[1]), twos[j]
        else:
            i += 1
            if i == len(ones):
                break
            one, two = ones[i], (one[1], two[1])
    if i < len(ones) or j < len(twos):
        shown_one = ", ".join(_guava_bounds(low, high, types) for low, high in ones)
        shown_two = ", ".join(_guava_bounds(low, high, types) for low, high in twos)
        raise SqlError(f"2 range lists are not stricly matched. [{shown_one}] vs. [{shown_two}]")


def _key_text(bound: Sequence[str], types: Sequence[DorisType]) -> str:
    """A bound as Doris's `PartitionKey.toString` prints it: `types: [INT]; keys: [10]; `."""
    return describe_bound(bound, types)


def _guava_bounds(lower: Sequence[str], upper: Sequence[str], types: Sequence[DorisType]) -> str:
    return f"[{describe_bound(lower, types)}..{describe_bound(upper, types)})"


def _guava_range(p: PartitionDef, types: Sequence[DorisType]) -> str:
    return _guava_bounds(p.lower, p.upper, types)


def _list_text(values: Sequence[Sequence[str | None]]) -> str:
    return "[" + ", ".join("(" + ", ".join(v or "NULL" for v in value) + ")" for value in values) + "]"
