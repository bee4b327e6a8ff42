"""Plan-time audit: queries whose cost lands in the Spark driver before any job runs, where `query_timeout`'s job
cancel cannot reach. Whole-stage codegen compiles each stage's expressions into one Java method in the driver,
and that compile grows faster than the text: `coalesce` of 5000 arguments (49 KB) and a CASE of 8000 branches
(190 KB) each ran the 2 GB driver out of memory (`GC overhead limit exceeded`), for any user with SELECT on one
table. Both are refused before Spark sees them (`sql.select.check_query`); nothing here runs Spark."""

from __future__ import annotations

import time

import pytest

import sql.select
from sql.select import check_query, parse_query
from tables.errors import SqlError


def _coalesce(args: int) -> str:
    return "SELECT sum(coalesce(" + ", ".join(["n"] + [f"n + {i}" for i in range(args - 1)]) + ")) FROM t"


def _case(branches: int) -> str:
    return "SELECT sum(CASE " + " ".join(f"WHEN n = {i} THEN {i}" for i in range(branches)) + " ELSE 0 END) FROM t"


def _many_coalesces(calls: int, args: int) -> str:
    return (
        "SELECT "
        + ", ".join("sum(coalesce(" + ", ".join(f"n + {i}" for i in range(j, j + args)) + "))" for j in range(calls))
        + " FROM t"
    )


@pytest.mark.parametrize(
    "stmt, message",
    [
        pytest.param(_coalesce(5000), "The query is too complex: .* nodes, more than 20000", id="coalesce-5000"),
        pytest.param(_case(8000), "The query is too complex: .* nodes, more than 20000", id="case-8000-branches"),
        pytest.param(
            _coalesce(1001), r"Exceeded the maximum number of child expressions \(1000\)", id="one-call-too-wide"
        ),
        pytest.param(_case(1001), r"Exceeded the maximum number of child expressions \(1000\)", id="case-too-wide"),
        pytest.param(_many_coalesces(8, 900), "The query is too complex", id="many-wide-calls"),
    ],
)
def test_a_query_whose_codegen_would_blow_up_the_driver_is_refused(stmt: str, message: str) -> None:
    started = time.monotonic()
    with pytest.raises(SqlError, match=message):
        check_query(parse_query(stmt))
    assert time.monotonic() - started < 5


def test_large_ordinary_queries_are_still_allowed() -> None:
    # an IN list is one hash set in Spark: its constants are not counted (tests/test_buckets.py has 20,000)
    check_query(parse_query("SELECT * FROM t WHERE n IN (" + ", ".join(str(-i) for i in range(50_000)) + ")"))
    check_query(parse_query(_case(999)))
    check_query(parse_query(_coalesce(1000)))
    check_query(parse_query("SELECT " + ", ".join(f"n + {i} AS c{i}" for i in range(3000)) + " FROM t"))
    assert sql.select.MAX_EXPANDED_NODES == 20_000
