"""DELETE FROM: delete markers on unique tables, stored delete predicates on duplicate and aggregate tables.

Unique tables: the current rows that match are loaded again with the delete sign set, each carrying its
current sequence, so a delete is an ordinary sequenced row (contract §6; Doris does the same on merge-on-write
tables; on merge-on-read tables Doris stores a predicate instead, we keep the marker rule there too).
Duplicate and aggregate tables: the predicate is stored with the DELETE's version and applied, at read and
compaction, to the rows loaded before it (Doris's delete handler); aggregate tables take key columns only.
Predicates are conjunctions of `column op literal`, `column [NOT] IN (literals)` and `column IS [NOT] NULL`.
"""

from __future__ import annotations

import datetime as dt
import decimal

from sqlglot import exp

from spark_runner.sqltext import convert_sql, lit, q
from tables.errors import SqlError
from tables.model import DeletePredicate, TableDef

_OPS: dict[type[exp.Expr], tuple[str, str]] = {
    exp.EQ: ("=", "EQ"),
    exp.NEQ: ("!=", "NE"),
    exp.GT: (">", "GT"),
    exp.GTE: (">=", "GE"),
    exp.LT: ("<", "LT"),
    exp.LTE: ("<=", "LE"),
}
_WHERE_FORMS = "Where clause only supports compound predicate, binary predicate, is_null predicate or in predicate."


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    node = node.unnest()
    if isinstance(node, exp.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _literal(node: exp.Expr, column: str) -> str:
    node = node.unnest()
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return "-" + node.this.name
    if isinstance(node, exp.Literal):
        return node.name
    raise SqlError(f"Right expr of binary predicate should be value, column: {column}")


def _check_value(table: TableDef, column: str, value: str) -> None:
    """Raises: SqlError when the literal does not convert to the column type (Doris checks it up front)."""
    col = table.column(column)
    assert col is not None
    t = col.type
    try:
        if t.is_integer:
            int(value)
        elif t.name in ("DECIMAL", "FLOAT", "DOUBLE"):
            decimal.Decimal(value)
        elif t.name == "DATE":
            dt.date.fromisoformat(value)
        elif t.name == "DATETIME":
            dt.datetime.fromisoformat(value)
    except (ValueError, decimal.InvalidOperation):
        raise SqlError(f"Invalid column value[{value}] for column {col.name}") from None


def delete_predicate(table: TableDef, where: exp.Expr, created: str, version: int) -> DeletePredicate:
    """The stored predicate of a DELETE on a duplicate or aggregate table.

    Raises:
        SqlError: with Doris's message for a predicate form or column it refuses.
    """
    conditions: list[str] = []
    shown: list[str] = []
    columns: list[str] = []
    for node in _conjuncts(where):
        negated = False
        if isinstance(node, exp.Not):
            negated, node = True, node.this.unnest()
        target = node.this.unnest() if isinstance(node, (exp.In, exp.Is, *_OPS)) else None
        if not isinstance(target, exp.Column):
            raise SqlError(_WHERE_FORMS)
        col = table.column(target.name)
        if col is None or col.hidden:
            raise SqlError(f"Unknown column '{target.name}' in '{table.name}'")
        if table.is_aggregate and not col.is_key:
            raise SqlError(
                "delete predicate on value column only supports Unique table with merge-on-write enabled and "
                f"Duplicate table, but Table[{table.name}] is an Aggregate table."
            )
        if col.type.name in ("FLOAT", "DOUBLE"):
            raise SqlError(f"Column[{col.name}] type is float or double.")
        name = q(col.name)
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                raise SqlError(_WHERE_FORMS)
            conditions.append(f"{name} IS {'NOT ' if negated else ''}NULL")
            shown.append(f"{col.name} IS {'NOT ' if negated else ''}NULL")
        elif isinstance(node, exp.In):
            values = [_literal(v, col.name) for v in node.expressions]
            if not values or node.args.get("query") is not None:
                raise SqlError(_WHERE_FORMS)
            for v in values:
                _check_value(table, col.name, v)
            typed = ", ".join(convert_sql(lit(v), col.type) for v in values)
            conditions.append(f"{name} {'NOT ' if negated else ''}IN ({typed})")
            shown.append(f"{col.name} {'NOT ' if negated else ''}IN (" + ", ".join(f'"{v}"' for v in values) + ")")
        else:
            if negated:
                raise SqlError(_WHERE_FORMS)
            sql_op, doris_op = _OPS[type(node)]
            value = _literal(node.expression, col.name)
            _check_value(table, col.name, value)
            conditions.append(f"{name} {sql_op} {convert_sql(lit(value), col.type)}")
            shown.append(f'{col.name} {doris_op} "{value}"')
        columns.append(col.name)
    return DeletePredicate(
        version=version,
        condition=" AND ".join(f"({c})" for c in conditions),
        display=" AND ".join(shown),
        columns=tuple(dict.fromkeys(columns)),
        create_time=created,
    )
