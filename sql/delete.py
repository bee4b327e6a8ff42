"""DELETE FROM: delete markers on unique tables, stored delete predicates on the others.

Unique tables: the current rows that match are loaded again with the delete sign set, each carrying its
current sequence, so a delete is an ordinary sequenced row (contract §6; Doris does the same on merge-on-write
tables; on merge-on-read tables Doris stores a predicate instead, we keep the marker rule there too).
Duplicate and aggregate tables, and sequence-mapping tables (merge-on-read unique tables without a delete
sign): the predicate is stored with the DELETE's version and applied, at read and compaction, to each stored
row loaded before it, before rows of a key are merged (Doris's delete handler filters every older rowset);
a later load of a matching key is visible again. Aggregate and sequence-mapping tables take key columns only
(Doris `DeleteFromCommand.checkColumn`), so every row of a key matches alike and a merged row (compaction's,
which carries its run's largest version) matches exactly when its inputs did.
Predicates are conjunctions of `column op literal`, `column [NOT] IN (literals)` and `column IS [NOT] NULL`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re

from sqlglot import exp

from spark_runner.sqltext import convert_sql, lit, q
from sql.context import SqlContext
from sql.insert import insert_request, live_rows, load_error_text, load_query
from sql.partition_filter import named_partitions, query_partitions
from sql.privileges import require_table
from sql.results import ExecStatus
from sql.select import parse_query
from sql.session import Session
from tables.accounts import Priv
from tables.errors import SqlError
from tables.model import DELETE_SIGN, SEQUENCE_COL, DeletePredicate, TableDef
from tables.partitions import PartitionDef, partition_sql
from tables.schema_change import SchemaOp

_OPS: dict[type[exp.Expr], tuple[str, str]] = {
    exp.EQ: ("=", "EQ"),
    exp.NEQ: ("!=", "NE"),
    exp.GT: (">", "GT"),
    exp.GTE: (">=", "GE"),
    exp.LT: ("<", "LT"),
    exp.LTE: ("<=", "LE"),
}
# sqlglot does not read `DELETE FROM t PARTITION p`: the clause is checked and cut before the parse
_PARTITION = re.compile(
    r"\s*DELETE\s+FROM\s+(\S+)\s+((?:TEMPORARY\s+)?PARTITIONS?\s*(?:\(([^)]*)\)|(`?\w+`?)))", re.IGNORECASE
)
_WHERE_FORMS = "Where clause only supports compound predicate, binary predicate, is_null predicate or in predicate."


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    node = node.unnest()
    if isinstance(node, exp.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _literal(node: exp.Expr, column: str) -> str:
    node = node.unnest()
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return "-" + node.this.name
    if isinstance(node, exp.Literal):
        return node.name
    raise SqlError(f"Right expr of binary predicate should be value, column: {column}")


def _check_value(table: TableDef, column: str, value: str) -> None:
    """Raises: SqlError when the literal does not convert to the column type (Doris checks it up front)."""
    col = table.column(column)
    assert col is not None
    t = col.type
    try:
        if t.is_integer:
            int(value)
        elif t.name in ("DECIMAL", "FLOAT", "DOUBLE"):
            decimal.Decimal(value)
        elif t.name == "DATE":
            dt.date.fromisoformat(value)
        elif t.name == "DATETIME":
            dt.datetime.fromisoformat(value)
    except (ValueError, decimal.InvalidOperation):
        raise SqlError(f"Invalid column value[{value}] for column {col.name}") from None


def delete_predicate(
    table: TableDef, where: exp.Expr, created: str, version: int, partitions: tuple[PartitionDef, ...] = ()
) -> DeletePredicate:
    """The stored predicate of a DELETE on a duplicate, aggregate or sequence-mapping table (of some of its
    partitions).

    Raises:
        SqlError: with Doris's message for a predicate form or column it refuses.
    """
    conditions: list[str] = []
    shown: list[str] = []
    columns: list[str] = []
    for node in _conjuncts(where):
        negated = False
        if isinstance(node, exp.Not):
            negated, node = True, node.this.unnest()
        target = node.this.unnest() if isinstance(node, (exp.In, exp.Is, *_OPS)) else None
        if not isinstance(target, exp.Column):
            raise SqlError(_WHERE_FORMS)
        col = table.column(target.name)
        if col is None or col.hidden:
            raise SqlError(f"Unknown column '{target.name}' in '{table.name}'")
        if not col.is_key and not table.is_duplicate:
            kind = "an Aggregate table" if table.is_aggregate else "an unique table without merge-on-write"
            raise SqlError(
                "delete predicate on value column only supports Unique table with merge-on-write enabled and "
                f"Duplicate table, but Table[{table.name}] is {kind}."
            )
        if col.type.name in ("FLOAT", "DOUBLE"):
            raise SqlError(f"Column[{col.name}] type is float or double.")
        name = q(col.name)
        if isinstance(node, exp.Is):
            if not isinstance(node.expression, exp.Null):
                raise SqlError(_WHERE_FORMS)
            conditions.append(f"{name} IS {'NOT ' if negated else ''}NULL")
            shown.append(f"{col.name} IS {'NOT ' if negated else ''}NULL")
        elif isinstance(node, exp.In):
            values = [_literal(v, col.name) for v in node.expressions]
            if not values or node.args.get("query") is not None:
                raise SqlError(_WHERE_FORMS)
            for v in values:
                _check_value(table, col.name, v)
            typed = ", ".join(convert_sql(lit(v), col.type) for v in values)
            conditions.append(f"{name} {'NOT ' if negated else ''}IN ({typed})")
            shown.append(f"{col.name} {'NOT ' if negated else ''}IN (" + ", ".join(f'"{v}"' for v in values) + ")")
        else:
            if negated:
                raise SqlError(_WHERE_FORMS)
            sql_op, doris_op = _OPS[type(node)]
            value = _literal(node.expression, col.name)
            _check_value(table, col.name, value)
            conditions.append(f"{name} {sql_op} {convert_sql(lit(value), col.type)}")
            shown.append(f'{col.name} {doris_op} "{value}"')
        columns.append(col.name)
    if partitions and table.partitioning is not None:
        names = [q(c) for c in table.partitioning.columns]
        ids = {p.id for p in partitions}  # a CASE over these partitions only
        conditions.append(f"{partition_sql(table.partitioning, names, table.partition_types(), ids=ids)} IS NOT NULL")
    return DeletePredicate(
        version=version,
        condition=" AND ".join(f"({c})" for c in conditions),
        display=" AND ".join(shown),
        columns=tuple(dict.fromkeys(columns)),
        create_time=created,
        partitions=tuple(p.name for p in partitions),
    )


def parse_delete(text: str) -> exp.Delete:
    """`DELETE FROM t [PARTITION p] WHERE ...`; an unpartitioned table is its own single partition, as in Doris.

    Raises:
        SqlError: a syntax error, or a partition other than the table.
    """
    partition = _PARTITION.match(text)
    names: list[str] = []
    if partition is not None:
        if partition.group(2).upper().startswith("TEMPORARY"):
            raise SqlError("DELETE FROM a TEMPORARY PARTITION is not supported by this server yet")
        names = [n.strip(" `") for n in (partition.group(3) or partition.group(4)).split(",")]
        text = text[: partition.start(2)] + text[partition.end() :]
    tree = parse_query(text)
    if not isinstance(tree, exp.Delete) or not isinstance(tree.this, exp.Table):
        raise SqlError("Syntax error in DELETE")
    if names:  # where a SELECT's `FROM t PARTITION (...)` is (`sql.partition_filter`)
        tree.this.set("partition", exp.Partition(expressions=[exp.to_identifier(n) for n in names]))
    return tree


def _partitions(tree: exp.Delete, table: TableDef, session: Session) -> tuple[PartitionDef, ...]:
    """The partitions a DELETE names, or infers from its filter; () for the whole table.

    Raises:
        SqlError: an unknown partition; on a partitioned table taking a predicate, none named nor inferable
            without `SET delete_without_partition = true` (Doris's text).
    """
    clause = tree.this.args.get("partition")
    names = [e.name for e in clause.expressions] if isinstance(clause, exp.Partition) else []
    if names:
        return named_partitions(table, names)
    if table.partitioning is None or (table.is_unique and not table.sequence_mapping):
        return ()  # markers; Doris's rule is for predicate deletes, which sequence-mapping tables store
    where = tree.args.get("where")
    probe = exp.select("*").from_(exp.table_(table.name)).where(where.this.copy() if where else None)
    source = probe.args["from_"].this
    inferred = query_partitions(source, table)
    if inferred is not None:
        return tuple(p for p in table.partitioning.formal() if p.id in inferred)
    if session.variables.get("delete_without_partition", "false").lower() != "true":
        raise SqlError(
            "This is a range or list partitioned table. You should specify partition in delete stmt, "
            "or set delete_without_partition to true"
        )
    return ()


def run_delete(ctx: SqlContext, tree: exp.Delete, session: Session) -> ExecStatus:
    """Markers on unique tables, a stored predicate on the others (sequence-mapping tables included)."""
    where = tree.args.get("where")
    require_table(session.privileges, Priv.LOAD, "LOAD", tree.this.db or session.db, tree.this.name)
    table = ctx.catalog.load(tree.this.db or session.db, tree.this.name).definition
    if where is None:
        raise SqlError("DELETE without a WHERE clause is not supported, use TRUNCATE TABLE")
    partitions = _partitions(tree, table, session)
    if table.is_unique and not table.sequence_mapping:
        return _delete_markers(ctx, table, where, session, partitions)
    created = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    delete_predicate(table, where.this, created, 0, partitions)  # check before taking a version

    def change(current: TableDef, version: int) -> tuple[TableDef, list[SchemaOp]]:
        pred = delete_predicate(current, where.this, created, version, partitions)
        return current.model_copy(update={"delete_predicates": (*current.delete_predicates, pred)}), []

    ctx.writer.alter(table.db, table.name, change, schema=False)
    return ExecStatus()


def _delete_markers(
    ctx: SqlContext, table: TableDef, where: exp.Where, session: Session, partitions: tuple[PartitionDef, ...] = ()
) -> ExecStatus:
    """The matching rows (of the named partitions) loaded again with the delete sign set, each with its current
    sequence."""
    names = [c.name for c in table.columns]
    if table.sequence_type is not None and table.sequence_col is None:
        names.append(SEQUENCE_COL)  # each marker carries the row's current sequence
    columns: list[exp.Expr] = [exp.column(n, quoted=True) for n in names]
    marker = exp.alias_(exp.Literal.number(1), DELETE_SIGN, quoted=True)
    request = insert_request(db=table.db, table=table.name, columns=[*names, DELETE_SIGN], strict=False)
    rows = live_rows(table, [*columns, marker], where)
    if partitions:  # read by the SELECT as its `FROM t PARTITION (...)`
        named = [exp.to_identifier(p.name) for p in partitions]
        rows.args["from_"].this.set("partition", exp.Partition(expressions=named))
    result = load_query(
        ctx, rows, request, db=session.db, show_hidden=True, privileges=session.privileges, reads_target=True
    )
    if result.status != "Success":
        raise SqlError(load_error_text(result.message))
    return ExecStatus(affected_rows=result.number_loaded_rows)
