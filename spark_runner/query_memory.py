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
# a side Spark must broadcast whole is refused past either bound (as Spark estimates rows in memory: the values'
# bytes and 16 bytes a value besides, `queries.row_bytes`); a hash relation takes ~2x that in the heap
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

    def build() -> SparkSession:
        session = spark.newSession()
        for key, value in QUERY_CONF.items():
            session.conf.set(key, value)
        return session

    found: SparkSession = per_jvm("_sl_query_session", build)
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
    _check_aggregates(frame, budget)
    _check_broadcasts(frame, budget)
    _check_top_k(frame, budget, value_bytes)


def _spend(budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise SqlError(
            f"The query is too complex: it needs more than {MAX_MEASURES} measures of what it would hold in memory "
            "(nested aggregates that collect values, or joins without an equality condition)"
        )


def _check_aggregates(frame: DataFrame, budget: list[int]) -> None:
    plan = frame._jdf.queryExecution().optimizedPlan()
    if _BUFFERED_NAME.search(plan.toString()) is None:
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


def _check_broadcasts(frame: DataFrame, budget: list[int]) -> None:
    execution = frame._jdf.queryExecution()
    if _JOIN.search(execution.optimizedPlan().toString()) is None:
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


def _check_top_k(frame: DataFrame, budget: list[int], value_bytes: int) -> None:
    """`ORDER BY ... LIMIT n` keeps its n first rows whole in a heap per task (Spark's take-ordered): n rows as
    wide as the query can make them must fit `MAX_TOP_K_BYTES`, else their widest row is measured first."""
    plan = frame._jdf.queryExecution().optimizedPlan()
    if "LocalLimit" not in plan.toString():
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
        from spark_runner.queries import row_bytes  # (queries imports this module)

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
    from spark_runner.queries import row_bytes  # (queries imports this module)

    named, size = row_bytes(side.limit(MAX_BROADCAST_ROWS + 1))
    counted = named.select(size.alias("b")).agg(F.count(F.lit(1)), F.sum("b")).first()
    if counted is None:
        return 0, 0
    return int(counted[0]), int(counted[1] or 0)
