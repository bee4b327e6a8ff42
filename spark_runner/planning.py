"""Load planning: resolve a `LoadRequest` against a `TableDef` before any data is read.

Pure Python (no Spark), so the server refuses a bad load before it sends `100 Continue`. The rules
and texts follow Doris's `Load.initColumns` and `NereidsStreamLoadPlanner` (contract §2, §6.3, §6.5).
"""

from __future__ import annotations

from dataclasses import dataclass

from tables.catalog import Catalog, TableHandle
from tables.errors import AnalysisError
from tables.load_spec import ColumnMapping, Expr, LoadRequest, MergeType
from tables.model import DELETE_SIGN, HIDDEN_PREFIX, SEQUENCE_COL, VERSION_COL, ColumnDef, TableDef


@dataclass(frozen=True)
class Target:
    """Where one stored column's value comes from: a name in the load's scope, or the column default."""

    column: ColumnDef
    source: str | None  # a scope name, or None for the DEFAULT / NULL


@dataclass(frozen=True)
class LoadPlan:
    request: LoadRequest
    table: TableDef
    source_fields: tuple[str, ...]
    derived: tuple[ColumnMapping, ...]
    targets: tuple[Target, ...]  # visible columns in table order
    delete_sign_source: str | None  # scope name of a mapped delete sign (APPEND)
    sequence_source: str | None  # a visible column (its stored value) or a scope name; None → NULL
    partial: bool = False  # fixed partial-column update: unlisted columns keep their stored values
    inherit_sequence: bool = False  # partial update that does not set the sequence: keep the stored one
    partition_ids: frozenset[int] | None = None  # the `partitions` a load names (None: every partition)

    @property
    def reads_stored(self) -> bool:
        """The load needs the current rows of its keys (merge-on-write style fill at load time)."""
        return self.partial or self.table.replace_if_not_null

    @property
    def scope(self) -> tuple[str, ...]:
        return self.source_fields + tuple(m.name for m in self.derived)


def _need_sequence(table: TableDef) -> AnalysisError:
    return AnalysisError(f"Table {table.name} has sequence column, need to specify the sequence column")


def _check_refs(expr: Expr, known: dict[str, str], what: str) -> None:
    for ref in expr.refs:
        if ref.lower() not in known:
            raise AnalysisError(f"Unknown column '{ref}' in '{what}'")


def plan_load(request: LoadRequest, table: TableDef) -> LoadPlan:
    """Resolve the column mapping, delete sign and sequence source of a load.

    Raises:
        AnalysisError: with Doris's planning message (unknown column, no default, sequence rules, ...).
    """
    if request.merge_type is not MergeType.APPEND:
        if not table.is_unique:
            raise AnalysisError("load by MERGE or DELETE is only supported in unique tables.")
        if not table.delete_sign:
            raise AnalysisError("load by MERGE or DELETE need to upgrade table to support batch delete.")

    if request.negative:
        for col in table.value_columns():
            if col.aggregation != "SUM":
                raise AnalysisError(f"Column is not SUM AggregateType. column:{col.name}")
    hidden_names = {c.name.lower(): c for c in table.shown_hidden_columns()}
    if request.columns is not None:
        mappings = request.columns
    else:
        mappings = tuple(ColumnMapping(name=c.name) for c in table.columns)
        for name in request.hidden_columns:
            if name.lower() not in hidden_names or name.upper() == VERSION_COL:
                raise AnalysisError(f"Unknown hidden column '{name}' in table {table.name}")
            mappings += (ColumnMapping(name=hidden_names[name.lower()].name),)

    known: dict[str, str] = {}
    for m in mappings:
        if m.name.upper().startswith(HIDDEN_PREFIX) and m.name.lower() not in hidden_names:
            raise AnalysisError(f"Unknown column '{m.name}' in table {table.name}")
        if m.name.upper() == VERSION_COL:
            raise AnalysisError(f"Column {VERSION_COL} can not be loaded")
        if m.expr is not None:
            _check_refs(m.expr, known, "columns")
        known[m.name.lower()] = m.name

    partial = _is_partial(request, table, known)
    targets: list[Target] = []
    for col in table.columns:
        source = known.get(col.name.lower())
        if source is None and not col.has_default and not col.nullable and not partial:
            raise AnalysisError(f"Column has no default value. column: {col.name}")
        targets.append(Target(column=col, source=source))

    for expr, what in ((request.where, "where"), (request.delete, "delete")):
        if expr is not None:
            _check_refs(expr, {**known, **{c.name.lower(): c.name for c in table.columns}}, what)

    delete_sign_source = known.get(DELETE_SIGN.lower()) if table.is_unique and table.delete_sign else None

    sequence_source: str | None = None
    inherit_sequence = False
    if not table.has_sequence:
        if request.sequence_col:
            raise AnalysisError(f"There is no sequence column in the table {table.name}")
    elif SEQUENCE_COL.lower() in known:
        sequence_source = known[SEQUENCE_COL.lower()]
    elif table.sequence_col is not None:
        # the table maps the sequence to a real column: the header is ignored
        mapped = table.column(table.sequence_col)
        assert mapped is not None
        if partial and mapped.name.lower() not in known:
            inherit_sequence = True  # the row keeps its stored sequence (contract §6.8)
        elif mapped.name.lower() not in known and not mapped.default_is_current_timestamp:
            raise _need_sequence(table)  # whatever the merge type: a DELETE row is ordered by it too
        sequence_source = mapped.name  # the stored value of the mapped column, default included
    elif request.sequence_col:
        if request.sequence_col.lower() not in known:
            raise AnalysisError(f"Unknown column '{request.sequence_col}' in 'function_column.sequence_col'")
        sequence_source = known[request.sequence_col.lower()]
        if partial and table.column(sequence_source) is not None:
            # Doris leaves the hidden sequence of a partial update unchanged when the header names a
            # table column (conformance seq_type_partial_vs_full_loads); a load-only column sets it
            inherit_sequence = True
    elif request.source == "stream_load":
        raise _need_sequence(table)

    return LoadPlan(
        partition_ids=_named_partitions(request, table),
        request=request,
        table=table,
        source_fields=tuple(m.name for m in mappings if m.expr is None),
        derived=tuple(m for m in mappings if m.expr is not None),
        targets=tuple(targets),
        delete_sign_source=delete_sign_source,
        sequence_source=sequence_source,
        partial=partial,
        inherit_sequence=inherit_sequence,
    )


def loaded_target(catalog: Catalog, handle: TableHandle, request: LoadRequest) -> TableHandle:
    """The table a load writes into: the table, or for a load into temporary partitions its companion, whose
    partitions are the temporary ones (`tables.catalog.Catalog.temporary`).

    Raises:
        AnalysisError: temporary partitions named on a table that has none (Doris's ERR_UNKNOWN_PARTITION text).
    """
    if not request.temporary_partitions:
        return handle
    companion = catalog.temporary(handle) if handle.definition.partitioning is not None else None
    if (
        companion is None
        or companion.definition.partitioning is None
        or not companion.definition.partitioning.partitions
    ):
        name = request.partitions[0] if request.partitions else ""
        raise AnalysisError(f"Unknown partition '{name}' in table '{handle.definition.name}'")
    return companion


def _named_partitions(request: LoadRequest, table: TableDef) -> frozenset[int] | None:
    """The ids of the partitions a load names (`partitions`), None when it names none; an unpartitioned table is
    its one partition, named as the table (as in Doris).

    Raises:
        AnalysisError: a name the table has no partition of (Doris's ERR_UNKNOWN_PARTITION text).
    """
    if not request.partitions:
        return None
    if table.partitioning is None:
        for name in request.partitions:
            if name.lower() != table.name.lower():
                raise AnalysisError(f"Unknown partition '{name}' in table '{table.name}'")
        return None
    ids = []
    for name in request.partitions:
        found = table.partitioning.find(name)
        if found is None:
            raise AnalysisError(f"Unknown partition '{name}' in table '{table.name}'")
        ids.append(found.id)
    return frozenset(ids)


def _is_partial(request: LoadRequest, table: TableDef, known: dict[str, str]) -> bool:
    """A fixed partial-column update, or a plain upsert when it lists no columns or every column.

    Raises:
        AnalysisError: the table is not merge-on-write unique, or a key column is missing.
    """
    if not request.partial_columns:
        return False
    if not (table.is_unique and table.merge_on_write):
        raise AnalysisError("Only unique key merge on write support partial update")
    if request.columns is None:
        return False
    listed = {c.name.lower() for c in table.columns if c.name.lower() in known}
    if listed == {c.name.lower() for c in table.columns}:
        return False
    missing = [k for k in table.key_columns if k.lower() not in listed]
    if missing:
        raise AnalysisError(f"Partial update should include all key columns, missing: {', '.join(missing)}")
    return True
