"""Small Arrow tables made DataFrames in a few JVM round trips (`spark_runner.arrow_frames`): the same rows and
schema as PySpark's `createDataFrame`, which takes dozens."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from spark_runner.arrow_frames import arrow_frame, collect_arrow
from tests.spark_runner.test_columns import round_trips

SCHEMA = T.StructType(
    [
        T.StructField("pos", T.LongType(), False),
        T.StructField("s", T.StringType()),
        T.StructField("i", T.IntegerType()),
        T.StructField("d", T.DecimalType(12, 2)),
        T.StructField("day", T.DateType()),
        T.StructField("b", T.BooleanType()),
        T.StructField("f", T.DoubleType()),
    ]
)
ROWS = [
    (0, "a", 1, decimal.Decimal("1.50"), dt.date(2024, 2, 29), True, 0.5),
    (1, None, None, None, None, None, None),
    (2, 'ünï\tcödé, "q"', -(2**31), decimal.Decimal("-9999999999.99"), dt.date(1, 1, 1), False, -1e300),
]


def _table(rows: list[tuple[Any, ...]], schema: T.StructType) -> pa.Table:
    columns: list[Any] = list(zip(*rows, strict=True)) if rows else [[] for _ in schema.fields]
    arrow = to_arrow_schema(schema)
    return pa.table([pa.array(list(c), f.type) for c, f in zip(columns, arrow, strict=True)], schema=arrow)


def test_the_rows_and_schema_are_createdataframes_in_a_few_round_trips(spark: Any) -> None:
    table = _table(ROWS, SCHEMA)
    # several chunks, one of them empty (PySpark's reader stopped at an empty batch): the rows all arrive
    chunked = pa.concat_tables([table.slice(0, 1), table.slice(1, 0), table.slice(1, 2)])
    assert chunked.column(0).num_chunks == 3
    arrow_frame(spark, table, SCHEMA)  # the JVM's two methods are looked up once per JVM
    with round_trips(spark) as direct:
        frame = arrow_frame(spark, chunked, SCHEMA)
    with round_trips(spark) as pyspark:
        reference = spark.createDataFrame(table, schema=SCHEMA)
    assert direct[0] <= 3, direct[0]  # read the file, make the frame (and free the reader's proxy)
    assert pyspark[0] > 20, pyspark[0]
    assert frame.schema == reference.schema == SCHEMA
    assert sorted(frame.collect()) == sorted(reference.collect()) == [T.Row(*r) for r in ROWS]  # type: ignore[call-overload]


def test_an_empty_table_is_an_empty_relation_of_the_schema(spark: Any) -> None:
    frame = arrow_frame(spark, _table([], SCHEMA), SCHEMA)
    assert frame.schema == SCHEMA
    assert frame.collect() == []


def test_a_schema_with_a_timestamp_goes_through_pyspark_which_localizes_it(spark: Any) -> None:
    schema = T.StructType([T.StructField("k", T.LongType()), T.StructField("at", T.TimestampType())])
    table = pa.table(
        {"k": pa.array([1], pa.int64()), "at": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5)], pa.timestamp("us"))}
    )
    with round_trips(spark) as sent:
        frame = arrow_frame(spark, table, schema)
    assert sent[0] > 20  # PySpark's own path
    assert frame.collect() == spark.createDataFrame(table, schema=schema).collect()


def test_rows_come_back_as_toarrow_brings_them_in_fewer_round_trips(spark: Any) -> None:
    frame = arrow_frame(spark, _table(ROWS, SCHEMA), SCHEMA).selectExpr("*", "upper(s) AS u")
    assert frame.schema.names[-1] == "u"  # asked once (a reused plan carries its schema)
    collect_arrow(frame)
    with round_trips(spark) as ours:
        rows = collect_arrow(frame)
    with round_trips(spark) as pyspark:
        reference = frame.toArrow()
    assert rows.equals(reference)
    assert rows.num_rows == len(ROWS)
    assert ours[0] < pyspark[0], (ours[0], pyspark[0])
    empty = frame.where("pos < 0")
    assert collect_arrow(empty).equals(empty.toArrow())


def test_a_failing_action_raises_as_toarrow_does(spark: Any) -> None:
    frame = arrow_frame(spark, _table(ROWS, SCHEMA), SCHEMA).selectExpr("assert_true(pos < 1, 'too far') AS x")
    with pytest.raises(Exception, match="too far") as ours:
        collect_arrow(frame)
    with pytest.raises(Exception, match="too far") as pyspark:
        frame.toArrow()
    assert type(ours.value) is type(pyspark.value)
