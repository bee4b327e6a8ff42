"""Patterns in load expressions cannot make Spark's backtracking regex engine run for hours (docs/security.md,
"Load input limits"): `LIKE` is linear whatever its pattern, a `regexp_*` pattern that backtracks exponentially
is refused, and one that backtracks polynomially refuses a value too long for it."""

from __future__ import annotations

import random
import time

import pytest

from loaders.expressions import parse_condition
from loaders.regex_cost import PatternRefused, like_regex, regex_cost
from tables.errors import BadExpression
from tests.helpers import DorisClient

DDL = "CREATE TABLE {name} (k INT, v STRING) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"


def test_like_as_linear_regex_matches_what_spark_like_matches(spark) -> None:  # type: ignore[no-untyped-def]
    """Random patterns of literals, `_`, `%` and escapes against random short values: Spark's own LIKE and the
    RLIKE that replaces it agree on every pair."""
    rng = random.Random(7)
    alphabet = ["a", "b", ".", "*", "(", "$", "\\\\", "é"]
    pieces = ["a", "b", "_", "%", "%", ".", "*", "(", "\\%", "\\_", "\\\\", "é"]
    patterns = sorted({"".join(rng.choice(pieces) for _ in range(rng.randint(2, 7))) for _ in range(1500)})
    patterns = [p for p in patterns if p.count("%") - p.count("\\%") >= 2 and like_regex(p) is not None]
    values = sorted({"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(60)})
    assert len(patterns) > 150
    rows = [(v, p, like_regex(p)) for p in patterns for v in values]
    df = spark.createDataFrame(rows, "v STRING, p STRING, r STRING")
    differ = df.selectExpr("v", "p", "r", "v LIKE p AS spark", "v RLIKE r AS ours").where("spark <> ours").collect()
    assert differ == []


def test_exponential_regex_constructs_are_refused() -> None:
    for pattern, why in [
        ("(a+)+b", "repeated group"),
        ("(a|aa)*b", "repeated group"),
        ("(?:x*y)*z", "repeated group"),
        ("(.*a){12}", "repeated group"),
        ("(a)\\1", "backreferences"),
        ("(?<n>a)\\k<n>", "backreferences"),
        ("a(?=b)", "lookaround"),
        ("(?<!a)b", "lookaround"),
        ("a?" * 30 + "a" * 30, "too many"),
        ("(a", "unbalanced"),
        ("[a", "unclosed"),
    ]:
        with pytest.raises(PatternRefused, match=why):
            regex_cost(pattern)


def test_a_regex_is_bounded_by_its_backtracking() -> None:
    assert regex_cost("x").max_subject() > 10**8  # no quantifier: a scan
    assert regex_cost("[a-z]{3}\\d{2}(?:ab|cd)").max_subject() > 10**7  # counted choices only
    one, two = regex_cost(".*x").max_subject(), regex_cost("(\\d+)-(\\d+)").max_subject()
    assert 10_000 < one < 20_000 and 500 < two < 700
    assert regex_cost("a{2,1000}").unbounded == 1  # a wide count is as unbounded


def test_patterns_must_be_constant() -> None:
    for text in ["v LIKE k", "regexp_extract(v, k, 1) = 'x'", "regexp_replace(v, concat('a', 'b'), '') = ''"]:
        with pytest.raises(BadExpression, match="must be a constant string"):
            parse_condition(text, header="where")


@pytest.fixture
def table(doris: DorisClient, db: str) -> str:
    doris.sql(db, DDL.format(name="t"))
    return "t"


def test_a_like_pattern_with_many_wildcards_loads_in_linear_time(doris: DorisClient, db: str, table: str) -> None:
    """Java's regex for this LIKE backtracks ~n^10 steps per value: the load timed out and its task ran on."""
    body = "".join(f"{i}\t{'a' * 5000}\n" for i in range(4)) + "9\txaxaxb\n"
    started = time.monotonic()
    reply = doris.stream_load(
        db, table, body, {"where": "v LIKE '%a%a%a%a%a%a%a%a%a%a%b' OR v LIKE 'x%a%b'", "timeout": "60"}
    ).json()
    assert reply["Status"] == "Success", reply
    assert (reply["NumberLoadedRows"], reply["NumberUnselectedRows"]) == (1, 4)
    assert time.monotonic() - started < 30
    assert doris.rows(db, "SELECT k FROM t") == [[9]]


def test_a_value_too_long_for_its_regex_fails_the_load_at_once(doris: DorisClient, db: str, table: str) -> None:
    """`.*x` tries every start and backtracks over the rest: quadratic, ~10^11 steps on 500,000 characters."""
    body = f"1\t{'a' * 500_000}\n"
    started = time.monotonic()
    reply = doris.stream_load(db, table, body, {"columns": "k, v0, v = regexp_extract(v0, '.*x', 0)"}).json()
    assert reply["Status"] == "Fail", reply
    assert "refuses a value longer than" in reply["Message"], reply
    assert time.monotonic() - started < 30
    assert doris.rows(db, "SELECT count(*) FROM t") == [[0]]
    refused = doris.stream_load(db, table, "1\tx\n", {"columns": "k, v0, v = regexp_extract(v0, '(a+)+b', 1)"})
    assert refused.json()["Status"] == "Fail" and "backtrack exponentially" in refused.json()["Message"]


def test_regexp_extract_takes_the_group_its_third_argument_names(doris: DorisClient, db: str, table: str) -> None:
    """Doris's `regexp_extract(str, pattern, pos)` returns group `pos`; the SQL sent to Spark had lost it (group 1
    for every call)."""
    reply = doris.stream_load(
        db,
        table,
        "1\t12-34\n",
        {
            "columns": "k, v0, v = concat(regexp_extract(v0, '(\\\\d+)-(\\\\d+)', 2), '/', "
            "regexp_extract(v0, '(\\\\d+)-(\\\\d+)', 0))"
        },
    ).json()
    assert reply["Status"] == "Success", reply
    assert doris.rows(db, "SELECT v FROM t") == [["34/12-34"]]


@pytest.mark.parametrize(
    "stmt, refusal",
    [
        # the audit's: a task that ran 11 minutes past query_timeout, its core held, every Spark job behind it waiting
        ("SELECT count(*) FROM range(1) WHERE concat(repeat('a', 300), CAST(id AS STRING)) RLIKE '^(.*a){12}$'",
         "backtrack exponentially"),
        ("SELECT regexp_replace(v, '(a|aa)*b', '') FROM t", "backtrack exponentially"),
        ("SELECT str_to_map(v, '(,+)+', ':') FROM t", "backtrack exponentially"),
        ("SELECT count(*) FROM t WHERE v RLIKE v", "must be a constant string"),
    ],
)  # fmt: skip
def test_a_query_pattern_that_backtracks_exponentially_is_refused(
    doris: DorisClient, db: str, table: str, stmt: str, refusal: str
) -> None:
    started = time.monotonic()
    assert refusal in doris.sql_error(db, stmt)
    assert time.monotonic() - started < 10


def test_query_patterns_are_linear_or_bounded(doris: DorisClient, db: str, table: str) -> None:
    long = "a" * 20_000
    doris.stream_load(db, table, f"1\t{long}\n2\txaxb\n")
    started = time.monotonic()
    assert doris.rows(db, "SELECT k FROM t WHERE v LIKE '%a%a%a%a%a%a%a%a%b' OR v ILIKE 'X%A%B' ORDER BY k") == [[2]]
    assert time.monotonic() - started < 20
    assert "refuses a value longer than" in doris.sql_error(db, "SELECT regexp_extract(v, '.*x', 0) FROM t")
    assert doris.rows(db, "SELECT regexp_extract('12-34', '(\\\\d+)-(\\\\d+)', 2)") == [["34"]]
