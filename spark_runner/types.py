"""Doris types in Spark: storage types (as Iceberg stores them), display types, and load-time conversion."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
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


def value_type(t: DorisType) -> T.DataType:
    """The Spark type values are converted to (and queries show): narrow integers keep their width."""
    if t.name == "TINYINT":
        return T.ByteType()
    if t.name == "SMALLINT":
        return T.ShortType()
    return storage_type(t)


def storage_schema(columns: list[tuple[ColumnDef, int]]) -> T.StructType:
    """A read/write schema whose fields carry their Iceberg field ids."""
    return T.StructType(
        [T.StructField(c.name, storage_type(c.type), True, {"parquet.field.id": fid}) for c, fid in columns]
    )


def convert(value: Column, t: DorisType, *, from_text: bool = True) -> Column:
    """Convert a loaded value to the column type; NULL when it does not convert (Doris non-strict rule).

    `from_text` says the value is a field of the payload (a string), not the result of an expression.
    """
    if t.name in ("CHAR", "VARCHAR", "STRING"):
        return value.cast(T.StringType())
    if t.name == "BOOLEAN":
        text = F.lower(F.trim(value.cast(T.StringType())))
        return (
            F.when(text.isin("true", "1"), F.lit(True))
            .when(text.isin("false", "0"), F.lit(False))
            .otherwise(F.lit(None).cast(T.BooleanType()))
        )
    if t.is_integer and t.name != "LARGEINT" and from_text:
        # Doris rejects fractional text for integer columns instead of truncating it.
        as_text = value.cast(T.StringType())
        converted = value.try_cast(value_type(t))
        return F.when(as_text.rlike(r"^\s*[-+]?\d+\s*$"), converted).otherwise(F.lit(None).cast(value_type(t)))
    return value.try_cast(value_type(t))


def default_value(col: ColumnDef) -> Column:
    """The column DEFAULT as a Spark value (CURRENT_TIMESTAMP included), converted to the column type."""
    if col.default is None:
        return F.lit(None).cast(value_type(col.type))
    if col.default_is_current_timestamp:
        now = F.current_timestamp().cast(T.TimestampNTZType())
        return now.cast(value_type(col.type)) if col.type.name != "DATETIME" else now
    return convert(F.lit(col.default), col.type)
