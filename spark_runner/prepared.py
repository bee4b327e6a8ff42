"""A small load's plan analyzed once per shape, then run with each load's own rows.

A one-row load's job is a chain of a dozen DataFrame steps over an in-memory relation (its rows, split by the
server), and PySpark analyzes each step as it is built: in a warm server's JVM that analysis was ~45% of a
one-row load's samples, for a plan that is the same from load to load of one shape (table, headers, columns)
except for the rows at its leaves. So the first load of a shape keeps its analyzed plan; the next ones take
that plan with each leaf (a `LocalRelation`) replaced by a relation of their own rows with the same output
attributes, every node marked analyzed so Spark goes straight to optimizing. A plan qualifies when every leaf
is one of the in-memory relations the caller names by role (`LOAD`: the load's rows; `STORED`: the stored rows
of its keys a merge-on-write load compares with, read in the server's process) and every expression is
deterministic (the nodes' expressions are shared by the loads that reuse them, as any two queries over one
DataFrame share them). No literal of one load's rows may sit in the plan: a merge-on-write lookup filters its
stored rows by key before they become a relation (`queries.keyed_leaf`), not in the plan.

The key is everything the plan is built from: the load plan (the table's definition, buckets and partitions
included) with the request's per-load fields (label, comment, timeout, filter ratio, transaction mode) left out,
the field ids, whether rows are merged, the SQL of a group's per-load counts, the leaves' schemas. A key that
misses only costs a fresh build; a shape that changes (a schema change makes a new table definition) is a
new key. The plans live on the `SparkContext` whose JVM holds them, as the columns of `spark_runner.columns`
do: a JVM replaced after a crash starts with none. At most `MAX_PLANS`; past that the cache starts over.

A rowset that Spark's optimizer folds into one in-memory relation (`load_job._folded_load`) is kept optimized
rather than analyzed, when it is projections and filters alone: the optimizer ran once, without the rule that
folds (`ConvertToLocalRelation`), in a clone of the load's session; each next load folds its own rows through it
with that rule alone (`reuse`, `folded_relation`), and reads them as Arrow (`arrow_frames.relation_rows`).

All of this names Spark's internal classes and methods (`LocalRelation`, `Dataset.ofRows`, the optimizer's rule,
`ArrowConverters`), which a Spark release may rename or change. A call that finds no such class or method (py4j's
`Py4JError`, not an exception the JVM threw) turns the reuse off for that JVM, with a warning in the log: every
load then builds its plan afresh, as a load of a new shape does (`internals_missing`).

The load's counts come from the plan's `observe` nodes (`CollectMetrics`), read from the query execution of
each run by the names the first build gave them (`Prepared.name`).

A load that reuses a plan needs its own rows' relation alone, not the chain its source would build over them
(a projection Spark analyzes on creation: ~10 ms of a one-row load on 2 cores). A small source is therefore
`deferred`: a DataFrame whose plan is made the first time anything asks for it (a load of a new shape, the
error lines of a load with rejected rows), and never for a load that reuses its shape's plan.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame
from pyspark.sql.types import StructType

from spark_runner.columns import context_cache, internals_missing, java_class, per_jvm
from spark_runner.planning import LoadPlan

log = logging.getLogger(__name__)

MAX_PLANS = 256
LOCAL_RELATION = "org.apache.spark.sql.catalyst.plans.logical.LocalRelation"
# the nodes a plan may have above its leaves to be kept optimized and folded per load (`remember(folded=True)`):
# their optimization never depends on the rows (no aggregate, sort, limit or join, whose rules read a relation's
# row count)
FOLDABLE = {"org.apache.spark.sql.catalyst.plans.logical.Project", "org.apache.spark.sql.catalyst.plans.logical.Filter"}
CONVERT_TO_LOCAL = "org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation"
EXCLUDED_RULES = "spark.sql.optimizer.excludedRules"
CODEGEN_FACTORY_MODE = "spark.sql.codegen.factoryMode"
SESSION = "org.apache.spark.sql.classic.SparkSession"
_ATTR = "_sl_prepared"
_LEAF = "_sl_leaf"  # on a small source: the DataFrame of its in-memory relation alone
_MEMBERS = "_sl_prepared_members"  # the JVM's class and methods `reuse` calls (`_members`), per JVM
_FOLDED = "_sl_folded"  # on a rowset `reuse` folded: its relation
_RULE = "_sl_prepared_fold"  # `_fold_members`, per JVM
_OFF = ("internals missing",)  # in a JVM's plans: its Spark lacks an internal member this module calls
_LOCK = threading.Lock()
# fields of a request that change no step of its job (the transaction's and the reply's)
PER_LOAD = {"label": "", "comment": "", "timeout_s": 0, "max_filter_ratio": 0.0, "two_phase_commit": False}


LOAD = "load"  # the load's own rows
STORED = "stored"  # the stored rows of its keys (merge-on-write)

# a plan as kept: (node, children) for an inner node, (role, output attributes) for a leaf
Tree = tuple[Any, tuple["Tree", ...]] | tuple[str, Any]


@dataclasses.dataclass(frozen=True)
class Prepared:
    tree: Tree  # the analyzed plan, its leaves by role (folded: the optimized plan, unfolded)
    name: str  # the suffix of its `CollectMetrics` nodes' names (the first build's)
    schema: StructType  # its output's (the JVM is not asked again for each load)
    folds: int = 0  # a folded plan: how many passes of `ConvertToLocalRelation` fold it into one relation
    session: Any = None  # a folded plan: the JVM session its passes run in (`_optimized_unfolded`)


class _Deferred(ClassicFrame):
    """A DataFrame whose JVM side (`_jdf`, which every PySpark method reads) is `build()`'s, made when first read."""

    def __init__(self, build: Callable[[], DataFrame], session: SparkSession) -> None:
        self._build = build
        self._made: Any = None
        super().__init__(None, session)

    @property
    def _jdf(self) -> Any:
        if self._made is None:
            self._made = self._build()._jdf
        return self._made

    @_jdf.setter
    def _jdf(self, value: Any) -> None:
        if value is not None:
            self._made = value


def deferred(build: Callable[[], DataFrame], session: SparkSession) -> DataFrame:
    """The DataFrame `build()` makes, made only when something reads it (not for a load that reuses a plan)."""
    return _Deferred(build, session)


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
    plans: dict[tuple[Any, ...], Any] | None = context_cache(_ATTR)
    return None if plans is None or _OFF in plans else plans


def _turn_off(exc: Exception) -> None:
    """No plan is kept or reused in this JVM any more (`internals_missing`)."""
    plans = context_cache(_ATTR)
    if plans is None:
        return
    with _LOCK:
        plans.clear()
        plans[_OFF] = True
    log.warning("plans are no longer reused in this JVM: this Spark lacks an internal member they need: %s", exc)


def _first_id(relation: Any) -> int:
    """The expression id of a relation's first output attribute: which leaf of a plan it is."""
    return int(relation.output().apply(0).exprId().id())


class _NotReusable(Exception):
    pass


def remember(
    key: tuple[Any, ...], out: DataFrame, name: str, leaves: Mapping[str, DataFrame], *, folded: bool = False
) -> None:
    """Keep the analyzed plan of `out` (a load's rowset, built fresh) for the next loads of its shape, if it is
    deterministic and each of its leaves is one of the in-memory relations `leaves` names by role.

    `folded`: a rowset Spark's optimizer folds into one in-memory relation (`load_job._folded_load`). Its plan is
    kept optimized, without that folding (`_optimized_unfolded`), when it holds only projections and filters:
    each next load then folds its own rows through it (`reuse`) instead of optimizing the whole chain again, the
    largest part of a one-row load's time in the JVM. Otherwise its analyzed plan is kept, as for any load."""
    plans = _plans()
    if plans is None or key in plans:
        return
    try:
        kept = _kept(out, name, leaves, folded=folded)
    except Exception as exc:
        if not internals_missing(exc):
            raise
        _turn_off(exc)
        return
    if kept is None:
        return
    with _LOCK:
        if len(plans) >= MAX_PLANS:
            plans.clear()
        plans[key] = kept


def _kept(out: DataFrame, name: str, leaves: Mapping[str, DataFrame], *, folded: bool) -> Prepared | None:
    """What `remember` keeps of `out`, or None when its plan does not qualify."""
    root = out._jdf.queryExecution().analyzed()
    if not root.deterministic():
        return None
    roles = {}
    for role, frame in leaves.items():
        relation = frame._jdf.queryExecution().analyzed()
        if relation.getClass().getName() != LOCAL_RELATION or relation.output().isEmpty():
            return None
        roles[_first_id(relation)] = role
    folds, session = 0, None
    if folded:
        optimized = _optimized_unfolded(out, root)
        if optimized is not None:
            root, folds, session = optimized

    def walk(node: Any) -> Tree:
        children = node.children()
        count = children.size()
        if count > 10:  # `java.util.List.of` takes up to ten elements one by one (a Union of many: not kept)
            raise _NotReusable
        if count:
            return node, tuple(walk(children.apply(i)) for i in range(count))
        if node.getClass().getName() != LOCAL_RELATION or node.output().isEmpty():
            raise _NotReusable
        role = roles.get(_first_id(node))
        if role is None:
            raise _NotReusable
        return role, node.output()

    try:
        tree = walk(root)
    except _NotReusable:
        return None
    return Prepared(tree, name, out.schema, folds, session)


def _optimized_unfolded(out: DataFrame, analyzed: Any) -> tuple[Any, int, Any] | None:
    """The plan of `out` optimized as Spark optimizes it, except that its in-memory relation is not folded
    through it (`ConvertToLocalRelation` left out, in a clone of the session: same settings otherwise), how many
    passes of that rule then fold it whole, and the session they run in (`_folded`); None when it is not made of
    projections and filters alone (in the analyzed plan and in the optimized one) over one relation, or when its
    own rows do not fold."""
    if not _projections_only(analyzed):
        return None
    session = out.sparkSession._jsparkSession.cloneSession()
    conf = session.conf()
    conf.set(EXCLUDED_RULES, ",".join(r for r in (conf.get(EXCLUDED_RULES, ""), CONVERT_TO_LOCAL) if r))
    # a filter's pass would generate the Java code of its condition for every load (a cache hit, after ~5 ms of
    # generating it): the few rows of a load are evaluated interpreted, as the rule does a projection's
    conf.set(CODEGEN_FACTORY_MODE, "NO_CODEGEN")
    optimized = _members()[3](session, analyzed).queryExecution().optimizedPlan()
    if not _projections_only(optimized):
        return None
    folds, node = 0, optimized
    while node.children().size():
        folds, node = folds + 1, node.children().apply(0)
    if _folded(optimized, folds, session).getClass().getName() != LOCAL_RELATION:
        return None
    return optimized, folds, session


def _projections_only(node: Any) -> bool:
    """Whether the plan is a chain of projections and filters over one in-memory relation."""
    while True:
        children = node.children()
        if children.size() == 0:
            return bool(node.getClass().getName() == LOCAL_RELATION)
        if children.size() != 1 or node.getClass().getName() not in FOLDABLE:
            return False
        node = children.apply(0)


def _folded(plan: Any, folds: int, session: Any) -> Any:
    """`plan` after `folds` passes of `ConvertToLocalRelation` (each folds at least its lowest node), run with
    `session` the thread's active one in the JVM (the settings the rule reads), as it was before afterwards."""
    apply, get_active, set_active, clear_active = per_jvm(_RULE, _fold_members)
    active = get_active()
    set_active(session)
    try:
        for _ in range(folds):
            plan = apply(plan)
    finally:
        if active.isDefined():
            set_active(active.get())
        else:
            clear_active()
    return plan


def _fold_members() -> tuple[Any, Any, Any, Any]:
    """The rule's `apply` and the session's static `getActiveSession`, `setActiveSession` and
    `clearActiveSession`, looked up once per JVM (py4j asks the JVM about a member each time it is named)."""
    rule, sessions = java_class(CONVERT_TO_LOCAL), java_class(SESSION)
    return rule.apply, sessions.getActiveSession, sessions.setActiveSession, sessions.clearActiveSession


def reuse(spark: SparkSession, key: tuple[Any, ...], leaves: Mapping[str, DataFrame]) -> tuple[DataFrame, str] | None:
    """The rowset of a load of a known shape over the rows of `leaves` (in-memory relations by role), analyzed
    already (a folded plan: folded already, one in-memory relation), and the suffix of its counts' names; None for
    a shape not seen yet."""
    plans = _plans()
    found = plans.get(key) if plans is not None else None
    if found is None:
        return None
    try:
        return _reused(spark, found, leaves)
    except Exception as exc:
        if not internals_missing(exc):
            raise
        _turn_off(exc)
        return None


def _reused(spark: SparkSession, found: Prepared, leaves: Mapping[str, DataFrame]) -> tuple[DataFrame, str]:
    relations = {role: frame._jdf.queryExecution().analyzed() for role, frame in leaves.items()}
    local, list_of, to_seq, of_rows = _members()

    def build(tree: Tree) -> Any:
        head, rest = tree
        if isinstance(head, str):
            rows = relations[head]
            node = local(rest, rows.data(), rows.isStreaming(), rows.stream())
            node.setAnalyzed()
            return node
        # a copy of an analyzed node is analyzed: only the new leaves need marking (and the root, below)
        return head.withNewChildren(to_seq(list_of(*[build(child) for child in rest])))

    root = build(found.tree)
    if found.folds:
        root = _folded(root, found.folds, found.session)
    root.setAnalyzed()  # a no-op, unless a copy came out unmarked: then it marks the whole tree
    dataset = of_rows(spark._jsparkSession, root)
    frame = DataFrame(dataset, spark)
    frame._schema = found.schema
    if found.folds:
        setattr(frame, _FOLDED, root)
    return frame, found.name


def folded_relation(frame: DataFrame) -> Any | None:
    """The in-memory relation (JVM) a folded plan reused for `frame` came out as (`reuse`), else None."""
    return getattr(frame, _FOLDED, None)


def _members() -> tuple[Any, Any, Any, Any]:
    """The JVM's `LocalRelation` class and the static methods `reuse` calls (`java.util.List.of`,
    `PythonUtils.toSeq`, `Dataset.ofRows`), looked up once per JVM."""

    def lookup() -> tuple[Any, Any, Any, Any]:
        python_utils = java_class("org.apache.spark.api.python.PythonUtils")
        dataset = java_class("org.apache.spark.sql.classic.Dataset")
        return java_class(LOCAL_RELATION), java_class("java.util.List").of, python_utils.toSeq, dataset.ofRows

    found: tuple[Any, Any, Any, Any] = per_jvm(_MEMBERS, lookup)
    return found


def observed(out: DataFrame, name: str) -> dict[str, Any]:
    """The values of the `observe` node `name` in the run of `out` that just finished."""
    found = out._jdf.queryExecution().observedMetrics().get(name)
    if found.isEmpty():
        raise RuntimeError(f"the load's counts ({name}) were not observed")
    values: dict[str, Any] = json.loads(found.get().json())
    return values
