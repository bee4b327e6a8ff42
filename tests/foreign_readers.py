"""Foreign Iceberg readers: a table's rows as another engine reads them from the catalog and the files, without the
server. Issue 18 asks that any Iceberg v2 reader return exactly `SELECT * FROM t`'s rows, hidden columns aside;
the readers here are pyiceberg's own scan and DuckDB's `iceberg_scan`.

DuckDB's iceberg extension comes from PyPI (`duckdb-extension-iceberg`, which pins `duckdb` to its own release)
and reads manifests through the avro extension (`duckdb-extension-avro`): both are loaded from the installed
wheels' files, with extension autoinstall off, so a test never reaches extensions.duckdb.org.

Rows come back as sorted lists of tuples of the values `/api/query` shows (`spark_runner.queries.render_value`
after a JSON round trip), so they compare with `DorisClient.rows(db, "SELECT * FROM t")` directly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from spark_runner.queries import render_value

HIDDEN_PREFIX = "__DORIS_"  # Doris's hidden columns (delete sign, sequence, version): SELECT * leaves them out
CATALOG_NAME = "default"  # the name the server's SqlCatalog records its tables under (tables/catalog.py)

Row = tuple[Any, ...]


def _extension_file(package: str, name: str) -> Path:
    """The `.duckdb_extension` file a `duckdb-extension-<name>` wheel ships, for the installed duckdb release."""
    module = __import__(package)
    path = Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.is_file():
        raise RuntimeError(f"{package} has no extension for duckdb {duckdb.__version__} (pin both to one release)")
    return path


def duckdb_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the iceberg extension loaded from its wheel (avro first: iceberg needs it)."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    con.execute(f"LOAD '{_extension_file('duckdb_extension_avro', 'avro')}'")
    con.execute(f"LOAD '{_extension_file('duckdb_extension_iceberg', 'iceberg')}'")
    return con


def open_catalog(data_dir: Path) -> SqlCatalog:
    """The server's catalog as a foreign engine opens it: pyiceberg's SqlCatalog on `<data_dir>/catalog.db`."""
    return SqlCatalog(
        CATALOG_NAME, uri=f"sqlite:///{data_dir / 'catalog.db'}", warehouse=f"file://{data_dir / 'warehouse'}"
    )


def load_table(data_dir: Path, db: str, table: str) -> Table:
    return open_catalog(data_dir).load_table((db, table))


def visible_columns(table: Table) -> list[str]:
    """The table's columns in schema order, hidden ones left out: the columns of `SELECT *`."""
    return [f.name for f in table.schema().fields if not f.name.upper().startswith(HIDDEN_PREFIX)]


def as_reply(rows: Iterable[Sequence[Any]]) -> list[Row]:
    """Rows as `/api/query` shows them, sorted: each value rendered as the server renders it, then sent through
    JSON (Doris's HTTP SQL reply), so a DECIMAL, DATE or DATETIME compares equal whichever engine read it."""
    rendered = [[render_value(v) for v in row] for row in rows]
    return sorted((tuple(row) for row in json.loads(json.dumps(rendered))), key=_sort_key)


def _sort_key(row: Row) -> tuple[tuple[bool, str, Any], ...]:
    """Sorts rows holding NULLs and mixed types: NULLs first, then by type name, then by value."""
    return tuple((v is not None, type(v).__name__, v if v is not None else 0) for v in row)


def arrow_rows(data: pa.Table) -> list[Row]:
    columns = [data.column(i).to_pylist() for i in range(data.num_columns)]
    return list(zip(*columns, strict=True)) if columns else []


def pyiceberg_rows(data_dir: Path, db: str, table: str) -> list[Row]:
    """The table's live rows as pyiceberg's own scan reads them (data files minus delete files)."""
    iceberg = load_table(data_dir, db, table)
    return as_reply(arrow_rows(iceberg.scan(selected_fields=tuple(visible_columns(iceberg))).to_arrow()))


def duckdb_rows(data_dir: Path, db: str, table: str) -> list[Row]:
    """The table's live rows as DuckDB's `iceberg_scan` reads them from the current metadata file."""
    iceberg = load_table(data_dir, db, table)
    columns = ", ".join('"' + name.replace('"', '""') + '"' for name in visible_columns(iceberg))
    con = duckdb_connection()
    try:
        data = con.execute(f"SELECT {columns} FROM iceberg_scan(?)", [iceberg.metadata_location]).to_arrow_table()
    finally:
        con.close()
    return as_reply(arrow_rows(data))
