"""`SHOW CREATE TABLE`: a CREATE TABLE statement that recreates the table as it is now."""

from __future__ import annotations

from tables.model import KeysType, TableDef
from tables.partitions import MAXVALUE, MINVALUE, PartitionKind, least
from tables.types import DorisType

_KEYS = {KeysType.UNIQUE: "UNIQUE KEY", KeysType.DUPLICATE: "DUPLICATE KEY", KeysType.AGGREGATE: "AGGREGATE KEY"}
# properties the definition's own fields decide; they are printed from the fields
_DERIVED = (
    "enable_unique_key_merge_on_write",
    "function_column.sequence_type",
    "function_column.sequence_col",
    "replace_version_column",
    "enable_unique_key_replace_if_not_null",
    "replace_if_not_null",
)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _bound(values: tuple[str, ...], types: tuple[DorisType, ...]) -> str:
    shown = [
        v if v == MAXVALUE else _quote(least(t) if v == MINVALUE else v) for v, t in zip(values, types, strict=True)
    ]
    return f"({', '.join(shown)})"


def partition_clause(table: TableDef) -> str:
    """`PARTITION BY RANGE|LIST (...) (...)` as Doris prints it: every range in the fixed `[lower, upper)` form."""
    partitioning = table.partitioning
    assert partitioning is not None
    types = table.partition_types()
    items = []
    for p in partitioning.formal():
        if partitioning.kind is PartitionKind.RANGE:
            items.append(f"PARTITION {p.name} VALUES [{_bound(p.lower, types)}, {_bound(p.upper, types)})")
        elif len(partitioning.columns) == 1:
            items.append(f"PARTITION {p.name} VALUES IN ({', '.join(_value(v[0]) for v in p.values)})")
        else:
            tuples = ", ".join("(" + ", ".join(_value(x) for x in v) + ")" for v in p.values)
            items.append(f"PARTITION {p.name} VALUES IN ({tuples})")
    columns = ", ".join(f"`{c}`" for c in partitioning.columns)
    if partitioning.auto and partitioning.kind is PartitionKind.RANGE:
        head = f"AUTO PARTITION BY RANGE (date_trunc({columns}, '{(partitioning.auto_unit or 'day').lower()}'))"
    else:
        head = f"{'AUTO ' if partitioning.auto else ''}PARTITION BY {partitioning.kind.value}({columns})"
    return head + "\n(" + ",\n".join(items) + ")"


def _value(value: str | None) -> str:
    return "NULL" if value is None else _quote(value)


def show_create_table(table: TableDef) -> str:
    lines = []
    for c in table.columns:
        parts = [f"`{c.name}`", c.type.sql()]
        if table.is_aggregate and not c.is_key and c.aggregation:
            parts.append(c.aggregation)
        parts.append("NULL" if c.nullable else "NOT NULL")
        if c.has_default:
            if c.default is None:
                parts.append("DEFAULT NULL")
            elif c.default_is_current_timestamp:
                parts.append("DEFAULT CURRENT_TIMESTAMP")
            else:
                parts.append(f"DEFAULT {_quote(c.default)}")
        if c.comment:
            parts.append(f"COMMENT {_quote(c.comment)}")
        lines.append("  " + " ".join(parts))
    keys = ", ".join(f"`{k}`" for k in table.key_columns)
    out = [f"CREATE TABLE `{table.name}` (", ",\n".join(lines), ") ENGINE=OLAP", f"{_KEYS[table.keys_type]}({keys})"]
    if table.comment:
        out.append(f"COMMENT {_quote(table.comment)}")
    if table.partitioning is not None:
        out.append(partition_clause(table))
    if table.bucket_columns:
        out.append(f"DISTRIBUTED BY HASH({', '.join(f'`{b}`' for b in table.bucket_columns)}) BUCKETS {table.buckets}")
    else:
        out.append(f"DISTRIBUTED BY RANDOM BUCKETS {table.buckets}")
    props = {k: v for k, v in table.properties.items() if k not in _DERIVED and not k.startswith("sequence_mapping.")}
    if table.is_unique:
        props["enable_unique_key_merge_on_write"] = str(table.merge_on_write).lower()
    if table.sequence_col:
        props["function_column.sequence_col"] = table.sequence_col
    elif table.sequence_type is not None:
        props["function_column.sequence_type"] = table.sequence_type.sql()
    if table.replace_if_not_null:
        props["enable_unique_key_replace_if_not_null"] = "true"
    if table.replace_version_column:
        props["replace_version_column"] = table.replace_version_column
    for seq, values in table.sequence_mapping.items():
        props[f"sequence_mapping.{seq}"] = ",".join(values)
    if props:
        body = ",\n".join(f"{_quote(k)} = {_quote(v)}" for k, v in props.items())
        out.append(f"PROPERTIES (\n{body}\n)")
    return "\n".join(out) + ";"
