"""The sequenced merge on tiny DataFrames: for each key the row with the largest
(sequence is not NULL, sequence, tie-breaker) survives — Doris's unique-key rule."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.testing import assertDataFrameEqual

from spark_runner.merge import latest_per_key, sequence_order

DAY = date(2024, 1, 1)
ROWS = "k INT, v STRING, seq INT, pos BIGINT"


def column(name: str):  # type: ignore[no-untyped-def]
    """A column by its exact name as SQL text: the caller builds the order, so the caller quotes."""
    return "`" + name.replace("`", "``") + "`"


def merged(spark, schema: str, rows: list[tuple[Any, ...]], keys: list[str], sequence: str | None, tie_breaker: str):  # type: ignore[no-untyped-def]
    df = spark.createDataFrame(rows, schema)
    seq = column(sequence) if sequence is not None else None
    return latest_per_key(df, keys, sequence_order(seq, column(tie_breaker)))


@pytest.mark.parametrize(
    "rows, expected",
    [
        pytest.param([(1, "a", 2, 0), (1, "b", 1, 1)], [(1, "a", 2, 0)], id="higher sequence wins over a later row"),
        pytest.param([(1, "a", 1, 0), (1, "b", 2, 1)], [(1, "b", 2, 1)], id="higher sequence wins over an earlier row"),
        pytest.param(
            [(1, "b", 5, 3), (1, "a", 9, 1), (1, "c", 7, 2)],
            [(1, "a", 9, 1)],
            id="highest of several sequences wins wherever it stands",
        ),
        pytest.param([(1, "a", 3, 0), (1, "b", 3, 1)], [(1, "b", 3, 1)], id="equal sequence goes to the later row"),
        pytest.param(
            [(1, "b", 3, 1), (1, "a", 3, 0)],
            [(1, "b", 3, 1)],
            id="equal sequence goes to the later position whatever the input order",
        ),
        pytest.param(
            [(1, "a", -5, 0), (1, "b", None, 1)],
            [(1, "a", -5, 0)],
            id="null sequence loses to a negative sequence even when later",
        ),
        pytest.param(
            [(1, "a", 0, 0), (1, "b", None, 1)],
            [(1, "a", 0, 0)],
            id="null sequence loses to sequence zero even when later",
        ),
        pytest.param(
            [(1, "a", None, 0), (1, "b", -2147483648, 1)],
            [(1, "b", -2147483648, 1)],
            id="smallest integer sequence beats an earlier null sequence",
        ),
        pytest.param(
            [(1, "a", None, 0), (1, "b", None, 1)], [(1, "b", None, 1)], id="null against null goes to the later row"
        ),
        pytest.param(
            [(1, "a", 1, 0), (2, "b", 1, 1), (1, "c", 0, 2), (2, "d", 2, 3)],
            [(1, "a", 1, 0), (2, "d", 2, 3)],
            id="each key is decided on its own",
        ),
        pytest.param([(1, "a", 1, 0)], [(1, "a", 1, 0)], id="a single row is kept as it is"),
        pytest.param([], [], id="no rows give no rows"),
    ],
)
def test_largest_sequence_then_later_position_wins(spark, rows, expected) -> None:  # type: ignore[no-untyped-def]
    out = merged(spark, ROWS, rows, ["k"], "seq", "pos")
    assertDataFrameEqual(out, spark.createDataFrame(expected, ROWS))


VERSIONED = "k INT, v STRING, seq INT, version BIGINT"


@pytest.mark.parametrize(
    "rows, expected",
    [
        pytest.param(
            [(1, "new", 4, 7), (1, "old", 4, 3)],
            [(1, "new", 4, 7)],
            id="equal sequence goes to the newer version listed first",
        ),
        pytest.param(
            [(1, "new", 1, 7), (1, "old", 4, 3)],
            [(1, "old", 4, 3)],
            id="higher sequence of an older version still wins",
        ),
        pytest.param(
            [(1, "new", None, 7), (1, "old", 0, 3)],
            [(1, "old", 0, 3)],
            id="newer version with null sequence loses to an older sequenced row",
        ),
    ],
)
def test_reads_order_by_sequence_then_version(spark, rows, expected) -> None:  # type: ignore[no-untyped-def]
    out = merged(spark, VERSIONED, rows, ["k"], "seq", "version")
    assertDataFrameEqual(out, spark.createDataFrame(expected, VERSIONED))


@pytest.mark.parametrize(
    "rows, expected",
    [
        pytest.param(
            [(1, "a", 9, 0), (1, "b", 1, 1)],
            [(1, "b", 1, 1)],
            id="without a sequence the later row wins whatever the values",
        ),
        pytest.param(
            [(1, "b", None, 5), (1, "a", None, 2), (2, "c", None, 0)],
            [(1, "b", None, 5), (2, "c", None, 0)],
            id="without a sequence the largest position wins per key",
        ),
    ],
)
def test_without_sequence_the_later_row_wins(spark, rows, expected) -> None:  # type: ignore[no-untyped-def]
    out = merged(spark, ROWS, rows, ["k"], None, "pos")
    assertDataFrameEqual(out, spark.createDataFrame(expected, ROWS))


COMPOSITE = "a INT, b STRING, v STRING, seq INT, pos BIGINT"


@pytest.mark.parametrize(
    "rows, expected",
    [
        pytest.param(
            [(1, "x", "p", 1, 0), (1, "y", "q", 0, 1), (1, "x", "r", 0, 2)],
            [(1, "x", "p", 1, 0), (1, "y", "q", 0, 1)],
            id="rows sharing only part of a composite key are different keys",
        ),
        pytest.param(
            [(1, "x", "p", 1, 0), (2, "x", "q", 1, 1), (1, "x", "r", 1, 2)],
            [(2, "x", "q", 1, 1), (1, "x", "r", 1, 2)],
            id="rows sharing the whole composite key merge",
        ),
        pytest.param(
            [(None, "x", "p", 1, 0), (None, "x", "q", 2, 1), (None, None, "r", 0, 2), (None, None, "s", 0, 3)],
            [(None, "x", "q", 2, 1), (None, None, "s", 0, 3)],
            id="null key values group together",
        ),
        pytest.param(
            [(None, "x", "p", 1, 0), (0, "x", "q", 0, 1), (1, "", "r", 0, 2), (1, None, "s", 0, 3)],
            [(None, "x", "p", 1, 0), (0, "x", "q", 0, 1), (1, "", "r", 0, 2), (1, None, "s", 0, 3)],
            id="null key is not zero and not the empty string",
        ),
    ],
)
def test_composite_keys(spark, rows, expected) -> None:  # type: ignore[no-untyped-def]
    out = merged(spark, COMPOSITE, rows, ["a", "b"], "seq", "pos")
    assertDataFrameEqual(out, spark.createDataFrame(expected, COMPOSITE))


@pytest.mark.parametrize(
    "schema, keys, rows, expected",
    [
        pytest.param(
            "k INT",
            ["k"],
            [(1,), (1,), (2,), (None,), (None,)],
            [(1,), (2,), (None,)],
            id="a table of one key column keeps each key once",
        ),
        pytest.param(
            "a INT, b STRING",
            ["a", "b"],
            [(1, "x"), (1, "x"), (1, "y")],
            [(1, "x"), (1, "y")],
            id="a table of a composite key keeps each key once",
        ),
    ],
)
def test_table_with_only_key_columns_keeps_one_row_per_key(spark, schema, keys, rows, expected) -> None:  # type: ignore[no-untyped-def]
    df = spark.createDataFrame(rows, schema)
    out = latest_per_key(df, keys, sequence_order(None, "0"))
    assertDataFrameEqual(out, spark.createDataFrame(expected, schema))


@pytest.mark.parametrize(
    "schema, keys, sequence, tie_breaker, rows, expected",
    [
        pytest.param(
            "`date` DATE, `order` STRING, `select` INT, `from` BIGINT",
            ["date"],
            "select",
            "from",
            [(DAY, "a", 2, 0), (DAY, "b", 1, 1)],
            [(DAY, "a", 2, 0)],
            id="reserved words as key sequence and tie breaker names",
        ),
        pytest.param(
            "`my key` INT, `the value` STRING, `seq no` INT, `row pos` BIGINT",
            ["my key"],
            "seq no",
            "row pos",
            [(1, "a", 1, 0), (1, "b", 1, 1), (2, "c", 0, 2)],
            [(1, "b", 1, 1), (2, "c", 0, 2)],
            id="names with spaces",
        ),
        pytest.param(
            "`order` INT, `group` INT, v STRING, s INT, p BIGINT",
            ["order", "group"],
            "s",
            "p",
            [(1, 1, "a", 1, 0), (1, 1, "b", 0, 1), (1, 2, "c", 0, 2)],
            [(1, 1, "a", 1, 0), (1, 2, "c", 0, 2)],
            id="a composite key of reserved words",
        ),
        pytest.param(
            "k INT, `v.x` STRING, s INT, p BIGINT",
            ["k"],
            "s",
            "p",
            [(1, "a", 1, 0), (1, "b", 0, 1)],
            [(1, "a", 1, 0)],
            id="a value column with a dot in its name",
        ),
        pytest.param(
            "`k.a` INT, v STRING, `s.q` INT, `p.o` BIGINT",
            ["k.a"],
            "s.q",
            "p.o",
            [(1, "a", 1, 0), (1, "b", 1, 1), (2, "c", 0, 2)],
            [(1, "b", 1, 1), (2, "c", 0, 2)],
            id="key sequence and tie breaker with dots in their names",
        ),
        pytest.param(
            "`K` INT, `k_` STRING, `__w` INT, pos BIGINT",
            ["K"],
            "__w",
            "pos",
            [(1, "a", 1, 0), (1, "b", 0, 1)],
            [(1, "a", 1, 0)],
            id="a column named like the internal winner struct",
        ),
    ],
)
def test_column_names_that_need_quoting(spark, schema, keys, sequence, tie_breaker, rows, expected) -> None:  # type: ignore[no-untyped-def]
    out = merged(spark, schema, rows, keys, sequence, tie_breaker)
    assertDataFrameEqual(out, spark.createDataFrame(expected, schema))


def doris_winners(rows: list[tuple[int, int | None, int]]) -> set[tuple[int, int | None, int]]:
    """The rule written out in Python: per key, the largest (sequence is not NULL, sequence, position)."""
    best: dict[int, tuple[int, int | None, int]] = {}
    for row in rows:
        key, seq, pos = row

        def rank(r: tuple[int, int | None, int]) -> tuple[bool, int, int]:
            return (r[1] is not None, r[1] if r[1] is not None else 0, r[2])

        if key not in best or rank(row) > rank(best[key]):
            best[key] = row
    return set(best.values())


@st.composite
def loads(draw: st.DrawFn) -> list[tuple[int, int | None, int]]:
    cells = draw(st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(-2, 2))), max_size=12))
    positions = draw(st.permutations(range(len(cells))))
    return [(k, s, p) for (k, s), p in zip(cells, positions, strict=True)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=loads())
def test_merge_matches_the_doris_rule_on_random_loads(spark, rows) -> None:  # type: ignore[no-untyped-def]
    schema = "k INT, seq INT, pos BIGINT"
    out = latest_per_key(spark.createDataFrame(rows, schema), ["k"], sequence_order("`seq`", "`pos`"))
    assert {(r.k, r.seq, r.pos) for r in out.collect()} == doris_winners(rows)


def test_what_a_merge_on_write_load_supersedes_follows_the_merge_order(spark) -> None:  # type: ignore[no-untyped-def]
    """`beats` (Spark SQL, the load's decision) and `later_wins` (the re-check in the server's process) agree with
    each other and with `sequence_order`: the later row wins unless the earlier one has a larger sequence
    (NULL lowest, a tie to the later row); without a sequence column the later row always wins."""
    from spark_runner.merge import beats, later_wins
    from tables.model import ColumnDef, KeysType, TableDef
    from tables.types import DorisType

    columns = (
        ColumnDef(name="k", type=DorisType(name="INT"), is_key=True),
        ColumnDef(name="s", type=DorisType(name="INT")),
    )
    with_seq = TableDef(
        db="d", name="t", keys_type=KeysType.UNIQUE, columns=columns, key_columns=("k",), sequence_col="s"
    )
    plain = with_seq.model_copy(update={"sequence_col": None})
    values = [None, 1, 2]
    pairs = [(later, earlier) for later in values for earlier in values]
    rows = spark.createDataFrame(pairs, "later INT, earlier INT").selectExpr(
        "later", "earlier", f"{beats(with_seq, 'later', 'earlier')} AS s", f"{beats(plain, 'later', 'earlier')} AS p"
    )
    for row in rows.collect():
        expected = row["earlier"] is None or (row["later"] is not None and row["later"] >= row["earlier"])
        assert row["s"] == later_wins(with_seq, row["later"], row["earlier"]) == expected, row
        assert row["p"] is True and later_wins(plain, row["later"], row["earlier"])


def test_order_key_puts_a_null_sequence_lowest_and_breaks_ties_by_version() -> None:
    from spark_runner.merge import order_key

    assert max([(None, 9), (3, 1), (3, 2), (1, 8)], key=lambda r: order_key(*r)) == (3, 2)
    assert max([(None, 1), (None, 2)], key=lambda r: order_key(*r)) == (None, 2)
    assert max([(None, 9), (-5, 1)], key=lambda r: order_key(*r)) == (-5, 1)


def table_of(keys_type: str, keys: tuple[str, ...] = ("a", "b"), **extra: Any) -> Any:
    from tables.model import ColumnDef, KeysType, TableDef
    from tables.types import DorisType

    columns = (
        ColumnDef(name="a", type=DorisType(name="INT"), is_key=True),
        ColumnDef(name="b", type=DorisType(name="VARCHAR", length=8), is_key=True),
        ColumnDef(name="v", type=DorisType(name="VARCHAR", length=8)),
        ColumnDef(name="s", type=DorisType(name="INT")),
    )
    return TableDef(db="d", name="t", keys_type=KeysType[keys_type], columns=columns, key_columns=keys, **extra)


@st.composite
def keyed_loads(draw: st.DrawFn) -> list[tuple[int | None, str | None, str, int | None, int]]:
    """Rows of a small load: composite keys with NULLs, sequences with NULLs and ties, positions in any order."""
    cells = draw(
        st.lists(
            st.tuples(
                st.one_of(st.none(), st.integers(-1, 2)),
                st.one_of(st.none(), st.sampled_from(["", "x", "y", "é"])),
                st.one_of(st.none(), st.integers(-2, 2)),
            ),
            max_size=16,
        )
    )
    positions = draw(st.permutations(range(len(cells))))
    return [(a, b, f"v{p}", s, p) for (a, b, s), p in zip(cells, positions, strict=True)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=keyed_loads(), sequenced=st.booleans())
def test_the_merge_in_the_servers_process_keeps_the_rows_spark_keeps(spark, rows, sequenced) -> None:  # type: ignore[no-untyped-def]
    """`latest_rows` (a folded small load's merge, pyarrow) keeps the rows `merge_rows` keeps (Spark), in key
    order: NULL keys grouped and first, the sequence's NULL lowest, ties to the later position."""
    import pyarrow as pa

    from spark_runner.merge import latest_rows, merge_rows

    table = table_of("UNIQUE")
    schema = "a INT, b STRING, v STRING, s INT, pos BIGINT"
    sequence = "s" if sequenced else None
    arrow = pa.table(
        {
            name: pa.array([r[i] for r in rows], kind)
            for i, (name, kind) in enumerate(
                [("a", pa.int32()), ("b", pa.string()), ("v", pa.string()), ("s", pa.int32()), ("pos", pa.int64())]
            )
        }
    )
    kept = latest_rows(arrow, table, "pos", sequence=sequence)
    assert kept is not None
    expected = merge_rows(spark.createDataFrame(rows, schema), table, "pos", sequence=sequence).collect()
    assert sorted(map(str, kept.to_pylist())) == sorted(str(r.asDict()) for r in expected)
    keys = [(r["a"] is not None, r["a"] or 0, r["b"] is not None, r["b"] or "") for r in kept.to_pylist()]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


def test_the_merge_in_the_servers_process_is_only_a_choice_of_rows() -> None:
    """Aggregate tables and sequence mapping merge values, not rows: `latest_rows` leaves them to Spark (None);
    a duplicate table's rows are all kept, in key order."""
    import pyarrow as pa

    from spark_runner.merge import latest_rows

    rows = pa.table({"a": [2, 1, 2], "b": ["x", "x", "x"], "v": ["p", "q", "r"], "s": [1, 2, 3], "pos": [0, 1, 2]})
    assert latest_rows(rows, table_of("AGGREGATE"), "pos") is None
    mapped = table_of("UNIQUE", sequence_mapping={"s": ("v",)})
    assert latest_rows(rows, mapped, "pos", sequence="s") is None
    kept = latest_rows(rows, table_of("DUPLICATE"), "pos")
    assert kept is not None and kept.column("v").to_pylist() == ["q", "p", "r"]
    floats = rows.set_column(3, "s", pa.array([1.0, 2.0, 3.0]))
    assert latest_rows(floats, table_of("UNIQUE"), "pos", sequence="s") is None  # NaN: Spark's order is its own
