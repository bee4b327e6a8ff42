"""A small load's plan analyzed once per shape, then run with each load's own rows.

A one-row load's job is a chain of a dozen DataFrame steps over an in-memory relation (its rows, split by the
server), and PySpark analyzes each step as it is built: in a warm server's JVM that analysis was ~45% of a
one-row load's samples, for a plan that is the same from load to load of one shape (table, headers, columns)
except for the rows at its leaf. So the first load of a shape keeps its analyzed plan; the next ones take
that plan with its leaf (a `LocalRelation`) replaced by a relation of their own rows with the same output
attributes, every node marked analyzed so Spark goes straight to optimizing. Only chains qualify: every node
above the leaf has one child (no join with stored rows) and every expression is deterministic (the nodes'
expressions are shared by the loads that reuse them, as any two queries over one DataFrame share them).

The key is everything the chain is built from: the load plan (the table's definition, buckets and partitions
included) with the request's per-load fields (label, comment, timeout, filter ratio, transaction mode) left out,
the field ids, whether rows are merged, the SQL of a group's per-load counts, the leaf's schema. A key that
misses only costs a fresh build; a shape that changes (a schema change makes a new table definition) is a
new key. The plans live on the `SparkContext` whose JVM holds them, as the columns of `spark_runner.columns`
do: a JVM replaced after a crash starts with none. At most `MAX_PLANS`; past that the cache starts over.

The load's counts come from the plan's `observe` node (`CollectMetrics`), read from the query execution of
each run by the name the first build gave it.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

from py4j.java_gateway import JavaClass
from pyspark.sql import DataFrame, SparkSession

from spark_runner.columns import context_cache
from spark_runner.planning import LoadPlan

MAX_PLANS = 256
LOCAL_RELATION = "org.apache.spark.sql.catalyst.plans.logical.LocalRelation"
_ATTR = "_sl_prepared"
_LEAF = "_sl_leaf"  # on a small source: the DataFrame of its in-memory relation alone
_LOCK = threading.Lock()
# fields of a request that change no step of its job (the transaction's and the reply's)
PER_LOAD = {"label": "", "comment": "", "timeout_s": 0, "max_filter_ratio": 0.0, "two_phase_commit": False}


@dataclasses.dataclass(frozen=True)
class Prepared:
    nodes: tuple[Any, ...]  # the analyzed plan, root first, down to the leaf's parent
    output: Any  # the leaf's output attributes (their ids are what the nodes above refer to)
    metrics: str  # the name of the `CollectMetrics` node holding the load's counts


def mark_leaf(source: DataFrame, leaf: DataFrame) -> DataFrame:
    """Record that `source` is a chain over the in-memory relation `leaf` (its analyzed plan a `LocalRelation`)."""
    setattr(source, _LEAF, leaf)
    return source


def leaf_of(source: DataFrame) -> DataFrame | None:
    leaf = getattr(source, _LEAF, None)
    return leaf if isinstance(leaf, DataFrame) else None


def shape_key(plan: LoadPlan, leaf: DataFrame, *parts: Any) -> tuple[Any, ...]:
    """The key of a load's chain: its plan without the request's per-load fields, the leaf's schema and `parts`
    (what else the chain is built from)."""
    shaped = dataclasses.replace(plan, request=plan.request.model_copy(update=PER_LOAD))
    return (repr(shaped), leaf.schema.json(), *parts)


def _plans() -> dict[tuple[Any, ...], Prepared] | None:
    return context_cache(_ATTR)


def remember(key: tuple[Any, ...], out: DataFrame, metrics: str) -> None:
    """Keep the analyzed plan of `out` (a load's rowset, built fresh) for the next loads of its shape, if it is a
    deterministic chain down to an in-memory relation."""
    plans = _plans()
    if plans is None or key in plans:
        return
    node = out._jdf.queryExecution().analyzed()
    if not node.deterministic():
        return
    nodes = []
    while True:
        children = node.children()
        count = children.size()
        if count == 0:
            break
        if count != 1:
            return
        nodes.append(node)
        node = children.apply(0)
    if node.getClass().getName() != LOCAL_RELATION:
        return
    with _LOCK:
        if len(plans) >= MAX_PLANS:
            plans.clear()
        plans[key] = Prepared(tuple(nodes), node.output(), metrics)


def reuse(spark: SparkSession, key: tuple[Any, ...], leaf: DataFrame) -> tuple[DataFrame, str] | None:
    """The rowset of a load of a known shape over `leaf`'s rows, analyzed already, and the name of its counts'
    node; None for a shape not seen yet."""
    plans = _plans()
    found = plans.get(key) if plans is not None else None
    if found is None:
        return None
    rows = leaf._jdf.queryExecution().analyzed()
    node = _java(spark, LOCAL_RELATION)(found.output, rows.data(), rows.isStreaming(), rows.stream())
    node.setAnalyzed()
    converters, lists = _java(spark, "scala.jdk.javaapi.CollectionConverters"), _java(spark, "java.util.List")
    for parent in reversed(found.nodes):
        node = parent.withNewChildren(converters.asScala(lists.of(node)).toSeq())
        node.setAnalyzed()
    dataset = _java(spark, "org.apache.spark.sql.classic.Dataset").ofRows(spark._jsparkSession, node)
    return DataFrame(dataset, spark), found.metrics


def _java(spark: SparkSession, name: str) -> Any:
    """The JVM class `name`, named in full: py4j's `jvm.org.apache...` asks the JVM about every prefix (`org`,
    `org.apache`, ...), and each is a class lookup that fails after searching every jar on the class path (18%
    of a warm one-row load's JVM samples)."""
    client = spark.sparkContext._gateway._gateway_client  # type: ignore[union-attr]
    return JavaClass(name, client)


def observed(out: DataFrame, name: str) -> dict[str, Any]:
    """The values of the `observe` node `name` in the run of `out` that just finished."""
    found = out._jdf.queryExecution().observedMetrics().get(name)
    if found.isEmpty():
        raise RuntimeError(f"the load's counts ({name}) were not observed")
    values: dict[str, Any] = json.loads(found.get().json())
    return values
