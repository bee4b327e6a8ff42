"""The values a query's filter pins a table's key columns to, so that its view reads only the files that may hold
them.

A point lookup (`SELECT ... FROM t WHERE k = 17`) of a bucketed table (`TableDef.bucketed`) needs the files of one
bucket, and of those only the ones whose Iceberg bounds of `k` hold 17. A column counts when the filter pins it with
`=` or `IN` to literals of the column's own kind (integer literals for integer columns, string literals for
VARCHAR / STRING columns: a comparison that converts types could equal stored values of other buckets), in the
WHERE of the SELECT that reads the table alone (no join). Anything else reads every file.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from tables.model import TableDef

# values of one column beyond which the filter prunes nothing: each is compared with every file's bounds
MAX_VALUES = 1000


def pinned_values(table: exp.Table, definition: TableDef) -> dict[str, list[Any]] | None:
    """The values of key columns rows of `table` must hold to pass its query's filter (by the table's own column
    names), or None when the filter pins none."""
    sole = table_filter(table)
    if sole is None:
        return None
    condition, names = sole
    # key columns only: every version of a row has its key's values, so a file whose bounds exclude them holds no
    # version of a row the query keeps (a value column's bounds say nothing of a row's later versions)
    keys = {c.name.lower(): c for c in definition.columns if c.is_key}
    pinned: dict[str, list[Any]] = {}
    terms = list(condition.flatten()) if isinstance(condition, exp.And) else [condition]
    for term in terms:
        found = _pinned_values(term, names) if isinstance(term, exp.Expression) else None
        if found is None or found[0] not in keys or len(found[1]) > MAX_VALUES:
            continue
        column = keys[found[0]]
        if all(_same_kind(column.type.is_integer, column.type.name, v) for v in found[1]):
            pinned[column.name] = sorted(set(found[1]), key=repr)
    return pinned or None


def table_filter(table: exp.Table) -> tuple[exp.Expression, set[str]] | None:
    """The WHERE condition of the SELECT that reads `table` alone (no join), and the names its columns may be
    qualified by; None for any other query."""
    source = table.parent
    select = source.parent if isinstance(source, exp.From) else None
    if not isinstance(select, exp.Select) or select.args.get("joins") or select.args.get("laterals"):
        return None
    where = select.args.get("where")
    if not isinstance(where, exp.Where):
        return None
    return where.this, {table.name.lower(), table.alias_or_name.lower()}


def _pinned_values(term: exp.Expression, names: set[str]) -> tuple[str, list[Any]] | None:
    """`col = literal` / `literal = col` / `col IN (literals)` on this table's column: its name and the values."""
    if isinstance(term, exp.Paren):
        return _pinned_values(term.this, names)
    if isinstance(term, exp.EQ):
        left, right = term.this, term.expression
        if isinstance(right, exp.Column):
            left, right = right, left
        value = _literal(right)
        column = _own_column(left, names)
        return (column, [value]) if column is not None and value is not None else None
    if isinstance(term, exp.In) and not term.args.get("query") and not term.args.get("unnest"):
        column = _own_column(term.this, names)
        values = [_literal(v) for v in term.expressions]
        if column is None or not values or any(v is None for v in values):
            return None
        return column, values
    return None


def _own_column(node: exp.Expression, names: set[str]) -> str | None:
    if not isinstance(node, exp.Column) or node.args.get("db") or node.args.get("catalog"):
        return None
    if node.table and node.table.lower() not in names:
        return None
    return node.name.lower()


def _literal(node: exp.Expression) -> int | str | None:
    """An integer or string literal's value (a negated integer too); None for anything else."""
    negative = isinstance(node, exp.Neg)
    if negative:
        node = node.this
    if not isinstance(node, exp.Literal):
        return None
    if node.is_string:
        return None if negative else str(node.this)
    text = str(node.this)
    if not text.isdigit():
        return None
    return -int(text) if negative else int(text)


def _same_kind(is_integer: bool, type_name: str, value: int | str) -> bool:
    if is_integer:
        return isinstance(value, int)
    return type_name in ("VARCHAR", "STRING") and isinstance(value, str)
