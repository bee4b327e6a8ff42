"""INSERT INTO t [(cols)] VALUES ... | SELECT ...: through the same load pipeline as a stream load."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from sqlglot import exp

from tables.errors import SqlError
from tables.load_spec import ColumnMapping, LoadRequest

Evaluate = Callable[[exp.Expression], "str | None"]


def literal_text(node: exp.Expression, evaluate: Evaluate) -> str | None:
    """A VALUES item as the text a load would carry (None for NULL); other expressions go to `evaluate`,
    which runs them as a checked, bound query (the same rules as a SELECT)."""
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return "1" if node.this else "0"
    if isinstance(node, exp.Literal):
        return str(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return "-" + str(node.this.this)
    if isinstance(node, exp.Paren):
        return literal_text(node.this, evaluate)
    return evaluate(node)


def insert_target(tree: exp.Insert) -> tuple[exp.Table, list[str] | None]:
    target = tree.this
    if isinstance(target, exp.Schema):
        table = target.this
        cols = [c.name for c in target.expressions]
        return table, cols
    if isinstance(target, exp.Table):
        return target, None
    raise SqlError("INSERT target must be a table")


def values_rows(tree: exp.Insert, evaluate: Evaluate) -> list[list[str | None]] | None:
    source = tree.expression
    if not isinstance(source, exp.Values):
        return None
    rows: list[list[str | None]] = []
    for tup in source.expressions:
        items = tup.expressions if isinstance(tup, exp.Tuple) else [tup]
        rows.append([literal_text(item, evaluate) for item in items])
    return rows


def insert_request(*, db: str, table: str, columns: list[str] | None, strict: bool) -> LoadRequest:
    """The load an INSERT asks for: its column list maps the values, strictness from the session."""
    return LoadRequest(
        db=db,
        table=table,
        label=f"insert_{uuid.uuid4().hex}",
        columns=tuple(ColumnMapping(name=c) for c in columns) if columns is not None else None,
        strict_mode=strict,
        max_filter_ratio=0.0 if strict else 1.0,
        source="insert",
    )
