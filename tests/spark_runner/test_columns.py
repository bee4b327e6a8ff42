"""Projections whose JVM lists are built once per shape (`spark_runner.columns`): the same rows as PySpark's own
calls, in a handful of round trips to the JVM where PySpark's cost one per expression."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.testing import assertDataFrameEqual

from spark_runner.columns import named, select_expr, select_named

EXPRS = [f"k + {i} AS c{i}" for i in range(20)]


@contextmanager
def round_trips(spark: Any) -> Iterator[list[int]]:
    """Counts the commands this thread sends to the JVM inside the block (py4j's client, wrapped in place).

    Only this thread's: the test session's Spark is shared, and a background thread left by an earlier test (a
    server's maintenance, a group's job) may send its own commands meanwhile (it once added 36 to a count of 3)."""
    client = spark.sparkContext._gateway._gateway_client
    sent = [0]
    original: Callable[..., Any] = client.send_command
    me = threading.get_ident()

    def counting(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == me:
            sent[0] += 1
        return original(*args, **kwargs)

    client.send_command = counting
    try:
        yield sent
    finally:
        client.send_command = original


def test_select_expr_gives_select_exprs_rows_and_reuses_its_jvm_list(spark: Any) -> None:
    df = spark.createDataFrame([(1,), (2,)], "k INT")
    assertDataFrameEqual(select_expr(df, EXPRS), df.selectExpr(*EXPRS))
    with round_trips(spark) as plain:
        df.selectExpr(*EXPRS)
    with round_trips(spark) as cached:
        select_expr(df, EXPRS)
    assert plain[0] > len(EXPRS)  # one per expression
    assert cached[0] <= 3, cached[0]


def test_select_named_attaches_field_ids_once_per_shape(spark: Any) -> None:
    df = spark.createDataFrame([(1, "a")], "k INT, v STRING")
    columns = [("k", None, 1), ("v2", "upper(v)", 2), ("v", None, None)]
    out = select_named(df, columns)
    assert out.collect() == [(1, "A", "a")]
    assert [(f.name, f.metadata) for f in out.schema.fields] == [
        ("k", {"parquet.field.id": 1}),
        ("v2", {"parquet.field.id": 2}),
        ("v", {}),
    ]
    with round_trips(spark) as cached:
        select_named(df, columns)
    assert cached[0] <= 3, cached[0]
    assert named("k", None, 1) is named("k", None, 1)
