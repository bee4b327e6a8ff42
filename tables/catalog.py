"""The catalog: Doris databases and tables kept as Iceberg namespaces and tables.

A Doris table is one Iceberg table; its `TableDef` lives in the table properties. Every column,
hidden ones included, is an optional Iceberg field (Spark writes every column as optional), and
NOT NULL is enforced by the load.
"""

from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchNamespaceError, NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import NestedField

from tables.errors import AlreadyExists, DatabaseNotFound, DorisError, TableNotFound
from tables.model import DEFINITION_PROPERTY, TableDef
from tables.rowsets import Rowset, table_rowsets

VERSION_PROPERTY = "doris.version"
INITIAL_VERSION = 1


@dataclass(frozen=True)
class TableHandle:
    """A table as one snapshot sees it: definition, Iceberg table, field ids and data files."""

    definition: TableDef
    iceberg: Table

    def field_id(self, column: str) -> int:
        return self.iceberg.schema().find_field(column, case_sensitive=False).field_id

    def data_files(self) -> list[str]:
        """Plain local paths of the data files of the current snapshot."""
        if self.iceberg.current_snapshot() is None:
            return []
        return [_plain_path(task.file.file_path) for task in self.iceberg.scan().plan_files()]

    def rowsets(self) -> list[Rowset]:
        """The rowsets of the current snapshot, oldest first (see `tables.rowsets`)."""
        return table_rowsets(self.iceberg)

    def current_version(self) -> int:
        """The table's load version: the last committed one, carried in the snapshot summary (or the
        version of the last schema change, which takes a version without writing a snapshot)."""
        snap = self.iceberg.current_snapshot()
        floor = max(INITIAL_VERSION, self.definition.meta_version)
        if snap is None or snap.summary is None:
            return floor
        return max(floor, int(snap.summary.additional_properties.get(VERSION_PROPERTY, INITIAL_VERSION)))

    @property
    def location(self) -> Path:
        return Path(_plain_path(self.iceberg.location()))


def _plain_path(uri: str) -> str:
    return urlparse(uri).path if uri.startswith("file:") else uri


class Catalog:
    """Databases and tables over a pyiceberg SQL catalog (SQLite file by default)."""

    def __init__(self, *, uri: str, warehouse: Path) -> None:
        warehouse.mkdir(parents=True, exist_ok=True)
        self.warehouse = warehouse
        self._iceberg = SqlCatalog("default", uri=uri, warehouse=f"file://{warehouse}")
        self._ddl_lock = threading.Lock()

    # -- databases -----------------------------------------------------------------------
    def create_database(self, db: str, *, if_not_exists: bool = False) -> None:
        """Create a database.

        Raises:
            AlreadyExists: it exists and `if_not_exists` is false.
        """
        try:
            self._iceberg.create_namespace(db)
        except NamespaceAlreadyExistsError:
            if not if_not_exists:
                raise AlreadyExists(f"Can't create database '{db}'; database exists") from None

    def list_databases(self) -> list[str]:
        return sorted(ns[0] for ns in self._iceberg.list_namespaces())

    def database_exists(self, db: str) -> bool:
        return db in self.list_databases()

    def require_database(self, db: str) -> None:
        """Raises: DatabaseNotFound."""
        if not self.database_exists(db):
            raise DatabaseNotFound(db)

    def drop_database(self, db: str, *, if_exists: bool = False) -> None:
        """Drop a database and every table in it."""
        if not self.database_exists(db):
            if if_exists:
                return
            raise DorisError(f"Can't drop database '{db}'; database doesn't exist")
        for table in self.list_tables(db):
            self.drop_table(db, table)
        self._iceberg.drop_namespace(db)

    # -- tables --------------------------------------------------------------------------
    def list_tables(self, db: str) -> list[str]:
        self.require_database(db)
        return sorted(ident[-1] for ident in self._iceberg.list_tables(db))

    def create_table(self, definition: TableDef, *, if_not_exists: bool = False) -> bool:
        """Create the Iceberg table for a definition; returns False when it existed and `if_not_exists`.

        Raises:
            DatabaseNotFound, AlreadyExists.
        """
        self.require_database(definition.db)
        fields = [
            NestedField(field_id=i, name=col.name, field_type=col.type.iceberg_type(), required=False)
            for i, col in enumerate(definition.all_columns(), start=1)
        ]
        with self._ddl_lock:
            if self._iceberg.table_exists((definition.db, definition.name)):
                if if_not_exists:
                    return False
                raise AlreadyExists(f"Table '{definition.name}' already exists")
            self._iceberg.create_table(
                (definition.db, definition.name),
                schema=Schema(*fields),
                properties={DEFINITION_PROPERTY: definition.to_json(), "format-version": "2"},
            )
        return True

    def load(self, db: str, table: str) -> TableHandle:
        """Raises: DatabaseNotFound, TableNotFound."""
        try:
            iceberg = self._iceberg.load_table((db, table))
        except (NoSuchTableError, NoSuchNamespaceError):
            self.require_database(db)
            # Doris table names are case-sensitive but users often expect a case-insensitive match
            for name in self.list_tables(db):
                if name.lower() == table.lower():
                    return self.load(db, name)
            raise TableNotFound(db, table) from None
        definition = TableDef.from_json(iceberg.properties[DEFINITION_PROPERTY])
        return TableHandle(definition=definition, iceberg=iceberg)

    def drop_table(self, db: str, table: str, *, if_exists: bool = False) -> None:
        """Drop a table and remove its files."""
        try:
            handle = self.load(db, table)
        except TableNotFound:
            if if_exists:
                return
            raise
        self._iceberg.drop_table((db, handle.definition.name))
        shutil.rmtree(handle.location, ignore_errors=True)
