"""The partitions a query reads: those it names (`FROM t PARTITION (p1, p2)`), and of those the ones its filter
can keep (partition pruning).

Pruning reads the WHERE of the SELECT that reads the table alone (no join), its AND-ed terms on the first partition
column: `=`, `IN`, `<`, `<=`, `>`, `>=` and `BETWEEN` against literals that are values of the column's type
(integers for integer columns; date or datetime text for DATE / DATETIME columns; strings for the string columns
of LIST partitions). A RANGE partition is kept when
its range meets the interval the terms allow, a LIST partition when one of its values passes them. A NULL sorts
below every value in a RANGE partition, and no comparison keeps it: pruning never drops a partition whose rows the
filter keeps. Anything else keeps every partition.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlglot
from sqlglot import TokenType, exp

from sql.bucket_filter import table_filter
from tables.catalog import Catalog, TableHandle
from tables.errors import SqlError
from tables.model import TableDef
from tables.partitions import MAXVALUE, MINVALUE, PartitionDef, PartitionKind, parse_value

# `TEMPORARY PARTITION (tp, ...)` reaches sqlglot (which reads no such clause) as `PARTITION (<mark>, tp, ...)`: no
# partition name starts with `_` (Doris's rule), so the mark cannot be a name
TEMPORARY_MARK = "__DORIS_TEMPORARY__"


def mark_temporary_partitions(text: str) -> str:
    """The statement with each `TEMPORARY PARTITION[S] (names)` (or `... name`) rewritten to the marked
    `PARTITION (...)` that `temporary_names` reads back; strings and comments untouched."""
    if "TEMPORARY" not in text.upper():
        return text
    try:
        tokens = sqlglot.tokenize(text, dialect="doris")
    except sqlglot.errors.TokenError:
        return text
    out: list[str] = []
    last = 0
    for i, tok in enumerate(tokens[:-2]):
        if tok.text.upper() != "TEMPORARY" or tokens[i + 1].text.upper() not in ("PARTITION", "PARTITIONS"):
            continue
        following = tokens[i + 2]
        out.append(text[last : tok.start])
        if following.token_type == TokenType.L_PAREN:
            out.append(f"PARTITION ({TEMPORARY_MARK}, ")
        else:
            out.append(f"PARTITION ({TEMPORARY_MARK}, {text[following.start : following.end + 1]})")
        last = following.end + 1
    out.append(text[last:])
    return "".join(out)


def temporary_names(clause: exp.Expression | None) -> bool:
    """Whether a PARTITION clause named temporary partitions (`mark_temporary_partitions`); takes the mark off."""
    if not isinstance(clause, exp.Partition) or not clause.expressions:
        return False
    if clause.expressions[0].name != TEMPORARY_MARK:
        return False
    clause.set("expressions", clause.expressions[1:])
    return True


def temporary_target(catalog: Catalog, handle: TableHandle, table: exp.Table) -> TableHandle:
    """The table a reference reads: the table, or for `FROM t TEMPORARY PARTITION (tp)` its companion, which holds
    the temporary partitions (`tables.catalog.Catalog.temporary`).

    Raises: SqlError with Doris's text for temporary partitions of a table that has none.
    """
    clause = table.args.get("partition")
    if not temporary_names(clause):
        return handle
    assert isinstance(clause, exp.Partition)
    companion = catalog.temporary(handle) if handle.definition.partitioning is not None else None
    if companion is None:
        name = clause.expressions[0].name if clause.expressions else ""
        raise SqlError(f"Unknown partition '{name}' in table '{handle.definition.name}'")
    return companion


def query_partitions(table: exp.Table, definition: TableDef) -> frozenset[int] | None:
    """The ids of the partitions the query may read rows of, None for every one (an unpartitioned table's too).
    Takes the `PARTITION (...)` clause off the table reference.

    Raises: SqlError with Doris's text for a partition the table does not have.
    """
    clause = table.args.get("partition")
    named: list[PartitionDef] | None = None
    if isinstance(clause, exp.Partition):
        table.set("partition", None)
        names = [e.name for e in clause.expressions]
        if definition.partitioning is None:
            for name in names:
                if name.lower() != definition.name.lower():
                    raise SqlError(f"Unknown partition '{name}' in table '{definition.name}'")
            return None
        named = []
        for name in names:
            found = definition.partitioning.find(name)
            if found is None:
                raise SqlError(f"Unknown partition '{name}' in table '{definition.name}'")
            named.append(found)
    partitioning = definition.partitioning
    if partitioning is None:
        return None
    candidates = named if named is not None else list(partitioning.formal())
    bounds = _bounds(table, definition)
    if bounds is not None:
        candidates = [p for p in candidates if _may_hold(p, partitioning.kind, bounds, definition)]
    if named is None and len(candidates) == len(partitioning.formal()):
        return None
    return frozenset(p.id for p in candidates)


def named_partitions(definition: TableDef, names: list[str] | tuple[str, ...]) -> tuple[PartitionDef, ...]:
    """The partitions of these names (a statement's PARTITION clause); () for an unpartitioned table named as
    itself, its one partition.

    Raises: SqlError with Doris's text for a partition the table does not have.
    """
    if definition.partitioning is None:
        for name in names:
            if name.lower() != definition.name.lower():
                raise SqlError(f"Partition does not exist: {name}")
        return ()
    return tuple(definition.partitioning.named(names))


class _Interval:
    """Values of the first partition column the filter allows: `[low, high]` with open ends, and a value set."""

    def __init__(self) -> None:
        self.low: Any = None
        self.low_inclusive = True
        self.high: Any = None
        self.high_inclusive = True
        self.values: set[Any] | None = None

    def raise_low(self, value: Any, inclusive: bool) -> None:
        if self.low is None or value > self.low or (value == self.low and not inclusive):
            self.low, self.low_inclusive = value, inclusive

    def lower_high(self, value: Any, inclusive: bool) -> None:
        if self.high is None or value < self.high or (value == self.high and not inclusive):
            self.high, self.high_inclusive = value, inclusive

    def keep(self, values: set[Any]) -> None:
        self.values = values if self.values is None else self.values & values

    def allows(self, value: Any) -> bool:
        if self.values is not None and value not in self.values:
            return False
        if self.low is not None and (value < self.low or (value == self.low and not self.low_inclusive)):
            return False
        return not (self.high is not None and (value > self.high or (value == self.high and not self.high_inclusive)))


def _bounds(table: exp.Table, definition: TableDef) -> _Interval | None:
    """What the filter allows of the first partition column, None when it says nothing of it."""
    assert definition.partitioning is not None
    found = table_filter(table)
    if found is None:
        return None
    condition, names = found
    column = definition.partitioning.columns[0]
    kind = definition.partition_types()[0]
    interval = _Interval()
    said = False
    for term in list(condition.flatten()) if isinstance(condition, exp.And) else [condition]:
        while isinstance(term, exp.Paren):
            term = term.this
        said = isinstance(term, exp.Expression) and _apply(term, interval, column.lower(), names, kind) or said
    return interval if said else None


_FLIP = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE, exp.EQ: exp.EQ}


def _apply(term: exp.Expression, interval: _Interval, column: str, names: set[str], kind: Any) -> bool:
    """Narrow `interval` by one term on the column; False when the term is not one that can."""
    if isinstance(term, exp.Between) and _is_column(term.this, column, names):
        low, high = _value(term.args.get("low"), kind), _value(term.args.get("high"), kind)
        if low is None or high is None:
            return False
        interval.raise_low(low, True)
        interval.lower_high(high, True)
        return True
    if isinstance(term, exp.In) and not term.args.get("query") and _is_column(term.this, column, names):
        values = [_value(v, kind) for v in term.expressions]
        if not values or any(v is None for v in values):
            return False
        interval.keep(set(values))
        return True
    if not isinstance(term, tuple(_FLIP)):
        return False
    assert isinstance(term, exp.Binary)
    op: type[exp.Binary] = type(term)
    left, right = term.this, term.expression
    if not _is_column(left, column, names):
        left, right, op = right, left, _FLIP[op]
        if not _is_column(left, column, names):
            return False
    value = _value(right, kind)
    if value is None:
        return False
    if op is exp.EQ:
        interval.keep({value})
    elif op in (exp.GT, exp.GTE):
        interval.raise_low(value, op is exp.GTE)
    else:
        interval.lower_high(value, op is exp.LTE)
    return True


def _is_column(node: exp.Expression | None, column: str, names: set[str]) -> bool:
    if not isinstance(node, exp.Column) or node.args.get("db") or node.args.get("catalog"):
        return False
    return node.name.lower() == column and (not node.table or node.table.lower() in names)


def _value(node: exp.Expression | None, kind: Any) -> Any:
    """A literal as a value of the column's type, None when it is not one (pruning then says nothing)."""
    negative = isinstance(node, exp.Neg)
    if negative:
        assert node is not None
        node = node.this
    if not isinstance(node, exp.Literal):
        return None
    text = str(node.this)
    if kind.is_integer:
        if node.is_string or not text.isdigit():
            return None
        return -int(text) if negative else int(text)
    if kind.is_string and node.is_string and not negative:  # LIST partitions of a string column
        return text
    if kind.name in ("DATE", "DATETIME") and node.is_string and not negative:
        try:
            value = parse_value(text, kind)
        except SqlError:
            return None
        # a DATETIME column compared with a date's text compares with its midnight, as Spark casts it
        return value if kind.name == "DATE" or isinstance(value, dt.datetime) else None
    return None


def _may_hold(p: PartitionDef, kind: PartitionKind, interval: _Interval, definition: TableDef) -> bool:
    types = definition.partition_types()
    if kind is PartitionKind.LIST:
        return any(v[0] is not None and interval.allows(parse_value(v[0], types[0])) for v in p.values)
    lower, upper = p.lower[0], p.upper[0]
    low = None if lower == MINVALUE else parse_value(lower, types[0])
    high = None if upper in (MAXVALUE, MINVALUE) else parse_value(upper, types[0])
    # the range ends before `high` unless later columns extend it: with more columns, a first column of exactly
    # `high` may still sit in the range
    exclusive = len(p.upper) == 1

    def inside(v: Any) -> bool:
        return (low is None or v >= low) and (high is None or v < high or (not exclusive and v == high))

    if interval.values is not None:
        return any(inside(v) for v in interval.values if interval.allows(v))
    if interval.high is not None and low is not None:
        if interval.high < low or (interval.high == low and not interval.high_inclusive):
            return False
    return not (
        interval.low is not None and high is not None and (interval.low > high or (exclusive and interval.low == high))
    )
