"""Spark `Column`s built once per JVM and reused by every load of the same shape.

Building a column costs PySpark round trips to the JVM: `F.col` one, `alias` with Iceberg's field-id metadata
three more (the metadata goes as JSON and is parsed there), `F.expr` a parse. A one-row load names every stored
column this way, and on a loaded machine those round trips were ~9% of its time in the server's process. A
`Column` is an unresolved expression that any number of DataFrames may use, so the same one serves every
load that asks for it (an `Alias` carries an expression id; plans of different queries may share one).

The cache lives on the `SparkContext` whose JVM holds the expressions: a JVM replaced after a crash
(`spark_runner.supervisor`) starts with an empty one, and no column of a dead JVM is ever handed out. It holds at
most `MAX_COLUMNS`; past that it starts over (shapes change rarely; a version literal of a large load is a new
shape each time).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError
from pyspark import SparkContext
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_runner.sqltext import q

MAX_COLUMNS = 4096
_ATTR = "_sl_columns"
_SQL = "_sl_sql"  # on a column: its SQL (`sql_text`)
_LOCK = threading.Lock()


def context_cache(attr: str) -> dict[tuple[Any, ...], Any] | None:
    """The dict kept on the active `SparkContext` under `attr` (None while there is none): what it holds lives
    and dies with that context's JVM."""
    context = SparkContext._active_spark_context
    if context is None:
        return None
    cache: dict[tuple[Any, ...], Any] | None = getattr(context, attr, None)
    if cache is None:
        with _LOCK:
            cache = getattr(context, attr, None)
            if cache is None:
                cache = {}
                setattr(context, attr, cache)
    return cache


def per_jvm(attr: str, build: Callable[[], Any]) -> Any:
    """`build()`, kept on the active `SparkContext` under `attr` (`context_cache`): JVM classes and methods looked up
    once per JVM, as py4j asks the JVM about each one it is handed by name (a round trip of its own)."""
    cache = context_cache(attr)
    if cache is None:
        return build()
    found = cache.get(())
    if found is None:
        found = cache[()] = build()
    return found


def java_class(name: str) -> Any:
    """The JVM class `name` of the running SparkContext, named in full: py4j's `jvm.org.apache...` asks the JVM about
    every prefix (`org`, `org.apache`, ...), each a class lookup that fails after searching every jar on the class
    path (18% of a warm one-row load's JVM samples)."""
    context = SparkContext._active_spark_context
    assert context is not None, "JVM classes are looked up in a running SparkContext"
    return JavaClass(name, context._gateway._gateway_client)  # type: ignore[union-attr]


def internals_missing(exc: Exception) -> bool:
    """Whether `exc` says a JVM class or method py4j was asked for is not there (a Spark whose internal classes
    differ from the release this code was written against), rather than an exception the JVM threw or a lost
    JVM: the caller then takes a path of public APIs."""
    return isinstance(exc, Py4JError) and not isinstance(exc, Py4JJavaError | Py4JNetworkError)


def _cache() -> dict[tuple[Any, ...], Any] | None:
    return context_cache(_ATTR)


def _cached(key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
    cache = _cache()
    if cache is None:
        return build()
    found = cache.get(key)
    if found is None:
        found = build()
        with _LOCK:
            if len(cache) >= MAX_COLUMNS:
                cache.clear()
            cache[key] = found
    return found


def sql_text(column: Column) -> str:
    """`repr(column)` (its SQL, from the JVM), asked once per column object: the columns of `named` are kept per
    JVM, so a group commit's per-load counts name their SQL in its plan's key without a round trip each."""
    kept = vars(column)  # not `getattr`: a Column names its struct fields by attribute
    text: str | None = kept.get(_SQL)
    if text is None:
        text = kept[_SQL] = repr(column)
    return text


def named(name: str, sql: str | None = None, field_id: int | None = None) -> Column:
    """The SQL expression `sql` (default: the column `name` itself) named `name`, with Iceberg's field id when
    given (Spark writes it into the Parquet schema)."""

    def build() -> Column:
        column = F.expr(sql) if sql is not None else F.col(q(name))
        if field_id is None:
            return column.alias(name) if sql is not None else column
        return column.alias(name, metadata={"parquet.field.id": field_id})

    column: Column = _cached(("named", name, sql, field_id), build)
    return column


def select_expr(df: DataFrame, exprs: Sequence[str]) -> DataFrame:
    """`df.selectExpr(*exprs)` with the JVM's list of the expressions built once per shape.

    PySpark hands a Python list to the JVM one element per round trip (py4j's `ListConverter`: an `ArrayList`,
    then an `add` call each), so a projection of 20 expressions cost 22 round trips before Spark saw it; a
    load builds several. The JVM parses the expressions anew on each call: only the list is reused (Scala's
    immutable `Seq`)."""
    session = df.sparkSession
    key = ("exprs", tuple(exprs))
    seq = _cached(key, lambda: session._jvm.PythonUtils.toSeq(list(exprs)))  # type: ignore[union-attr]
    return DataFrame(df._jdf.selectExpr(seq), session)


def select_named(df: DataFrame, columns: Sequence[tuple[str, str | None, int | None]]) -> DataFrame:
    """`df.select` of the `named` columns (name, SQL, field id), the JVM's list of them built once per shape."""
    session = df.sparkSession
    key = ("select", tuple(columns))
    seq = _cached(key, lambda: session._jvm.PythonUtils.toSeq([named(*c)._jc for c in columns]))  # type: ignore[union-attr]
    return DataFrame(df._jdf.select(seq), session)
