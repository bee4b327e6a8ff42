"""User expressions (`columns`, `where`, `delete`): parsed with sqlglot, checked against an allow-list.

Only the node types and functions listed here reach Spark; anything else (reflect, java_method,
sleep, subqueries, aggregates, ...) is a `BadExpression` naming the fragment. Accepted trees are
rendered as Spark SQL with every identifier quoted.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from loaders.errors import BadExpression
from tables.load_spec import ColumnMapping, Expr

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


def _parse(text: str, *, header: str) -> exp.Expression:
    # Parsed as a one-item SELECT list: a leading REPLACE(...) would otherwise read as a statement.
    try:
        select = sqlglot.parse_one(f"SELECT {text}", dialect="doris")
    except ParseError as exc:
        detail = exc.errors[0] if exc.errors else {}
        raise BadExpression(f"failed to parse {header} '{text}': {detail.get('description', exc)}") from None
    clauses = ("from_", "where", "group", "having", "order", "limit")
    if not isinstance(select, exp.Select) or len(select.expressions) != 1 or any(select.args.get(c) for c in clauses):
        raise BadExpression(f"failed to parse {header} '{text}': expected one expression")
    tree: exp.Expression = select.expressions[0]
    return tree


def _to_expr(tree: exp.Expression, *, header: str, text: str) -> Expr:
    check_allowed(tree, header=header, text=text)
    refs = tuple(dict.fromkeys(col.name for col in tree.find_all(exp.Column)))
    return Expr(spark_sql=tree.sql(dialect="spark", identify=True), refs=refs, text=text)


def parse_condition(text: str, *, header: str) -> Expr:
    """Parse a boolean expression such as a `where` or `delete` header.

    Raises:
        BadExpression.
    """
    return _to_expr(_parse(text, header=header), header=header, text=text)


def parse_value(text: str, *, header: str) -> Expr:
    """Parse a scalar expression (a derived column of `columns`).

    Raises:
        BadExpression.
    """
    return _to_expr(_parse(text, header=header), header=header, text=text)


def parse_columns(text: str) -> tuple[ColumnMapping, ...]:
    """Parse the `columns` header: source names in file order and `name = expr` derived columns.

    Raises:
        BadExpression.
    """
    try:
        select = sqlglot.parse_one(f"SELECT {text}", dialect="doris")
    except ParseError as exc:
        detail = exc.errors[0] if exc.errors else {}
        raise BadExpression(f"failed to parse columns '{text}': {detail.get('description', exc)}") from None
    if not isinstance(select, exp.Select) or select.args.get("from_") or select.args.get("where"):
        raise BadExpression(f"failed to parse columns '{text}'")
    out: list[ColumnMapping] = []
    seen: set[str] = set()
    for item in select.expressions:
        if isinstance(item, exp.Column) and not item.table:
            name, expr = item.name, None
        elif isinstance(item, exp.EQ) and isinstance(item.this, exp.Column) and not item.this.table:
            name = item.this.name
            fragment = item.expression.sql(dialect="doris")
            expr = _to_expr(item.expression, header="columns", text=fragment)
        else:
            raise BadExpression(f"invalid entry in columns: '{item.sql(dialect='doris')}'")
        if name.lower() in seen:
            raise BadExpression(f"Duplicate column: {name}")
        seen.add(name.lower())
        out.append(ColumnMapping(name=name, expr=expr))
    return tuple(out)
