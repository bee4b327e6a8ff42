"""The sequenced merge: one pure DataFrame function for loads, reads and compaction.

For each key the winner is the row with the largest ordering tuple. Loads order by
(sequence is not NULL, sequence, position in the payload); reads and compaction by
(sequence is not NULL, sequence, version). NULL sequence is below every value and equal sequences
go to the later row or load: Doris's rule (contract §6.2), deterministic inside one load.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_runner.columns import col


def sequence_order(sequence: Column | None, tie_breaker: Column) -> list[Column]:
    """The ordering tuple: NULL sequence lowest, then the sequence, then the tie-breaker."""
    if sequence is None:
        return [tie_breaker]
    return [sequence.isNotNull(), sequence, tie_breaker]


def latest_per_key(df: DataFrame, keys: Sequence[str], order: Sequence[Column]) -> DataFrame:
    """Keep, for each key, the one row whose `order` tuple is largest (a hash aggregate, no sort)."""
    others = [c for c in df.columns if c not in keys]
    if not others:
        return df.select(*[col(k) for k in keys]).distinct().select(*[col(c) for c in df.columns])
    ordering = F.struct(*[o.alias(f"o{i}") for i, o in enumerate(order)])
    winner = F.max_by(F.struct(*[col(c) for c in others]), ordering).alias("__w")
    merged = df.groupBy(*[col(k) for k in keys]).agg(winner)
    return merged.select(*[col(k) for k in keys], *[F.col("__w").getField(c).alias(c) for c in others]).select(
        *[col(c) for c in df.columns]
    )
