"""`information_schema.schemata`, `.tables` and `.columns`, as the catalog has them and the user may see them.

Connectors (DBeaver, Superset, JDBC metadata calls) read these three views. `sql.select.bind_tables` replaces a
reference to one of them by the view built here: a `VALUES` relation of the catalog's databases, tables and columns,
already filtered by the user's privileges (a database with any privilege on it or its tables, a table with any
privilege on it, as `SHOW DATABASES` and `SHOW TABLES` filter), so the rest of the query filters and joins as usual.
Names reach the relation as string literals only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sqlglot import exp

from sql.privileges import BUILTIN_DATABASES
from tables.accounts import Privileges
from tables.catalog import Catalog
from tables.errors import DorisError, SqlError
from tables.model import KeysType, TableDef

INFORMATION_SCHEMA = "information_schema"
CATALOG_NAME = "internal"

Row = list[str | int | None]
Columns = tuple[tuple[str, str], ...]  # (name, Spark type)

SCHEMATA_COLUMNS: Columns = (
    ("CATALOG_NAME", "STRING"),
    ("SCHEMA_NAME", "STRING"),
    ("DEFAULT_CHARACTER_SET_NAME", "STRING"),
    ("DEFAULT_COLLATION_NAME", "STRING"),
    ("SQL_PATH", "STRING"),
    ("DEFAULT_ENCRYPTION", "STRING"),
)
TABLES_COLUMNS: Columns = (
    ("TABLE_CATALOG", "STRING"),
    ("TABLE_SCHEMA", "STRING"),
    ("TABLE_NAME", "STRING"),
    ("TABLE_TYPE", "STRING"),
    ("ENGINE", "STRING"),
    ("VERSION", "BIGINT"),
    ("ROW_FORMAT", "STRING"),
    ("TABLE_ROWS", "BIGINT"),
    ("AVG_ROW_LENGTH", "BIGINT"),
    ("DATA_LENGTH", "BIGINT"),
    ("CREATE_TIME", "TIMESTAMP"),
    ("UPDATE_TIME", "TIMESTAMP"),
    ("TABLE_COLLATION", "STRING"),
    ("CREATE_OPTIONS", "STRING"),
    ("TABLE_COMMENT", "STRING"),
)
COLUMNS_COLUMNS: Columns = (
    ("TABLE_CATALOG", "STRING"),
    ("TABLE_SCHEMA", "STRING"),
    ("TABLE_NAME", "STRING"),
    ("COLUMN_NAME", "STRING"),
    ("ORDINAL_POSITION", "BIGINT"),
    ("COLUMN_DEFAULT", "STRING"),
    ("IS_NULLABLE", "STRING"),
    ("DATA_TYPE", "STRING"),
    ("CHARACTER_MAXIMUM_LENGTH", "BIGINT"),
    ("CHARACTER_OCTET_LENGTH", "BIGINT"),
    ("NUMERIC_PRECISION", "BIGINT"),
    ("NUMERIC_SCALE", "BIGINT"),
    ("DATETIME_PRECISION", "BIGINT"),
    ("CHARACTER_SET_NAME", "STRING"),
    ("COLLATION_NAME", "STRING"),
    ("COLUMN_TYPE", "STRING"),
    ("COLUMN_KEY", "STRING"),
    ("EXTRA", "STRING"),
    ("PRIVILEGES", "STRING"),
    ("COLUMN_COMMENT", "STRING"),
)
_KEY_MARK = {KeysType.UNIQUE: "UNI", KeysType.DUPLICATE: "DUP", KeysType.AGGREGATE: "AGG"}
_PRECISION = {"TINYINT": 3, "SMALLINT": 5, "INT": 10, "BIGINT": 19, "LARGEINT": 39, "FLOAT": 7, "DOUBLE": 15}


def visible_databases(catalog: Catalog, privileges: Privileges) -> list[str]:
    """The databases the user may see, the built-in ones first, then the catalog's in name order."""
    return list(BUILTIN_DATABASES) + sorted(d for d in catalog.list_databases() if privileges.sees_db(d))


def visible_tables(catalog: Catalog, privileges: Privileges, db: str) -> list[str]:
    """The tables of `db` the user may see (the views of information_schema for it)."""
    if db.lower() == INFORMATION_SCHEMA:
        return sorted(VIEWS)
    if db.lower() in BUILTIN_DATABASES:
        return []
    return [t for t in catalog.list_tables(db) if privileges.sees_table(db, t)]


def _definitions(catalog: Catalog, privileges: Privileges) -> Iterator[TableDef]:
    for db in visible_databases(catalog, privileges):
        if db in BUILTIN_DATABASES:
            continue
        for name in visible_tables(catalog, privileges, db):
            try:
                yield catalog.load(db, name).definition
            except DorisError:
                continue  # dropped meanwhile, or unreadable: a listing skips it


def schemata_rows(catalog: Catalog, privileges: Privileges) -> list[Row]:
    databases = visible_databases(catalog, privileges)
    return [[CATALOG_NAME, db, "utf8mb4", "utf8mb4_0900_bin", None, "NO"] for db in databases]


def tables_rows(catalog: Catalog, privileges: Privileges) -> list[Row]:
    rows: list[Row] = []
    for view in sorted(VIEWS):
        rows.append(_table_row(INFORMATION_SCHEMA, view, "SYSTEM VIEW", "SYSTEM VIEW", "utf8mb4_0900_bin", ""))
    for table in _definitions(catalog, privileges):
        rows.append(_table_row(table.db, table.name, "BASE TABLE", "Doris", "utf-8", table.comment))
    return rows


def _table_row(db: str, name: str, kind: str, engine: str, collation: str, comment: str) -> Row:
    # version, row format, rows, average length, data length, create and update times: not kept here
    return [CATALOG_NAME, db, name, kind, engine, None, "", None, None, None, None, None, collation, "", comment]


def columns_rows(catalog: Catalog, privileges: Privileges) -> list[Row]:
    rows: list[Row] = []
    for table in _definitions(catalog, privileges):
        for position, col in enumerate(table.columns, start=1):
            kind = col.type
            chars = kind.length if kind.name in ("CHAR", "VARCHAR") else None
            precision = kind.precision if kind.name == "DECIMAL" else _PRECISION.get(kind.name)
            scale = kind.scale if kind.name == "DECIMAL" else (0 if kind.is_integer else None)
            rows.append(
                [
                    CATALOG_NAME,
                    table.db,
                    table.name,
                    col.name,
                    position,
                    col.default if col.has_default else None,
                    "YES" if col.nullable else "NO",
                    kind.name.lower(),
                    chars,
                    chars * 4 if chars is not None else None,
                    precision,
                    scale,
                    kind.scale if kind.name == "DATETIME" else None,
                    "utf8mb4" if chars is not None else None,
                    "utf8mb4_0900_bin" if chars is not None else None,
                    kind.sql().lower(),
                    _KEY_MARK[table.keys_type] if col.is_key else "",
                    "",
                    "SELECT",
                    col.comment,
                ]
            )
    return rows


VIEWS: dict[str, tuple[Columns, Callable[[Catalog, Privileges], list[Row]]]] = {
    "schemata": (SCHEMATA_COLUMNS, schemata_rows),
    "tables": (TABLES_COLUMNS, tables_rows),
    "columns": (COLUMNS_COLUMNS, columns_rows),
}


def _literal(value: str | int | None) -> exp.Expr:
    if value is None:
        return exp.Null()
    if isinstance(value, int):
        return exp.Literal.number(value)
    return exp.Literal.string(value)


def information_schema_view(catalog: Catalog, privileges: Privileges, name: str, alias: str) -> exp.Subquery:
    """The view `information_schema.<name>` for this user, as a subquery named `alias`.

    Raises:
        SqlError: not one of the views served here (Doris's unknown-table text).
    """
    view = VIEWS.get(name.lower())
    if view is None:
        raise SqlError(f"Unknown table '{name}' in database '{INFORMATION_SCHEMA}'")
    columns, build = view
    rows = build(catalog, privileges)
    width = len(columns)
    tuples = [exp.Tuple(expressions=[_literal(v) for v in row]) for row in rows] or [
        exp.Tuple(expressions=[exp.Null() for _ in range(width)])  # one row of NULLs, filtered out below
    ]
    values = exp.Values(
        expressions=tuples,
        alias=exp.TableAlias(
            this=exp.to_identifier("__is"), columns=[exp.to_identifier(f"c{i}") for i in range(width)]
        ),
    )
    select = exp.select(
        *(exp.alias_(exp.cast(exp.column(f"c{i}"), kind), cname) for i, (cname, kind) in enumerate(columns))
    ).from_(values)
    if not rows:
        select = select.where(exp.false())
    return exp.Subquery(this=select, alias=exp.TableAlias(this=exp.to_identifier(alias)))
