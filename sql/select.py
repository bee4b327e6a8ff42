"""SELECT over merged tables: each referenced table becomes a temporary view of its merged rows.

User SQL reaches Spark only through `run_query`, after three steps, each refusing with a `SqlError`:

    check_query     a positive check: the root is a query and every node below it is a query clause, an
                    operator, a literal or a function of `sql.functions.ALLOWED_FUNCTIONS` (so no INSERT
                    OVERWRITE DIRECTORY, DDL, SET, CACHE, hints or commands inside a CTE, subquery or UNION)
    bind_tables     every table reference is a CTE visible where it stands or a catalog table the user holds
                    SELECT_PRIV on, replaced by a view of its merged rows (information_schema's views by the
                    user's view of the catalog); the one table function is `range` with constant, bounded arguments
    cap_growth      calls that grow a value with a count or a product of lengths (repeat, lpad, concat, replace,
                    array_repeat, ...) raise an error past `QueryLimits` before they allocate

The tree is rendered for Spark without comments; the session runs with SQL on files and `${...}` variable
substitution off (`spark_runner.session.BASE_CONF`).
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from loaders.regex_cost import PatternRefused, bound_patterns
from spark_runner.queries import QueryViews, collect_result
from spark_runner.sqltext import lit
from sql.bucket_filter import pinned_values
from sql.context import QueryLimits, SqlContext
from sql.functions import ALLOWED_FUNCTIONS
from sql.information_schema import INFORMATION_SCHEMA, information_schema_view
from sql.partition_filter import mark_temporary_partitions, query_partitions, temporary_target
from sql.privileges import require_table
from sql.results import ResultSet
from sql.session import Session
from tables.accounts import Priv, Privileges
from tables.catalog import Catalog
from tables.errors import DorisError, SqlError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def _classes(*names: str) -> tuple[type[exp.Expression], ...]:
    # sqlglot renames node classes between releases: a missing one is simply not allowed
    return tuple(cls for n in names if isinstance(cls := getattr(exp, n, None), type))


# Query clauses and leaves; operators (Binary, Unary, Predicate) and functions are checked by kind.
_QUERY_NODES = _classes(
    "Select", "Union", "Intersect", "Except", "Subquery", "With", "CTE", "From", "Join", "Where", "Group", "Having",
    "Qualify", "Order", "Ordered", "Limit", "Offset", "Fetch", "Distinct", "Lateral", "Values", "Tuple", "Table",
    "TableAlias", "Alias", "Aliases", "Column", "Identifier", "Star", "Literal", "Null", "Boolean", "DataType",
    "DataTypeParam", "Interval", "IntervalSpan", "Var", "Window", "WindowSpec", "Bracket", "Cube", "Rollup",
    "GroupingSets", "Lambda", "TableSample", "Kwarg", "RespectNulls", "IgnoreNulls", "Filter", "WithinGroup",
    "HexString", "BitString", "ByteString", "RawString", "National", "JSONPath", "JSONPathKey", "JSONPathRoot",
    "JSONPathSubscript", "JSONPathWildcard", "Any", "All", "Escape", "Slice", "ColumnPosition",
)  # fmt: skip
_OPERATORS = (exp.Binary, exp.Unary, exp.Predicate)

_CALL = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def parse_query(text: str) -> exp.Expression:
    try:
        tree = sqlglot.parse_one(mark_temporary_partitions(text), dialect="doris")
    except ParseError as exc:
        detail = exc.errors[0] if exc.errors else {}
        raise SqlError(f"Syntax error: {detail.get('description', exc)}") from None
    if not isinstance(tree, exp.Expression):
        raise SqlError("Syntax error: empty statement")
    return tree


# arguments kept as they are when a call is rendered to find its name (small, and what a renderer may look at)
_NAME_LEAVES = _classes(
    "Literal", "Identifier", "Var", "DataType", "Null", "Boolean", "Star", "Column", "JSONPath", "Placeholder",
)  # fmt: skip


def _arg_stand_in(value: object) -> object:
    if not isinstance(value, exp.Expression):
        return value
    if isinstance(value, _NAME_LEAVES):
        return value.copy()
    return exp.column("__arg")


def spark_function_name(node: exp.Func) -> str:
    """The name Spark resolves for this call: the call as rendered for Spark, lower-cased.

    Only the call itself is rendered: each argument that is not a leaf stands in as a column. Rendering the whole
    subtree for every call made `WHERE k=1 AND k=1 AND ...` (each AND a call) quadratic: 1000 of them held a core
    for 65 s before the statement's timeout could count."""
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    args = {
        key: [_arg_stand_in(v) for v in value] if isinstance(value, list) else _arg_stand_in(value)
        for key, value in node.args.items()
    }
    match = _CALL.match(type(node)(**args).sql(dialect="spark", comments=False))
    return match[1].lower() if match else node.sql_name().lower()


# Nodes a query may have once every reference to a WITH query is replaced by that query, as Spark inlines them:
# `WITH c1 AS (SELECT .. FROM c0 UNION ALL SELECT .. FROM c0), c2 AS (.. c1 .. c1), ...` doubles with each CTE,
# and 17 of them (1.5 KB of text) kept the JVM's driver planning past the statement's query_timeout until the
# wedged-JVM watch killed it. Spark plans about 10 ms per copy of a small query, so this keeps planning within
# seconds; Doris does not inline a CTE referenced more than once. A query without WITH is held to it too: Spark's
# whole-stage codegen compiles each stage's expressions into one Java method in the driver, which no job cancel
# reaches, and its cost grows faster than the text (`coalesce` of 5000 arguments, 49 KB, ran the 2 GB driver out
# of memory in 53 s; 8000 CASE branches, 190 KB, too). The constants of an IN list are not counted: Spark turns them
# into one hash set (20,000 of them plan in about 3 s).
MAX_EXPANDED_NODES = 20_000
# Arguments of one call (CASE's WHEN branches, COALESCE's, GREATEST's ...): one huge call is the costliest shape for
# that compiler (2500 COALESCE arguments took 6 s, 5000 ended the JVM). Doris's `expr_children_limit` is 10000.
MAX_EXPRESSION_CHILDREN = 1000


class CteScope:
    """Which WITH query a table reference names: the innermost in scope (enclosing WITHs; inside a CTE, only the
    CTEs before it). Each WITH's names are indexed once, so a lookup costs the reference's depth, not the number
    of CTEs (a chain of 2000 CTEs took 19 s when every lookup walked every CTE before it)."""

    def __init__(self) -> None:
        self._names: dict[int, dict[str, list[int]]] = {}

    def _index(self, with_: exp.With) -> dict[str, list[int]]:
        names = self._names.get(id(with_))
        if names is None:
            names = {}
            for i, cte in enumerate(with_.expressions):
                names.setdefault(cte.alias_or_name.lower(), []).append(i)
            self._names[id(with_)] = names
        return names

    def cte_of(self, table: exp.Table) -> exp.CTE | None:
        """Raises nothing; None for a catalog table (or a qualified or function reference)."""
        if table.args.get("db") is not None or table.args.get("catalog") is not None:
            return None
        if not isinstance(table.this, exp.Identifier):
            return None
        name = table.name.lower()
        grand: exp.Expr | None = None
        child: exp.Expr = table
        node = table.parent
        while node is not None:
            with_ = node.args.get("with_") or node.args.get("with")
            if isinstance(with_, exp.With):
                found = self._index(with_).get(name)
                if found:
                    # inside one of these CTEs (`grand`): only the ones before it are defined there
                    before = bisect.bisect_left(found, grand.index or 0) if child is with_ and grand else len(found)
                    if before:
                        return with_.expressions[found[before - 1]]  # type: ignore[no-any-return]
            grand, child, node = child, node, node.parent
        return None


def _in_list_constant(node: exp.Expr) -> bool:
    """A constant of an IN list (`k IN (1, -2, 'x', NULL)`)."""
    if not (isinstance(node.parent, exp.In) and node.arg_key == "expressions"):
        return False
    inner = node.this if isinstance(node, exp.Neg) else node
    return isinstance(inner, (exp.Literal, exp.Null, exp.Boolean))


def expanded_size(tree: exp.Expression) -> int:
    """Nodes of the query with each reference to a WITH query counted as that query's own expanded size (its
    definition counts nothing itself), IN-list constants not counted. Linear: each node is visited once, CTEs
    before the queries that use them."""
    sizes: dict[int, int] = {}
    scope = CteScope()

    def size_of(root: exp.Expr) -> int:
        total = 0
        stack = [root]
        while stack:
            node = stack.pop()
            if isinstance(node, exp.CTE) and node is not root:
                continue  # counted where it is referenced
            if _in_list_constant(node):
                continue  # one hash set in Spark, whatever its length
            total += 1
            if isinstance(node, exp.Table):
                cte = scope.cte_of(node)
                if cte is not None:
                    total += sizes.get(id(cte), 0)
            stack.extend(node.iter_expressions())
        return total

    # CTEs innermost and earliest first: a CTE names only CTEs before it or inside it
    order: list[exp.CTE] = []
    stack: list[tuple[exp.Expr, bool]] = [(tree, False)]
    while stack:
        node, done = stack.pop()
        if done:
            if isinstance(node, exp.CTE):
                order.append(node)
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(list(node.iter_expressions())))
    for cte in order:
        sizes[id(cte)] = size_of(cte.this)
    return size_of(tree)


def check_query(tree: exp.Expression) -> None:
    """Raises: SqlError unless the tree is a query made only of query clauses, operators and allowed functions,
    no larger than `MAX_EXPANDED_NODES` once its WITH queries are inlined, and no call has more than
    `MAX_EXPRESSION_CHILDREN` arguments."""
    if not isinstance(tree, exp.Query):
        raise SqlError(f"Only a query is allowed here, not {tree.key.upper()}")
    expanded = expanded_size(tree)
    if expanded > MAX_EXPANDED_NODES:
        if tree.find(exp.CTE) is not None and expanded > sum(1 for n in tree.walk() if not _in_list_constant(n)):
            raise SqlError(
                f"The query is too complex once its WITH queries are expanded: {expanded} nodes, more than "
                f"{MAX_EXPANDED_NODES}; reference each WITH query fewer times"
            )
        raise SqlError(
            f"The query is too complex: {expanded} nodes, more than {MAX_EXPANDED_NODES}; split it into smaller queries"
        )
    for node in tree.walk():
        if isinstance(node, exp.Func):
            if isinstance(node.parent, exp.Table) and node.arg_key == "this":
                continue  # a table function: bind_tables decides
            if sum(1 for _ in node.iter_expressions()) > MAX_EXPRESSION_CHILDREN:
                raise SqlError(f"Exceeded the maximum number of child expressions ({MAX_EXPRESSION_CHILDREN}).")
            check_function(node)
        elif isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
            # `builtin.reflect(...)`, `system.session.f(...)`: qualified names reach other function namespaces
            raise SqlError(f"function {node.sql(dialect='doris')[:80]} is not allowed")
        elif isinstance(node, exp.Partition) and isinstance(node.parent, exp.Table) and node.arg_key == "partition":
            continue  # `FROM t PARTITION (p1, p2)`: names, which bind_tables resolves (`sql.partition_filter`)
        elif isinstance(node, exp.With) and node.args.get("recursive"):
            raise SqlError("WITH RECURSIVE is not supported")
        elif not isinstance(node, _QUERY_NODES + _OPERATORS):
            raise SqlError(f"{node.key.upper()} is not allowed in a query")


# functions whose message argument becomes the statement's error text: a constant message only, so an error
# cannot carry values the user may not SELECT (an UPDATE reads its own rows without SELECT_PRIV)
_MESSAGE_ARGUMENT = {"raise_error": 0, "assert_true": 1}


def check_function(node: exp.Func) -> None:
    """Raises: SqlError for a function outside the allow-list, or a `raise_error`/`assert_true` message that is
    not a string constant."""
    name = spark_function_name(node)
    if name not in ALLOWED_FUNCTIONS:
        raise SqlError(f"function {name} is not allowed")
    if name in _MESSAGE_ARGUMENT:
        args = _arguments(node)
        position = _MESSAGE_ARGUMENT[name]
        message = args[position] if len(args) > position else None
        if message is None and name == "raise_error":
            raise SqlError("raise_error takes a constant message here")
        if message is not None and not (isinstance(message, exp.Literal) and message.is_string):
            raise SqlError(f"{name} takes a constant message here")


def check_query_functions(tree: exp.Expression) -> None:
    """Raises: SqlError for a node or function a query may not hold (a scalar expression's check)."""
    check_query(exp.select(tree.copy()))


def _int_literal(node: exp.Expression | None) -> int | None:
    if isinstance(node, exp.Neg):
        inner = _int_literal(node.this)
        return None if inner is None else -inner
    if isinstance(node, exp.Literal) and not node.is_string and re.fullmatch(r"\d+", node.name):
        return int(node.name)
    return None


def range_size(args: list[exp.Expression]) -> int:
    """Rows of `range(end)`, `range(start, end[, step[, partitions]])` with integer literals.

    Raises:
        SqlError: a non-constant argument.
    """
    values = [_int_literal(a) for a in args]
    if not 1 <= len(values) <= 4 or any(v is None for v in values):
        raise SqlError("table function range takes 1 to 4 integer constants")
    ints = [v for v in values if v is not None]
    start, end, step = (0, ints[0], 1) if len(ints) == 1 else (ints[0], ints[1], ints[2] if len(ints) > 2 else 1)
    if len(ints) == 4 and not 1 <= ints[3] <= 64:
        raise SqlError("table function range takes at most 64 partitions")
    if step == 0:
        raise SqlError("table function range needs a non-zero step")
    return max(0, -(-(end - start) // step))


def _check_table_function(table: exp.Table, limits: QueryLimits) -> None:
    func = table.this
    name = spark_function_name(func) if isinstance(func, exp.Func) else func.key
    if name != "range" or not isinstance(func, exp.Anonymous):
        raise SqlError(f"table function {name} is not allowed")
    if range_size(list(func.expressions)) > limits.max_generated_rows:
        raise SqlError(
            f"table function range produces more than {limits.max_generated_rows} rows (SL_SQL_MAX_GENERATED_ROWS)"
        )


def _catalog_table(table: exp.Table) -> tuple[str | None, str]:
    """(database, table) of a plain reference; Doris's own catalog is `internal`."""
    catalog = table.args.get("catalog")
    if catalog is not None and catalog.name.lower() != "internal":
        raise SqlError(f"Unknown catalog '{catalog.name}'")
    if not isinstance(table.this, exp.Identifier):
        raise SqlError(f"table reference {table.sql(dialect='doris')[:80]} is not allowed")
    return (table.text("db") or None), table.name


def bind_tables(
    views: QueryViews,
    catalog: Catalog,
    tree: exp.Expression,
    *,
    db: str,
    show_hidden: bool,
    privileges: Privileges,
    limits: QueryLimits | None = None,
    row_source: exp.Table | None = None,
) -> exp.Expression:
    """Replace every table reference by a view of its merged rows (made in `views`); returns the new tree.

    Each catalog table needs SELECT_PRIV, except `row_source`: the one reference (this very node of `tree`, not
    its name) an UPDATE or a DELETE builds to read back the rows it changes, whose statement checked LOAD_PRIV.
    Any other reference to the same table (a subquery in WHERE or SET) needs SELECT_PRIV like any table, as in
    Doris. `information_schema.schemata / tables / columns` become the user's view of the catalog
    (`sql.information_schema`).

    Raises:
        SqlError: a reference that is neither a visible CTE nor a catalog table, or a refused table function.
        StatementDenied: a table the user may not SELECT from.
    """
    limits = limits or QueryLimits()
    originals = list(tree.find_all(exp.Table))
    if row_source is not None and not any(t is row_source for t in originals):
        raise SqlError("the row source of the statement is not in its query")
    tree = tree.copy()
    copies = list(tree.find_all(exp.Table))  # the same walk of a copy: the same order
    exempt = next((c for o, c in zip(originals, copies, strict=True) if o is row_source), None)
    scope = CteScope()
    named: set[tuple[str, str]] = set()  # (db, table) of the references a column may name as `db.table.column`
    for table in copies:
        if not isinstance(table.this, exp.Identifier):
            _check_table_function(table, limits)
            continue
        table_db, name = _catalog_table(table)
        if scope.cte_of(table) is not None:
            continue
        if not (table_db or db):
            raise SqlError("No database selected")
        if (table_db or db).lower() == INFORMATION_SCHEMA:
            table.replace(information_schema_view(catalog, privileges, name, table.alias or name))
            continue
        if table is not exempt:
            require_table(privileges, Priv.SELECT, "SELECT", table_db or db, name)
        try:
            handle = catalog.load(table_db or db, name)
        except DorisError as exc:
            raise SqlError(exc.message) from None
        handle = temporary_target(catalog, handle, table)
        partitions = query_partitions(table, handle.definition)
        pinned = pinned_values(table, handle.definition)
        view = views.merged_view(handle, show_hidden=show_hidden, pinned=pinned, partitions=partitions)
        if not table.alias:
            table.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
            named.add(((table_db or db).lower(), name.lower()))
        table.set("this", exp.to_identifier(view))
        table.set("db", None)
        table.set("catalog", None)
    for column in tree.find_all(exp.Column):  # `db.t.k` (Doris, MySQL) names the column `k` of the reference `t`
        if column.args.get("db") is not None and (column.text("db").lower(), column.table.lower()) in named:
            column.set("db", None)
            column.set("catalog", None)
    return tree


# -- growth caps ------------------------------------------------------------------------------------------------
# Each entry: the bound of the call's result from its arguments (`a0`, `a1`, ... in Spark SQL) and which
# limit it is held to. The call is rewritten so its arguments are evaluated once, the bound compared, and the
# function called only within the limit.
_LEN = "CAST(length({}) AS BIGINT)"
_TEXT_LEN = "greatest(coalesce(CAST(octet_length(CAST({} AS STRING)) AS BIGINT), 0), 1)"
_GROWTH: dict[str, tuple[Callable[[list[str]], str], str]] = {
    "repeat": (lambda a: f"{_LEN.format(a[0])} * CAST({a[1]} AS BIGINT)", "bytes"),
    "space": (lambda a: f"CAST({a[0]} AS BIGINT)", "bytes"),
    "lpad": (lambda a: f"CAST({a[1]} AS BIGINT)", "bytes"),
    "rpad": (lambda a: f"CAST({a[1]} AS BIGINT)", "bytes"),
    "randstr": (lambda a: f"CAST({a[0]} AS BIGINT)", "bytes"),
    "concat": (lambda a: " + ".join(f"coalesce({_LEN.format(x)}, 0)" for x in a) or "0", "bytes"),
    "concat_ws": (  # string arguments (array ones: `_concat_ws_bound`)
        lambda a: " + ".join(f"coalesce({_LEN.format(x)}, 0)" for x in a[1:]) + f" + {_LEN.format(a[0])} * {len(a)}",
        "bytes",
    ),
    "replace": (lambda a: f"{_LEN.format(a[0])} * greatest({_LEN.format(a[2])}, 1)" if len(a) > 2 else "0", "bytes"),
    "regexp_replace": (lambda a: f"{_LEN.format(a[0])} * greatest({_LEN.format(a[2])}, 1)", "bytes"),
    "overlay": (lambda a: " + ".join(f"coalesce({_LEN.format(x)}, 0)" for x in a[:2]), "bytes"),
    "array_join": (
        lambda a: (
            f"aggregate({a[0]}, CAST(0 AS BIGINT), (acc, x) -> acc + coalesce(length(x), 0) + {_LEN.format(a[1])})"
        ),
        "bytes",
    ),
    "array_repeat": (lambda a: f"CAST({a[1]} AS BIGINT)", "rows"),
    "array_insert": (lambda a: f"abs(CAST({a[1]} AS BIGINT))", "rows"),
}
# a second bound for calls whose size is also the product of a count and a value's size: array_repeat of a
# 10 MB string 10M times is 100 TB (its element count alone is within SL_SQL_MAX_GENERATED_ROWS)
_GROWTH_BYTES: dict[str, Callable[[list[str]], str]] = {
    "array_repeat": lambda a: f"CAST({a[1]} AS BIGINT) * {_TEXT_LEN.format(a[0])}",
}
# fixed bounds of sizes Spark allocates from a constant argument (checked statically, `_check_static_growth`)
MAX_FORMAT_NUMBER_SCALE = 1000  # MySQL clamps FORMAT's decimals at 30
MAX_SKETCH_BYTES = 16 * 1024 * 1024  # count_min_sketch's table: depth * width longs
MAX_PERCENTILE_ACCURACY = 10_000  # Spark's default; Doris's percentile_approx compression is at most 10000 too
_STATIC_GROWTH = frozenset(
    "sequence format_string printf format_number count_min_sketch percentile_approx approx_percentile".split()
)
_NUMBER = re.compile(r"(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)(?:[dDfF]|BD|bd)?")
_FORMAT_WIDTH = re.compile(r"%(?:\d+\$)?[-#+ 0,(<]*(\d+)?(?:\.(\d+))?")


def _arguments(node: exp.Func) -> list[exp.Expression]:
    """The call's arguments in Spark's positional order (sqlglot keeps them in `arg_types` order)."""
    out: list[exp.Expression] = []
    for key in node.arg_types:
        value = node.args.get(key)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, exp.Expression):
                out.append(item)
    return out


# calls whose result is an array of strings: `concat_ws` joins their elements (`length` of one fails to analyse)
_STRING_ARRAYS = frozenset(
    "array array_agg array_compact array_distinct array_except array_intersect array_remove array_sort "
    "array_union collect_list collect_set filter map_keys map_values slice sort_array split".split()
)


def _concat_ws_bound(node: exp.Func, refs: list[str]) -> str:
    """`concat_ws`'s size: each string argument's length, each array argument's elements', and a separator after
    each string and each element."""
    args = _arguments(node)
    parts = [f"{_LEN.format(refs[0])} * {len(refs)}"]
    for arg, ref in zip(args[1:], refs[1:], strict=True):
        call = arg.this if isinstance(arg, exp.Window) else arg  # collect_list(x) OVER (...) too
        if isinstance(call, exp.Func) and spark_function_name(call) in _STRING_ARRAYS:
            each = f"coalesce(length(x), 0) + {_LEN.format(refs[0])}"
            parts.append(f"aggregate({ref}, CAST(0 AS BIGINT), (acc, x) -> acc + {each})")
        else:
            parts.append(f"coalesce({_LEN.format(ref)}, 0)")
    return " + ".join(parts)


def _capped(node: exp.Func, name: str, limits: QueryLimits) -> exp.Expr:
    bound, kind = _GROWTH[name]
    args = [a.sql(dialect="spark", comments=False) for a in _arguments(node)]
    if not args:
        return node
    limit = limits.max_string_bytes if kind == "bytes" else limits.max_generated_rows
    refs = [f"__g.a{i}" for i in range(len(args))]
    size = _concat_ws_bound(node, refs) if name == "concat_ws" else bound(refs)
    checks = f"WHEN ({size}) > {limit} THEN raise_error({_limit_message(name, limit, kind)}) "
    if name in _GROWTH_BYTES:
        checks += (
            f"WHEN ({_GROWTH_BYTES[name](refs)}) > {limits.max_string_bytes} "
            f"THEN raise_error({_limit_message(name, limits.max_string_bytes, 'bytes')}) "
        )
    call = node.copy()  # the same call on the struct's fields, rendered as sqlglot renders the original
    for i, arg in enumerate(_arguments(call)):
        arg.replace(exp.column(f"a{i}", table="__g"))
    fields = ", ".join(f"'a{i}', {arg}" for i, arg in enumerate(args))
    text = (
        f"element_at(transform(array(named_struct({fields})), __g -> CASE {checks}"
        f"ELSE {call.sql(dialect='spark', comments=False)} END), 1)"
    )
    return sqlglot.parse_one(text, dialect="spark")


def _limit_message(name: str, limit: int, kind: str) -> str:
    setting = "SL_SQL_MAX_STRING_BYTES" if kind == "bytes" else "SL_SQL_MAX_GENERATED_ROWS"
    return lit(f"{name} would produce more than {limit} {'bytes' if kind == 'bytes' else 'elements'} ({setting})")


def _number_literal(node: exp.Expression | None) -> float | None:
    """A numeric constant (`0.01`, `1e-3`, `0.01D`, `CAST(0.01 AS DOUBLE)`), or None."""
    while isinstance(node, (exp.Cast, exp.Paren)):
        node = node.this
    text: str | None = None
    if isinstance(node, exp.Literal) and not node.is_string:
        text = node.name
    elif isinstance(node, exp.Column) and not node.table and not node.this.args.get("quoted"):
        text = node.name  # Spark's typed literal `0.01D` reaches the doris dialect as a bare name
    match = _NUMBER.fullmatch(text or "")
    return float(match[1]) if match else None


def _check_count_min_sketch(args: list[exp.Expression]) -> None:
    """`count_min_sketch(col, eps, confidence, seed)` allocates depth * width longs from its constants:
    width = ceil(2 / eps), depth = ceil(-log(1 - confidence) / log(2)) (Spark's CountMinSketchImpl)."""
    eps, confidence = (_number_literal(a) for a in (args[1:3] + [None, None])[:2])
    if eps is None or confidence is None or not eps > 0 or not 0 < confidence < 1:
        raise SqlError("count_min_sketch takes constants eps > 0 and 0 < confidence < 1 here")
    width = math.ceil(2 / eps)
    depth = math.ceil(-math.log(1 - confidence) / math.log(2))
    if width * depth * 8 > MAX_SKETCH_BYTES:
        raise SqlError(f"count_min_sketch would allocate more than {MAX_SKETCH_BYTES} bytes: raise eps")


def _check_static_growth(node: exp.Func, name: str, limits: QueryLimits) -> None:
    """Raises: SqlError for `sequence`, `format_string`, `format_number` and `count_min_sketch` calls whose size
    is not a checked constant."""
    args = _arguments(node)
    if name == "format_number":
        # Spark builds a DecimalFormat pattern of `d` zeros (2147483600 of them kill the JVM): a constant scale
        # within a fixed bound, or a constant pattern (whose size the statement's own length bounds)
        scale = args[1] if len(args) > 1 else None
        if isinstance(scale, exp.Literal) and scale.is_string:
            return
        value = _int_literal(scale)
        if value is None or value > MAX_FORMAT_NUMBER_SCALE:
            raise SqlError(
                f"format_number takes a constant number of decimal places of at most {MAX_FORMAT_NUMBER_SCALE}, "
                "or a constant pattern"
            )
        return
    if name == "count_min_sketch":
        _check_count_min_sketch(args)
        return
    if name in ("percentile_approx", "approx_percentile"):
        # its sketch grows with the accuracy: 10^9 over 30M rows kept them all and ended the JVM
        accuracy = _number_literal(args[2]) if len(args) > 2 else MAX_PERCENTILE_ACCURACY
        if accuracy is None or accuracy > MAX_PERCENTILE_ACCURACY:
            raise SqlError(f"{name} takes a constant accuracy of at most {MAX_PERCENTILE_ACCURACY}")
        return
    if name == "sequence":
        ints = [_int_literal(a) for a in args]
        if any(v is None for v in ints) or len(ints) not in (2, 3):
            raise SqlError("sequence takes integer constants here (start, stop[, step])")
        start, stop, step = ints[0] or 0, ints[1] or 0, (ints[2] if len(ints) == 3 else 1) or 0
        if step == 0 or (stop - start) // step + 1 > limits.max_generated_rows:
            raise SqlError(
                f"sequence would produce more than {limits.max_generated_rows} elements (SL_SQL_MAX_GENERATED_ROWS)"
            )
    elif name in ("format_string", "printf"):
        fmt = args[0] if args else None
        if not isinstance(fmt, exp.Literal) or not fmt.is_string:
            raise SqlError(f"{name} takes a constant format here")
        for match in _FORMAT_WIDTH.finditer(fmt.name):
            if any(g and int(g) > limits.max_string_bytes for g in match.groups()):
                raise SqlError(
                    f"{name} would produce more than {limits.max_string_bytes} bytes (SL_SQL_MAX_STRING_BYTES)"
                )


def cap_growth(tree: exp.Expr, limits: QueryLimits) -> exp.Expr:
    """The tree with every growing call bounded (innermost first, so a nested call sees its capped inputs).

    Raises:
        SqlError: a `sequence` or `format_string` whose size cannot be checked or is over the limit.
    """

    for node in reversed(list(tree.walk(bfs=True))):  # deepest first
        if not isinstance(node, exp.Func) or isinstance(node.parent, exp.Table):
            continue
        name = spark_function_name(node)
        if name in _STATIC_GROWTH:
            _check_static_growth(node, name, limits)
        if isinstance(node, exp.Space):  # rendered as repeat(' ', n): its one argument is the count
            name = "space"
        if name in _GROWTH and not isinstance(node, exp.ArrayConcat):  # arrays: sizes add, each already capped
            capped = _capped(node, name, limits)
            if node is tree:
                return capped
            node.replace(capped)
    return tree


def query_sql(tree: exp.Expr) -> str:
    """The Spark SQL text of a checked, bound tree (comments dropped: they are never passed on)."""
    return tree.sql(dialect="spark", comments=False)


def run_query(
    views: QueryViews,
    catalog: Catalog,
    tree: exp.Expression,
    *,
    db: str,
    show_hidden: bool,
    privileges: Privileges,
    limits: QueryLimits | None = None,
    row_source: exp.Table | None = None,
) -> DataFrame:
    """The query as a Spark DataFrame over merged views, made in `views` (which drops them when it closes).

    Raises:
        SqlError: the query holds a refused node, function or table reference.
        StatementDenied: a table the user may not SELECT from (`bind_tables`).
    """
    limits = limits or QueryLimits()
    check_query(tree)
    bound = bind_tables(
        views,
        catalog,
        tree,
        db=db,
        show_hidden=show_hidden,
        privileges=privileges,
        limits=limits,
        row_source=row_source,
    )
    plain = query_sql(bound)
    try:  # no pattern may make Spark's regex engine backtrack for long (docs/security.md)
        patterned = bound_patterns(bound, longest_value=limits.max_string_bytes)
    except PatternRefused as exc:
        raise SqlError(str(exc)) from None
    # the capped text may rename its columns: the frame keeps the names the caller wrote
    return views.frame(query_sql(cap_growth(patterned, limits)), names_from=plain, value_bytes=limits.max_string_bytes)


def run_select(ctx: SqlContext, tree: exp.Expression, session: Session) -> ResultSet:
    """Run a query and collect at most `ctx.row_limit` rows."""
    with QueryViews(ctx.spark) as views:
        frame = run_query(
            views,
            ctx.catalog,
            tree,
            db=session.db,
            show_hidden=session.flag("show_hidden_columns"),
            privileges=session.privileges,
            limits=ctx.limits,
        )
        try:
            result = collect_result(frame, limit=ctx.row_limit, max_bytes=ctx.limits.max_result_bytes)
        except Exception as exc:
            raise SqlError(str(exc).strip().splitlines()[0]) from None
    return ResultSet(columns=result.columns, rows=result.rows)
