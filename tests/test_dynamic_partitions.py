"""Issue 20: dynamic partitions (`sql.dynamic_partition`): the `dynamic_partition.*` properties with Doris's checks,
the window of partitions created with the table and kept up by the scheduler, and those past `start` dropped."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sql.ddl import parse_create_table
from sql.dynamic_partition import plan
from tables.errors import SqlError
from tests.helpers import DorisClient, assert_doris_result

DDL = """CREATE TABLE {name} (d {type}, k INT, v INT) UNIQUE KEY(d, k) PARTITION BY RANGE(d) ({partitions})
DISTRIBUTED BY HASH(k) BUCKETS 1 PROPERTIES ({props})"""


def _ddl(name: str, props: dict[str, str], *, type_: str = "DATE", partitions: str = "") -> str:
    text = ", ".join(f'"dynamic_partition.{k}" = "{v}"' for k, v in props.items())
    return DDL.format(name=name, type=type_, partitions=partitions, props=text)


def _names(doris: DorisClient, db: str, table: str) -> list[str]:
    return [r[1] for r in doris.rows(db, f"SHOW PARTITIONS FROM {table}")]


def test_the_window_is_created_with_the_table_and_loads_land_in_it(doris: DorisClient, db: str) -> None:
    props = {"time_unit": "DAY", "start": "-3", "end": "2", "prefix": "p", "time_zone": "UTC"}
    doris.sql(db, _ddl("t", props))
    today = dt.datetime.now(dt.UTC).date()
    days = [today + dt.timedelta(days=n) for n in range(3)]
    assert _names(doris, db, "t") == [f"p{d:%Y%m%d}" for d in days]
    assert_doris_result(
        doris.stream_load(db, "t", f"{today},1,10\n{days[2]},2,20\n", headers={"column_separator": ","}), loaded=2
    )
    created = doris.rows(db, "SHOW CREATE TABLE t")[0][1]
    assert '"dynamic_partition.end" = "2"' in created
    shown = doris.rows(db, "SHOW DYNAMIC PARTITION TABLES")
    assert [r[:6] for r in shown] == [["t", "true", "DAY", "-3", "2", "p"]]

    # history partitions, then a wider window through ALTER TABLE ... SET
    doris.sql(db, _ddl("h", {**props, "create_history_partition": "true"}))
    assert len(_names(doris, db, "h")) == 6
    doris.sql(db, 'ALTER TABLE h SET ("dynamic_partition.end" = "4")')
    assert _names(doris, db, "h")[-1] == f"p{today + dt.timedelta(days=4):%Y%m%d}"
    doris.sql(db, 'ALTER TABLE h SET ("dynamic_partition.enable" = "false", "dynamic_partition.end" = "6")')
    assert len(_names(doris, db, "h")) == 8  # disabled: nothing more is created


def test_partitions_past_start_are_dropped_with_their_rows(doris: DorisClient, db: str) -> None:
    props = {"enable": "false", "time_unit": "DAY", "start": "-2", "end": "1", "time_zone": "UTC"}
    old = 'PARTITION p_old VALUES [("2000-01-01"), ("2000-01-02"))'
    doris.sql(db, _ddl("t", props, partitions=old))
    assert _names(doris, db, "t") == ["p_old"]
    assert_doris_result(doris.stream_load(db, "t", "2000-01-01,1,10\n", headers={"column_separator": ","}))
    doris.sql(db, 'ALTER TABLE t SET ("dynamic_partition.enable" = "true")')
    today = dt.datetime.now(dt.UTC).date()
    assert _names(doris, db, "t") == [f"p{today:%Y%m%d}", f"p{today + dt.timedelta(days=1):%Y%m%d}"]
    assert doris.rows(db, "SELECT count(*) FROM t") == [[0]]


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"time_unit": "DAY"}, "Must assign dynamic_partition.end properties"),
        ({"time_unit": "MINUTE", "end": "3"}, "Unsupported time unit MINUTE. Expect HOUR/DAY/WEEK/MONTH/YEAR."),
        ({"time_unit": "DAY", "end": "0"}, "Dynamic partition end must greater than 0"),
        ({"time_unit": "DAY", "end": "3", "start": "1"}, "Dynamic partition start must less than 0"),
        ({"time_unit": "DAY", "end": "600"}, "Too many dynamic partitions: 601. Limit: 500"),
        ({"time_unit": "DAY", "end": "3", "prefix": "p x"}, "Invalid dynamic partition prefix: p x"),
        ({"time_unit": "HOUR", "end": "3"}, "time_unit HOUR of dynamic partition needs a DATETIME partition column"),
        (
            {"time_unit": "DAY", "end": "3", "create_history_partition": "true"},
            "Provide start or history_partition_num property when creating history partition",
        ),
    ],
)
def test_dynamic_properties_are_checked(doris: DorisClient, db: str, props: dict[str, str], message: str) -> None:
    assert doris.sql_error(db, _ddl("t", props)).endswith(message)


@pytest.mark.parametrize(
    ("unit", "column", "expected"),
    [
        ("HOUR", "DATETIME", [("p2024022923", "2024-02-29 23:00:00"), ("p2024030100", "2024-03-01 00:00:00")]),
        ("WEEK", "DATE", [("p2024_09", "2024-02-26"), ("p2024_10", "2024-03-04")]),
        ("MONTH", "DATE", [("p202402", "2024-02-01"), ("p202403", "2024-03-01")]),
        ("YEAR", "DATE", [("p2024", "2024-01-01"), ("p2025", "2025-01-01")]),
    ],
)
def test_time_units_name_and_bound_partitions_as_doris(unit: str, column: str, expected: list[Any]) -> None:
    props = {"time_unit": unit, "end": "1", "time_zone": "UTC"}
    table = parse_create_table(_ddl("t", props, type_=column), "db").definition
    now = dt.datetime(2024, 2, 29, 23, 30, tzinfo=dt.UTC)
    planned, dropped = plan(table, now, "2024-02-29 23:30:00")
    assert planned.partitioning is not None and not dropped
    assert [(p.name, p.lower[0]) for p in planned.partitioning.partitions] == expected
    with pytest.raises(SqlError, match="Unknown dynamic partition property"):
        plan(parse_create_table(_ddl("t", {**props, "bogus": "1"}), "db").definition, now, "")
