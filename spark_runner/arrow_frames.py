"""Small Arrow tables into Spark and back with few JVM round trips.

A small Arrow table becomes a Spark DataFrame in two JVM round trips (PySpark's `createDataFrame` takes 38).

`SparkSession.createDataFrame(pyarrow.Table, schema)` takes 38 Py4J round trips for a table of a few rows: eight
settings read through a Java list built and read one element per call, the schema checked and converted, the
encryption setting asked. A small load makes one or two such relations (its split lines, the stored rows of its
keys), and each round trip waits for the JVM and then for the GIL: ~10 ms of a one-row load in an idle server,
more under concurrent loads. `arrow_frame` does what PySpark does for an unencrypted local session (the table cast
to the schema's Arrow types, written as an Arrow stream to a file in the context's temp folder, read there and
made a DataFrame by `PythonSQLUtils`) with the settings at Spark's defaults, and leaves the rest to PySpark: a
schema with a timestamp (PySpark localizes those to the session's time zone first) or a context with IO
encryption (the rows then go through a socket).

A rowset that Spark's optimizer computes on the driver needs no job at all (`collect_local`): a chain of projections
and filters over an in-memory relation is folded into one (`ConvertToLocalRelation`), whose rows the driver hands
out as they are (`LocalTableScanExec.executeCollect`). `toArrow` still runs a job over them (one task: ~45 ms of a
one-row load on 2 cores, most of its Spark time); PySpark's `collect` (`collectToPython`) does not. A relation
folded already (`prepared.reuse`) needs no query at all: the JVM writes its rows as one Arrow stream
(`relation_rows`).

A small DataFrame's rows come back (`collect_arrow`) as `DataFrame.toArrow` brings them, without what it does
besides: two settings read through a Java list, the schema asked of the JVM again, and the call site set in the
JVM before and cleared after, found by walking the Python stack and reading the source line of every frame.
"""

from __future__ import annotations

import os
import tempfile
import threading
from typing import Any

import pyarrow as pa
from pyspark.errors.exceptions.captured import unwrap_spark_exception
from pyspark.serializers import BatchedSerializer, CPickleSerializer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.pandas.serializers import ArrowCollectSerializer, ArrowStreamSerializer
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.util import _load_from_socket

from spark_runner.columns import internals_missing, java_class, per_jvm

BATCH_ROWS = 10_000  # spark.sql.execution.arrow.maxRecordsPerBatch's default: one partition per batch
_UTILS = "org.apache.spark.sql.api.python.PythonSQLUtils"
LOCAL_SCAN = "org.apache.spark.sql.execution.LocalTableScanExec"
_ATTR = "_sl_arrow_frames"
_ARROW_CONVERTERS = "org.apache.spark.sql.execution.arrow.ArrowConverters$"
_CONVERTERS = "_sl_arrow_converters"  # the JVM's `ArrowConverters` object, per JVM
_SCHEMAS: dict[str, tuple[pa.Schema, bool]] = {}  # schema JSON -> (Arrow schema, has a timestamp)
_LOCK = threading.Lock()


def arrow_frame(spark: SparkSession, table: pa.Table, schema: T.StructType) -> DataFrame:
    """`table` as a DataFrame of `schema` (as `spark.createDataFrame(table, schema=schema)` makes it)."""
    context = spark.sparkContext
    text = schema.json()
    arrow_schema, timestamps = _arrow_schema(schema, text)
    if timestamps or context._encryption_enabled:
        return spark.createDataFrame(table, schema=schema)
    batches = table.cast(arrow_schema).to_batches(max_chunksize=BATCH_ROWS)
    batches = [batch for batch in batches if batch.num_rows] or batches[:1]  # Spark's reader stops at an empty one
    with tempfile.NamedTemporaryFile(delete=False, dir=context._temp_dir) as out:
        path = out.name
        ArrowStreamSerializer().dump_stream(batches, out)
    try:
        read, to_frame = _members()
        jdf = to_frame(read(path), text, spark._jsparkSession)
    finally:
        os.unlink(path)
    frame = DataFrame(jdf, spark)
    frame._schema = schema
    return frame


def collect_arrow(frame: DataFrame) -> pa.Table:
    """The rows of `frame` (its one action), as `frame.toArrow()` returns them, with settings at their defaults.

    Raises:
        Exception: the action's failure, as PySpark raises it.
    """
    arrow_schema, _ = _arrow_schema(frame.schema, frame.schema.json())
    port, secret, server = frame._jdf.collectAsArrowToPython()
    try:
        with _load_from_socket((port, secret), ArrowCollectSerializer()) as stream:
            batches = list(stream)
    finally:
        with unwrap_spark_exception():
            server.getResult()  # the action's own failure, if any
    if not batches:
        return arrow_schema.empty_table()
    return pa.Table.from_batches(batches).cast(arrow_schema)


def collect_local(frame: DataFrame) -> pa.Table | None:
    """The rows of `frame` as `collect_arrow` returns them, without a Spark job: None when its plan needs one (it is
    not one in-memory relation once optimized), or holds a type whose Python value is not exact (a timestamp in
    the session's zone). The plan is optimized and planned once: a caller that gets None runs another plan.

    Raises:
        Exception: the collection's failure, as PySpark raises it.
    """
    schema = frame.schema
    arrow_schema, _ = _arrow_schema(schema, schema.json())
    if any(_has_timestamp(field.dataType, zoned_only=True) for field in schema.fields):
        return None
    if frame._jdf.queryExecution().executedPlan().getClass().getName() != LOCAL_SCAN:
        return None
    port, secret, server = frame._jdf.collectToPython()
    try:
        with _load_from_socket((port, secret), BatchedSerializer(CPickleSerializer())) as stream:  # type: ignore[no-untyped-call]
            rows = list(stream)
    finally:
        with unwrap_spark_exception():
            server.getResult()
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in arrow_schema]
    try:
        arrays = [pa.array(list(values), type=field.type) for values, field in zip(columns, arrow_schema, strict=True)]
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    return pa.Table.from_arrays(arrays, schema=arrow_schema)


def relation_rows(relation: Any, schema: T.StructType) -> pa.Table | None:
    """The rows of `relation` (a JVM `LocalRelation` of `schema`, folded already: `prepared.reuse`) as
        `collect_local` returns them, with no query at all: the JVM writes them as one Arrow stream
        (`ArrowConverters`, as `toArrow` does on an executor) and hands its bytes over. A query over the relation,
        however small, costs its optimizer, its planner and an execution of its own with its listeners' events and a
        socket for its rows: ~18 ms of a one-row load on 2 cores. None for a schema `collect_local` refuses, and when
    this Spark has no such converter (`columns.internals_missing`)."""
    arrow_schema, _ = _arrow_schema(schema, schema.json())
    if any(_has_timestamp(field.dataType, zoned_only=True) for field in schema.fields):
        return None
    tables = []
    try:
        converters = per_jvm(_CONVERTERS, lambda: getattr(java_class(_ARROW_CONVERTERS), "MODULE$"))
        streams = converters.toBatchWithSchemaIterator(
            relation.data().iterator(), relation.schema(), BATCH_ROWS, -1, "UTC", True, False
        )
        while streams.hasNext():
            tables.append(pa.ipc.open_stream(bytes(streams.next())).read_all())
    except Exception as exc:  # a Spark whose `ArrowConverters` differs: the caller collects the rows otherwise
        if not internals_missing(exc):
            raise
        return None
    if not tables:
        return arrow_schema.empty_table()
    try:
        return pa.concat_tables(tables).cast(arrow_schema)
    except (pa.ArrowException, TypeError, ValueError):
        return None


def _members() -> tuple[Any, Any]:
    """`PythonSQLUtils`' two methods, looked up once per JVM."""

    def lookup() -> tuple[Any, Any]:
        utils = java_class(_UTILS)
        return utils.readArrowStreamFromFile, utils.toDataFrame

    found: tuple[Any, Any] = per_jvm(_ATTR, lookup)
    return found


def _arrow_schema(schema: T.StructType, text: str) -> tuple[pa.Schema, bool]:
    found = _SCHEMAS.get(text)
    if found is None:
        stamps = any(_has_timestamp(field.dataType) for field in schema.fields)
        arrow = to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC")
        found = (arrow, stamps)
        with _LOCK:
            if len(_SCHEMAS) > 1024:
                _SCHEMAS.clear()
            _SCHEMAS[text] = found
    return found


def _has_timestamp(data_type: T.DataType, *, zoned_only: bool = False) -> bool:
    """Whether `data_type` holds a timestamp (`zoned_only`: one in the session's zone, not a TIMESTAMP_NTZ)."""
    if isinstance(data_type, T.TimestampType) or (isinstance(data_type, T.TimestampNTZType) and not zoned_only):
        return True
    if isinstance(data_type, T.StructType):
        return any(_has_timestamp(f.dataType, zoned_only=zoned_only) for f in data_type.fields)
    if isinstance(data_type, T.ArrayType):
        return _has_timestamp(data_type.elementType, zoned_only=zoned_only)
    if isinstance(data_type, T.MapType):
        return _has_timestamp(data_type.keyType, zoned_only=zoned_only) or _has_timestamp(
            data_type.valueType, zoned_only=zoned_only
        )
    return False
