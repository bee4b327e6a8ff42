"""The merge: one pure DataFrame function for loads, reads and compaction (`merge_rows`).

Unique tables: for each key the winner is the row with the largest ordering tuple. Loads order by
(sequence is not NULL, sequence, position in the payload); reads and compaction by
(sequence is not NULL, sequence, version). NULL sequence is below every value and equal sequences
go to the later row or load: Doris's rule (contract §6.2), deterministic inside one load.
With sequence mapping each column group is merged the same way by its own sequence column.

Aggregate tables: per column SUM / MAX / MIN (NULL inputs ignored), REPLACE (the latest row,
or the row with the largest `replace_version_column` value, ties to the later) and
REPLACE_IF_NOT_NULL (the latest non-NULL value). Every aggregation is associative, so merging a
load's rows first and the rowsets later (or compacting any contiguous run of rowsets) gives the
same answer as merging everything at once.
Orderings are Spark SQL expressions (text), so building the step costs a handful of JVM calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_runner.columns import select_expr
from spark_runner.sqltext import q
from tables.model import TableDef

if TYPE_CHECKING:
    import pyarrow as pa


def sequence_order(sequence: str | None, tie_breaker: str) -> list[str]:
    """The ordering tuple: NULL sequence lowest, then the sequence, then the tie-breaker."""
    if sequence is None:
        return [tie_breaker]
    return [f"({sequence}) IS NOT NULL", sequence, tie_breaker]


def beats(table: TableDef, later: str, earlier: str) -> str:
    """SQL: a row with sequence `later` from a later version beats one with sequence `earlier` (`sequence_order`:
    NULL lowest, a tie to the later row); without a sequence column the later row always wins. Merge-on-write
    loads decide with this what they supersede."""
    if not table.has_sequence:
        return "true"
    return f"NOT ({earlier} IS NOT NULL AND ({later} IS NULL OR {later} < {earlier}))"


def later_wins(table: TableDef, later: Any, earlier: Any) -> bool:
    """`beats` on Python values: the commit-time re-check of a few rows runs in the server's process."""
    return not table.has_sequence or not (earlier is not None and (later is None or later < earlier))


def order_key(sequence: Any, version: int) -> tuple[bool, Any, int]:
    """`sequence_order` on Python values, a sort key: NULL sequence lowest, then the sequence, then the version
    (the later load wins a tie)."""
    return sequence is not None, sequence, version


def latest_per_key(df: DataFrame, keys: Sequence[str], order: Sequence[str]) -> DataFrame:
    """Keep, for each key, the one row whose `order` tuple is largest (a hash aggregate, no sort)."""
    columns = df.columns
    others = [c for c in columns if c not in keys]
    if not others:
        return df.selectExpr(*[q(k) for k in keys]).distinct().selectExpr(*[q(c) for c in columns])
    value = "struct(" + ", ".join(q(c) for c in others) + ")"
    ordering = "struct(" + ", ".join(f"{o} AS o{i}" for i, o in enumerate(order)) + ")"
    merged = df.groupBy(*[F.col(q(k)) for k in keys]).agg(F.expr(f"max_by({value}, {ordering})").alias("__w"))
    fields = {c: f"__w.{q(c)} AS {q(c)}" for c in others}
    return select_expr(merged, [fields.get(c, q(c)) for c in columns])


def latest_rows(rows: pa.Table, table: TableDef, tie: str, *, sequence: str | None = None) -> pa.Table | None:
    """`merge_rows` on rows the server holds (a small load's, computed by Spark's optimizer without a job): for
    each key the row with the largest (sequence is not NULL, sequence, `tie`), as `latest_per_key` keeps it, and
    a duplicate table's rows as they are; either way in key order (NULL keys first, one key as Spark groups
    them). None for a merge that is not a choice of rows (aggregate tables, sequence mapping) or a column that
    pyarrow might not order as Spark does (`_ordered`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.sequence_mapping or not (table.is_unique or table.is_duplicate):
        return None
    keys = list(table.key_columns)
    sequence = sequence if table.is_unique else None
    compared = [*keys, tie, *([sequence] if sequence is not None else [])]
    if not all(_ordered(rows.schema.field(c).type) for c in compared):
        return None
    present = "__sl_present"
    ranked = rows
    order = [(k, "ascending") for k in keys]
    if sequence is not None:
        ranked = rows.append_column(present, pc.is_valid(rows.column(sequence)))
        order += [(present, "ascending"), (sequence, "ascending")]
    order.append((tie, "ascending"))
    ranked = ranked.take(pc.sort_indices(ranked, sort_keys=order, null_placement="at_start"))
    if sequence is not None:
        ranked = ranked.drop_columns([present])
    if table.is_duplicate or ranked.num_rows < 2:
        return ranked
    same = None  # row i and row i + 1 have one key (NULL equal to NULL, as in a GROUP BY)
    for k in keys:
        column = ranked.column(k)
        before, after = column.slice(0, len(column) - 1), column.slice(1)
        equal = pc.or_(pc.and_(pc.is_null(before), pc.is_null(after)), pc.fill_null(pc.equal(before, after), False))
        same = equal if same is None else pc.and_(same, equal)
    last = pa.concat_arrays([pc.invert(same).combine_chunks(), pa.array([True])])
    return ranked.filter(last)


def _ordered(data_type: pa.DataType) -> bool:
    """Types whose order (and equality) in pyarrow is Spark's: integers, decimals, dates, timestamps, booleans,
    strings (by UTF-8 bytes)."""
    import pyarrow.types as pt

    return any(
        check(data_type)
        for check in (pt.is_integer, pt.is_decimal, pt.is_date, pt.is_timestamp, pt.is_boolean, pt.is_string)
    )


def merge_rows(df: DataFrame, table: TableDef, tie: str, *, sequence: str | None = None) -> DataFrame:
    """One row per key under the table's model; duplicate tables are returned unchanged.

    `tie` orders rows of one key (payload position in a load, the version column in storage);
    `sequence` is the unique table's sequence expression, if it has one.
    """
    keys = list(table.key_columns)
    if table.is_duplicate:
        return df
    if table.is_unique and not table.sequence_mapping:
        return latest_per_key(df, keys, sequence_order(sequence, tie))
    columns = df.columns
    present = {c.lower(): c for c in columns}
    exprs: dict[str, str] = {}
    grouped: list[tuple[str, list[str]]] = []
    if table.is_unique:
        for i, (seq, values) in enumerate(table.sequence_mapping.items()):
            members = [present[n.lower()] for n in (*values, seq) if n.lower() in present]
            if not members:
                continue
            s = q(present[seq.lower()]) if seq.lower() in present else "NULL"
            value = "struct(" + ", ".join(q(c) for c in members) + ")"
            ordering = f"struct(({s}) IS NOT NULL AS o0, {s} AS o1, {tie} AS o2)"
            grouped.append((f"__g{i}", members))
            exprs[f"__g{i}"] = f"max_by({value}, {ordering})"
    else:
        types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
        replace_order = tie
        if table.replace_version_column is not None and table.replace_version_column.lower() in present:
            v = q(present[table.replace_version_column.lower()])
            replace_order = f"struct(({v}) IS NOT NULL AS o0, {v} AS o1, {tie} AS o2)"
        for col in table.value_columns():
            name = present.get(col.name.lower())
            if name is None:
                continue
            c = q(name)
            aggregation = col.aggregation or "REPLACE"
            if aggregation == "SUM":
                exprs[name] = f"CAST(sum({c}) AS {types[name]})"
            elif aggregation in ("MAX", "MIN"):
                exprs[name] = f"{aggregation.lower()}({c})"
            elif aggregation == "REPLACE_IF_NOT_NULL":
                # the latest non-NULL value; the version column orders REPLACE only (a merged row carries
                # the largest version value, which need not be the one its non-NULL value came with)
                exprs[name] = f"max_by({c}, IF({c} IS NOT NULL, {tie}, NULL))"
            else:
                exprs[name] = f"max_by({c}, {replace_order})"
    in_group = {m for _, members in grouped for m in members}
    for name in columns:
        if name not in keys and name not in exprs and name not in in_group:
            exprs[name] = f"max_by({q(name)}, {tie})"  # hidden and load-internal columns: the latest row
    merged = df.groupBy(*[F.col(q(k)) for k in keys]).agg(*[F.expr(e).alias(alias) for alias, e in exprs.items()])
    picked = {m: f"{alias}.{q(m)} AS {q(m)}" for alias, members in grouped for m in members}
    return select_expr(merged, [picked.get(c, q(c)) for c in columns])
