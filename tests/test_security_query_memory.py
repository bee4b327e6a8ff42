"""What Spark holds whole for a query (a broadcast join side, an aggregate's kept values) is measured before it runs.

Spark's planner broadcast a side its estimate put under 10 MB, and the estimate ignores rows a LATERAL VIEW
multiplies: a SELECT-only user's equi-join with `explode(sequence(1, 300))` of a 100k-row table broadcast 30M rows
and the 2 GB JVM died in 2.6 s (every load in flight with it). A join Spark can only run as a broadcast (an outer,
semi or anti join on no equality, NOT IN) ran the JVM out of memory the same way in 49 s. Now queries run in a
session that broadcasts only what AQE has measured, and a side that must be broadcast is measured first.
`group_concat(repeat(v, 10000))` of the same table kept 6 GB in one group and ended the JVM in 4 s: an aggregate
that keeps its values is measured first too (`spark_runner.query_memory`)."""

from __future__ import annotations

import pytest

from spark_runner.query_memory import MAX_BROADCAST_ROWS
from tests.helpers import DorisClient

ROWS = 100_000
EXPLODED = "(SELECT k + e AS j FROM t LATERAL VIEW explode(sequence(1, 300)) x AS e) b"
TOO_LARGE = "The query is too large to run: a join side Spark must hold whole"
KEEPS_TOO_MUCH = "would hold more than 134217728 bytes of values at once"


@pytest.fixture(scope="module")
def reader(doris: DorisClient) -> tuple[DorisClient, str]:
    """A database with `t` of 100k rows, and the client of a user who may only SELECT from it."""
    db = "db_broadcast"
    doris.sql(db, f"CREATE DATABASE {db}")
    doris.sql(db, "CREATE TABLE t (k BIGINT, v VARCHAR(32)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(db, "CREATE TABLE sink (k BIGINT) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    body = "\n".join(f"{i},value{i}" for i in range(ROWS))
    assert doris.stream_load(db, "t", body, {"column_separator": ","}).json()["Status"] == "Success"
    doris.sql(
        db, f"CREATE USER 'bcast_reader'@'%' IDENTIFIED BY 'pw'; GRANT SELECT_PRIV ON {db}.* TO 'bcast_reader'@'%'"
    )
    doris.sql(db, f"GRANT LOAD_PRIV ON {db}.sink TO 'bcast_reader'@'%'")
    return DorisClient(doris.base_url, auth=("bcast_reader", "pw")), db


def test_an_equi_join_with_an_exploded_side_answers_instead_of_broadcasting_it(
    reader: tuple[DorisClient, str], doris: DorisClient
) -> None:
    client, db = reader
    wide = ", ".join(f"concat(v, '{i}') AS w{i}" for i in range(30))  # the other side looks the larger one
    stmt = f"SELECT count(*) FROM (SELECT k, {wide} FROM t) a JOIN {EXPLODED} ON a.k = b.j"
    # every j = k + e in [1, 100299] that is some k < 100000: sum over e of (100000 - e)
    assert client.rows(db, stmt) == [[sum(ROWS - e for e in range(1, 301))]]
    assert doris.rows(db, "SELECT count(*) FROM t") == [[ROWS]]  # the same JVM answers


@pytest.mark.parametrize(
    "stmt",
    [
        pytest.param(f"SELECT count(*) FROM t a LEFT JOIN {EXPLODED} ON a.k < b.j", id="non-equi-left-join"),
        pytest.param(f"SELECT count(*) FROM t WHERE k NOT IN (SELECT j FROM {EXPLODED})", id="not-in"),
        pytest.param(
            f"SELECT count(*) FROM t a WHERE NOT EXISTS (SELECT 1 FROM {EXPLODED} WHERE b.j > a.k)",
            id="not-exists-non-equi",
        ),
    ],
)
def test_a_join_spark_must_broadcast_is_refused_when_that_side_is_large(
    reader: tuple[DorisClient, str], doris: DorisClient, stmt: str
) -> None:
    client, db = reader
    assert TOO_LARGE in client.sql_error(db, stmt)
    assert f"more than {MAX_BROADCAST_ROWS} rows" in client.sql_error(db, stmt)
    assert doris.rows(db, "SELECT count(*) FROM t") == [[ROWS]]


def test_an_insert_select_of_such_a_join_is_refused_and_loads_nothing(reader: tuple[DorisClient, str]) -> None:
    client, db = reader
    stmt = f"INSERT INTO sink SELECT a.k FROM t a LEFT JOIN {EXPLODED} ON a.k < b.j"
    assert TOO_LARGE in client.sql_error(db, stmt)
    assert client.rows(db, "SELECT count(*) FROM sink") == [[0]]


def test_joins_spark_broadcasts_whole_still_answer_when_that_side_is_small(reader: tuple[DorisClient, str]) -> None:
    client, db = reader
    assert client.rows(db, "SELECT count(*) FROM t WHERE k NOT IN (SELECT k + 1 FROM t)") == [[1]]
    assert client.rows(db, "SELECT count(*) FROM t WHERE k NOT IN (SELECT k FROM t WHERE k > 10)") == [[11]]
    small = "(SELECT k FROM t WHERE k < 10) b"
    assert client.rows(db, f"SELECT count(*) FROM t a LEFT JOIN {small} ON a.k < b.k") == [[ROWS - 9 + 45]]
    assert client.rows(db, f"SELECT count(*) FROM t a WHERE EXISTS (SELECT 1 FROM {small} WHERE b.k > a.k)") == [[9]]


@pytest.mark.parametrize(
    "stmt, kept",
    [
        pytest.param(
            "SELECT length(group_concat(repeat(v, 10000))) FROM t", "its 128 largest groups", id="group-concat"
        ),
        pytest.param(f"SELECT size(collect_list(j)) FROM {EXPLODED}", "its 128 largest groups", id="exploded-rows"),
        pytest.param(
            "SELECT max(length(x)) FROM (SELECT concat_ws(',', collect_list(repeat(v, 1000)) OVER (ORDER BY k)) x "
            "FROM t) w",
            "one window partition",
            id="window",
        ),
        pytest.param(  # the aggregate is measured before the join that broadcasts its result
            "SELECT count(*) FROM t a LEFT JOIN (SELECT size(collect_list(repeat(v, 10000))) AS j FROM t) b "
            "ON a.k < b.j",
            "its 128 largest groups",
            id="inside-a-broadcast-side",
        ),
    ],
)
def test_an_aggregate_that_would_keep_too_many_values_is_refused(
    reader: tuple[DorisClient, str], doris: DorisClient, stmt: str, kept: str
) -> None:
    client, db = reader
    error = client.sql_error(db, stmt)
    assert KEEPS_TOO_MUCH in error and kept in error, error
    assert doris.rows(db, "SELECT count(*) FROM t") == [[ROWS]]


def test_aggregates_that_keep_values_still_answer_within_the_bound(reader: tuple[DorisClient, str]) -> None:
    client, db = reader
    joined = sum(len(f"value{i}") for i in range(ROWS)) + ROWS - 1  # Doris's separator: ","
    assert client.rows(db, "SELECT length(group_concat(v)) FROM t") == [[joined]]
    windowed = "SELECT max(s) FROM (SELECT size(collect_list(v) OVER (PARTITION BY k % 100)) s FROM t) w"
    assert client.rows(db, windowed) == [[1000]]


def test_order_by_limit_of_rows_too_wide_to_keep_is_refused(
    reader: tuple[DorisClient, str], doris: DorisClient
) -> None:
    client, db = reader
    # Spark keeps the first n rows whole in a heap: 1000 rows of 300 KB are over the 256 MB bound
    wide = "SELECT r FROM (SELECT repeat(v, 30000) r FROM t WHERE k < 2000 ORDER BY r LIMIT 1000) x WHERE length(r) < 0"
    error = client.sql_error(db, f"SELECT count(*) FROM ({wide}) y")
    assert "ORDER BY ... LIMIT 1000 keeps its first 1000 rows whole" in error, error
    assert client.rows(db, "SELECT k FROM t ORDER BY v DESC LIMIT 2") == [[99999], [99998]]
    assert client.rows(
        db, "SELECT length(r) FROM (SELECT repeat(v, 30000) r FROM t WHERE k < 100 ORDER BY k LIMIT 5) x"
    ) == [
        [180000],
        [180000],
        [180000],
        [180000],
        [180000],
    ]
    assert doris.rows(db, "SELECT count(*) FROM t") == [[ROWS]]


def test_an_order_by_whose_rows_are_too_wide_for_the_result_is_refused_not_kept_whole(
    reader: tuple[DorisClient, str], doris: DorisClient
) -> None:
    """The row limit (1000) makes an ORDER BY without a LIMIT a top-k: its 1000 rows of 2 MB were kept whole in
    one task's heap to be measured, and the 2 GB JVM died in 8.6 s."""
    client, db = reader
    error = client.sql_error(db, "SELECT repeat(v, 300000) FROM t WHERE k < 1000 ORDER BY k")
    assert "Result set is larger than 268435456 bytes" in error, error
    assert doris.rows(db, "SELECT count(*) FROM t") == [[ROWS]]  # the same JVM answers


def test_an_order_by_with_one_wide_row_outside_its_first_rows_answers_in_order(reader: tuple[DorisClient, str]) -> None:
    """1000 rows as wide as the widest would not fit the result: the rows are sorted where a sort spills, and the
    first 1000 (none of them the wide one) measured and returned in order."""
    client, db = reader
    wide_last = "if(k = 99999, repeat(v, 300000), v)"
    assert client.rows(db, f"SELECT {wide_last} FROM t ORDER BY k") == [[f"value{i}"] for i in range(1000)]
    first = client.rows(db, f"SELECT length(x) FROM (SELECT {wide_last} x, k FROM t ORDER BY k DESC) y")
    assert first == [[3_000_000]] + [[10]] * 999
