"""`spark_runner.buckets.with_partition_id`: a row's partition by arithmetic (evenly spaced bounds), by binary search
(Spark's Bucketizer) and by CASE (`tables.partitions.partition_sql`) agree, at the bounds, in the gaps, for NULL."""

from __future__ import annotations

import random
from typing import Any

import pytest

from spark_runner.buckets import with_partition_id
from sql.ddl import parse_create_table
from tables.partitions import partition_sql

EVEN = ", ".join(f"PARTITION p{i} VALUES [({i * 10}), ({i * 10 + 10}))" for i in range(40) if i != 7)
UNEVEN = "PARTITION a VALUES LESS THAN (5), PARTITION b VALUES [(5), (50)), PARTITION c VALUES [(60), (61))"


@pytest.mark.parametrize("partitions", [EVEN, UNEVEN, EVEN + ", PARTITION top VALUES LESS THAN MAXVALUE"])
def test_every_way_of_finding_a_partition_agrees(spark: Any, partitions: str) -> None:
    ddl = f"CREATE TABLE t (k INT, v INT) DUPLICATE KEY(k) PARTITION BY RANGE(k) ({partitions}) DISTRIBUTED BY HASH(k)"
    table = parse_create_table(ddl, "db").definition
    assert table.partitioning is not None
    rng = random.Random(7)
    values: list[int | None] = [None, -1, 0, 9, 10, 69, 70, 79, 80, 399, 400, 401, 2**31 - 1, 5, 49, 50, 60, 61]
    values += [rng.randint(-50, 450) for _ in range(200)]
    df = spark.createDataFrame([(v,) for v in values], "k INT")
    case = partition_sql(table.partitioning, ["`k`"], table.partition_types())
    rows = with_partition_id(df, table, "p").selectExpr("k", "p", f"{case} AS expected").collect()
    assert [(r.k, r.p) for r in rows] == [(r.k, r.expected) for r in rows]
    assert any(r.p is None for r in rows) and any(r.p is not None for r in rows)
