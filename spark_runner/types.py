"""Doris types as Spark stores them in Parquet (matching `DorisType.iceberg_type`); conversions live in `sqltext`."""

from __future__ import annotations

from pyspark.sql import types as T

from tables.model import ColumnDef
from tables.types import DorisType


def storage_type(t: DorisType) -> T.DataType:
    """The Spark type of the column in Parquet files (matches `DorisType.iceberg_type`)."""
    if t.name in ("TINYINT", "SMALLINT", "INT"):
        return T.IntegerType()
    if t.name == "BIGINT":
        return T.LongType()
    if t.name == "LARGEINT":
        return T.DecimalType(38, 0)
    if t.name == "FLOAT":
        return T.FloatType()
    if t.name == "DOUBLE":
        return T.DoubleType()
    if t.name == "DECIMAL":
        return T.DecimalType(t.precision or 9, t.scale or 0)
    if t.name == "DATE":
        return T.DateType()
    if t.name == "DATETIME":
        return T.TimestampNTZType()
    if t.name == "BOOLEAN":
        return T.BooleanType()
    return T.StringType()


def storage_schema(columns: list[tuple[ColumnDef, int]]) -> T.StructType:
    """A read/write schema whose fields carry their Iceberg field ids."""
    return T.StructType(
        [T.StructField(c.name, storage_type(c.type), True, {"parquet.field.id": fid}) for c, fid in columns]
    )
