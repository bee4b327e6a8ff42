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
from typing import Any

from pyspark import SparkContext
from pyspark.sql import Column
from pyspark.sql import functions as F

from spark_runner.sqltext import q

MAX_COLUMNS = 4096
_ATTR = "_sl_columns"
_LOCK = threading.Lock()


def _cache() -> dict[tuple[Any, ...], Column] | None:
    context = SparkContext._active_spark_context
    if context is None:
        return None
    cache: dict[tuple[Any, ...], Column] | None = getattr(context, _ATTR, None)
    if cache is None:
        with _LOCK:
            cache = getattr(context, _ATTR, None)
            if cache is None:
                cache = {}
                setattr(context, _ATTR, cache)
    return cache


def _cached(key: tuple[Any, ...], build: Any) -> Column:
    cache = _cache()
    if cache is None:
        return build()  # type: ignore[no-any-return]
    column = cache.get(key)
    if column is None:
        column = build()
        with _LOCK:
            if len(cache) >= MAX_COLUMNS:
                cache.clear()
            cache[key] = column
    return column


def named(name: str, sql: str | None = None, field_id: int | None = None) -> Column:
    """The SQL expression `sql` (default: the column `name` itself) named `name`, with Iceberg's field id when
    given (Spark writes it into the Parquet schema)."""

    def build() -> Column:
        column = F.expr(sql) if sql is not None else F.col(q(name))
        if field_id is None:
            return column.alias(name) if sql is not None else column
        return column.alias(name, metadata={"parquet.field.id": field_id})

    return _cached(("named", name, sql, field_id), build)
