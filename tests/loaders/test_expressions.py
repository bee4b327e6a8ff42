"""`loaders.expressions`: user expressions of `columns` / `where` / `delete` against the allow-list.

Written like sqlglot's Validator tables: one row per expression, accepted or rejected with the message part
a user sees.
"""

from __future__ import annotations

import pytest
import sqlglot

from loaders.expressions import check_allowed, parse_columns, parse_condition, parse_value
from tables.errors import BadExpression
from tables.load_spec import ColumnMapping, Expr


def _parse(header: str, text: str) -> Expr | tuple[ColumnMapping, ...]:
    if header == "columns":
        return parse_columns(text)
    return parse_condition(text, header=header)


def assert_rejected(header: str, text: str, message_part: str) -> BadExpression:
    """`text` in `header` is refused with a `BadExpression` whose message contains `message_part`."""
    with pytest.raises(BadExpression) as info:
        _parse(header, text)
    assert message_part in info.value.text, info.value.text
    return info.value


def assert_accepted(header: str, text: str) -> list[Expr]:
    """`text` in `header` is accepted; every column it reads is rendered back-quoted in the Spark SQL."""
    try:
        parsed = _parse(header, text)
    except BadExpression as exc:
        pytest.fail(f"{header}: {text!r} was refused: {exc.text}")
    exprs = [m.expr for m in parsed if m.expr is not None] if isinstance(parsed, tuple) else [parsed]
    for expr in exprs:
        for ref in expr.refs:
            assert f"`{ref}`" in expr.spark_sql, expr
    return exprs


# --- rejected ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "text", "message_part"),
    [
        pytest.param(
            "where",
            "reflect('java.lang.Runtime','getRuntime')",
            "function reflect is not allowed",
            id="reflect-calls-java",
        ),
        pytest.param(
            "where",
            "java_method('java.lang.Runtime','getRuntime')",
            "function java_method is not allowed",
            id="java-method-calls-java",
        ),
        pytest.param("where", "k > sleep(1)", "function sleep is not allowed", id="sleep-inside-a-comparison"),
        pytest.param("delete", "k = uuid()", "function uuid is not allowed", id="function-not-on-the-allow-list"),
        pytest.param(
            "where",
            "upper(reflect('a', 'b')) = 'x'",
            "function reflect is not allowed",
            id="denied-function-nested-in-an-allowed-one",
        ),
        pytest.param("where", "sum(v)", "aggregate function sum is not allowed in where", id="aggregate-sum"),
        pytest.param("where", "sum(v) > 1", "aggregate function sum is not allowed", id="aggregate-in-a-comparison"),
        pytest.param(
            "delete",
            "count(*) = 0",
            "aggregate function count is not allowed in delete",
            id="aggregate-count-in-delete",
        ),
        pytest.param("where", "max(v) > 1", "aggregate function max", id="aggregate-max"),
        pytest.param("where", "k in (select 1)", "(Subquery) is not allowed", id="subquery-in-in-list"),
        pytest.param("where", "k = (select max(k) from t)", "is not allowed", id="scalar-subquery"),
        pytest.param("where", "exists(select 1)", "is not allowed", id="exists-subquery"),
        pytest.param("where", "row_number() over () = 1", "(Window) is not allowed", id="window-function"),
        pytest.param("where", "k = @v", "(Parameter) is not allowed", id="session-variable"),
        pytest.param("where", "k = ?", "(Placeholder) is not allowed", id="placeholder"),
        pytest.param("where", "k >", "failed to parse where 'k >'", id="unparsable-comparison"),
        pytest.param("delete", "k = 1)", "failed to parse delete", id="unbalanced-parenthesis"),
        pytest.param("where", "k = 1; drop table t", "failed to parse where", id="second-statement"),
        pytest.param("where", "", "failed to parse where", id="empty-condition"),
        pytest.param("columns", "k1, k1", "Duplicate column: k1", id="duplicate-source-column"),
        pytest.param("columns", "k1, K1", "Duplicate column: K1", id="duplicate-differing-only-in-case"),
        pytest.param("columns", "k1, v1 = k1 + 1, v1 = 2", "Duplicate column: v1", id="duplicate-derived-column"),
        pytest.param(
            "columns",
            "k1, v1 = reflect('java.lang.Runtime','getRuntime')",
            "function reflect is not allowed",
            id="reflect-in-a-derived-column",
        ),
        pytest.param(
            "columns",
            "k1, v1 = sum(k1)",
            "aggregate function sum is not allowed in columns",
            id="aggregate-in-a-derived-column",
        ),
        pytest.param("columns", "k1, v1 = (select 1)", "(Subquery) is not allowed", id="subquery-in-a-derived-column"),
        pytest.param("columns", "k1, k1 + 1", "invalid entry in columns", id="expression-without-a-name"),
        pytest.param("columns", "t.k1", "invalid entry in columns: 't.k1'", id="qualified-source-column"),
        pytest.param("columns", "*", "invalid entry in columns", id="star"),
        pytest.param("columns", "k1 from t", "failed to parse columns 'k1 from t'", id="from-clause"),
        pytest.param("columns", "k1 where k1 > 1", "failed to parse columns", id="where-clause"),
        pytest.param("columns", "k1, v1 = ", "failed to parse columns", id="unparsable-derived-column"),
    ],
)
def test_expression_is_rejected(header: str, text: str, message_part: str) -> None:
    assert_rejected(header, text, message_part)


def test_rejection_names_the_header_and_the_fragment() -> None:
    exc = assert_rejected("where", "k > sleep(1)", "function sleep")
    assert exc.text == "function sleep is not allowed in load expressions (where: 'k > sleep(1)')"
    assert exc.doris_message == (
        "[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = "
        "function sleep is not allowed in load expressions (where: 'k > sleep(1)')"
    )


# --- accepted ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "text", "refs"),
    [
        pytest.param("where", "k1 + 1 > v1 * 2 - v2 / 3", ("k1", "v1", "v2"), id="arithmetic"),
        pytest.param("where", "k1 % 2 = 0", ("k1",), id="modulo"),
        pytest.param("where", "-k1 < 0", ("k1",), id="negation"),
        pytest.param("where", "k1 = 1", ("k1",), id="equals"),
        pytest.param("where", "k1 != 1", ("k1",), id="not-equals"),
        pytest.param("where", "k1 <> 1", ("k1",), id="not-equals-sql-style"),
        pytest.param("where", "k1 >= 1", ("k1",), id="greater-or-equal"),
        pytest.param("where", "k1 <= v1", ("k1", "v1"), id="column-to-column-comparison"),
        pytest.param("where", "k1 <=> NULL", ("k1",), id="null-safe-equals"),
        pytest.param("where", "k1 IN (1, 2)", ("k1",), id="in-list"),
        pytest.param("where", "k1 NOT IN ('a', 'b')", ("k1",), id="not-in-list"),
        pytest.param("where", "k1 BETWEEN 1 AND 10", ("k1",), id="between"),
        pytest.param("where", "name LIKE 'a%'", ("name",), id="like"),
        pytest.param("where", "NOT k1 = 1", ("k1",), id="not"),
        pytest.param("where", "k1 IS NULL", ("k1",), id="is-null"),
        pytest.param("delete", "k1 is not null", ("k1",), id="is-not-null"),
        pytest.param("where", "k1 > 1 AND v1 < 10", ("k1", "v1"), id="and"),
        pytest.param("where", "k1 = 1 OR k1 = 2", ("k1",), id="or"),
        pytest.param("delete", "(k1 = 1 OR v1 = 2) AND flag = 1", ("k1", "v1", "flag"), id="and-of-or"),
        pytest.param("where", "k1 = 1 XOR v1 = 2", ("k1", "v1"), id="xor"),
        pytest.param("where", "CASE WHEN k1 > 1 THEN 'a' ELSE 'b' END = 'a'", ("k1",), id="case-when"),
        pytest.param("where", "CASE k1 WHEN 1 THEN true ELSE false END", ("k1",), id="simple-case"),
        pytest.param("where", "IF(k1 > 1, 'a', 'b') = 'a'", ("k1",), id="if"),
        pytest.param("where", "concat(first, '-', last) = 'a-b'", ("first", "last"), id="concat"),
        pytest.param("where", "upper(name) = 'A'", ("name",), id="upper"),
        pytest.param("where", "substr(name, 1, 2) = 'ab'", ("name",), id="substr"),
        pytest.param("where", "coalesce(a, b, 0) > 0", ("a", "b"), id="coalesce"),
        pytest.param("where", "cast(x as int) > 3", ("x",), id="cast-to-int"),
        pytest.param("where", "cast(x as decimal(10, 2)) > 3", ("x",), id="cast-to-decimal"),
        pytest.param("where", "str_to_date(d, '%Y-%m-%d') > '2024-01-01'", ("d",), id="str-to-date-date-format"),
        pytest.param(
            "where", "str_to_date(d, '%Y-%m-%d %H:%i:%s') > '2024-01-01'", ("d",), id="str-to-date-datetime-format"
        ),
        pytest.param("where", "now() > d", ("d",), id="now"),
        pytest.param("where", "`weird col` = 1", ("weird col",), id="quoted-identifier-with-a-space"),
        pytest.param("columns", "k1, tmp, v1 = tmp * 10", ("tmp",), id="derived-column-arithmetic"),
        pytest.param("columns", "k1, v1 = if(k1 > 0, 'pos', 'neg')", ("k1",), id="derived-column-if"),
        pytest.param("columns", "k1, d = str_to_date(raw, '%Y-%m-%d')", ("raw",), id="derived-column-str-to-date"),
        pytest.param("columns", "k1, v1 = replace(raw, 'x', 'y')", ("raw",), id="derived-column-replace"),
    ],
)
def test_expression_is_accepted(header: str, text: str, refs: tuple[str, ...]) -> None:
    exprs = assert_accepted(header, text)
    seen = [ref for expr in exprs for ref in expr.refs]
    assert sorted(seen) == sorted(refs)


# Every Doris function name the allow-list lists, called as a user would write it in a `where` header.
ALLOW_LISTED_CALLS = [
    "abs(a)",
    "ceil(a)",
    "ceiling(a)",
    "floor(a)",
    "round(a, 2)",
    "truncate(a, 1)",
    "mod(a, 2)",
    "pow(a, 2)",
    "power(a, 2)",
    "sqrt(a)",
    "ln(a)",
    "log(10, a)",
    "log10(a)",
    "log2(a)",
    "exp(a)",
    "sign(a)",
    "greatest(a, b)",
    "least(a, b)",
    "concat(a, b)",
    "concat_ws(',', a, b)",
    "substr(a, 1)",
    "substring(a, 1, 2)",
    "upper(a)",
    "lower(a)",
    "ucase(a)",
    "lcase(a)",
    "trim(a)",
    "ltrim(a)",
    "rtrim(a)",
    "length(a)",
    "char_length(a)",
    "character_length(a)",
    "replace(a, 'x', 'y')",
    "lpad(a, 3, '0')",
    "rpad(a, 3, '0')",
    "left(a, 2)",
    "right(a, 2)",
    "reverse(a)",
    "split_part(a, ',', 1)",
    "instr(a, 'x')",
    "locate('x', a)",
    "md5(a)",
    "sha1(a)",
    "sha2(a, 256)",
    "hex(a)",
    "unhex(a)",
    "repeat(a, 2)",
    "regexp_replace(a, 'x', 'y')",
    "initcap(a)",
    "coalesce(a, b)",
    "ifnull(a, b)",
    "nvl(a, b)",
    "nullif(a, b)",
    "if(a > 1, 1, 0)",
    "now()",
    "current_timestamp()",
    "current_date()",
    "curdate()",
    "to_date(a)",
    "date(a)",
    "date_format(a, '%Y-%m-%d')",
    "str_to_date(a, '%Y-%m-%d')",
    "str_to_date(a, '%Y-%m-%d %H:%i:%s')",
    "from_unixtime(a)",
    "unix_timestamp(a)",
    "year(a)",
    "month(a)",
    "day(a)",
    "dayofmonth(a)",
    "hour(a)",
    "minute(a)",
    "second(a)",
    "quarter(a)",
    "week(a)",
    "weekofyear(a)",
    "dayofweek(a)",
    "dayofyear(a)",
    "date_add(a, interval 1 day)",
    "date_sub(a, 1)",
    "datediff(a, b)",
    "date_trunc(a, 'day')",
    "days_add(a, 1)",
    "days_sub(a, 1)",
]


@pytest.mark.parametrize("call", [pytest.param(c, id=c) for c in ALLOW_LISTED_CALLS])
def test_allow_listed_function_is_accepted(call: str) -> None:
    assert_accepted("where", call)


# --- rendering --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "spark_sql", "refs"),
    [
        pytest.param("k1 > 1", "`k1` > 1", ("k1",), id="column-is-back-quoted"),
        pytest.param("`weird col` = 1", "`weird col` = 1", ("weird col",), id="quoted-name-keeps-its-space"),
        pytest.param("k1 IN (1, 2)", "`k1` IN (1, 2)", ("k1",), id="in-list-rendered"),
        pytest.param("b + a > b", "`b` + `a` > `b`", ("b", "a"), id="refs-name-each-column-once"),
        pytest.param("k1 is null", "`k1` IS NULL", ("k1",), id="is-null-rendered"),
        pytest.param("upper(name) = 'A'", "UPPER(`name`) = 'A'", ("name",), id="function-argument-back-quoted"),
        pytest.param("cast(x as int) > 3", "CAST(`x` AS INT) > 3", ("x",), id="cast-rendered"),
        pytest.param("now() > d", "NOW() > `d`", ("d",), id="now-has-no-refs-of-its-own"),
        pytest.param("1 = 1", "1 = 1", (), id="constant-condition-has-no-refs"),
    ],
)
def test_condition_is_rendered_as_spark_sql(text: str, spark_sql: str, refs: tuple[str, ...]) -> None:
    expr = parse_condition(text, header="where")
    assert expr.spark_sql == spark_sql
    assert expr.refs == refs
    assert expr.text == text


@pytest.mark.parametrize(
    ("text", "spark_sql", "refs"),
    [
        pytest.param("tmp * 10", "`tmp` * 10", ("tmp",), id="arithmetic-on-a-source-column"),
        pytest.param("concat(a, '-', b)", "CONCAT(`a`, '-', `b`)", ("a", "b"), id="concat-of-two-columns"),
        pytest.param("coalesce(v, 0)", "COALESCE(`v`, 0)", ("v",), id="coalesce-default"),
        pytest.param("'constant'", "'constant'", (), id="string-literal"),
    ],
)
def test_value_is_rendered_as_spark_sql(text: str, spark_sql: str, refs: tuple[str, ...]) -> None:
    expr = parse_value(text, header="columns")
    assert expr.spark_sql == spark_sql
    assert expr.refs == refs


@pytest.mark.parametrize(
    ("text", "message_part"),
    [
        pytest.param("sleep(1)", "function sleep is not allowed", id="sleep"),
        pytest.param("sum(v)", "aggregate function sum is not allowed in columns", id="aggregate"),
        pytest.param("v +", "failed to parse columns 'v +'", id="unparsable"),
    ],
)
def test_value_is_rejected(text: str, message_part: str) -> None:
    with pytest.raises(BadExpression) as info:
        parse_value(text, header="columns")
    assert message_part in info.value.text


def test_columns_keep_file_order_and_names() -> None:
    assert parse_columns("k1, tmp, v1 = tmp * 10") == (
        ColumnMapping(name="k1"),
        ColumnMapping(name="tmp"),
        ColumnMapping(name="v1", expr=Expr(spark_sql="`tmp` * 10", refs=("tmp",), text="tmp * 10")),
    )


# --- check_allowed on a parsed tree -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message_part"),
    [
        pytest.param("reflect('java.lang.Runtime', 'getRuntime')", "function reflect", id="reflect"),
        pytest.param("k > sleep(1)", "function sleep", id="sleep"),
        pytest.param("sum(v) > 1", "aggregate function sum", id="aggregate"),
        pytest.param("k IN (SELECT 1)", "(Subquery)", id="subquery"),
    ],
)
def test_check_allowed_rejects_a_parsed_tree(text: str, message_part: str) -> None:
    tree = sqlglot.parse_one(text, dialect="doris")
    with pytest.raises(BadExpression) as info:
        check_allowed(tree, header="where", text=text)
    assert message_part in info.value.text
    assert f"'{text}'" in info.value.text


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("k + 1 > 2", id="arithmetic"),
        pytest.param("upper(name) = 'A'", id="allowed-function"),
        pytest.param("k IN (1, 2)", id="in-list"),
        pytest.param("k > 1 AND v < 2", id="and"),
    ],
)
def test_check_allowed_accepts_a_parsed_tree(text: str) -> None:
    assert check_allowed(sqlglot.parse_one(text, dialect="doris"), header="where", text=text) is None
