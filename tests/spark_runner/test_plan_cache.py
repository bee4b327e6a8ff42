"""A load's plan is kept by its request minus the label and by the table's definition (`spark_runner.service._plan`):
loads of one shape plan once, and a plan is never taken for another shape or another definition."""

from __future__ import annotations

import pytest

from loaders.headers import parse_load_request
from spark_runner.planning import plan_load
from spark_runner.service import _plan
from sql.ddl import parse_create_table
from tables.catalog import TableHandle
from tables.errors import AnalysisError

DDL = "CREATE TABLE t (k INT, v VARCHAR(8), s INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"


def handle(ddl: str = DDL) -> TableHandle:
    return TableHandle(definition=parse_create_table(ddl, "d").definition, iceberg=None, storage=None)  # type: ignore[arg-type]


def test_loads_of_one_shape_plan_once_and_each_keeps_its_own_label() -> None:
    table = handle()
    headers = {"columns": "k, tmp, v = upper(tmp), s", "where": "k > 0"}
    first = _plan(parse_load_request("d", "t", {**headers, "label": "a"}), table)
    second = _plan(parse_load_request("d", "t", {**headers, "label": "b"}), table)
    assert (first.request.label, second.request.label) == ("a", "b")
    assert second.targets is first.targets  # the kept plan
    fresh = plan_load(parse_load_request("d", "t", {**headers, "label": "b"}), table.definition)
    assert second == fresh


def test_another_shape_or_another_definition_is_planned_anew() -> None:
    table = handle()
    plain = _plan(parse_load_request("d", "t", {"label": "a"}), table)
    assert plain.source_fields == ("k", "v", "s")
    mapped = _plan(parse_load_request("d", "t", {"label": "b", "columns": "s, v, k"}), table)
    assert mapped.source_fields == ("s", "v", "k")
    altered = handle(DDL.replace("s INT)", "s INT, w INT)"))  # the table after an ADD COLUMN
    assert _plan(parse_load_request("d", "t", {"label": "c"}), altered).source_fields == ("k", "v", "s", "w")
    for label in ("d", "e"):  # a failing plan fails each time
        with pytest.raises(AnalysisError, match="Unknown column 'nope'"):
            _plan(parse_load_request("d", "t", {"label": label, "columns": "k, v = nope"}), table)


def test_a_large_request_is_planned_each_time_and_never_kept() -> None:
    """Kept plans stay small: a `columns` of more than `MAX_KEPT_COLUMNS` entries (up to 4,096 are allowed) is
    planned anew for each load, so many such loads cannot fill the server's memory with plans."""
    from spark_runner import service

    table = handle()
    loose = ", ".join(["k", "v", "s"] + [f"x{i}" for i in range(service.MAX_KEPT_COLUMNS)])
    before = len(service._PLANS)
    first = _plan(parse_load_request("d", "t", {"label": "a", "columns": loose}), table)
    second = _plan(parse_load_request("d", "t", {"label": "b", "columns": loose}), table)
    assert first.source_fields == second.source_fields and second.targets is not first.targets
    assert len(service._PLANS) == before
