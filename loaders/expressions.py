"""User expressions (`columns`, `where`, `delete`): parsed with sqlglot, checked against an allow-list.

Only the node types and functions listed here reach Spark; anything else (reflect, java_method,
sleep, subqueries, aggregates, ...) is a `BadExpression` naming the fragment. Accepted trees are
rendered as Spark SQL with every identifier quoted.

A value an expression builds is bounded before Spark sees it (`check_size`): `repeat`, `lpad`, `rpad`
and `space` take constant counts, and every node's largest possible value, a column counted as a whole
line of the body, stays within `InputLimits.max_expression_bytes`. Spark folds constant calls while it
plans, so a check at run time would come too late: `repeat('x', 2000000000)` is built by the optimizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from loaders import regex_cost
from tables.errors import BadExpression
from tables.load_spec import ColumnMapping, Expr, InputLimits

ALLOWED_NODES: tuple[type[exp.Expression], ...] = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Paren,
    exp.Neg,
    exp.Not,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Mod,
    exp.IntDiv,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.NullSafeEQ,
    exp.And,
    exp.Or,
    exp.Xor,
    exp.In,
    exp.Between,
    exp.Is,
    exp.Like,
    exp.ILike,
    exp.Case,
    exp.If,
    exp.Cast,
    exp.TryCast,
    exp.DataType,
    exp.DataTypeParam,
    exp.Var,
    exp.Tuple,
    exp.Interval,
)

# Functions Doris users put in load expressions; compared on sqlglot's SQL name, lower case.
ALLOWED_FUNCTIONS = frozenset(
    {
        "abs",
        "ceil",
        "ceiling",
        "floor",
        "round",
        "truncate",
        "mod",
        "pow",
        "power",
        "sqrt",
        "ln",
        "log",
        "log10",
        "log2",
        "exp",
        "sign",
        "greatest",
        "least",
        "concat",
        "concat_ws",
        "substr",
        "substring",
        "upper",
        "lower",
        "ucase",
        "lcase",
        "trim",
        "ltrim",
        "rtrim",
        "length",
        "char_length",
        "character_length",
        "replace",
        "lpad",
        "rpad",
        "left",
        "right",
        "reverse",
        "split_part",
        "instr",
        "locate",
        "md5",
        "sha1",
        "sha2",
        "hex",
        "unhex",
        "repeat",
        "regexp_replace",
        "regexp_extract",
        "initcap",
        "coalesce",
        "ifnull",
        "nvl",
        "nullif",
        "if",
        "case",
        "now",
        "current_timestamp",
        "current_date",
        "curdate",
        "currenttimestamp",
        "currentdate",
        "to_date",
        "todate",
        "date",
        "date_format",
        "dateformat",
        "timetostr",
        "str_to_date",
        "strtodate",
        "strtotime",
        "from_unixtime",
        "unixtotime",
        "unix_timestamp",
        "timetounix",
        "strtounix",
        "year",
        "month",
        "day",
        "dayofmonth",
        "hour",
        "minute",
        "second",
        "quarter",
        "week",
        "weekofyear",
        "dayofweek",
        "dayofyear",
        "date_add",
        "dateadd",
        "date_sub",
        "datesub",
        "datediff",
        "datetrunc",
        "date_trunc",
        "timestamp_trunc",
        "timestamptrunc",
        "days_add",
        "days_sub",
        # sqlglot's own names for the Doris spellings above
        "trunc",
        "pad",
        "str_position",
        "sha",
        "ts_or_ds_to_date",
        "ts_or_ds_to_timestamp",
        "time_to_str",
        "str_to_time",
        "unix_to_time",
        "day_of_month",
        "week_of_year",
        "day_of_week",
        "day_of_year",
    }
)

DENIED_HINT = "is not allowed in load expressions"


def _function_name(node: exp.Func) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return node.sql_name().lower()


def check_allowed(tree: exp.Expression, *, header: str, text: str) -> None:
    """Walk a parsed expression and reject any node or function outside the allow-list.

    Raises:
        BadExpression: with the header name, the fragment and what was refused.
    """
    for node in tree.walk():
        if isinstance(node, exp.AggFunc):
            raise BadExpression(f"aggregate function {_function_name(node)} is not allowed in {header}: '{text}'")
        if isinstance(node, ALLOWED_NODES):
            continue  # operators (AND/OR are Func subclasses in sqlglot) and casts
        if isinstance(node, exp.Func):
            name = _function_name(node)
            if name not in ALLOWED_FUNCTIONS:
                raise BadExpression(f"function {name} {DENIED_HINT} ({header}: '{text}')")
            continue
        raise BadExpression(f"'{node.sql(dialect='doris')}' ({type(node).__name__}) {DENIED_HINT} ({header}: '{text}')")


@dataclass(frozen=True)
class Size:
    """An upper bound of a value's bytes: `fixed`, plus each source column's bytes times how often the value
    holds it (`columns`, by lower-case name). The fields of one line are never longer than the line together,
    so the bound in bytes is `fixed` plus the largest multiplicity times the longest line."""

    fixed: int = 0
    columns: Mapping[str, int] = field(default_factory=dict)

    def __add__(self, other: Size) -> Size:
        merged = dict(self.columns)
        for name, count in other.columns.items():
            merged[name] = merged.get(name, 0) + count
        return Size(self.fixed + other.fixed, merged)

    def times(self, n: int) -> Size:
        return Size(self.fixed * n, {name: count * n for name, count in self.columns.items()})

    def bytes(self, line_bytes: int) -> int:
        return self.fixed + max(self.columns.values(), default=0) * line_bytes


UTF8_MAX = 4  # bytes of one character; lpad/rpad counts are characters
TRUTH = 8


def _constant_count(node: exp.Expression | None, *, function: str, header: str, text: str) -> int:
    """An integer literal (a negative one builds an empty string).

    Raises:
        BadExpression: the count is not a constant integer.
    """
    inner = node.unnest() if node is not None else None
    sign = 1
    if isinstance(inner, exp.Neg):
        sign, inner = -1, inner.this.unnest()
    if isinstance(inner, exp.Literal) and not inner.is_string:
        try:
            return sign * int(str(inner.this))
        except ValueError:
            pass
    fragment = node.sql(dialect="doris") if node is not None else ""
    raise BadExpression(f"the count of {function} must be a constant integer, got '{fragment}' ({header}: '{text}')")


def _node_size(node: exp.Expression, children: dict[int, Size], *, header: str, text: str, line_bytes: int) -> Size:
    """The bound of one node from its children's bounds (keyed by `id` of the child)."""

    def size(child: exp.Expression | None) -> Size:
        return children.get(id(child), Size()) if child is not None else Size()

    if isinstance(node, exp.Literal):
        return Size(len(str(node.this).encode()))
    if isinstance(node, exp.Predicate | exp.Connector | exp.Not | exp.Length):
        return Size(TRUTH)  # a comparison or a length is small, however large what it compares
    if isinstance(node, exp.Repeat):
        count = _constant_count(node.args.get("times"), function="repeat", header=header, text=text)
        return size(node.this).times(max(count, 0))
    if isinstance(node, exp.Pad):
        name = "lpad" if node.args.get("is_left") else "rpad"
        count = _constant_count(node.expression, function=name, header=header, text=text)
        return Size(UTF8_MAX * max(count, 0))
    if isinstance(node, exp.Space):
        return Size(max(_constant_count(node.this, function="space", header=header, text=text), 0))
    if isinstance(node, exp.Replace | exp.RegexpReplace):
        # every match (an empty pattern matches between all characters) becomes the replacement
        grow = size(node.args.get("replacement"))
        if grow.columns:  # a column as the replacement: a line's worth, once per byte of the subject
            return Size((size(node.this).bytes(line_bytes) + 1) * grow.bytes(line_bytes))
        return size(node.this).times(max(1, grow.fixed)) + grow
    total = sum(children.values(), Size())
    return total.times(2) if isinstance(node, exp.Hex) else total


def check_size(
    tree: exp.Expression,
    *,
    header: str,
    text: str,
    limits: InputLimits,
    derived: Mapping[str, Size] | None = None,
) -> Size:
    """The largest value each node of `tree` can build stays within `limits.max_expression_bytes`;
    `derived` holds the bounds of earlier `columns` entries an expression may read. Returns the tree's bound.

    Raises:
        BadExpression: a count that is not constant, or a value that could pass the limit.
    """
    if isinstance(tree, exp.Column):
        name = tree.name.lower()
        return (derived or {}).get(name) or Size(columns={name: 1})
    children = {
        id(child): check_size(child, header=header, text=text, limits=limits, derived=derived)
        for child in tree.iter_expressions()
    }
    size = _node_size(tree, children, header=header, text=text, line_bytes=limits.max_line_bytes)
    most = size.bytes(limits.max_line_bytes)
    if most > limits.max_expression_bytes:
        raise BadExpression(
            f"'{tree.sql(dialect='doris')}' may build a value of {most} bytes, over the limit of "
            f"{limits.max_expression_bytes} bytes (SL_MAX_EXPRESSION_BYTES; a column counts as a line of up to "
            f"{limits.max_line_bytes} bytes) ({header}: '{text}')"
        )
    return size


MAX_COLUMNS = 4096  # `columns` entries: a Doris table has at most a few thousand columns (planning is linear in them)
MAX_DERIVED = 256  # derived entries: a chain of them takes a projection per link
MAX_DEPTH = 32  # Doris allows 3000 (expr_depth_limit); sqlglot's parser recurses ~25 Python frames a level
TOO_DEEP = f"Exceeded the maximum depth of an expression tree ({MAX_DEPTH})."


def _parse_select(text: str, *, header: str) -> exp.Expr:
    """`SELECT <text>` parsed, no deeper than MAX_DEPTH.

    Raises:
        BadExpression: a parse error, or a tree too deep.
    """
    try:
        select = sqlglot.parse_one(f"SELECT {text}", dialect="doris")
    except ParseError as exc:
        detail = exc.errors[0] if exc.errors else {}
        raise BadExpression(f"failed to parse {header} '{text}': {detail.get('description', exc)}") from None
    except RecursionError:
        raise BadExpression(f"{TOO_DEEP} ({header})") from None
    stack = [(select, 0)]
    while stack:  # iterative: the checks after this one recurse
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BadExpression(f"{TOO_DEEP} ({header})")
        stack.extend((child, depth + 1) for child in node.iter_expressions())
    return select


def _parse(text: str, *, header: str) -> exp.Expression:
    # Parsed as a one-item SELECT list: a leading REPLACE(...) would otherwise read as a statement.
    select = _parse_select(text, header=header)
    clauses = ("from_", "where", "group", "having", "order", "limit")
    if not isinstance(select, exp.Select) or len(select.expressions) != 1 or any(select.args.get(c) for c in clauses):
        raise BadExpression(f"failed to parse {header} '{text}': expected one expression")
    tree: exp.Expression = select.expressions[0]
    return tree


def _to_expr(
    tree: exp.Expression, *, header: str, text: str, limits: InputLimits, derived: Mapping[str, Size] | None = None
) -> tuple[Expr, Size]:
    check_allowed(tree, header=header, text=text)
    size = check_size(tree, header=header, text=text, limits=limits, derived=derived)
    refs = tuple(dict.fromkeys(col.name for col in tree.find_all(exp.Column)))
    bounded = bound_patterns(tree, header=header, text=text, limits=limits)
    return Expr(spark_sql=bounded.sql(dialect="spark", identify=True), refs=refs, text=text), size


def bound_patterns(tree: exp.Expression, *, header: str, text: str, limits: InputLimits) -> exp.Expression:
    """`tree` with its patterns made linear or bounded (`loaders.regex_cost.bound_patterns`) for a value of at most
    a line.

    Raises:
        BadExpression: a pattern that is not a constant string, or a regex `regex_cost` refuses.
    """
    try:
        return regex_cost.bound_patterns(tree, longest_value=limits.max_line_bytes)
    except regex_cost.PatternRefused as exc:
        raise BadExpression(f"{exc} ({header}: '{text}')") from None


DEFAULT_LIMITS = InputLimits()


def parse_condition(
    text: str, *, header: str, limits: InputLimits = DEFAULT_LIMITS, derived: Mapping[str, Size] | None = None
) -> Expr:
    """Parse a boolean expression such as a `where` or `delete` header (`derived`: bounds of `columns` entries).

    Raises:
        BadExpression.
    """
    return _to_expr(_parse(text, header=header), header=header, text=text, limits=limits, derived=derived)[0]


def parse_value(text: str, *, header: str, limits: InputLimits = DEFAULT_LIMITS) -> Expr:
    """Parse a scalar expression (a derived column of `columns`).

    Raises:
        BadExpression.
    """
    return _to_expr(_parse(text, header=header), header=header, text=text, limits=limits)[0]


def parse_columns(
    text: str, *, limits: InputLimits = DEFAULT_LIMITS, sizes: dict[str, Size] | None = None
) -> tuple[ColumnMapping, ...]:
    """Parse the `columns` header: source names in file order and `name = expr` derived columns.
    When `sizes` is given, the bound of each derived column is put there by lower-case name.

    Raises:
        BadExpression.
    """
    select = _parse_select(text, header="columns")
    if not isinstance(select, exp.Select) or select.args.get("from_") or select.args.get("where"):
        raise BadExpression(f"failed to parse columns '{text}'")
    entries = select.expressions
    derived_count = sum(1 for item in entries if not isinstance(item, exp.Column))
    if len(entries) > MAX_COLUMNS or derived_count > MAX_DERIVED:
        raise BadExpression(
            f"the columns header has {len(entries)} entries ({derived_count} derived), at most {MAX_COLUMNS} "
            f"({MAX_DERIVED} derived)"
        )
    out: list[ColumnMapping] = []
    seen: set[str] = set()
    derived: dict[str, Size] = {} if sizes is None else sizes
    for item in select.expressions:
        if isinstance(item, exp.Column) and not item.table:
            name, expr = item.name, None
        elif isinstance(item, exp.EQ) and isinstance(item.this, exp.Column) and not item.this.table:
            name = item.this.name
            fragment = item.expression.sql(dialect="doris")
            expr, derived[name.lower()] = _to_expr(
                item.expression, header="columns", text=fragment, limits=limits, derived=derived
            )
        else:
            raise BadExpression(f"invalid entry in columns: '{item.sql(dialect='doris')}'")
        if name.lower() in seen:
            raise BadExpression(f"Duplicate column: {name}")
        seen.add(name.lower())
        out.append(ColumnMapping(name=name, expr=expr))
    return tuple(out)
