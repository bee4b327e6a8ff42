"""The aggregate-key model through the server: the seed's `test` table of 003_8fcb7ff40e8dfb0f.txt with its
version column, partial-column INSERTs, `negative: true`, DESC and the DDL rules."""

from __future__ import annotations

import random
from datetime import date, timedelta
from typing import Any

import pytest

from tests.aggregate_model import aggregate
from tests.helpers import DorisClient, assert_doris_result

SEED_TABLE = """CREATE TABLE `test` (
`id` bigint(20) NOT NULL,
`date` date NOT NULL,
`group_id` bigint(20) NOT NULL,
`version` int MAX NOT NULL,
`keyword` varchar(128) REPLACE NOT NULL,
`clicks` bigint(20) SUM NULL DEFAULT "0" ,
`cost` bigint(20) SUM NULL DEFAULT "0"
) ENGINE=OLAP
AGGREGATE KEY(`id`, `date`, `group_id`)
DISTRIBUTED BY HASH(`id`) BUCKETS 16
PROPERTIES (
"replace_version_column" = "version"
)"""
KEYS = ["id", "date", "group_id"]
AGGREGATIONS = {"version": "MAX", "keyword": "REPLACE", "clicks": "SUM", "cost": "SUM"}
CSV = {"column_separator": ","}


def _csv(rows: list[dict[str, Any]]) -> str:
    cells = (("\\N" if r[c] is None else str(r[c])) for r in rows for c in [*KEYS, *AGGREGATIONS])
    flat = list(cells)
    width = len(KEYS) + len(AGGREGATIONS)
    return "".join(",".join(flat[i : i + width]) + "\n" for i in range(0, len(flat), width))


def _rendered(rows: list[dict[str, Any]]) -> list[list[Any]]:
    return [[str(r["date"]) if c == "date" else r[c] for c in [*KEYS, *AGGREGATIONS]] for r in rows]


def test_seed_table_with_version_column_matches_the_model_over_shuffled_loads(doris: DorisClient, db: str) -> None:
    doris.sql(db, SEED_TABLE)
    rng = random.Random(3)
    rows = []
    for _ in range(60):
        rows.append(
            {
                "id": rng.randint(1, 4),
                "date": date(2024, 1, 1) + timedelta(days=rng.randint(0, 1)),
                "group_id": rng.randint(1, 2),
                "version": rng.randint(1, 6),  # ties on purpose: the later load wins them
                "keyword": rng.choice(["doris", "spark", "iceberg", "arrow"]),
                "clicks": rng.choice([None, *range(0, 50)]),
                "cost": rng.choice([None, *range(-5, 100)]),
            }
        )
    loads = [rows[i : i + 15] for i in range(0, 60, 15)]
    for i, load in enumerate(loads):
        assert_doris_result(doris.stream_load(db, "test", _csv(load), headers={**CSV, "label": f"l{i}"}), loaded=15)
    expected = aggregate(loads, KEYS, AGGREGATIONS, version_column="version")
    got = doris.rows(db, "SELECT * FROM test ORDER BY id, date, group_id")
    assert got == _rendered(expected)

    # key-only queries and value predicates see the aggregated rows
    assert doris.rows(db, "SELECT count(*) FROM test") == [[len(expected)]]
    assert doris.rows(db, "SELECT id, date, group_id FROM test ORDER BY id, date, group_id") == [
        r[:3] for r in _rendered(expected)
    ]
    threshold = sorted(r["clicks"] or 0 for r in expected)[len(expected) // 2]
    wanted = [[r["id"], str(r["date"]), r["group_id"]] for r in expected if (r["clicks"] or 0) > threshold]
    assert wanted, "the threshold must select some rows"
    got_filtered = doris.rows(db, f"SELECT id, date, group_id FROM test WHERE clicks > {threshold} ORDER BY 1, 2, 3")
    assert got_filtered == [[r[0], r[1], r[2]] for r in wanted]


def test_insert_of_some_columns_aggregates_defaults_and_nulls(doris: DorisClient, db: str) -> None:
    doris.sql(
        db,
        "CREATE TABLE a (k INT, s BIGINT SUM DEFAULT '5', m INT MAX, r VARCHAR(8) REPLACE, n INT REPLACE_IF_NOT_NULL) "
        "AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2",
    )
    doris.sql(db, "INSERT INTO a VALUES (1, 10, 3, 'x', 7), (1, 1, 9, 'y', NULL), (2, 2, 2, 'z', 2)")
    doris.sql(db, "INSERT INTO a (k, m) VALUES (1, 4), (3, 1)")  # s takes DEFAULT 5, r and n NULL
    assert doris.rows(db, "SELECT * FROM a ORDER BY k") == [
        [1, 16, 9, None, 7],
        [2, 2, 2, "z", 2],
        [3, 5, 1, None, None],
    ]
    assert doris.rows(db, "SELECT k, s FROM a WHERE m > 1 ORDER BY k") == [[1, 16], [2, 2]]
    assert doris.rows(db, "SELECT sum(s), max(m) FROM a") == [[23, 9]]


def test_negative_load_subtracts_sum_columns(doris: DorisClient, db: str) -> None:
    doris.sql(
        db,
        "CREATE TABLE s (k INT, a BIGINT SUM, b DECIMAL(10,2) SUM) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1",
    )
    assert_doris_result(doris.stream_load(db, "s", "1,10,2.50\n2,5,1\n", headers=CSV), loaded=2)
    assert_doris_result(doris.stream_load(db, "s", "1,3,0.25\n", headers={**CSV, "negative": "true"}), loaded=1)
    assert doris.rows(db, "SELECT * FROM s ORDER BY k") == [[1, 7, 2.25], [2, 5, 1]]


def test_negative_load_fails_unless_every_value_column_is_sum(doris: DorisClient, db: str) -> None:
    doris.sql(db, SEED_TABLE)
    body = assert_doris_result(
        doris.stream_load(db, "test", "1,2024-01-01,1,1,x,1,1\n", headers={**CSV, "negative": "true"}),
        status="Fail",
        message_contains="Column is not SUM AggregateType. column:version",
    )
    assert body["NumberLoadedRows"] == 0
    assert doris.rows(db, "SELECT count(*) FROM test") == [[0]]


def test_merge_type_and_sequence_are_unique_only(doris: DorisClient, db: str) -> None:
    doris.sql(db, "CREATE TABLE s (k INT, a BIGINT SUM) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    assert_doris_result(
        doris.stream_load(db, "s", "1,1\n", headers={**CSV, "merge_type": "DELETE"}),
        status="Fail",
        message_contains="load by MERGE or DELETE is only supported in unique tables.",
    )


def test_desc_shows_the_aggregation(doris: DorisClient, db: str) -> None:
    doris.sql(db, SEED_TABLE)
    extra = {row[0]: row[5] for row in doris.rows(db, "DESC test")}
    assert extra == {
        "id": "",
        "date": "",
        "group_id": "",
        "version": "MAX",
        "keyword": "REPLACE",
        "clicks": "SUM",
        "cost": "SUM",
    }
    doris.sql(db, "SET show_hidden_columns = true")
    assert [row[0] for row in doris.rows(db, "DESC test")] == list(extra)  # aggregate tables show no hidden column


@pytest.mark.parametrize(
    "ddl, message",
    [
        pytest.param(
            "CREATE TABLE x (k INT, h HLL HLL_UNION) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k)",
            "Unsupported data type: HLL",
            id="hll-union",
        ),
        pytest.param(
            "CREATE TABLE x (k INT, b BIGINT BITMAP_UNION) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k)",
            "Aggregation type BITMAP_UNION of column b is not supported",
            id="bitmap-union",
        ),
        pytest.param(
            "CREATE TABLE x (k INT, v INT) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k)",
            "AGG_KEYS table should specify aggregate type for non-key column[v]",
            id="missing-aggregation",
        ),
        pytest.param(
            "CREATE TABLE x (k INT, v INT SUM) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) "
            "PROPERTIES ('replace_version_column' = 'nope')",
            "The replace version column [nope] does not exist in schema",
            id="version-column-missing",
        ),
        pytest.param(
            "CREATE TABLE x (k INT, ver INT SUM, v INT REPLACE) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) "
            "PROPERTIES ('replace_version_column' = 'ver')",
            "The replace version column [ver] must be a value column with aggregation type MAX",
            id="version-column-not-max",
        ),
    ],
)
def test_aggregate_ddl_errors(doris: DorisClient, db: str, ddl: str, message: str) -> None:
    assert message in doris.sql_error(db, ddl)
    assert doris.rows(db, "SHOW TABLES") == []
