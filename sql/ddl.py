"""Doris CREATE TABLE → `TableDef`, with Doris's validation messages.

sqlglot's doris dialect does not parse per-column aggregation types, LARGEINT, key-model clauses
with DISTRIBUTED BY and PROPERTIES together, so this statement is read with a token cursor.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlglot import TokenType

from sql.partition_ddl import PartitionClause, build_partitioning, parse_auto_clause, parse_partition_clause
from sql.tokens import Cursor
from tables.errors import SqlError
from tables.model import HIDDEN_PREFIX, STORAGE_FORMAT, ColumnDef, KeysType, TableDef
from tables.names import InvalidName, check_column_name
from tables.types import DorisType, UnsupportedType

AGGREGATIONS = (
    "SUM",
    "MAX",
    "MIN",
    "REPLACE",
    "REPLACE_IF_NOT_NULL",
    "HLL_UNION",
    "BITMAP_UNION",
    "QUANTILE_UNION",
    "GENERIC",
)
UNSUPPORTED_AGGREGATIONS = ("HLL_UNION", "BITMAP_UNION", "QUANTILE_UNION", "GENERIC")
DEFAULT_BUCKETS = 10
MAX_BUCKETS = 768  # Doris FE config max_bucket_num_per_partition (its default since 4.1)
# The definition is stored in the Iceberg table properties, so every commit (each load) writes it again: a 100 MB
# comment made each one-row load write 100 MB. 2000 commented columns and 4096 partitions take about 1.1 MB.
MAX_DEFINITION_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class CreateTable:
    definition: TableDef
    if_not_exists: bool


def _parse_type(cur: Cursor) -> DorisType:
    name = cur.name()
    if cur.at(TokenType.LT):  # ARRAY<...>, MAP<...>
        raise SqlError(f"Unsupported data type: {name}<...> (complex types are not supported)")
    args: list[int] = []
    if cur.accept_type(TokenType.L_PAREN):
        while True:
            tok = cur.expect_type(TokenType.NUMBER, "a number")
            args.append(int(tok.text))
            if not cur.accept_type(TokenType.COMMA):
                break
        cur.expect_type(TokenType.R_PAREN, ")")
    try:
        return DorisType.parse(name, args)
    except UnsupportedType as exc:
        raise SqlError(str(exc)) from None


def parse_column(cur: Cursor, stop: tuple[str, ...] = ()) -> ColumnDef:
    """One column definition; stops at `,`, `)` or one of the `stop` words (ALTER's AFTER, FIRST, ...)."""
    name = cur.name()
    if name.upper().startswith(HIDDEN_PREFIX):
        raise SqlError(f"Incorrect column name '{name}'. Column name can not start with '{HIDDEN_PREFIX}'")
    col_type = _parse_type(cur)
    nullable: bool | None = None
    aggregation: str | None = None
    default: str | None = None
    has_default = False
    comment = ""
    is_key = False
    while not cur.at_end() and not cur.at(TokenType.COMMA, TokenType.R_PAREN) and cur.word() not in stop:
        if cur.accept("KEY"):
            is_key = True
        elif cur.word() in AGGREGATIONS:
            aggregation = cur.next().text.upper()
        elif cur.accept("NOT", "NULL"):
            nullable = False
        elif cur.accept("NULL"):
            nullable = True
        elif cur.accept("AUTO_INCREMENT"):
            if cur.at(TokenType.L_PAREN):
                cur.skip_parens()
        elif cur.accept("DEFAULT"):
            has_default = True
            if cur.accept("NULL"):
                default = None
            elif cur.word() in ("CURRENT_TIMESTAMP", "NOW"):
                cur.next()
                if cur.at(TokenType.L_PAREN):
                    cur.skip_parens()
                default = "CURRENT_TIMESTAMP"
            else:
                negative = cur.accept_type(TokenType.DASH) is not None
                default = ("-" if negative else "") + cur.string()
        elif cur.accept("ON", "UPDATE"):
            cur.next()
            if cur.at(TokenType.L_PAREN):
                cur.skip_parens()
        elif cur.accept("COMMENT"):
            comment = cur.string()
        else:
            raise cur.error("a column attribute")
    return ColumnDef(
        name=name,
        type=col_type,
        nullable=True if nullable is None else nullable,
        aggregation=aggregation,
        default=default,
        has_default=has_default,
        comment=comment,
        is_key=is_key,
    )


def _name_list(cur: Cursor) -> list[str]:
    cur.expect_type(TokenType.L_PAREN, "(")
    names = [cur.name()]
    while cur.accept_type(TokenType.COMMA):
        names.append(cur.name())
    cur.expect_type(TokenType.R_PAREN, ")")
    return names


def parse_properties(cur: Cursor) -> dict[str, str]:
    cur.expect_type(TokenType.L_PAREN, "(")
    props: dict[str, str] = {}
    if cur.accept_type(TokenType.R_PAREN):
        return props
    while True:
        key = cur.string()
        cur.expect_type(TokenType.EQ, "=")
        props[key] = cur.string()
        if not cur.accept_type(TokenType.COMMA):
            break
        if cur.at(TokenType.R_PAREN):
            break  # a trailing comma, as users write
    cur.expect_type(TokenType.R_PAREN, ")")
    return props


def parse_create_table(text: str, current_db: str) -> CreateTable:
    """Parse a Doris CREATE TABLE statement.

    Raises:
        SqlError: syntax errors and Doris's table validation errors.
    """
    cur = Cursor(text)
    cur.expect("CREATE")
    cur.accept("EXTERNAL")
    cur.expect("TABLE")
    if_not_exists = cur.accept("IF", "NOT", "EXISTS")
    db, name = cur.qualified_name()
    cur.expect_type(TokenType.L_PAREN, "(")
    columns: list[ColumnDef] = []
    while True:
        if cur.word() == "INDEX":
            while cur.peek() is not None and not cur.at(TokenType.COMMA, TokenType.R_PAREN):
                if cur.at(TokenType.L_PAREN):
                    cur.skip_parens()
                else:
                    cur.next()
        else:
            columns.append(parse_column(cur))
        if not cur.accept_type(TokenType.COMMA):
            break
        if cur.at(TokenType.R_PAREN):
            break  # trailing comma after the last column (the seed's second CREATE has one)
    cur.expect_type(TokenType.R_PAREN, ")")

    keys_type: KeysType | None = None
    key_names: list[str] = []
    bucket_cols: list[str] = []
    buckets = DEFAULT_BUCKETS
    comment = ""
    props: dict[str, str] = {}
    partition_clause: PartitionClause | None = None
    while not cur.at_end():
        if cur.accept("ENGINE"):
            cur.expect_type(TokenType.EQ, "=")
            engine = cur.name()
            if engine.upper() != "OLAP":
                raise SqlError(f"Unsupported engine: {engine}")
        elif cur.word() in ("UNIQUE", "DUPLICATE", "AGGREGATE") and cur.word(1) == "KEY":
            keys_type = {"UNIQUE": KeysType.UNIQUE, "DUPLICATE": KeysType.DUPLICATE, "AGGREGATE": KeysType.AGGREGATE}[
                cur.next().text.upper()
            ]
            cur.expect("KEY")
            key_names = _name_list(cur)
        elif cur.accept("CLUSTER", "BY"):
            _name_list(cur)
        elif cur.accept("COMMENT"):
            comment = cur.string()
        elif cur.accept("PARTITION BY"):  # one token to sqlglot's tokenizer
            partition_clause = parse_partition_clause(cur)
        elif cur.accept("AUTO", "PARTITION BY"):
            partition_clause = parse_auto_clause(cur)
        elif cur.accept("DISTRIBUTED", "BY"):
            if cur.accept("HASH"):
                bucket_cols = _name_list(cur)
            else:
                cur.expect("RANDOM")
            if cur.accept("BUCKETS"):
                if not cur.accept("AUTO"):  # AUTO takes the default count, well below the cap
                    buckets = _bucket_count(cur)
        elif cur.accept("ROLLUP"):
            cur.skip_parens()
        elif cur.accept("PROPERTIES"):
            props = parse_properties(cur)
        else:
            raise cur.error("a table clause")
    return CreateTable(
        definition=check_definition_size(
            build_table_def(
                db=db or current_db,
                name=name,
                columns=columns,
                keys_type=keys_type,
                key_names=key_names,
                bucket_cols=bucket_cols,
                buckets=buckets,
                comment=comment,
                props=props,
                partition_clause=partition_clause,
            )
        ),
        if_not_exists=if_not_exists,
    )


def _bucket_count(cur: Cursor) -> int:
    """`BUCKETS n`, with Doris's cap on n.

    Raises:
        SqlError: not a whole number, or above `MAX_BUCKETS` (Doris's text).
    """
    text = cur.expect_type(TokenType.NUMBER, "a bucket count").text
    if not text.isdigit():
        raise SqlError(f"Invalid bucket count: {text}")
    buckets = int(text)
    if buckets > MAX_BUCKETS:
        raise SqlError(
            f"Number of buckets ({buckets}) exceeds the maximum allowed value ({MAX_BUCKETS}). Generally, a large "
            "number of buckets is not needed. If you have a specific use case requiring more buckets, please review "
            "your schema design or modify the FE config 'max_bucket_num_per_partition' to adjust this limit."
        )
    return buckets


def check_new_column_name(name: str) -> None:
    """Raises: SqlError when a column being created breaks Doris's column name rule."""
    try:
        check_column_name(name)
    except InvalidName as exc:
        raise SqlError(exc.message) from None


def check_definition_size(table: TableDef) -> TableDef:
    """The definition, when its stored form is at most `MAX_DEFINITION_BYTES`.

    Raises: SqlError naming both sizes (comments, properties, columns and partitions count together).
    """
    size = len(table.to_json().encode())
    if size > MAX_DEFINITION_BYTES:
        raise SqlError(
            f"The definition of table {table.name} would take {size} bytes, more than {MAX_DEFINITION_BYTES}: its "
            "comments, properties, columns and partitions are stored with every load"
        )
    return table


def _bool_prop(props: dict[str, str], key: str, default: bool) -> bool:
    value = props.get(key)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise SqlError(f"Invalid value for property {key}: {value}, must be true or false")
    return value.lower() == "true"


def build_table_def(
    *,
    db: str,
    name: str,
    columns: list[ColumnDef],
    keys_type: KeysType | None,
    key_names: list[str],
    bucket_cols: list[str],
    buckets: int,
    comment: str,
    props: dict[str, str],
    partition_clause: PartitionClause | None = None,
) -> TableDef:
    """Apply Doris's CREATE TABLE rules and build the definition.

    Raises:
        SqlError: with Doris's message for the rule broken.
    """
    for col in columns:
        check_new_column_name(col.name)
    by_name = {c.name.lower(): c for c in columns}
    if len(by_name) != len(columns):
        raise SqlError("Duplicate column name")
    if keys_type is None:
        keys_type = KeysType.DUPLICATE
        key_names = [c.name for c in columns[: min(3, len(columns))]] if not key_names else key_names
    for k in key_names:
        if k.lower() not in by_name:
            raise SqlError(f"Key column[{k}] doesn't exist.")
    for i, k in enumerate(key_names):
        if i >= len(columns) or columns[i].name.lower() != k.lower():
            found = columns[i].name if i < len(columns) else "nothing"
            raise SqlError(
                f"Key columns should be a ordered prefix of the schema. KeyColumns[{i}] (starts from zero) is {k}, "
                f"but corresponding column is {found} in the previous columns declaration."
            )
    keyset = {k.lower() for k in key_names}
    fixed: list[ColumnDef] = []
    for col in columns:
        is_key = col.name.lower() in keyset
        if is_key and col.aggregation:
            raise SqlError(f"Key column {col.name} can not set aggregation type")
        if is_key and col.type.name in ("FLOAT", "DOUBLE"):
            raise SqlError(f"Float or double can not used as a key, use decimal instead. column: {col.name}")
        aggregation = col.aggregation
        if not is_key:
            if keys_type is KeysType.UNIQUE and aggregation:
                raise SqlError(f"UNIQUE_KEYS table should not specify aggregate type for non-key column[{col.name}]")
            if keys_type is KeysType.DUPLICATE and aggregation:
                raise SqlError(f"DUP_KEYS table should not specify aggregate type for non-key column[{col.name}]")
            if keys_type is KeysType.AGGREGATE and not aggregation:
                raise SqlError(f"AGG_KEYS table should specify aggregate type for non-key column[{col.name}]")
            if keys_type is KeysType.UNIQUE:
                aggregation = "REPLACE"
        fixed.append(col.model_copy(update={"is_key": is_key, "aggregation": aggregation}))
    for col in fixed:
        if col.aggregation in UNSUPPORTED_AGGREGATIONS:
            raise SqlError(f"Aggregation type {col.aggregation} of column {col.name} is not supported by this server")
    for b in bucket_cols:
        if b.lower() not in by_name:
            raise SqlError(f"Distribution column[{b}] is not found")
        if keys_type is not KeysType.DUPLICATE and b.lower() not in keyset:
            raise SqlError(f"Distribution column[{b}] is not key column")
    if buckets < 1:
        raise SqlError("Number of hash distribution should be greater than zero.")
    merge_on_write = keys_type is KeysType.UNIQUE and _bool_prop(props, "enable_unique_key_merge_on_write", True)
    mapping = check_sequence_mapping(props, fixed, keys_type, merge_on_write)
    version_col = _replace_version_column(props, fixed, keys_type)
    # Doris's property, and the name 004_719a6f3ac1a41aa8.txt uses for it
    replace_if_not_null = _bool_prop(props, "enable_unique_key_replace_if_not_null", False) or _bool_prop(
        props, "replace_if_not_null", False
    )
    if replace_if_not_null and keys_type is not KeysType.UNIQUE:
        raise SqlError("enable_unique_key_replace_if_not_null is only supported in unique tables")
    partitioning = None
    if partition_clause is not None:
        created = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        partitioning = build_partitioning(partition_clause, fixed, keys_type, created)
    seq_col = props.get("function_column.sequence_col")
    seq_type_raw = props.get("function_column.sequence_type")
    seq_type: DorisType | None = None
    if seq_col or seq_type_raw:
        if keys_type is not KeysType.UNIQUE:
            raise SqlError("sequence column only support UNIQUE_KEYS")
    if seq_col:
        mapped = by_name.get(seq_col.lower())
        if mapped is None:
            raise SqlError(f"The specified sequence column[{seq_col}] not exists")
        if mapped.name.lower() in keyset:
            raise SqlError(f"Sequence column[{seq_col}] can not be a key column")
        if not mapped.type.can_be_sequence:
            raise SqlError("Sequence type only support integer types and date types")
        seq_col = mapped.name
    elif seq_type_raw:
        try:
            seq_type = DorisType.parse(*split_type(seq_type_raw))
        except UnsupportedType:
            raise SqlError(f"Unsupported data type: {seq_type_raw}") from None
        if not seq_type.can_be_sequence:
            raise SqlError("Sequence type only support integer types and date types")
    return TableDef(
        db=db,
        name=name,
        keys_type=keys_type,
        columns=tuple(fixed),
        key_columns=tuple(c.name for c in fixed if c.is_key),
        bucket_columns=tuple(by_name[b.lower()].name for b in bucket_cols),
        buckets=buckets,
        sequence_col=seq_col,
        sequence_type=seq_type,
        merge_on_write=merge_on_write,
        # sequence mapping tables do not support batch delete (000_0c520fff6485a702.txt)
        delete_sign=keys_type is KeysType.UNIQUE and not mapping,
        replace_if_not_null=replace_if_not_null,
        replace_version_column=version_col,
        sequence_mapping=mapping,
        comment=comment,
        properties=props,
        storage_format=STORAGE_FORMAT,
        partitioning=partitioning,
    )


def check_sequence_mapping(
    props: dict[str, str], columns: list[ColumnDef], keys_type: KeysType, merge_on_write: bool
) -> dict[str, tuple[str, ...]]:
    """`sequence_mapping.<seq>` = "<value columns>" properties, checked as Doris checks them.

    Raises:
        SqlError: with Doris's message (texts from its `test_unique_seq_map` suite).
    """
    raw = {k[len("sequence_mapping.") :]: v for k, v in props.items() if k.startswith("sequence_mapping.")}
    if not raw:
        return {}
    if keys_type is not KeysType.UNIQUE:
        raise SqlError("column sequence mapping only be supported in unique table")
    if merge_on_write:
        raise SqlError("sequence mapping do not support merge on write")
    if "function_column.sequence_type" in props or "function_column.sequence_col" in props:
        raise SqlError("column group sequence and sequence column can't apply to both")
    by_name = {c.name.lower(): c for c in columns}
    mapping: dict[str, tuple[str, ...]] = {}
    seen: set[str] = set()
    for seq_name, value_text in raw.items():
        seq = by_name.get(seq_name.lower())
        if seq is None:
            raise SqlError(f"sequence column [{seq_name}] in column_group does not exist in schema")
        if seq.is_key:
            raise SqlError(f"sequence column [{seq_name}] in column_group can't be key column")
        if not seq.type.can_be_sequence:
            raise SqlError(f"Unsupported data type in sequence column [{seq_name}]: {seq.type.sql()}")
        values: list[str] = []
        for name in (v.strip() for v in value_text.split(",")):
            if not name:
                continue
            col = by_name.get(name.lower())
            if col is None:
                raise SqlError(f"value column [{name}] in column_group [{seq_name}] does not exist in schema")
            if col.is_key:
                raise SqlError(f"value column [{name}] in column_group [{seq_name}] can't be key column")
            if col.name.lower() in seen or col.name.lower() in {s.lower() for s in raw}:
                raise SqlError("The columns are overlapping")
            seen.add(col.name.lower())
            values.append(col.name)
        mapping[seq.name] = tuple(values)
    sequences = {s.lower() for s in mapping}
    expected = {c.name.lower() for c in columns if not c.is_key and c.name.lower() not in sequences}
    if seen != expected:
        raise SqlError("The columns are not equal between the schema and prop")
    return mapping


def _replace_version_column(props: dict[str, str], columns: list[ColumnDef], keys_type: KeysType) -> str | None:
    """The aggregate model's `replace_version_column` (003_8fcb7ff40e8dfb0f.txt): a MAX value column.

    Raises:
        SqlError: the table is not aggregate, or the column is missing, a key, or not MAX.
    """
    name = props.get("replace_version_column")
    if name is None:
        return None
    if keys_type is not KeysType.AGGREGATE:
        raise SqlError("replace_version_column is only supported in AGGREGATE KEY tables")
    col = next((c for c in columns if c.name.lower() == name.lower()), None)
    if col is None:
        raise SqlError(f"The replace version column [{name}] does not exist in schema")
    if col.is_key or col.aggregation != "MAX":
        raise SqlError(f"The replace version column [{name}] must be a value column with aggregation type MAX")
    return col.name


def split_type(text: str) -> tuple[str, list[int]]:
    text = text.strip()
    if "(" in text and text.endswith(")"):
        base, args = text[:-1].split("(", 1)
        return base.strip(), [int(a) for a in args.split(",") if a.strip()]
    return text, []
