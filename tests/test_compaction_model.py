"""Compaction never changes a query answer: random loads, deletes and updates on unique (with and without a
sequence column) and aggregate tables give the same rows before compaction, after a cumulative compaction of a
random contiguous run of rowsets, and after base compaction, and those rows are what a pure-Python model of
the rules predicts. The Spark jobs run in-process (catalog, writer, loads and compactor wired as the server
wires them) to stay inside the suite's time budget."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.aggregate_model import aggregate
from tests.unique_model import DELETE_SIGN, UniqueModel

KEYS = st.integers(0, 5)
VALUES = st.one_of(st.none(), st.integers(-9, 9))
SEQS = st.one_of(st.none(), st.integers(0, 3))


@dataclass
class Stack:
    """The server's objects, built the way `app.main.build_services` builds them."""

    catalog: Any
    loads: Any
    sql: Any
    compactor: Any

    def run(self, db: str, stmt: str, *, hidden: bool = False) -> list[list[Any]]:
        from sql.session import Session
        from tables.accounts import ALL_PRIVS, Grant, Identity, Privileges, Scope

        session = Session(db=db, privileges=Privileges(Identity("root"), (Grant(Scope(), ALL_PRIVS),)))
        if hidden:
            session.set("show_hidden_columns", "true")
        result = self.sql.execute(stmt, session)
        return [list(r) for r in getattr(result, "rows", [])]

    def load(self, db: str, table: str, rows: list[list[Any]], **headers: str) -> None:
        from loaders.headers import parse_load_request

        request = parse_load_request(db, table, {"column_separator": ",", "label": uuid.uuid4().hex, **headers})
        fields = [[None if v is None else str(v) for v in row] for row in rows]
        result = self.loads.run_rows(self.loads.prepare(request), fields)
        assert result.status == "Success", result.message


@pytest.fixture(scope="module")
def stack(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from spark_runner.compaction import Compactor
    from spark_runner.service import LoadService
    from sql.executor import SqlExecutor
    from tables.catalog import Catalog
    from tables.commit import TableWriter
    from tables.transactions import TransactionStore

    data: Path = tmp_path_factory.mktemp("compaction-model")
    catalog = Catalog(uri=f"sqlite:///{data / 'catalog.db'}", warehouse=data / "warehouse")
    txns = TransactionStore(data / "transactions.db")
    writer = TableWriter(catalog, txns)
    loads = LoadService(spark=spark, catalog=catalog, txns=txns, writer=writer, error_log_dir=data / "error_log")
    sql = SqlExecutor(spark=spark, catalog=catalog, loads=loads, writer=writer)
    compactor = Compactor(spark=spark, catalog=catalog, writer=writer)
    stack = Stack(catalog=catalog, loads=loads, sql=sql, compactor=compactor)
    stack.run("information_schema", "CREATE DATABASE m")
    yield stack
    txns.close()


# -- the test ------------------------------------------------------------------------------------
unique_rows = st.lists(st.tuples(KEYS, VALUES, SEQS, st.booleans()), min_size=1, max_size=6)
unique_ops = st.lists(
    st.one_of(
        st.tuples(st.just("load"), unique_rows),
        st.tuples(st.just("delete"), unique_rows),
        st.tuples(st.just("update"), KEYS),
    ),
    min_size=3,
    max_size=5,
)


def _run_unique_op(
    stack: Stack, table: str, with_seq: bool, op: tuple[str, Any], model: UniqueModel, version: int
) -> None:
    kind, arg = op
    if kind == "update":
        # UPDATE reloads the current row with the new value and its own sequence: it wins its tie
        stack.run("m", f"UPDATE {table} SET v = coalesce(v, 0) + 1 WHERE k = {arg}")
        old = model.state.get((arg,))
        if old is not None and not old.deleted:
            model.apply([{**old.values, "v": (old.values["v"] or 0) + 1}], version)
        return
    if kind == "delete":  # merge_type DELETE: every row is a delete marker carrying its sequence
        rows = [[k, v, s] if with_seq else [k, v] for k, v, s, _ in arg]
        stack.load("m", table, rows, merge_type="DELETE", columns="k,v,s" if with_seq else "k,v")
        model.apply([{"k": k, "v": v, "s": s} for k, v, s, _ in arg], version, delete=True)
        return
    # delete-sign rows mapped from the payload
    rows = [[k, v, *([s] if with_seq else []), int(d)] for k, v, s, d in arg]
    columns = "k,v,s," if with_seq else "k,v,"
    stack.load("m", table, rows, columns=columns + "__DORIS_DELETE_SIGN__")
    model.apply([{"k": k, "v": v, "s": s, DELETE_SIGN: d} for k, v, s, d in arg], version)


def _check_compactions(stack: Stack, table: str, expected: list[list[Any]], run_at: tuple[int, int]) -> None:
    """Same answer before, after a cumulative compaction of a contiguous run, and after base compaction.

    Unique tables are read once per stage with `show_hidden_columns` (markers, sequences and versions
    included); the visible answer is those rows without the delete-signed ones.
    """
    from spark_runner.compaction import CompactionType, NothingToCompact

    definition = stack.catalog.load("m", table).definition
    width = len(definition.columns)
    hidden = definition.is_unique

    def read() -> tuple[list[list[Any]], list[list[Any]]]:
        rows = stack.run("m", f"SELECT * FROM {table} ORDER BY k", hidden=hidden)
        if not hidden:
            return rows, rows
        visible = [r[:width] for r in rows if r[width] == 0]
        if definition.positional:  # merge-on-write: any Iceberg reader sees exactly the visible rows
            scanned = stack.catalog.load("m", table).iceberg.scan().to_arrow()
            names = [c.name for c in definition.columns]
            assert sorted([[r[n] for n in names] for r in scanned.to_pylist()]) == visible
        return visible, rows

    visible, stored = read()
    assert visible == expected
    rowsets = stack.catalog.load("m", table).rowsets()
    if not rowsets:  # every operation was an UPDATE of a missing key: nothing was written
        return
    start = run_at[0] % len(rowsets)
    end = start + 2 + run_at[1] % max(1, len(rowsets) - start - 1)
    if end <= len(rowsets):
        stack.compactor.compact("m", table, CompactionType.CUMULATIVE, rowsets=rowsets[start:end])
        # the run became one rowset (none when every row in it was empty or dropped)
        assert len(stack.catalog.load("m", table).rowsets()) <= len(rowsets) - (end - start) + 1
    # cumulative compaction keeps every marker, sequence and version
    assert read() == (expected, stored)
    try:
        stack.compactor.compact("m", table, CompactionType.BASE)
    except NothingToCompact:  # one rowset left, without delete markers base compaction could drop
        pass
    assert len(stack.catalog.load("m", table).rowsets()) <= 1
    visible, after_base = read()
    assert visible == expected
    if hidden and not definition.has_sequence:
        # base compaction dropped the delete markers: show_hidden_columns no longer lists them
        assert after_base == [r for r in stored if r[width] == 0]
    else:
        assert after_base == stored


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
)
@given(
    with_seq=st.booleans(),
    partitioned=st.booleans(),
    ops=unique_ops,
    run_at=st.tuples(st.integers(0, 9), st.integers(0, 9)),
)
def test_unique_tables_answer_the_same_before_and_after_compaction(
    stack: Stack, with_seq: bool, partitioned: bool, ops: list[tuple[str, Any]], run_at: tuple[int, int]
) -> None:
    """Partitioned or not (issue 20: a partitioned table answers as the same table unpartitioned, the model)."""
    table = f"u_{uuid.uuid4().hex[:10]}"
    props = 'PROPERTIES ("function_column.sequence_col" = "s")' if with_seq else ""
    seq_col = ", s INT" if with_seq else ""
    partitions = (
        "PARTITION BY RANGE(k) (PARTITION p0 VALUES LESS THAN (2), PARTITION p1 VALUES [(2), (4)), "
        "PARTITION p2 VALUES LESS THAN MAXVALUE)"
        if partitioned
        else ""
    )
    stack.run(
        "m",
        f"CREATE TABLE {table} (k INT, v INT{seq_col}) UNIQUE KEY(k) {partitions} DISTRIBUTED BY HASH(k) BUCKETS 2 "
        f"{props}",
    )
    model = UniqueModel(
        keys=("k",), columns=("k", "v", "s") if with_seq else ("k", "v"), sequence="s" if with_seq else None
    )
    version = 1
    for op in ops:
        version += 1
        _run_unique_op(stack, table, with_seq, op, model, version)
    _check_compactions(stack, table, model.visible(), run_at)


AGG = {"a": "SUM", "b": "MAX", "c": "MIN", "d": "REPLACE", "e": "REPLACE_IF_NOT_NULL"}
agg_rows = st.lists(st.tuples(KEYS, *[VALUES] * len(AGG)), min_size=1, max_size=6)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
)
@given(loads=st.lists(agg_rows, min_size=3, max_size=5), run_at=st.tuples(st.integers(0, 9), st.integers(0, 9)))
def test_aggregate_tables_answer_the_same_before_and_after_compaction(
    stack: Stack, loads: list[list[tuple[Any, ...]]], run_at: tuple[int, int]
) -> None:
    table = f"a_{uuid.uuid4().hex[:10]}"
    cols = ", ".join(f"{c} INT {how}" for c, how in AGG.items())
    stack.run("m", f"CREATE TABLE {table} (k INT, {cols}) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2")
    names = ["k", *AGG]
    model_loads = []
    for rows in loads:
        stack.load("m", table, [list(r) for r in rows])
        model_loads.append([dict(zip(names, r, strict=True)) for r in rows])
    expected = [[r[c] for c in names] for r in aggregate(model_loads, ["k"], AGG)]
    _check_compactions(stack, table, expected, run_at)
