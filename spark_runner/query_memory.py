"""What a user's query may make Spark hold whole, outside its memory manager: a join side broadcast to every task,
and the values an aggregate keeps per group. Both are measured before the query runs.

Spark builds a broadcast join's table in the driver, from every row of that side at once, with no memory limit
and no spill; `collect_list`, `percentile` and their kin keep every value of a group in objects it does not
count. In local mode the driver is the one JVM of the server, and running it out of memory ends every load in
flight (docs/security.md, "The Spark JVM"). Spark's planner broadcasts a side its *estimate* puts under 10 MB,
and the estimate ignores rows that multiply (`LATERAL VIEW explode`) or widen (`repeat`): a SELECT-only user
broadcast 30M rows of one 100k-row table and the JVM died in 2.6 s; `group_concat(repeat(v, 10000))` of the same
table ended it in 4 s. So user queries run in a session of their own (`query_session`) where:

- the planner broadcasts no join by its estimate; AQE still makes a join a broadcast one once it has measured the
  side (its shuffle's real size, under `spark.sql.adaptive.autoBroadcastJoinThreshold`);
- a join Spark can only run by broadcasting a side whatever its size (a nested loop join: an outer, semi or anti
  join on no equality, `EXISTS` with a non-equi correlation, a multi-column `NOT IN`; and the single-column
  `NOT IN`'s null-aware hash join) runs only after that side is measured by a job of its own that returns two
  numbers, and is refused past `MAX_BROADCAST_ROWS` rows or `MAX_BROADCAST_BYTES` bytes;
- an aggregate or window that keeps values (`BUFFERED_AGGREGATES`) runs only after a job has measured the bytes
  its largest groups would keep, and is refused past `MAX_AGGREGATE_BYTES` (`check_query_memory`).

A query without such joins or aggregates pays one look at its plan's text.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_runner.columns import java_class, per_jvm
from tables.errors import SqlError

log = logging.getLogger(__name__)

QUERY_CONF = {
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.autoBroadcastJoinThreshold": "10MB",
}
# `without_top_k`: ORDER BY ... LIMIT n as a sort that spills, not Spark's heap of n whole rows per task
SORTED_CONF = {**QUERY_CONF, "spark.sql.execution.topKSortFallbackThreshold": "0"}
# a side Spark must broadcast whole is refused past either bound (as Spark estimates rows in memory: the values'
# bytes and 16 bytes a value besides, `row_bytes`); a hash relation takes ~2x that in the heap
MAX_BROADCAST_ROWS = 1_000_000
MAX_BROADCAST_BYTES = 64 * 1024 * 1024

# the physical plan's text names every broadcast join: only then is the plan walked (a Py4J call per node)
_JOIN = re.compile(r"\bJoin ")  # a join node of an optimized logical plan's text
_BROADCAST_JOIN = re.compile(r"\bBroadcast(?:NestedLoop|Hash)Join\b")

# Aggregate functions that keep every value (or every distinct one) of a group until the group ends, in objects
# outside Spark's memory manager (no spill): `collect_list` of 100k 60 KB values (Doris's group_concat is one)
# ended the JVM in 4 s. Sketches with a bounded size (percentile_approx, approx_count_distinct) are not here.
BUFFERED_AGGREGATES = frozenset(
    "CollectList CollectSet ListAgg Percentile PercentileCont PercentileDisc Mode HistogramNumeric".split()
)
_BUFFERED_NAME = re.compile(
    r"(?<![\w.])(?:collect_list|collect_set|array_agg|listagg|string_agg|percentile|percentile_cont|"
    r"percentile_disc|median|mode|histogram_numeric)\(",
    re.IGNORECASE,
)
# the values all groups held at once may hold, estimated (`_held_bytes`): Spark's object hash aggregate keeps up
# to 128 groups in a hash map (`spark.sql.objectHashAggregate.sortBased.fallbackThreshold`), then one at a time;
# a window, one partition
MAX_AGGREGATE_BYTES = 128 * 1024 * 1024
HASHED_GROUPS = 128
VALUE_OVERHEAD = 48  # a value's object and its reference in the buffer, besides its bytes
MAX_MEASURES = 32  # measuring jobs one statement may need
MAX_TOP_K_BYTES = 256 * 1024 * 1024  # the rows `ORDER BY ... LIMIT n` keeps whole, as wide as they can be


def query_session(spark: SparkSession) -> SparkSession:
    """The session user queries run in (one per JVM, sharing its SparkContext): `QUERY_CONF` on the server's."""
    return _session(spark, "_sl_query_session", QUERY_CONF)


def without_top_k(frame: DataFrame) -> DataFrame:
    """`frame` planned again where `ORDER BY ... LIMIT n` sorts every row (in Spark's memory manager: it spills to
    disk) and then takes n, instead of keeping each task's first n rows whole in a heap (`SORTED_CONF`)."""
    session = _session(frame.sparkSession, "_sl_sorted_session", SORTED_CONF)
    return DataFrame(_of_rows(session, frame._jdf.queryExecution().analyzed()), session)


def _session(spark: SparkSession, name: str, conf: dict[str, str]) -> SparkSession:
    def build() -> SparkSession:
        session = spark.newSession()
        for key, value in conf.items():
            session.conf.set(key, value)
        return session

    found: SparkSession = per_jvm(name, build)
    return found


def check_query_memory(frame: DataFrame, *, value_bytes: int = 10 * 1024 * 1024) -> None:
    """Measure what `frame` would make Spark hold whole (module doc) before it runs: each aggregate group's buffer,
    then each side Spark must broadcast. Each measuring job first has its own input checked the same way (an
    aggregate's input may hold such a join, a broadcast side such an aggregate), innermost first.

    `value_bytes`: the largest string a query can make (`SL_SQL_MAX_STRING_BYTES`), for the top-k's static bound.

    Raises:
        SqlError: something would hold more than its bound, or the query needs more than `MAX_MEASURES` measures.
    """
    budget = [MAX_MEASURES]
    plan = frame._jdf.queryExecution().optimizedPlan()
    text = plan.toString()
    _check_aggregates(frame, budget, plan, text)
    _check_broadcasts(frame, budget, text)
    _check_top_k(frame, budget, value_bytes, plan, text)


def _spend(budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise SqlError(
            f"The query is too complex: it needs more than {MAX_MEASURES} measures of what it would hold in memory "
            "(nested aggregates that collect values, or joins without an equality condition)"
        )


def _check_aggregates(frame: DataFrame, budget: list[int], plan: Any = None, text: str | None = None) -> None:
    """`plan` and `text`: `frame`'s optimized plan and its text, when the caller has them."""
    if plan is None:
        plan = frame._jdf.queryExecution().optimizedPlan()
    if _BUFFERED_NAME.search(text if text is not None else plan.toString()) is None:
        return
    session = frame.sparkSession
    for node, functions in _buffered_aggregates(plan):
        _spend(budget)
        window = node.getClass().getSimpleName() == "Window"
        groups = node.partitionSpec() if window else node.groupingExpressions()
        rows = DataFrame(_of_rows(session, node.child()), session)
        _check_broadcasts(rows, budget)
        held = _group_bytes(rows, [groups.apply(i) for i in range(groups.size())], functions, 1 if window else None)
        if held > MAX_AGGREGATE_BYTES:
            names = ", ".join(sorted({f.prettyName() for f in functions}))
            raise SqlError(
                f"The query is too large to run: {names} would hold more than {MAX_AGGREGATE_BYTES} bytes of values "
                f"at once ({'one window partition' if window else f'its {HASHED_GROUPS} largest groups'}); group by "
                "more columns, filter the rows, or use an aggregate that keeps no values (count, sum, "
                "percentile_approx)"
            )


def _check_broadcasts(frame: DataFrame, budget: list[int], text: str | None = None) -> None:
    """`text`: `frame`'s optimized plan's text, when the caller has it."""
    execution = frame._jdf.queryExecution()
    if _JOIN.search(text if text is not None else execution.optimizedPlan().toString()) is None:
        return  # no join: no physical plan made for this look (it costs 5-15 ms)
    plan = execution.executedPlan()
    if _BROADCAST_JOIN.search(plan.toString()) is None:
        return
    if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
        plan = plan.initialPlan()
    for side in _unbounded_build_sides(plan):
        _spend(budget)
        built = DataFrame(_of_rows(frame.sparkSession, side), frame.sparkSession)
        _check_aggregates(built, budget)
        rows, size = _measure(built)
        if rows > MAX_BROADCAST_ROWS or size > MAX_BROADCAST_BYTES:
            raise SqlError(
                f"The query is too large to run: a join side Spark must hold whole (an outer, semi or anti join "
                f"without an equality condition, or NOT IN) has more than {MAX_BROADCAST_ROWS} rows or "
                f"{MAX_BROADCAST_BYTES} bytes; join on an equality of the two sides' columns or filter that side"
            )


def _check_top_k(frame: DataFrame, budget: list[int], value_bytes: int, plan: Any, text: str) -> None:
    """`ORDER BY ... LIMIT n` keeps its n first rows whole in a heap per task (Spark's take-ordered): n rows as
    wide as the query can make them must fit `MAX_TOP_K_BYTES`, else their widest row is measured first."""
    if "LocalLimit" not in text:
        return
    session = frame.sparkSession
    for node in _post_order(plan):
        if node.getClass().getSimpleName() != "LocalLimit" or not node.limitExpr().foldable():
            continue
        below = node.child()
        while below.getClass().getSimpleName() == "Project":
            below = below.child()
        if below.getClass().getSimpleName() != "Sort" or not getattr(below, "global")():  # (a Python keyword)
            continue
        rows = int(node.limitExpr().eval(None))
        kept = DataFrame(_of_rows(session, below.child()), session)
        widest = sum(_static_width(f.dataType, value_bytes) for f in kept.schema.fields)
        if rows * widest <= MAX_TOP_K_BYTES:
            continue
        _spend(budget)
        named, size = row_bytes(kept)
        measured = named.select(F.max(size)).first()
        widest = int(measured[0] or 0) if measured is not None else 0
        if rows * widest > MAX_TOP_K_BYTES:
            raise SqlError(
                f"The query is too large to run: ORDER BY ... LIMIT {rows} keeps its first {rows} rows whole, and "
                f"a row takes up to {widest} bytes: more than {MAX_TOP_K_BYTES} bytes at once; use a smaller LIMIT "
                "or select fewer or smaller columns"
            )


def _static_width(data_type: T.DataType, value_bytes: int) -> int:
    """The most bytes one value of `data_type` can take in a query: a fixed width, a string's cap, or (a nested
    value, whose size no cap states) more than any top-k may hold."""
    if isinstance(data_type, (T.StringType, T.BinaryType, T.VarcharType, T.CharType)):
        return value_bytes
    if isinstance(data_type, (T.ArrayType, T.MapType, T.StructType, T.VariantType)):
        return MAX_TOP_K_BYTES + 1
    return 16


def _buffered_aggregates(plan: Any) -> list[tuple[Any, list[Any]]]:
    """The Aggregate and Window nodes of an optimized logical plan with aggregate functions that keep their
    values (`BUFFERED_AGGREGATES`), each with those functions; children before parents."""
    found: list[tuple[Any, list[Any]]] = []
    for node in _post_order(plan):
        name = node.getClass().getSimpleName()
        if name not in ("Aggregate", "Window"):
            continue
        exprs = node.aggregateExpressions() if name == "Aggregate" else node.windowExpressions()
        functions: list[Any] = []
        pending = [exprs.apply(i) for i in range(exprs.size())]
        while pending:
            expr = pending.pop()
            if expr.getClass().getSimpleName() == "AggregateExpression":
                function = expr.aggregateFunction()
                if function.getClass().getSimpleName() in BUFFERED_AGGREGATES:
                    functions.append(function)
                continue
            children = expr.children()
            pending.extend(children.apply(i) for i in range(children.size()))
        if functions:
            found.append((node, functions))
    return found


def _group_bytes(rows: DataFrame, groups: list[Any], functions: list[Any], largest: int | None) -> int:
    """The estimated bytes the `functions` would hold for the `largest` groups of `rows` together (all but the
    constant arguments of each, kept per row: `_held_bytes`); `largest` None: `HASHED_GROUPS` of them.
    One job that returns one number."""
    column = per_jvm("_sl_expression_column", lambda: java_class("org.apache.spark.sql.classic.ExpressionUtils").column)
    held = [
        _held_bytes(Column(column(child)))
        for function in functions
        for child in (function.children().apply(i) for i in range(function.children().size()))
        if not child.foldable()
    ]
    if not held:
        return 0
    per_row = functools.reduce(lambda a, b: a + b, held)
    sizes = rows.groupBy(*[Column(column(g)) for g in groups]).agg(F.sum(per_row).alias("b"))
    top = sizes.orderBy(F.desc("b")).limit(largest or HASHED_GROUPS).agg(F.sum("b")).first()
    return int(top[0] or 0) if top is not None else 0


def _held_bytes(value: Column) -> Column:
    """A kept value's estimated size: its text's bytes and an object's overhead."""
    return F.coalesce(F.octet_length(value.cast("string")).cast("bigint"), F.lit(0)) + F.lit(VALUE_OVERHEAD)


def _post_order(plan: Any) -> list[Any]:
    """The nodes of a Spark plan tree (logical or physical), children before parents, without recursion (a plan
    may be deep)."""
    out: list[Any] = []
    stack: list[tuple[Any, bool]] = [(plan, False)]
    while stack:
        node, seen = stack.pop()
        if seen:
            out.append(node)
            continue
        stack.append((node, True))
        children = node.children()
        stack.extend((children.apply(i), False) for i in reversed(range(children.size())))
    return out


def _unbounded_build_sides(plan: Any) -> list[Any]:
    """The logical plans of the build sides of `plan`'s nested loop joins and null-aware anti joins, children
    before parents. A hash join the planner chose by an explicit hint (the reads' own, `queries._drop_positions`)
    is not one: its side's size is known."""
    found: list[Any] = []
    for node in _post_order(plan):
        name = node.getClass().getSimpleName()
        if name == "BroadcastNestedLoopJoinExec" or (name == "BroadcastHashJoinExec" and node.isNullAwareAntiJoin()):
            join = node.logicalLink().get()
            found.append(join.left() if node.buildSide().toString() == "BuildLeft" else join.right())
    return found


def _of_rows(session: SparkSession, plan: Any) -> Any:
    of_rows = per_jvm("_sl_dataset_of_rows", lambda: java_class("org.apache.spark.sql.classic.Dataset").ofRows)
    return of_rows(session._jsparkSession, plan)


def _measure(side: DataFrame) -> tuple[int, int]:
    """Rows (counted to one past the bound) and estimated bytes of `side`: one job that returns two numbers."""
    named, size = row_bytes(side.limit(MAX_BROADCAST_ROWS + 1))
    counted = named.select(size.alias("b")).agg(F.count(F.lit(1)), F.sum("b")).first()
    if counted is None:
        return 0, 0
    return int(counted[0]), int(counted[1] or 0)


# The rows a statement returns: a collect holds them all in the driver at once (a 3 GB result ended the JVM).

_FIXED_WIDTH = 16  # a number, date, timestamp, boolean or interval as the result carries it (an estimate)
_ROW_OVER_SHARE = "sl-result-row-over-its-share"
_TAKE_ORDERED = re.compile(r"\bTakeOrderedAndProject\b")  # Spark's heap of the first rows (physical plan text)


def _value_bytes(column: Column, data_type: T.DataType) -> Column:
    """An estimate of one value's size in the result: a string's or binary's bytes, a nested value's text, or a
    fixed width for the rest (computed by Spark next to the value, without moving the value)."""
    if isinstance(data_type, (T.StringType, T.BinaryType)):
        return F.coalesce(F.octet_length(column).cast("bigint"), F.lit(0)) + F.lit(1)
    if isinstance(data_type, (T.ArrayType, T.MapType, T.StructType, T.VariantType)):
        return F.coalesce(F.octet_length(column.cast("string")).cast("bigint"), F.lit(0)) + F.lit(1)
    return F.lit(_FIXED_WIDTH)


def row_bytes(df: DataFrame) -> tuple[DataFrame, Column]:
    """`df` with positional column names (a result may repeat a name) and its rows' estimated size."""
    fields = df.schema.fields
    named = df.toDF(*(f"c{i}" for i in range(len(fields))))
    sizes = [_value_bytes(F.col(f"c{i}"), f.dataType) for i, f in enumerate(fields)]
    return named, functools.reduce(lambda a, b: a + b, sizes, F.lit(0).cast("bigint"))


def result_bytes(df: DataFrame) -> int:
    """The estimated size of the rows of `df` (one Spark job that returns one number, not the rows)."""
    named, size = row_bytes(df)
    return _total(named.select(size.alias("b")))


def _total(sizes: DataFrame) -> int:
    found = sizes.agg(F.sum("b")).first()
    return int(found[0] or 0) if found is not None else 0


def result_too_large(cap: int) -> SqlError:
    return SqlError(
        f"Result set is larger than {cap} bytes (SL_SQL_MAX_RESULT_BYTES): add a LIMIT or select fewer or "
        "smaller columns"
    )


def bounded_rows(df: DataFrame, limit: int | None, max_bytes: int) -> list[Any]:
    """The rows of `df` (at most `limit`), refused past `max_bytes`, without ever holding more than that.

    With a row limit, each row may take its share, `max_bytes // limit`: the rows are collected with a check that
    fails the job on a larger row (usually nothing more is run). A result with a larger row, or with no row limit,
    is first measured by jobs that return only sizes. In an order (`ORDER BY`, no LIMIT of its own: the row limit
    makes its top-k), Spark keeps each task's first `limit` rows whole in a heap (take-ordered), whichever of them
    end in the result (1,000 rows of 2 MB ended the 2 GB JVM in 8.6 s): one job measures the narrowest and the
    widest row. Past `limit` narrowest rows the result is refused; within `limit` widest ones it is collected as
    planned; between the two the rows are sorted where a sort spills to disk (`without_top_k`) and the first
    `limit` measured. (An ORDER BY's own LIMIT was bounded before the query ran, `_check_top_k`.)
    """
    if limit is not None and limit > 0:
        share = max_bytes // limit
        named, size = row_bytes(df)
        guard = F.when(size > share, F.raise_error(F.lit(_ROW_OVER_SHARE))).otherwise(F.lit(True))
        try:
            return named.where(guard).limit(limit).toDF(*df.columns).collect()
        except (PySparkException, Py4JError) as exc:
            if _ROW_OVER_SHARE not in str(exc):
                raise
    limited = df.limit(limit) if limit is not None else df
    if limit is not None and _TAKE_ORDERED.search(limited._jdf.queryExecution().executedPlan().toString()):
        named, size = row_bytes(df)
        found = named.agg(F.count(F.lit(1)), F.min(size), F.max(size)).first()
        kept = min(limit, int(found[0])) if found is not None else 0
        narrowest, widest = (int(found[1] or 0), int(found[2] or 0)) if found is not None else (0, 0)
        if kept * narrowest > max_bytes:
            raise result_too_large(max_bytes)
        if kept * widest <= max_bytes:
            return limited.collect()
        limited = without_top_k(limited)
    if result_bytes(limited) > max_bytes:
        raise result_too_large(max_bytes)
    return limited.collect()
