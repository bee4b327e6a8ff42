"""The catalog: Doris databases and tables kept as Iceberg namespaces and tables.

A Doris table is one Iceberg table; its `TableDef` lives in the table properties. Every column,
hidden ones included, is an optional Iceberg field (Spark writes every column as optional), and
NOT NULL is enforced by the load.

Storage locations are chosen here, never built from names: a new table lives in `<warehouse>/<uuid>`.
Tables created before that keep pyiceberg's `<warehouse>/<db>/<table>`, and their names were never
checked, so a drop removes a location only through the guard of `tables.paths`. A table whose metadata
cannot be read raises `BrokenTable` for that table alone: listing and every other table keep working.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchNamespaceError, NoSuchTableError
from pyiceberg.io import FileIO
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, StagedTable, Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    TableRequirement,
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.transforms import (
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    YearTransform,
)
from pyiceberg.types import IntegerType, NestedField
from pyiceberg.utils.datetime import datetime_to_millis
from sqlalchemy import bindparam, create_engine, select
from sqlalchemy.orm import Session

from tables.errors import AlreadyExists, DatabaseNotFound, DorisError, TableNotFound
from tables.model import BUCKET_COL, DEFINITION_PROPERTY, TableDef
from tables.names import check_database_name, check_table_name
from tables.partitions import PARTITION_COL, aligned_unit, temporary_partitioning
from tables.rowsets import UNREADABLE, FileFilter, Rowset, live_data_files, may_hold, plain_path, table_rowsets
from tables.store import Sql, lock_key, pool_options, report_unavailable, store_failure
from tables.warehouse import Location, WarehouseStorage

log = logging.getLogger(__name__)

VERSION_PROPERTY = "doris.version"
INITIAL_VERSION = 1
# The companion tables holding temporary partitions (`Catalog.temporary`): one namespace no statement sees, a
# table named by the uuid of the table whose temporary partitions it holds
TEMPORARY_NAMESPACE = "__doris_temporary_partitions"


def updated_metadata(
    base: TableMetadata, updates: tuple[TableUpdate, ...], metadata_location: str | None = None
) -> TableMetadata:
    """pyiceberg's `update_table_metadata` without its last step, a deep copy of the whole result.

    Every update returns a new frozen model (`model_copy` with new lists), so nothing of the result is shared
    mutably; the copy cost ~3 ms at 60 snapshots and ran three or four times per commit (a staged change's
    metadata, the catalog's commit), 10-30 ms of a one-row load at the snapshot counts a table keeps.
    """
    context = _TableMetadataUpdateContext()
    new = base
    for update in updates:
        new = _apply_table_update(update, new, context)
    if context.has_changes():
        if metadata_location:
            new = _update_table_metadata_log(new, metadata_location, base.last_updated_ms)
        if base.last_updated_ms == new.last_updated_ms:
            new = new.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    new.spec().check_compatible(new.schema())
    new.sort_order().check_compatible(new.schema())
    return new


class _SqlCatalog(SqlCatalog):
    """pyiceberg's SQL catalog that reads and parses a metadata file once per metadata location.

    Every load plans against the table, so `load_table` is on every request's path; pyiceberg's reads the
    catalog row through the ORM and then the whole metadata JSON (~2-4 ms with a hundred snapshots). Here the
    row's `metadata_location` is one Core select (~0.05 ms) and a location seen before gives a new `Table` over
    the parsed metadata it had (pydantic models, frozen: sharing is safe). A commit writes a new metadata file
    under a new location, so a cached entry is never stale: the row says which file is current.

    On SQLite the database is put in WAL mode, so reads of the catalog do not wait for a commit's write. On a
    server database (PostgreSQL) connections are pinged before use, so a restart of the database is survived,
    and while it cannot be reached every call raises `StoreUnavailable` (Doris's `[INTERNAL_ERROR]...`). A
    statement either database refuses (its disk full, locked past the wait, read-only) raises `StoreFailed`.
    """

    CACHED = 64  # metadata files kept parsed (one per table in use; a commit makes the old one unused)

    def __init__(self, name: str, pool_size: int | None = None, **properties: str) -> None:
        super().__init__(name, **properties)
        if pool_size is not None and self.engine.dialect.name != "sqlite":  # bounded (`SL_CATALOG_POOL_SIZE`)
            self.engine.dispose()
            self.engine = create_engine(properties["uri"], pool_pre_ping=True, **pool_options(pool_size, bounded=True))
        self._parsed: dict[str, tuple[TableMetadata, FileIO]] = {}
        self._parsed_lock = threading.Lock()
        # built once: composing the statement cost ~0.3 ms per load, ten times running it
        query = select(IcebergTables.metadata_location).where(
            IcebergTables.catalog_name == self.name,
            IcebergTables.table_namespace == bindparam("ns"),
            IcebergTables.table_name == bindparam("name"),
        )
        type_filter = self._iceberg_type_filter()
        self._location_query = query if type_filter is None else query.where(type_filter)
        # on a SQLite file, the row is read on a connection of its own, as `tables.store.Store` reads: a
        # connection from the pool (checked out, pinged, reset) cost ~5x the statement, ~0.2-0.4 ms of every
        # load's Python under concurrent small loads
        self._location_conn: sqlite3.Connection | None = None
        self._location_sql = Sql(self._location_query, self.engine.dialect)
        self._location_lock = threading.Lock()
        self._shared = threading.local()  # `shared_reads`: the rows read in this thread's block
        if self.engine.dialect.name == "sqlite":
            with self.engine.begin() as conn:
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")  # kept in the file: every connection uses it
            database = self.engine.url.database
            if database and database != ":memory:" and not database.startswith("file:"):
                self._location_conn = sqlite3.connect(database, check_same_thread=False, isolation_level=None)
        report_unavailable(self.engine)  # and a full disk, a lock held too long, a read-only file: `StoreFailed`

    def _init_catalog(self) -> None:
        """pyiceberg's (create the catalog tables when absent), one server at a time on a server database: servers
        starting together on a new PostgreSQL database would both create them, and one would fail."""
        if self.engine.dialect.name != "postgresql":
            super()._init_catalog()
            return
        with self.engine.connect() as conn:
            key = lock_key("iceberg catalog tables")
            conn.exec_driver_sql("SELECT pg_advisory_lock(%s)", (key,))
            try:
                super()._init_catalog()
            finally:
                conn.exec_driver_sql("SELECT pg_advisory_unlock(%s)", (key,))
                conn.commit()

    def load_table(self, identifier: str | tuple[str, ...]) -> Table:
        namespace = SqlCatalog.namespace_to_string(SqlCatalog.namespace_from(identifier))
        table_name = SqlCatalog.table_name_from(identifier)
        location = self._location(namespace, table_name)
        with self._parsed_lock:
            parsed = self._parsed.get(location) if location else None
        if location is None or parsed is None:  # no such table (pyiceberg raises), or not parsed yet
            return self._parsed_table(super().load_table(identifier))
        metadata, io = parsed
        return Table(
            identifier=SqlCatalog.identifier_to_tuple(namespace) + (table_name,),
            metadata=metadata,
            metadata_location=location,
            io=io,
            catalog=self,
        )

    @contextmanager
    def shared_reads(self) -> Iterator[None]:
        """A block in which this thread reads each table's catalog row once (`_location`), as one read would:
        for a batch of concurrent loads (`loads.steps`) that all arrived before the block began, a row read in
        it is as current as each of them needs (every change that ended before a load arrived is in it). A
        change this thread makes in the block forgets what it read. Nested blocks are the outer one."""
        if getattr(self._shared, "rows", None) is not None:
            yield
            return
        self._shared.rows = {}
        try:
            yield
        finally:
            self._shared.rows = None

    def _forget_shared(self) -> None:
        rows = getattr(self._shared, "rows", None)
        if rows:
            rows.clear()

    def _location(self, namespace: str, table_name: str) -> str | None:
        """The table's current metadata location from the catalog row, or None when there is no such table."""
        shared: dict[tuple[str, str], str | None] | None = getattr(self._shared, "rows", None)
        if shared is None:
            return self._read_location(namespace, table_name)
        key = (namespace, table_name)
        if key not in shared:
            shared[key] = self._read_location(namespace, table_name)
        return shared[key]

    def _read_location(self, namespace: str, table_name: str) -> str | None:
        params = {"ns": namespace, "name": table_name}
        if self._location_conn is None:
            with self.engine.connect() as conn:
                return conn.execute(self._location_query, params).scalar()
        with self._location_lock:
            try:  # autocommit: each statement reads the last commit
                row = self._location_conn.execute(self._location_sql.text, self._location_sql.args(params)).fetchone()
            except sqlite3.Error as exc:
                if (failure := store_failure(exc)) is not None:
                    raise failure from exc
                raise
        return None if row is None else row[0]

    def close(self) -> None:
        """Close the catalog database's connections."""
        if self._location_conn is not None:
            with self._location_lock:
                self._location_conn.close()
        super().close()

    # a change forgets the rows `shared_reads` kept, once done (pyiceberg's own reads in it keep them again)
    def create_table(self, *args: Any, **kwargs: Any) -> Table:
        try:
            return super().create_table(*args, **kwargs)
        finally:
            self._forget_shared()

    def drop_table(self, identifier: str | tuple[str, ...]) -> None:
        try:
            super().drop_table(identifier)
        finally:
            self._forget_shared()

    def rename_table(self, from_identifier: str | tuple[str, ...], to_identifier: str | tuple[str, ...]) -> Table:
        try:
            return super().rename_table(from_identifier, to_identifier)
        finally:
            self._forget_shared()

    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        """pyiceberg's commit; the metadata it wrote is kept parsed (the next load of the table reads it)."""
        try:
            response = super().commit_table(table, requirements, updates)
        finally:
            self._forget_shared()
        self._keep(response.metadata_location, response.metadata, table.io)
        return response

    def _update_and_stage_table(
        self,
        current_table: Table | None,
        table_identifier: tuple[str, ...],
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> StagedTable:
        """pyiceberg's, with `updated_metadata` (no deep copy) for a table that exists."""
        if current_table is None:  # a new table: pyiceberg validates the whole metadata
            return super()._update_and_stage_table(current_table, table_identifier, requirements, updates)
        for requirement in requirements:
            requirement.validate(current_table.metadata)
        metadata = updated_metadata(current_table.metadata, updates, current_table.metadata_location)
        version = self._parse_metadata_version(current_table.metadata_location) + 1
        provider = load_location_provider(metadata.location, metadata.properties)
        location = provider.new_table_metadata_file_location(version)
        return StagedTable(
            identifier=table_identifier,
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(properties=metadata.properties, location=location),
            catalog=self,
        )

    def _parsed_table(self, table: Table) -> Table:
        self._keep(table.metadata_location, table.metadata, table.io)
        return table

    def _keep(self, location: str, metadata: TableMetadata, io: FileIO) -> None:
        with self._parsed_lock:
            if location not in self._parsed and len(self._parsed) >= self.CACHED:
                self._parsed.pop(next(iter(self._parsed)))  # the oldest entry
            self._parsed[location] = (metadata, io)


@dataclass(frozen=True)
class TableHandle:
    """A table as one snapshot sees it: definition, Iceberg table, field ids and data files."""

    definition: TableDef
    iceberg: Table
    storage: WarehouseStorage | None = None  # none: a local warehouse

    def field_id(self, column: str) -> int:
        return self.iceberg.schema().find_field(column, case_sensitive=False).field_id

    def data_files(self, wanted: FileFilter | None = None) -> list[str]:
        """Plain local paths of the data files of the current snapshot; with `wanted`, only those that may hold
        the rows it asks for (`tables.rowsets.may_hold`)."""
        if self.iceberg.current_snapshot() is None:
            return []
        return [
            plain_path(f.file_path)
            for f in live_data_files(self.iceberg)
            if f.record_count > 0 and may_hold(self.iceberg, f, wanted)
        ]

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
        """The table's local folder (a warehouse reached with local file calls)."""
        return Path(_plain_path(self.iceberg.location()))

    @property
    def place(self) -> Location:
        """The table's location in its warehouse's storage (`tables.warehouse`): its folder, or a URI."""
        if self.storage is None or self.storage.is_local:
            return self.location
        return self.storage.location(self.iceberg.location())


# the first partition field id Iceberg assigns (field ids of partition fields start above the schema's)
PARTITION_FIELD_ID = 1000


def bucket_spec(
    source_id: int, partition_source_id: int | None = None, unit: tuple[int, str, str] | None = None
) -> PartitionSpec:
    """A bucketed table's partition spec: identity on `BUCKET_COL`, then, for a partitioned table, identity on
    `PARTITION_COL` (a file holds one bucket of one partition), and, when every partition is one aligned time unit
    (`unit`: the column's field id, its name and the unit), that unit's transform of the column, by which foreign
    Iceberg readers prune."""
    fields = [
        PartitionField(source_id=source_id, field_id=PARTITION_FIELD_ID, transform=IdentityTransform(), name=BUCKET_COL)
    ]
    if partition_source_id is not None:
        fields.append(
            PartitionField(
                source_id=partition_source_id,
                field_id=PARTITION_FIELD_ID + 1,
                transform=IdentityTransform(),
                name=PARTITION_COL,
            )
        )
    if unit is not None:
        column_id, column, unit_name = unit
        transform = time_transform(unit_name)
        name = f"{column}_{unit_name.lower()}"
        fields.append(
            PartitionField(source_id=column_id, field_id=PARTITION_FIELD_ID + 2, transform=transform, name=name)
        )
    return PartitionSpec(*fields)


def time_unit_hint(definition: TableDef) -> str | None:
    """The time unit of the partitions an AUTO or dynamic partition table will get."""
    partitioning = definition.partitioning
    if partitioning is not None and partitioning.auto:
        return partitioning.auto_unit
    return definition.properties.get("dynamic_partition.time_unit", "").upper() or None


def time_transform(unit: str) -> Transform[Any, int]:
    """Iceberg's transform of a time unit (`tables.partitions.TRANSFORM_UNITS`)."""
    if unit == "HOUR":
        return HourTransform()
    if unit == "DAY":
        return DayTransform()
    if unit == "MONTH":
        return MonthTransform()
    return YearTransform()


def _plain_path(uri: str) -> str:
    return urlparse(uri).path if uri.startswith("file:") else uri


def _first_line(exc: BaseException) -> str:
    return next(iter(str(exc).strip().splitlines()), "")


class BrokenTable(DorisError):
    """The table is in the catalog but its metadata or definition cannot be read."""

    def __init__(self, db: str, table: str) -> None:
        super().__init__(f"Table '{table}' in database '{db}' cannot be read: its metadata is missing or damaged")
        self.db = db
        self.table = table


class Catalog:
    """Databases and tables over a pyiceberg SQL catalog (SQLite file by default)."""

    def __init__(self, *, uri: str, warehouse: Path | WarehouseStorage, pool_size: int | None = None) -> None:
        """`pool_size`: at most this many connections to a server database (none: pyiceberg's pool, which grows).
        `warehouse`: a local folder, or the storage of one given as a URI (`tables.warehouse`)."""
        if isinstance(warehouse, Path):
            warehouse = WarehouseStorage.of(warehouse)
        self.storage = warehouse
        warehouse.makedirs(warehouse.top)
        # the local folder (the guard's root for local deletes); a remote warehouse's root URI
        self.warehouse = warehouse.top
        self._iceberg = _SqlCatalog(
            "default", pool_size, uri=uri, warehouse=warehouse.uri(warehouse.top), pool_pre_ping="true"
        )
        self._ddl_lock = threading.Lock()

    def close(self) -> None:
        """Close the catalog database's connections (a catalog of the server's own lifetime needs not)."""
        self._iceberg.close()

    def shared_reads(self) -> AbstractContextManager[None]:
        """A block in which this thread reads each table's catalog row once (`_SqlCatalog.shared_reads`)."""
        return self._iceberg.shared_reads()

    # -- databases -----------------------------------------------------------------------
    def create_database(self, db: str, *, if_not_exists: bool = False) -> None:
        """Create a database.

        Raises:
            InvalidName: the name breaks Doris's database name rule.
            AlreadyExists: it exists and `if_not_exists` is false.
        """
        if not (if_not_exists and self.database_exists(db)):
            check_database_name(db)
        try:
            self._iceberg.create_namespace(db)
        except NamespaceAlreadyExistsError:
            if not if_not_exists:
                raise AlreadyExists(f"Can't create database '{db}'; database exists") from None

    def list_databases(self) -> list[str]:
        return sorted(ns[0] for ns in self._iceberg.list_namespaces() if ns[0] != TEMPORARY_NAMESPACE)

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
            InvalidName, DatabaseNotFound, AlreadyExists.
        """
        check_table_name(definition.name)
        self.require_database(definition.db)
        fields = [
            NestedField(field_id=i, name=col.name, field_type=col.type.iceberg_type(), required=False)
            for i, col in enumerate(definition.all_columns(), start=1)
        ]
        spec = UNPARTITIONED_PARTITION_SPEC
        if definition.bucketed:
            fields.append(NestedField(field_id=len(fields) + 1, name=BUCKET_COL, field_type=IntegerType()))
            bucket_id = len(fields)
            if definition.partitioned:
                fields.append(NestedField(field_id=len(fields) + 1, name=PARTITION_COL, field_type=IntegerType()))
            unit = None
            if definition.partitioning is not None:
                found = aligned_unit(definition.partitioning, definition.partition_types(), time_unit_hint(definition))
                if found is not None:
                    column = definition.partitioning.columns[0]
                    unit = (next(f.field_id for f in fields if f.name == column), column, found)
            spec = bucket_spec(bucket_id, len(fields) if definition.partitioned else None, unit)
        with self._ddl_lock:
            if self._iceberg.table_exists((definition.db, definition.name)):
                if if_not_exists:
                    return False
                raise AlreadyExists(f"Table '{definition.name}' already exists")
            self._iceberg.create_table(
                (definition.db, definition.name),
                schema=Schema(*fields),
                partition_spec=spec,
                location=self.storage.uri(self._new_location()),
                properties={DEFINITION_PROPERTY: definition.to_json(), "format-version": "2"},
            )
        return True

    def _new_location(self) -> Location:
        """A fresh directory under the warehouse, named by a random uuid (never by the table's name)."""
        while True:
            location = self.storage.child(self.storage.top, uuid.uuid4().hex)
            if not self.storage.exists(location):  # an old layout's database directory could, in theory, be named so
                return location

    def load(self, db: str, table: str) -> TableHandle:
        """Raises: DatabaseNotFound, TableNotFound, BrokenTable."""
        try:
            iceberg = self._iceberg.load_table((db, table))
            definition = TableDef.from_json(iceberg.properties[DEFINITION_PROPERTY])
        except (NoSuchTableError, NoSuchNamespaceError):
            self.require_database(db)
            # Table names are case-sensitive, as in Doris (`lower_case_table_names` = 0, its default): `T` is not
            # `t`. Privileges are granted on exact names, so a case-insensitive fallback here would let a grant
            # on a name that is not the table (`d.T2`) reach the table (`d.t2`).
            raise TableNotFound(db, table) from None
        except UNREADABLE as exc:
            log.warning("table %s.%s cannot be read: %s: %s", db, table, type(exc).__name__, _first_line(exc))
            raise BrokenTable(db, table) from exc
        return TableHandle(definition=definition, iceberg=iceberg, storage=self.storage)

    def private_table(self, table: Table) -> Table:
        """`table` as the catalog has it now, over metadata parsed for the caller alone. pyiceberg's transactions
        deep-copy their table's metadata, and the parsed metadata `load` shares is not frozen in full: its
        schemas fill lazy caches (`cached_property`) when first asked, so a copy of it raced the loads reading it
        ("dictionary changed size during iteration")."""
        return SqlCatalog.load_table(self._iceberg, table.name())

    def drop_table(self, db: str, table: str, *, if_exists: bool = False) -> None:
        """Drop a table; its files go too when its location passes the guard of `tables.paths`.

        A broken table is dropped as well (its catalog entry; its files when the guard allows).
        """
        location: Location | None
        handle: TableHandle | None = None
        try:
            handle = self.load(db, table)
            name, location = handle.iceberg.name()[-1], handle.place
        except TableNotFound:
            if if_exists:
                return
            raise
        except BrokenTable as exc:
            name, location = exc.table, None
        others = self.table_locations()
        location = location or others.get((db, name))
        others.pop((db, name), None)
        self._iceberg.drop_table((db, name))
        if handle is not None:
            self.drop_temporary(handle)  # its files lie under the table's location, removed with it
        if location is not None and not self.storage.remove_tree(location, others=others.values()):
            log.warning("dropped table %s.%s; its files at %s stay where they are", db, name, location)

    def table_locations(self) -> dict[tuple[str, str], Location]:
        """`(db, table) → location` of every table, broken ones included, without reading any metadata.

        The location is the directory holding `metadata/`, which is where pyiceberg keeps a table's metadata.
        """
        query = select(IcebergTables.table_namespace, IcebergTables.table_name, IcebergTables.metadata_location)
        with Session(self._iceberg.engine) as session:
            rows = session.execute(query.where(IcebergTables.catalog_name == self._iceberg.name)).all()
        return {
            (ns, name): self._metadata_table(meta)
            for ns, name, meta in rows
            if meta and ns != TEMPORARY_NAMESPACE  # a companion lies inside its table's location
        }

    def _metadata_table(self, metadata_location: str) -> Location:
        """The table location of a metadata file's (`<location>/metadata/<file>`)."""
        if self.storage.is_local:
            return Path(_plain_path(metadata_location)).parent.parent
        return str(self.storage.location(metadata_location)).rsplit("/", 2)[0]

    # -- temporary partitions ---------------------------------------------------------------
    def temporary(self, handle: TableHandle) -> TableHandle | None:
        """The companion of a table: the Iceberg table holding the rows of its temporary partitions (None when it
        has none yet). Its definition is the table's own with the temporary partitions as its partitions (their
        ids and ranges), and the versions and schema version its own commits recorded.

        Raises: BrokenTable when the companion cannot be read.
        """
        identifier = (TEMPORARY_NAMESPACE, _temporary_name(handle))
        try:
            iceberg = self._iceberg.load_table(identifier)
            stored = TableDef.from_json(iceberg.properties[DEFINITION_PROPERTY])
        except (NoSuchTableError, NoSuchNamespaceError):
            return None
        except UNREADABLE as exc:
            log.warning("temporary partitions of %s cannot be read: %s", handle.definition.name, _first_line(exc))
            raise BrokenTable(handle.definition.db, handle.definition.name) from exc
        return TableHandle(
            definition=temporary_definition(handle.definition, stored), iceberg=iceberg, storage=self.storage
        )

    def create_temporary(self, handle: TableHandle) -> TableHandle:
        """A new, empty companion for the table (replacing any earlier one, whose catalog entry goes; its files
        stay: rows a REPLACE PARTITION moved into the table are among them).

        It is made from the table's own metadata, so its schema, field ids and partition specs are the table's
        and its files can join the table as they are. It lies under the table's location (`temporary/<uuid>`), so
        dropping the table removes it, and it is not in `table_locations`: maintenance and listings never see it.
        """
        from pyiceberg.serializers import ToOutputFile

        identifier = (TEMPORARY_NAMESPACE, _temporary_name(handle))
        storage = self.storage
        location = storage.child(handle.place, "temporary", uuid.uuid4().hex)
        meta = handle.iceberg.metadata
        stored = handle.definition.model_copy(update={"meta_version": handle.current_version()})
        # no time-unit field: a temporary partition need not be one unit (the REPLACE fits the table's spec)
        spec = meta.spec()
        kept = [f for f in spec.fields if f.name in (BUCKET_COL, PARTITION_COL)]
        specs = {"partition_specs": meta.partition_specs, "default_spec_id": meta.default_spec_id}
        if len(kept) != len(spec.fields):
            plain = PartitionSpec(*kept, spec_id=max(s.spec_id for s in meta.partition_specs) + 1)
            specs = {"partition_specs": [*meta.partition_specs, plain], "default_spec_id": plain.spec_id}
        fresh = meta.model_copy(
            update={
                **specs,
                "location": storage.uri(location),
                "table_uuid": uuid.uuid4(),
                "properties": {**meta.properties, DEFINITION_PROPERTY: stored.to_json()},
                "current_snapshot_id": None,
                "snapshots": [],
                "snapshot_log": [],
                "metadata_log": [],
                "refs": {},
                "statistics": [],
                "partition_statistics": [],
                "last_sequence_number": 0,
            }
        )
        path = storage.child(location, "metadata", f"00000-{uuid.uuid4()}.metadata.json")
        storage.makedirs(storage.child(location, "metadata"))
        ToOutputFile.table_metadata(fresh, handle.iceberg.io.new_output(storage.uri(path)))
        with self._ddl_lock:
            try:
                self._iceberg.create_namespace(TEMPORARY_NAMESPACE)
            except NamespaceAlreadyExistsError:
                pass
            try:
                self._iceberg.drop_table(identifier)
            except NoSuchTableError:
                pass
            self._iceberg.register_table(identifier, storage.uri(path))
        created = self.temporary(handle)
        assert created is not None
        return created

    def drop_temporary(self, handle: TableHandle) -> None:
        """Forget the table's companion (its catalog entry; its files lie under the table's location)."""
        try:
            self._iceberg.drop_table((TEMPORARY_NAMESPACE, _temporary_name(handle)))
        except (NoSuchTableError, NoSuchNamespaceError):
            pass


def _temporary_name(handle: TableHandle) -> str:
    return handle.iceberg.metadata.table_uuid.hex


def temporary_definition(table: TableDef, stored: TableDef) -> TableDef:
    """The definition of a table's companion: the table's, routing to its temporary partitions only
    (`tables.partitions.temporary_partitioning`), with no dynamic partitions, no DELETE predicate (a DELETE on the
    table never reaches its temporary partitions, as in Doris), and the companion's own versions."""
    assert table.partitioning is not None
    properties = {k: v for k, v in table.properties.items() if not k.startswith("dynamic_partition.")}
    return table.model_copy(
        update={
            "partitioning": temporary_partitioning(table.partitioning),
            "properties": properties,
            "delete_predicates": (),
            "schema_version": stored.schema_version,
            "meta_version": stored.meta_version,
        }
    )
