"""ALTER TABLE: light schema change (ADD / DROP / RENAME / MODIFY COLUMN) and ENABLE FEATURE.

Every change here is metadata only (tables/schema_change.py): no rowset is rewritten. Changes that
would need a rewrite in Doris too (a new key column, a narrowing type change) get a clear error.
`parse_alter` reads the statement; `plan_alter` is the pure function the single writer applies in the
change's own version turn (so the rules see the schema as it is when the change commits).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import TokenType

from spark_runner.sqltext import q
from sql.ddl import (
    AGGREGATIONS,
    check_definition_size,
    check_new_column_name,
    check_sequence_mapping,
    parse_column,
    parse_properties,
    split_type,
)
from sql.dynamic_partition import check_table
from sql.partition_ddl import (
    BatchDesc,
    PartitionDesc,
    add_partition,
    check_partition_count,
    expand_batch,
    parse_batch,
    parse_partition_desc,
)
from sql.tokens import Cursor
from tables.errors import SqlError
from tables.model import HIDDEN_PREFIX, SEQUENCE_COL, AlterJob, ColumnDef, KeysType, TableDef
from tables.partitions import PartitionKind, partition_sql, replace_with_temporary
from tables.schema_change import AddColumn, DropColumn, RenameColumn, SchemaOp, WidenColumn
from tables.types import DorisType, UnsupportedType

_CLAUSE_END = ("AFTER", "FIRST", "TO", "IN", "PROPERTIES", "FROM")
_INTEGER_WIDTH = {"TINYINT": 1, "SMALLINT": 2, "INT": 3, "BIGINT": 4, "LARGEINT": 5}


@dataclass(frozen=True)
class Clause:
    kind: str  # ADD, DROP, RENAME, MODIFY, ENABLE
    columns: tuple[ColumnDef, ...] = ()
    name: str = ""  # DROP / RENAME source / ENABLE feature
    new_name: str = ""
    after: str | None = None
    first: bool = False
    properties: dict[str, str] = field(default_factory=dict)
    partition: PartitionDesc | None = None  # ADD PARTITION
    batch: BatchDesc | None = None  # ADD PARTITIONS FROM ... TO ... INTERVAL
    if_exists: bool = False  # DROP PARTITION IF EXISTS
    names: tuple[str, ...] = ()  # REPLACE PARTITION (names) WITH TEMPORARY PARTITION (temp_names)
    temp_names: tuple[str, ...] = ()
    strict_range: bool = True
    use_temp_name: bool = False


@dataclass(frozen=True)
class AlterTable:
    db: str | None
    table: str
    clauses: tuple[Clause, ...]


def parse_alter(text: str) -> AlterTable:
    """Parse `ALTER TABLE [db.]t <clause> [, <clause> ...]`.

    Raises:
        SqlError: a syntax error or an ALTER form this server does not run.
    """
    cur = Cursor(text)
    cur.expect("ALTER")
    cur.expect("TABLE")
    db, name = cur.qualified_name()
    clauses: list[Clause] = []
    while True:
        clauses.append(_clause(cur))
        if not cur.accept_type(TokenType.COMMA):
            break
    if not cur.at_end():
        raise cur.error("end of statement")
    return AlterTable(db=db, table=name, clauses=tuple(clauses))


def _placement(cur: Cursor) -> tuple[str | None, bool, dict[str, str]]:
    after: str | None = None
    first = False
    props: dict[str, str] = {}
    while cur.word() in _CLAUSE_END:
        if cur.accept("AFTER"):
            after = cur.name()
        elif cur.accept("FIRST"):
            first = True
        elif cur.accept("PROPERTIES"):
            props = parse_properties(cur)
        else:  # TO / IN / FROM rollup
            word = cur.next().text.upper()
            raise SqlError(f"ALTER ... {word} <rollup> is not supported: this server has no rollups")
    return after, first, props


def _clause(cur: Cursor) -> Clause:
    if cur.word(0) in ("ADD", "DROP", "REPLACE") and cur.word(1) in ("TEMPORARY", "PARTITION", "PARTITIONS"):
        return _partition_clause(cur)
    if cur.accept("ADD", "COLUMN") or cur.accept("ADD"):
        if cur.word() in ("ROLLUP", "INDEX", "PARTITION", "TEMPORARY"):
            raise SqlError(f"ALTER TABLE ADD {cur.word()} is not supported by this server")
        if cur.accept_type(TokenType.L_PAREN):
            cols = [parse_column(cur)]
            while cur.accept_type(TokenType.COMMA):
                cols.append(parse_column(cur))
            cur.expect_type(TokenType.R_PAREN, ")")
            _, _, props = _placement(cur)
            return Clause(kind="ADD", columns=tuple(cols), properties=props)
        col = parse_column(cur, _CLAUSE_END)
        after, first, props = _placement(cur)
        return Clause(kind="ADD", columns=(col,), after=after, first=first, properties=props)
    if cur.accept("DROP", "COLUMN"):
        name = cur.name()
        _placement(cur)
        return Clause(kind="DROP", name=name)
    if cur.accept("RENAME", "COLUMN"):
        old = cur.name()
        return Clause(kind="RENAME", name=old, new_name=cur.name())
    if cur.accept("MODIFY", "COLUMN"):
        col = parse_column(cur, _CLAUSE_END)
        after, first, props = _placement(cur)
        return Clause(kind="MODIFY", columns=(col,), after=after, first=first, properties=props)
    if cur.accept("SET"):
        return Clause(kind="SET", properties=parse_properties(cur))
    if cur.accept("ENABLE", "FEATURE"):
        feature = cur.string().upper()
        props = {}
        if cur.accept("WITH", "PROPERTIES"):
            props = parse_properties(cur)
        return Clause(kind="ENABLE", name=feature, properties=props)
    raise SqlError(f"This ALTER TABLE form is not supported by this server: {cur.word()}")


def _partition_clause(cur: Cursor) -> Clause:
    """`ADD [TEMPORARY] PARTITION p VALUES ...`, `DROP [TEMPORARY] PARTITION [IF EXISTS] p`, `REPLACE PARTITION (p, ...)
    WITH TEMPORARY PARTITION (tp, ...) [PROPERTIES ("strict_range" = "true", "use_temp_partition_name" = "false")]`.

    Raises: SqlError with Doris's texts for a REPLACE of other than formal partitions by temporary ones, or an
    unknown property.
    """
    verb = cur.next().text.upper()
    if verb == "REPLACE":
        return _replace_clause(cur)
    temporary = cur.accept("TEMPORARY")
    if verb == "ADD" and not temporary and cur.accept("PARTITIONS"):
        cur.expect("FROM")
        return Clause(kind="ADD PARTITION", batch=parse_batch(cur))
    cur.expect("PARTITION")
    kind = f"{verb} TEMPORARY PARTITION" if temporary else f"{verb} PARTITION"
    if verb == "ADD":
        return Clause(kind=kind, partition=parse_partition_desc(cur))
    if_exists = cur.accept("IF", "EXISTS")
    name = cur.name()
    cur.accept("FORCE")
    return Clause(kind=kind, name=name, if_exists=if_exists)


def _names(cur: Cursor) -> tuple[bool, tuple[str, ...]]:
    """`[TEMPORARY] PARTITION[S] (a, b)` (or one name without parentheses): whether temporary, and the names."""
    temporary = cur.accept("TEMPORARY")
    if not cur.accept("PARTITIONS"):
        cur.expect("PARTITION")
    if not cur.accept_type(TokenType.L_PAREN):
        return temporary, (cur.name(),)
    names = [cur.name()]
    while cur.accept_type(TokenType.COMMA):
        names.append(cur.name())
    cur.expect_type(TokenType.R_PAREN, ")")
    return temporary, tuple(names)


REPLACE_PROPERTIES = ("strict_range", "use_temp_partition_name")


def _replace_clause(cur: Cursor) -> Clause:
    formal_temporary, names = _names(cur)
    cur.expect("WITH")
    temporary, temp_names = _names(cur)
    if formal_temporary or not temporary:
        raise SqlError("Only support replace partitions with temp partitions")
    props = parse_properties(cur) if cur.accept("PROPERTIES") else {}
    unknown = [k for k in props if k.lower() not in REPLACE_PROPERTIES]
    if unknown:
        raise SqlError(f"Unknown properties: {{{', '.join(f'{k}={props[k]}' for k in unknown)}}}")
    flags = {k.lower(): v.strip().lower() == "true" for k, v in props.items()}
    return Clause(
        kind="REPLACE PARTITION",
        names=names,
        temp_names=temp_names,
        strict_range=flags.get("strict_range", True),
        use_temp_name=flags.get("use_temp_partition_name", False),
    )


# no schema change, no ALTER job
PARTITION_CLAUSES = (
    "ADD PARTITION",
    "DROP PARTITION",
    "SET",
    "ADD TEMPORARY PARTITION",
    "DROP TEMPORARY PARTITION",
    "REPLACE PARTITION",
)


def plan_alter(
    alter: AlterTable, dropped: set[int] | None = None, moved: set[int] | None = None
) -> Callable[[TableDef, int], tuple[TableDef, list[SchemaOp]]]:
    """The change as a function of the current definition and the change's version; the ids of the partitions it
    drops are added to `dropped` (their files go in the same commit: `tables.commit.remove_partitions`), those of
    the temporary partitions a REPLACE makes formal to `moved` (`tables.commit.TableWriter.replace_partitions`).

    The function raises SqlError with Doris's wording when a rule is broken; nothing is applied then.
    """

    def change(before: TableDef, version: int) -> tuple[TableDef, list[SchemaOp]]:
        ops: list[SchemaOp] = []
        table = before
        if before.partitioning is not None and any(p.temporary for p in before.partitioning.partitions):
            if any(c.kind not in PARTITION_CLAUSES for c in alter.clauses):
                raise SqlError("Can not alter table when there are temp partitions in table")
        for clause in alter.clauses:
            if clause.kind in ("ADD PARTITION", "ADD TEMPORARY PARTITION"):
                table = _add_partition(table, clause)
            elif clause.kind in ("DROP PARTITION", "DROP TEMPORARY PARTITION"):
                table = _drop_partition(table, clause, dropped if dropped is not None else set())
            elif clause.kind == "REPLACE PARTITION":
                table = _replace_partitions(table, clause, dropped if dropped is not None else set(), moved)
            elif clause.kind == "SET":
                table = _set_properties(table, clause)
            else:
                table = _APPLY[clause.kind](table, clause, version, ops)
        now = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        if ops or any(c.kind not in PARTITION_CLAUSES for c in alter.clauses):
            job = AlterJob(job_id=int(time.time() * 1000), create_time=now, finish_time=now, schema_version=version)
            table = table.model_copy(update={"alter_jobs": (*table.alter_jobs, job)})
        return check_definition_size(table), ops

    return change


def _add_partition(table: TableDef, clause: Clause) -> TableDef:
    if table.partitioning is None:
        raise SqlError(f"Table[{table.name}]'s partition info is empty: it is not a partitioned table")
    created = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    types = table.partition_types()
    if clause.batch is not None:
        if table.partitioning.kind is not PartitionKind.RANGE or len(types) != 1:
            raise SqlError("Batch partitions (FROM ... TO ... INTERVAL) are only for one-column RANGE partitions")
        descs = expand_batch(clause.batch, types[0])
    else:
        assert clause.partition is not None
        descs = [clause.partition]
    partitioning = table.partitioning
    temporary = clause.kind == "ADD TEMPORARY PARTITION"
    check_partition_count(len(partitioning.partitions) + len(descs))
    for desc in descs:
        partitioning = add_partition(partitioning, desc, types, created=created, temporary=temporary)
    return table.model_copy(update={"partitioning": partitioning})


SETTABLE = ("dynamic_partition.", "group_commit_mode")  # ALTER TABLE ... SET keys this server runs


def _set_properties(table: TableDef, clause: Clause) -> TableDef:
    """`SET ("key" = "value", ...)`: dynamic partition properties (checked as at CREATE TABLE) and the group
    commit mode.

    Raises: SqlError for another key, or a value Doris refuses.
    """
    for key in clause.properties:
        if not key.startswith(SETTABLE):
            raise SqlError(f'ALTER TABLE SET ("{key}") is not supported by this server')
    if "group_commit_mode" in clause.properties:
        mode = clause.properties["group_commit_mode"].lower()
        if mode not in ("off_mode", "sync_mode", "async_mode"):
            raise SqlError(f"Invalid group_commit_mode: {clause.properties['group_commit_mode']}")
    new = table.model_copy(update={"properties": {**table.properties, **clause.properties}})
    check_table(new)
    return new


def _drop_partition(table: TableDef, clause: Clause, dropped: set[int]) -> TableDef:
    if table.partitioning is None:
        raise SqlError(f"Table[{table.name}] is not a partitioned table")
    found = table.partitioning.find(clause.name, temporary=clause.kind == "DROP TEMPORARY PARTITION")
    if found is None:
        if clause.if_exists:
            return table
        raise SqlError(f"Error in list of partitions to {clause.name}")
    dropped.add(found.id)
    kept = tuple(p for p in table.partitioning.partitions if p.id != found.id)
    return table.model_copy(update={"partitioning": table.partitioning.model_copy(update={"partitions": kept})})


def _replace_partitions(table: TableDef, clause: Clause, dropped: set[int], moved: set[int] | None) -> TableDef:
    """`REPLACE PARTITION (...) WITH TEMPORARY PARTITION (...)` (`tables.partitions.replace_with_temporary`)."""
    if table.partitioning is None:
        raise SqlError(f"Table[{table.name}] is not a partitioned table")
    partitioning, replaced, promoted = replace_with_temporary(
        table.partitioning,
        clause.names,
        clause.temp_names,
        table.partition_types(),
        strict_range=clause.strict_range,
        use_temp_name=clause.use_temp_name,
    )
    dropped.update(p.id for p in replaced)
    if moved is not None:
        moved.update(p.id for p in promoted)
    # the table's DELETE predicates applied to the partitions the temporary ones replace, never to these (Doris keeps
    # them with the replaced partitions' tablets): each now leaves alone the rows of the promoted partitions
    only = partitioning.model_copy(update={"partitions": tuple(promoted)})
    columns = [q(c) for c in partitioning.columns]
    outside = f"({partition_sql(only, columns, table.partition_types())}) IS NULL"
    predicates = tuple(
        pred.model_copy(update={"condition": f"({pred.condition}) AND {outside}"}) for pred in table.delete_predicates
    )
    return table.model_copy(update={"partitioning": partitioning, "delete_predicates": predicates})


def _find(table: TableDef, name: str) -> ColumnDef:
    col = next((c for c in table.columns if c.name.lower() == name.lower()), None)
    if col is None:
        raise SqlError(f"Column does not exists: {name}")
    return col


def _check_new_column(table: TableDef, col: ColumnDef) -> ColumnDef:
    if col.name.upper().startswith(HIDDEN_PREFIX):
        raise SqlError(f"Incorrect column name '{col.name}'. Column name can not start with '{HIDDEN_PREFIX}'")
    check_new_column_name(col.name)
    if table.column(col.name) is not None:
        raise SqlError(f"Can not add column which already exists in base table: {col.name}")
    if col.is_key:
        raise SqlError(f"Can not add key column {col.name}: a new key column needs a data rewrite, not supported")
    aggregation = col.aggregation
    if table.is_aggregate:
        if not aggregation:
            raise SqlError(f"Aggregate method must be specified for value column: {col.name}")
        if aggregation not in AGGREGATIONS[:5]:
            raise SqlError(f"Aggregation type {aggregation} of column {col.name} is not supported by this server")
    elif aggregation:
        model = "Unique" if table.is_unique else "Duplicate"
        raise SqlError(f"Can not assign aggregation method on column in {model} data model table: {col.name}")
    if table.is_unique:
        aggregation = "REPLACE"
    if not col.nullable and not col.has_default:
        raise SqlError(f"Can not add column {col.name}: it is NOT NULL and has no default value")
    return col.model_copy(update={"aggregation": aggregation})


def _add(table: TableDef, clause: Clause, version: int, ops: list[SchemaOp]) -> TableDef:
    columns = list(table.columns)
    added = [_check_new_column(table, c).model_copy(update={"since_version": version}) for c in clause.columns]
    if len({c.name.lower() for c in added}) != len(added):
        raise SqlError("Duplicate column name")
    if clause.first:
        raise SqlError("Can not add a value column FIRST: key columns come first")
    at = len(columns)
    if clause.after is not None:
        anchor = _find(table, clause.after)
        at = columns.index(anchor) + 1
        if at < len(columns) and columns[at].is_key:
            raise SqlError(f"Can not add value column {added[0].name} between key columns")
    columns[at:at] = added
    ops += [AddColumn(c) for c in added]
    new_mapping = {
        k[len("sequence_mapping.") :]: v for k, v in clause.properties.items() if k.startswith("sequence_mapping.")
    }
    props = dict(table.properties)
    mapping = dict(table.sequence_mapping)
    if new_mapping:
        if not table.sequence_mapping:
            raise SqlError("sequence mapping can only be set when the table is created")
        for seq in new_mapping:
            if any(seq.lower() == s.lower() for s in mapping):
                raise SqlError(f"The mapping of sequence column [{seq}] can not be changed")
        props.update({k: v for k, v in clause.properties.items() if k.startswith("sequence_mapping.")})
    if table.sequence_mapping:
        mapping = check_sequence_mapping(props, columns, table.keys_type, merge_on_write=False)
    return table.model_copy(update={"columns": tuple(columns), "properties": props, "sequence_mapping": mapping})


def _check_not_in_delete(table: TableDef, col: ColumnDef, what: str) -> None:
    if any(col.name in pred.columns for pred in table.delete_predicates):
        raise SqlError(f"Can not {what} column {col.name}: a DELETE condition of the table uses it")


def _drop(table: TableDef, clause: Clause, version: int, ops: list[SchemaOp]) -> TableDef:
    col = _find(table, clause.name)
    _check_not_in_delete(table, col, "drop")
    if _is_partition_column(table, col):
        raise SqlError(f"Partition column[{col.name}] cannot be dropped")
    if col.is_key:
        model = {KeysType.UNIQUE: "Unique", KeysType.AGGREGATE: "Aggregate", KeysType.DUPLICATE: "Duplicate"}
        raise SqlError(f"Can not drop key column in {model[table.keys_type]} data model table")
    if _is_distribution_column(table, col):
        raise SqlError(f"Distribution column[{col.name}] cannot be dropped. index[{table.name}]")
    if table.sequence_col and table.sequence_col.lower() == col.name.lower():
        raise SqlError(f"Can not drop sequence column {col.name}: function_column.sequence_col maps to it")
    if table.replace_version_column and table.replace_version_column.lower() == col.name.lower():
        raise SqlError(f"Can not drop the replace version column {col.name}")
    if len(table.value_columns()) == 1 and not table.is_duplicate:
        raise SqlError(f"Can not drop column {col.name}: the table needs at least one value column")
    mapping = dict(table.sequence_mapping)
    props = dict(table.properties)
    group = table.sequence_group(col.name)
    if group is not None:
        if group == col.name:
            if mapping[group]:
                raise SqlError(
                    f"Can not drop sequence column [{col.name}]: it still orders {', '.join(mapping[group])}"
                )
            del mapping[group]
            props.pop(f"sequence_mapping.{group}", None)
        else:
            mapping[group] = tuple(v for v in mapping[group] if v.lower() != col.name.lower())
            props[f"sequence_mapping.{group}"] = ",".join(mapping[group])
    ops.append(DropColumn(col.name))
    columns = tuple(c for c in table.columns if c is not col)
    return table.model_copy(update={"columns": columns, "sequence_mapping": mapping, "properties": props})


def _rename(table: TableDef, clause: Clause, version: int, ops: list[SchemaOp]) -> TableDef:
    col = _find(table, clause.name)
    _check_not_in_delete(table, col, "rename")
    new = clause.new_name
    if new.upper().startswith(HIDDEN_PREFIX):
        raise SqlError(f"Incorrect column name '{new}'. Column name can not start with '{HIDDEN_PREFIX}'")
    check_new_column_name(new)
    if table.column(new) is not None:
        raise SqlError(f"Column name[{new}] is already used")
    if table.sequence_mapping:
        raise SqlError("Rename column is not supported on a table with sequence mapping")
    if table.sequence_col and table.sequence_col.lower() == col.name.lower():
        raise SqlError(f"Can not rename sequence column {col.name}")
    if table.replace_version_column and table.replace_version_column.lower() == col.name.lower():
        raise SqlError(f"Can not rename the replace version column {col.name}")
    ops.append(RenameColumn(col.name, new))
    renamed = col.model_copy(update={"name": new})

    def swap(names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(new if n.lower() == col.name.lower() else n for n in names)

    partitioning = table.partitioning
    if partitioning is not None:
        partitioning = partitioning.model_copy(update={"columns": swap(partitioning.columns)})
    return table.model_copy(
        update={
            "columns": tuple(renamed if c is col else c for c in table.columns),
            "key_columns": swap(table.key_columns),
            "bucket_columns": swap(table.bucket_columns),
            "partitioning": partitioning,
        }
    )


def _is_partition_column(table: TableDef, col: ColumnDef) -> bool:
    return table.partitioning is not None and col.name.lower() in {c.lower() for c in table.partitioning.columns}


def _is_distribution_column(table: TableDef, col: ColumnDef) -> bool:
    """The column's values pick a row's bucket (`TableDef.distribution_columns`)."""
    return col.name.lower() in {c.lower() for c in table.distribution_columns}


def _widens(old: DorisType, new: DorisType) -> bool:
    """Type changes that read old files as they are (Iceberg promotions, or the same storage type)."""
    if old == new:
        return True
    if old.name in _INTEGER_WIDTH and new.name in _INTEGER_WIDTH:
        return _INTEGER_WIDTH[new.name] >= _INTEGER_WIDTH[old.name] and new.name != "LARGEINT"
    if old.name == "FLOAT" and new.name == "DOUBLE":
        return True
    if old.name == new.name == "DECIMAL":
        return new.scale == old.scale and (new.precision or 0) >= (old.precision or 0)
    if old.name in ("CHAR", "VARCHAR") and new.name in ("VARCHAR", "STRING"):
        return new.name == "STRING" or (new.length or 0) >= (old.length or 0)
    return old.name == "VARCHAR" and new.name == "STRING"


def _modify(table: TableDef, clause: Clause, version: int, ops: list[SchemaOp]) -> TableDef:
    new = clause.columns[0]
    col = _find(table, new.name)
    if clause.after is not None or clause.first:
        raise SqlError("Changing a column's position is not supported by this server (it needs a rewrite)")
    if (
        new.aggregation
        and new.aggregation != col.aggregation
        and not (table.is_unique and new.aggregation == "REPLACE")
    ):
        raise SqlError(f"Can not change aggregation type of column {col.name}")
    if col.nullable and not new.nullable:
        raise SqlError(f"Can not change column {col.name} from nullable to non-nullable")
    fixed_type = {table.sequence_col, table.replace_version_column, *table.sequence_mapping}
    if col.type != new.type and col.name in fixed_type:
        raise SqlError(f"The type of sequence column {col.name} can not be changed")
    if col.type != new.type and _is_partition_column(table, col):
        raise SqlError(f"Can not modify partition column[{col.name}]")
    if col.type != new.type and _is_distribution_column(table, col):
        # a row's bucket is the hash of its distribution columns' values as typed: a wider type hashes a value
        # elsewhere, and the rows stored before would be looked for in the wrong bucket (Doris's own check)
        raise SqlError(f"Can not modify distribution column[{col.name}]. index[{table.name}]")
    if not _widens(col.type, new.type):
        raise SqlError(f"Can not change {col.type.sql()} to {new.type.sql()}")
    modified = col.model_copy(
        update={
            "type": new.type,
            "nullable": new.nullable,
            "default": new.default if new.has_default else col.default,
            "has_default": new.has_default or col.has_default,
            "comment": new.comment or col.comment,
        }
    )
    if new.type.iceberg_type() != col.type.iceberg_type():
        ops.append(WidenColumn(modified))  # other changes live in the definition only
    return table.model_copy(update={"columns": tuple(modified if c is col else c for c in table.columns)})


def _enable(table: TableDef, clause: Clause, version: int, ops: list[SchemaOp]) -> TableDef:
    if clause.name == "BATCH_DELETE":
        if not table.is_unique:
            raise SqlError("Batch delete only supported in unique tables.")
        if table.sequence_mapping:
            raise SqlError("sequence mapping tables do not support batch delete")
        return table  # every unique table here already has the delete sign
    if clause.name != "SEQUENCE_LOAD":
        raise SqlError(f"Unknown feature: {clause.name}")
    if not table.is_unique:
        raise SqlError("Sequence load only supported in unique tables.")
    if table.sequence_mapping:
        raise SqlError("column group sequence and sequence column can't apply to both")
    if table.has_sequence:
        raise SqlError(f"Table {table.name} already has a sequence column")
    raw = clause.properties.get("function_column.sequence_type")
    if raw is None:
        raise SqlError("function_column.sequence_type must be set to enable SEQUENCE_LOAD")
    try:
        seq_type = DorisType.parse(*split_type(raw))
    except (UnsupportedType, ValueError):
        raise SqlError(f"Unsupported data type: {raw}") from None
    if not seq_type.can_be_sequence:
        raise SqlError("Sequence type only support integer types and date types")
    props = {**table.properties, "function_column.sequence_type": raw}
    new = table.model_copy(update={"sequence_type": seq_type, "properties": props})
    seq_col = next(c for c in new.hidden_columns() if c.name == SEQUENCE_COL)
    ops.append(AddColumn(seq_col))
    return new


_APPLY: dict[str, Callable[[TableDef, Clause, int, list[SchemaOp]], TableDef]] = {
    "ADD": _add,
    "DROP": _drop,
    "RENAME": _rename,
    "MODIFY": _modify,
    "ENABLE": _enable,
}
