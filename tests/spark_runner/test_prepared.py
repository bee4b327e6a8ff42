"""Small loads of one shape run on the plan the first of them analyzed (`spark_runner.prepared`): each answers
with its own rows, counts and error lines, and a load of another shape (headers, columns) gets a plan of its own."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from spark_runner import load_job, prepared
from tests.helpers import AUTH, DorisClient

SEQ = {"column_separator": ","}


def test_loads_of_one_shape_reuse_its_plan_with_their_own_rows_counts_and_errors(
    doris: DorisClient, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-row load first tries its folded plan (no job, no counts: `load_job._folded_load`); only a row that
    does not come back (filtered, here) runs the counted plan, which is prepared once per shape as well. A load
    that reuses a plan builds no chain of its own over its rows (`prepared.deferred`)."""
    reused: list[tuple[str, bool]] = []  # (which plan: folded or counted, reused)
    real = prepared.reuse

    def spy(spark: Any, key: tuple[Any, ...], leaves: Any) -> Any:
        found = real(spark, key, leaves)
        reused.append(("folded" if key[-1] == load_job.FOLDED else "counted", found is not None))
        return found

    monkeypatch.setattr(prepared, "reuse", spy)
    chains: list[str] = []  # the chains over a load's rows that were built (a load that reuses a plan needs none)
    chain = load_job._split_fields_source
    monkeypatch.setattr(load_job, "_split_fields_source", lambda *args: chains.append("built") or chain(*args))
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
    assert reused == [("folded", False), ("folded", True), ("folded", True)]
    assert chains == ["built"]  # by the first load only
    assert doris.rows(db, "SELECT k, v, s FROM p ORDER BY k") == [[1, "a", 5], [2, "c", 1]]

    for reuses in (False, True):  # the shape of the loads above: its counts and error line, from the counted plan
        del reused[:]
        bad = load("x,d,9\n", max_filter_ratio="1")
        assert reused == [("folded", True), ("counted", reuses)]
        assert (bad["Status"], bad["NumberTotalRows"], bad["NumberFilteredRows"], bad["NumberLoadedRows"]) == (
            "Success",
            1,
            1,
            0,
        ), bad
        assert "x,d,9" in httpx.get(bad["ErrorURL"], auth=AUTH).text

    del reused[:]
    upper = load("3,e,1\n", columns="k,tmp,s,v=upper(tmp)")  # another shape: a plan of its own, then reused
    again = load("4,f,1\n", columns="k,tmp,s,v=upper(tmp)")
    assert upper["Status"] == again["Status"] == "Success"
    assert reused == [("folded", False), ("folded", True)]
    deleted = load("2,c,2\n", merge_type="DELETE")
    assert deleted["Status"] == "Success" and reused[-1] == ("folded", False)
    assert doris.rows(db, "SELECT k, v, s FROM p ORDER BY k") == [[1, "a", 5], [3, "E", 1], [4, "F", 1]]

    two = load("5,g,1\n5,h,2\n")  # two rows of one key: folded too (a plan of their own), merged in the server
    assert two["Status"] == "Success" and reused[-1] == ("folded", False)
    assert doris.rows(db, "SELECT v FROM p WHERE k = 5") == [["h"]]
    del reused[:]
    mixed = load("6,i,1\ny,j,2\n", max_filter_ratio="1")  # a row filtered: the counted plan of that shape
    assert reused == [("folded", True), ("counted", False)]
    assert (mixed["Status"], mixed["NumberTotalRows"], mixed["NumberFilteredRows"]) == ("Success", 2, 1), mixed


def test_merge_on_write_loads_reuse_their_plan_with_the_stored_rows_of_their_own_keys(
    doris: DorisClient, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small load into a large merge-on-write table that compares with the stored rows of its keys in its job
    (a partial update; a load of more rows than `KEYED_RECHECK_ROWS`) reads them in the server's process: its
    plan has two in-memory leaves (its rows, those stored rows) and no key of its own in
    it, so the next loads of its shape reuse it with their rows and their keys' stored rows. Each answers by its
    own keys: a stored row with a larger sequence wins, a new key is added, a deleted key stays deleted below
    its tombstone's sequence; a partial update fills its own keys' unlisted columns and counts its new keys."""
    from spark_runner import service

    monkeypatch.setattr(service, "DRIVER_RECHECK_ROWS", 0)  # decided in the job, as into a large table,
    monkeypatch.setattr(service, "KEYED_RECHECK_ROWS", 0)  # as a load of more rows than a pairing by key takes
    reused: list[tuple[bool, tuple[str, ...]]] = []
    real = prepared.reuse

    def spy(spark: Any, key: Any, leaves: Any) -> Any:
        found = real(spark, key, leaves)
        if key[-1] != "keys":  # the rowset's plan, not the chain of the load's keys
            reused.append((found is not None, tuple(sorted(leaves))))
        return found

    monkeypatch.setattr(prepared, "reuse", spy)
    doris.sql(
        db,
        "CREATE TABLE m (k INT NOT NULL, v VARCHAR(8), s INT, w INT DEFAULT '7') UNIQUE KEY(k) "
        'DISTRIBUTED BY HASH(k) BUCKETS 1 PROPERTIES ("function_column.sequence_col" = "s")',
    )
    bulk = "".join(f"{k},v{k},{k % 5},{k}\n" for k in [*range(50), 100])
    assert doris.stream_load(db, "m", bulk, SEQ).json()["Status"] == "Success"

    def load(body: str, **headers: str) -> dict[str, Any]:
        reply: dict[str, Any] = doris.stream_load(db, "m", body, {**SEQ, **headers}).json()
        assert reply["Status"] == "Success", reply["Message"]
        return reply

    reused.clear()
    load("3,a,9,0\n")  # wins over (3, v3, 3)
    load("4,b,1,0\n")  # loses to (4, v4, 4): its own key's stored row, not key 3's
    load("60,c,0,0\n")  # new keys: the stored rows read hold none of them
    load("61,g,0,0\n")
    load("9,d,0,0\n", merge_type="DELETE")  # a tombstone with sequence 0 (9's row had 4: the delete loses)
    load("8,e,9,0\n", merge_type="DELETE")
    load("8,f,2,0\n")  # below 8's tombstone: still deleted
    assert [found for found, _ in reused] == [False, True, True, True, False, True, True], reused
    assert all(leaves == ("load", "stored") for _, leaves in reused), reused
    assert doris.rows(db, "SELECT k, v, s, w FROM m WHERE k IN (3, 4, 8, 9, 60, 61) ORDER BY k") == [
        [3, "a", 9, 0],
        [4, "v4", 4, 4],
        [9, "v9", 4, 9],
        [60, "c", 0, 0],
        [61, "g", 0, 0],
    ]

    partial = {"partial_columns": "true", "columns": "k,v"}
    load("5,p\n", **partial)
    second = load("6,q\n", **partial)  # the same shape: its own key's stored values fill `s` and `w`
    new = load("70,r\n", **partial)  # a new key in a reused plan: counted, DEFAULTs filled
    load("500,z\n", **partial)  # a key no file may hold: no file to read, a plan of its own
    assert [found for found, _ in reused[-4:]] == [False, True, True, False], reused
    assert second["NumberLoadedRows"] == new["NumberLoadedRows"] == 1
    assert doris.rows(db, "SELECT k, v, s, w FROM m WHERE k IN (5, 6, 70, 500) ORDER BY k") == [
        [5, "p", 0, 5],
        [6, "q", 1, 6],
        [70, "r", None, 7],
        [500, "z", None, 7],
    ]
    refused = doris.stream_load(db, "m", "71,x\n", {**SEQ, **partial, "partial_update_new_key_behavior": "ERROR"})
    assert refused.json()["Status"] == "Fail" and "key=[71]" in refused.json()["Message"]


def test_a_reused_plan_is_rebuilt_in_three_round_trips_a_node(spark: Any) -> None:
    import pyarrow as pa
    from pyspark.sql import types as T

    from spark_runner.arrow_frames import arrow_frame
    from tests.spark_runner.test_columns import round_trips

    schema = T.StructType([T.StructField("k", T.LongType()), T.StructField("v", T.StringType())])

    def leaf(keys: list[int]) -> Any:
        return arrow_frame(spark, pa.table({"k": keys, "v": [f"v{k}" for k in keys]}), schema)

    def chain(source: Any) -> Any:
        out = source.selectExpr("k * 2 AS k2", "upper(v) AS v").where("k2 > 2").selectExpr("k2 + 1 AS k3", "v")
        return out.where("k3 < 100").selectExpr("concat(v, k3) AS s", "k3")

    first = leaf([1, 2, 3])
    key = ("test_reuse_round_trips", str(first.schema))
    prepared.remember(key, chain(first), "t", {prepared.LOAD: first})
    tree = prepared._plans()[key].tree  # type: ignore[index]

    def nodes(t: Any) -> int:
        return 1 if isinstance(t[0], str) else 1 + sum(nodes(c) for c in t[1])

    second = leaf([4, 40, 60])
    second.schema  # noqa: B018  (the leaf's schema, asked before counting)
    prepared.reuse(spark, key, {prepared.LOAD: second})  # the JVM's methods are looked up once per JVM
    with round_trips(spark) as sent:
        found = prepared.reuse(spark, key, {prepared.LOAD: second})
    assert found is not None
    assert sorted(found[0].collect()) == [("V4081", 81), ("V49", 9)]
    assert found[0].schema.names == ["s", "k3"]
    # per inner node: the list of its children, as a Scala Seq, and the copy; the leaf: its rows and a new relation
    assert sent[0] <= 3 * nodes(tree) + 6, (sent[0], nodes(tree))


def test_a_folded_plan_folds_each_loads_rows_as_the_optimizer_would(spark: Any) -> None:
    """A chain of projections and filters over a load's rows (`load_job._folded_load`) is kept optimized and not
    folded; each next load of its shape folds its own rows through it and reads them from the JVM as Arrow: the
    same rows, values and types as Spark's own query over those rows, which optimizes the whole chain again. A
    chain with an aggregate is kept analyzed only (its optimization may read the rows' count)."""
    import datetime as dt
    import decimal

    import pyarrow as pa
    from pyspark.sql import types as T

    from spark_runner.arrow_frames import arrow_frame, relation_rows

    schema = T.StructType([T.StructField("k", T.StringType()), T.StructField("v", T.StringType())])
    session = spark.newSession()  # a zone of its own: the passes run with the load's session settings
    session.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")

    def leaf(rows: list[tuple[str | None, str | None]]) -> Any:
        table = pa.table({"k": [r[0] for r in rows], "v": [r[1] for r in rows]})
        return arrow_frame(session, table, schema)

    def chain(source: Any) -> Any:
        out = source.selectExpr(
            "try_cast(k AS BIGINT) AS k",
            "CASE WHEN v RLIKE '^[0-9]+[.][0-9]+$' THEN try_cast(v AS DECIMAL(9,2)) END AS d",
            "upper(v) AS u",
            "CAST(CAST(concat('2024-03-01 ', coalesce(k, '0'), ':30:00') AS TIMESTAMP) AS DATE) AS day",
        )
        return out.where("k IS NOT NULL AND k < 100").selectExpr("k * 2 AS k2", "d", "concat(u, '/', k) AS s", "day")

    first = leaf([("1", "1.50")])
    key = ("test_folded_plan", str(first.schema))
    prepared.remember(key, chain(first), "", {prepared.LOAD: first}, folded=True)
    assert prepared._plans()[key].folds > 0  # type: ignore[index]

    rows = [("7", "2.25"), ("x", "1.00"), ("300", "3.00"), (None, None), ("23", "ü-ß"), ("4", None)]
    second = leaf(rows)
    found = prepared.reuse(session, key, {prepared.LOAD: second})
    assert found is not None
    relation = prepared.folded_relation(found[0])
    assert relation is not None
    got = relation_rows(relation, found[0].schema)
    assert got is not None
    expected = chain(leaf(rows)).toArrow()  # Spark's own query, optimized whole
    assert got.schema.types == expected.schema.types
    assert (
        got.to_pylist()
        == expected.to_pylist()
        == [
            {"k2": 14, "d": decimal.Decimal("2.25"), "s": "2.25/7", "day": dt.date(2024, 3, 1)},
            {"k2": 46, "d": None, "s": "Ü-SS/23", "day": dt.date(2024, 3, 1)},
            {"k2": 8, "d": None, "s": None, "day": dt.date(2024, 3, 1)},
        ]
    )

    grouped = ("test_folded_plan_grouped", str(first.schema))
    prepared.remember(grouped, chain(first).groupBy("s").count(), "", {prepared.LOAD: first}, folded=True)
    assert prepared._plans()[grouped].folds == 0  # type: ignore[index]
    again = prepared.reuse(session, grouped, {prepared.LOAD: leaf(rows)})
    assert again is not None and prepared.folded_relation(again[0]) is None


@pytest.mark.parametrize("missing", ["fold", "arrow"])
def test_a_spark_without_the_internal_classes_a_small_load_uses_still_loads_its_rows(
    doris: DorisClient, db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, missing: str
) -> None:
    """A small load's fast path calls Spark's internal classes (the optimizer's session and rule: `prepared`;
    `ArrowConverters`: `arrow_frames.relation_rows`). A Spark release that renamed one, simulated by the name of a
    class this Spark does not have, still loads every row: the plans are built afresh (and no longer kept in
    that JVM, with a warning), or the rows are collected by a query."""
    from spark_runner import arrow_frames
    from spark_runner.columns import context_cache

    if missing == "fold":
        monkeypatch.setattr(prepared, "SESSION", "org.apache.spark.sql.classic.NoSuchSession")
        monkeypatch.setattr(prepared, "_RULE", "_sl_test_missing_rule")  # looked up again, not the cached members
    else:
        monkeypatch.setattr(arrow_frames, "_ARROW_CONVERTERS", "org.apache.spark.sql.execution.arrow.NoSuchConverters$")
        monkeypatch.setattr(arrow_frames, "_CONVERTERS", "_sl_test_missing_converters")
    table = f"missing_{missing}"
    doris.sql(
        db,
        f"CREATE TABLE {table} (k INT NOT NULL, v VARCHAR(8), s INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
        'PROPERTIES ("function_column.sequence_col" = "s")',
    )
    try:
        with caplog.at_level("WARNING", logger="spark_runner.prepared"):
            for body in ("1,a,5\n", "1,b,3\n", "2,c,1\n2,d,4\n", "3,e,1\n"):
                reply = doris.stream_load(db, table, body, SEQ).json()
                assert (reply["Status"], reply["NumberLoadedRows"]) == ("Success", body.count("\n")), reply
        assert doris.rows(db, f"SELECT k, v, s FROM {table} ORDER BY k") == [[1, "a", 5], [2, "d", 4], [3, "e", 1]]
        turned_off = [r for r in caplog.records if "no longer reused" in r.getMessage()]
        assert bool(turned_off) == (missing == "fold")
    finally:
        plans = context_cache(prepared._ATTR)
        if plans is not None:
            plans.pop(prepared._OFF, None)  # the next tests' JVM reuses plans again
