"""Small loads of one shape run on the plan the first of them analyzed (`spark_runner.prepared`): each answers
with its own rows, counts and error lines, and a load of another shape (headers, columns) gets a plan of its own."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from spark_runner import prepared
from tests.helpers import AUTH, DorisClient

SEQ = {"column_separator": ","}


def test_loads_of_one_shape_reuse_its_plan_with_their_own_rows_counts_and_errors(
    doris: DorisClient, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reused: list[bool] = []
    real = prepared.reuse

    def spy(*args: Any) -> Any:
        found = real(*args)
        reused.append(found is not None)
        return found

    monkeypatch.setattr(prepared, "reuse", spy)
    doris.sql(
        db,
        "CREATE TABLE p (k INT NOT NULL, v VARCHAR(8), s INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
        'PROPERTIES ("function_column.sequence_col" = "s")',
    )

    def load(body: str, **headers: str) -> dict[str, Any]:
        reply: dict[str, Any] = doris.stream_load(db, "p", body, {**SEQ, **headers}).json()
        return reply

    for body in ("1,a,5\n", "1,b,3\n", "2,c,1\n"):  # 1,b loses to 1,a on the sequence column
        reply = load(body)
        assert reply["Status"] == "Success", reply["Message"]
    assert reused == [False, True, True]
    assert doris.rows(db, "SELECT k, v, s FROM p ORDER BY k") == [[1, "a", 5], [2, "c", 1]]

    bad = load("x,d,9\n", max_filter_ratio="1")  # the shape of the loads above: its counts and error line
    assert reused[-1] is True
    assert (bad["Status"], bad["NumberTotalRows"], bad["NumberFilteredRows"], bad["NumberLoadedRows"]) == (
        "Success",
        1,
        1,
        0,
    ), bad
    assert "x,d,9" in httpx.get(bad["ErrorURL"], auth=AUTH).text

    upper = load("3,e,1\n", columns="k,tmp,s,v=upper(tmp)")  # another shape: a plan of its own, then reused
    again = load("4,f,1\n", columns="k,tmp,s,v=upper(tmp)")
    assert upper["Status"] == again["Status"] == "Success"
    assert reused[-2:] == [False, True]
    deleted = load("2,c,2\n", merge_type="DELETE")
    assert deleted["Status"] == "Success" and reused[-1] is False
    assert doris.rows(db, "SELECT k, v, s FROM p ORDER BY k") == [[1, "a", 5], [3, "E", 1], [4, "F", 1]]

    two = load("5,g,1\n5,h,2\n")  # two rows are merged in the job: another plan
    assert two["Status"] == "Success" and reused[-1] is False
    assert doris.rows(db, "SELECT v FROM p WHERE k = 5") == [["h"]]
