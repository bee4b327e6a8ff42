"""The sequenced merge: one pure DataFrame function for loads, reads and compaction.

For each key the winner is the row with the largest ordering tuple. Loads order by
(sequence is not NULL, sequence, position in the payload); reads and compaction by
(sequence is not NULL, sequence, version). NULL sequence is below every value and equal sequences
go to the later row or load: Doris's rule (contract §6.2), deterministic inside one load.
Orderings are Spark SQL expressions (text), so building the step costs a handful of JVM calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_runner.sqltext import q


def sequence_order(sequence: str | None, tie_breaker: str) -> list[str]:
    """The ordering tuple: NULL sequence lowest, then the sequence, then the tie-breaker."""
    if sequence is None:
        return [tie_breaker]
    return [f"({sequence}) IS NOT NULL", sequence, tie_breaker]


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
    return merged.selectExpr(*[fields.get(c, q(c)) for c in columns])
