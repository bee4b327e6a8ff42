"""The aggregate model's merge (`merge_rows`) against a pure-Python model: random loads into random tables.

Each load is merged on its own (ties by payload position, as the load job does), stored with its
version, and the stored rowsets are merged again (ties by version, as reads do). Merging any run of
rowsets first (what compaction does) must not change the answer.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession

from spark_runner.merge import merge_rows
from tables.model import VERSION_COL, ColumnDef, KeysType, TableDef
from tables.types import DorisType
from tests.aggregate_model import aggregate

AGGREGATIONS = ("SUM", "MAX", "MIN", "REPLACE", "REPLACE_IF_NOT_NULL")
POS = "__pos"


def table_def(aggregations: list[str], version: bool) -> TableDef:
    columns = [ColumnDef(name="k", type=DorisType(name="INT"), is_key=True)]
    if version:
        columns.append(ColumnDef(name="ver", type=DorisType(name="INT"), aggregation="MAX"))
    columns += [
        ColumnDef(name=f"v{i}", type=DorisType(name="BIGINT"), aggregation=a) for i, a in enumerate(aggregations)
    ]
    return TableDef(
        db="d",
        name="t",
        keys_type=KeysType.AGGREGATE,
        columns=tuple(columns),
        key_columns=("k",),
        replace_version_column="ver" if version else None,
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[TableDef, list[list[dict[str, Any]]], int]:
    aggregations = draw(st.lists(st.sampled_from(AGGREGATIONS), min_size=1, max_size=4))
    version = draw(st.booleans())
    table = table_def(aggregations, version)
    value = st.one_of(st.none(), st.integers(-5, 5))
    names = [c.name for c in table.columns if not c.is_key]
    row = st.fixed_dictionaries({"k": st.integers(0, 3), **{n: value for n in names}})
    loads = draw(st.lists(st.lists(row, min_size=1, max_size=6), min_size=1, max_size=4))
    split = draw(st.integers(0, len(loads)))
    return table, loads, split


def frame(spark: SparkSession, table: TableDef, rows: list[dict[str, Any]], extra: str) -> DataFrame:
    names = [c.name for c in table.columns]
    schema = ", ".join(f"{n} {'INT' if n in ('k', 'ver') else 'BIGINT'}" for n in names) + f", {extra} BIGINT"
    return spark.createDataFrame([(*[r[n] for n in names], r[extra]) for r in rows], schema)


def rowsets(spark: SparkSession, table: TableDef, loads: list[list[dict[str, Any]]]) -> list[DataFrame]:
    out = []
    for version, load in enumerate(loads, start=2):
        batch = frame(spark, table, [{**r, POS: i} for i, r in enumerate(load)], POS)
        merged = merge_rows(batch, table, POS)
        out.append(merged.selectExpr(*[c.name for c in table.columns], f"{version} AS {VERSION_COL}"))
    return out


def read(table: TableDef, stored: list[DataFrame]) -> list[dict[str, Any]]:
    merged = merge_rows(_union(stored), table, VERSION_COL).drop(VERSION_COL)
    return [r.asDict() for r in merged.orderBy("k").collect()]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=scenarios())
def test_loads_then_reads_match_the_model_and_compaction_changes_nothing(
    spark: SparkSession, scenario: tuple[TableDef, list[list[dict[str, Any]]], int]
) -> None:
    table, loads, split = scenario
    aggregations = {c.name: c.aggregation or "" for c in table.columns if not c.is_key}
    expected = aggregate(loads, ["k"], aggregations, table.replace_version_column)
    stored = rowsets(spark, table, loads)
    assert read(table, stored) == expected
    if split:
        # compact the first `split` rowsets into one (it keeps the newest version), then read again
        compacted = merge_rows(_union(stored[:split]), table, VERSION_COL)
        assert read(table, [compacted, *stored[split:]]) == expected


def _union(frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out
