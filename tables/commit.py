"""The single writer: the only code that commits table data or marks a label visible.

A load takes its table's next version before its job runs; jobs of concurrent loads run side by side,
and commits are published strictly in version order, so a load's version is its commit order and the
version written into its rows never lies. The commit
happens only on a clean exit of `TableWriter.write`; any exception aborts the transaction and
removes the rowset's files, so a failed load leaves no trace.

A load commits only into the table it was planned against: the transaction records that table's
Iceberg uuid, and a table dropped and re-created under the same name (another uuid) fails the load
with Doris's `unknown table` text. DROP TABLE / DATABASE go through the writer too: refused while a
transaction of the table is COMMITTED but not yet visible (Doris's rule, unless FORCE), and every
other unfinished transaction of the table is aborted before the files go.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, field

from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableUpdate
from pyiceberg.typedef import Record

from tables.catalog import VERSION_PROPERTY, BrokenTable, Catalog, TableHandle, updated_metadata
from tables.errors import (
    DatabaseNotFound,
    DorisError,
    SchemaChanged,
    TableDropped,
    TableNotFound,
    TxnAborted,
    TxnStateError,
)
from tables.model import BUCKET_COL, DEFINITION_PROPERTY, DELETE_SIGN, TableDef
from tables.partitions import (
    PARTITION_COL,
    PartitionDef,
    PartitionKind,
    aligned_unit,
    auto_list,
    auto_range,
    check_new,
    value_text,
)
from tables.pause import PausePoints
from tables.row_delta import (
    DELETE_FILE_PREFIX,
    Partition,
    RowDelta,
    delete_file_entry,
    live_delete_files,
    referenced_data_paths,
    split_by_partition,
    tombstone_positions,
    write_position_deletes,
)
from tables.rowset import restamp_version
from tables.rowsets import RowsetsChanged, file_partition, live_data_files, partition_of, plain_path
from tables.schema_change import SchemaOp, apply_ops
from tables.transactions import (
    ABORTED,
    COMMITTED,
    PRECOMMITTED,
    PREPARE,
    UNKNOWN,
    VISIBLE,
    Claim,
    TransactionStore,
    Txn,
)
from tables.versions import SharedTurnstile, SharedVersions
from tables.warehouse import (
    Location,
    arrow_path,
    as_location,
    child_of,
    delete_file,
    list_files,
    name_of,
    sync_written,
)

log = logging.getLogger(__name__)

GROUP_PROPERTY = "doris.txn_ids"  # every transaction of a group-commit rowset
PRECOMMIT_VERSION = 0  # rows of a precommitted load carry this until its commit stamps the real version


@dataclass
class PendingRowset:
    """A rowset being written: where its files go and the version its rows carry."""

    handle: TableHandle
    txn_id: int
    label: str
    version: int
    directory: Location
    files: list[str] = field(default_factory=list)
    group: tuple[int, ...] = ()
    table_uuid: str = ""  # the table the rowset must land in
    # position delete files of a positional table's load: the stored rows its rows supersede
    deletes: list[str] = field(default_factory=list)
    # the data files its lookup compared against (None: no lookup, compare with the whole table at the commit)
    seen: frozenset[str] | None = None

    @property
    def precommit(self) -> bool:
        """A two-phase load's rowset: its version (and what it supersedes) is decided at its commit."""
        return self.version == PRECOMMIT_VERSION


@dataclass
class PendingRewrite:
    """A compaction being written: the files it replaces and the files replacing them."""

    handle: TableHandle
    txn_id: int
    label: str
    directory: Location
    replaced: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    output_rows: int = 0
    seen: frozenset[str] = frozenset()  # the data files when the rewrite read its input
    definition: TableDef | None = None  # a new definition committed with the rewrite (a storage conversion)


# The commit-time re-check of a positional table (`spark_runner.mow.resolve`, given by the load service):
# (table, my data files, data files committed meanwhile, directory, my rows are the later ones) → delete files
Resolver = Callable[[TableHandle, list[str], list[str], Location, bool], list[str]]


class _Turnstile:
    """Versions of one table: handed out in arrival order, published strictly in that order.

    Jobs of concurrent loads run side by side; a load commits only when every lower version has
    committed or aborted, so a row's version is always its commit order (Doris publishes the same way).
    """

    def __init__(self, next_version: int) -> None:
        self.next_version = next_version
        self.in_flight: list[int] = []
        self.cond = threading.Condition()
        self.last_metadata: str | None = None  # metadata location after this writer's last commit
        self.commit_lock = threading.Lock()  # held by the version in its turn, or by a compaction committing

    def take(self) -> int:
        with self.cond:
            version = self.next_version
            self.next_version += 1
            self.in_flight.append(version)
            return version

    @contextmanager
    def turn(self, version: int) -> Iterator[None]:
        """Wait until every lower version is done; the table is ours until the block ends.

        Raises:
            DorisError: the version was released meanwhile (its load was abandoned at its deadline).
        """
        with self.cond:
            self.cond.wait_for(lambda: version not in self.in_flight or min(self.in_flight) == version)
            if version not in self.in_flight:
                raise DorisError(f"version {version} was released: its load passed its deadline")
        with self.commit_lock:
            yield

    def done(self, version: int) -> None:
        """Release a version; a second release (the abandoned load's own exit, later) changes nothing."""
        with self.cond:
            if version in self.in_flight:
                self.in_flight.remove(version)
                self.cond.notify_all()


Turnstile = _Turnstile | SharedTurnstile


class TableWriter:
    """Commits of rowsets into Iceberg with their label and version, in version order per table."""

    def __init__(
        self,
        catalog: Catalog,
        txns: TransactionStore,
        *,
        pauses: PausePoints | None = None,
        snapshot_keep_count: int | None = None,
        versions: SharedVersions | None = None,
    ) -> None:
        self._catalog = catalog
        self._txns = txns
        self._versions = versions  # several servers: the version order lives in the shared store
        self.snapshot_keep_count = snapshot_keep_count
        self.pauses = pauses or PausePoints()
        self._turnstiles: dict[str, Turnstile] = {}
        self._guard = threading.Lock()
        self._stripes = [threading.Lock() for _ in range(64)]
        self._writing: dict[int, tuple[Turnstile, int, Location]] = {}  # txn id → its version, while `write` runs
        self.resolver: Resolver | None = None

    def _turnstile(self, handle: TableHandle) -> Turnstile:
        # keyed by the Iceberg table uuid: a dropped and re-created table starts its own count
        key = str(handle.iceberg.metadata.table_uuid)
        with self._guard:
            if key not in self._turnstiles:
                floor = handle.current_version() + 1
                shared = self._versions
                self._turnstiles[key] = _Turnstile(floor) if shared is None else SharedTurnstile(shared, key, floor)
            return self._turnstiles[key]

    @contextmanager
    def write(
        self,
        db: str,
        table: str,
        *,
        txn_id: int,
        label: str,
        exclusive: bool = False,
        planned: TableDef | None = None,
        two_phase: bool = False,
        group: tuple[int, ...] = (),
        handle: TableHandle | None = None,
        replannable: bool = False,
    ) -> Iterator[PendingRowset]:
        """Allocate the next version, let the caller write a rowset, then commit it and mark the label VISIBLE.

        `exclusive` waits for the commit turn before the caller runs, so what it reads of the table is
        exactly what its commit lands on (partial updates read the rows they update). `planned` is the
        definition the load was planned with: if a schema change committed since, the load fails.
        `two_phase` stops at PRECOMMITTED: the files are written and durable, the snapshot waits for
        `commit_precommitted`, which stamps them with the version of that commit. `group` names further
        transactions whose rows are in this rowset (group commit): they become VISIBLE with it. `handle` is
        the table as the load was planned on it (refreshed here, not looked up again by name). `replannable`:
        a `SchemaChanged` leaves the transaction PREPARE (its files go), for the caller to plan the load again
        against the new schema and write it anew, or abort it.

        Raises:
            TableDropped, TableNotFound, DatabaseNotFound: before the caller runs (the transaction is aborted).
            SchemaChanged: before the caller runs, or at the commit.
        """
        handle = self._planned_table(db, table, txn_id, handle)
        turnstile = self._turnstile(handle)
        version = turnstile.take() if exclusive or not two_phase else PRECOMMIT_VERSION
        pending = PendingRowset(
            handle=handle,
            txn_id=txn_id,
            label=label,
            version=version,
            directory=txn_directory(handle, txn_id),
            group=group,
            table_uuid=table_identity(handle),
        )
        if version != PRECOMMIT_VERSION:
            self._writing[txn_id] = (turnstile, version, pending.directory)
        try:
            if exclusive:
                with turnstile.turn(version):
                    refresh_same_table(handle, pending.table_uuid)
            check_schema(handle, planned)  # once before the job; again at the commit only if the table moved on
            yield pending
            if pending.files:
                _fsync_files(pending.files, pending.directory)
            if two_phase:
                schema = planned.schema_version if planned is not None else None
                if not self._txns.transition(txn_id, (PREPARE,), PRECOMMITTED, schema_version=schema):
                    raise self._aborted(txn_id)
                return
            with turnstile.turn(version), self._deciding(txn_id):
                current = self._txns.get(txn_id)
                if current is not None and current.state != PREPARE:  # aborted by label or timeout meanwhile
                    raise self._aborted(txn_id)
                if pending.files:
                    self.pauses.hit("before_commit", handle.definition.name)
                    if handle.iceberg.metadata_location != turnstile.last_metadata:
                        # lower versions, housekeeping or a schema change committed meanwhile
                        refresh_same_table(handle, pending.table_uuid)
                        check_schema(handle, planned)
                    if handle.definition.positional:
                        pending.deletes += self._recheck(handle, pending.files, pending.seen, pending.directory)
                    _append(handle, pending, version)
                    turnstile.last_metadata = handle.iceberg.metadata_location
                    self.pauses.hit("after_commit", handle.definition.name)
                self._txns.set_states((txn_id, *pending.group), VISIBLE)  # one write for a group's loads
                if pending.files:
                    self._trim_snapshots(handle, turnstile)
        except BaseException as exc:
            self._catalog.storage.remove_tree(pending.directory)
            # group members are the caller's to decide: an acknowledged async load is retried, not aborted
            if not (replannable and isinstance(exc, SchemaChanged)):
                self.abort(txn_id)
            raise
        finally:
            self._writing.pop(txn_id, None)
            if version != PRECOMMIT_VERSION:
                turnstile.done(version)

    def abandon(self, txn_id: int, reason: str) -> bool:
        """Abort a load that outlived its deadline while its job may still run, and give its version turn
        to the next load of the table at once, whatever its thread is stuck in.

        False when the transaction committed or precommitted meanwhile: the load's own outcome stands.
        Files its job writes later are never committed (its commit finds the transaction aborted and its
        version released) and are removed by its own exit or by orphan removal.
        """
        with self._deciding(txn_id):
            if not self._txns.transition(txn_id, (PREPARE,), ABORTED, reason=reason):
                current = self._txns.get(txn_id)
                if current is None or current.state != ABORTED:  # aborted by a user or a DROP: released too
                    return False
        writing = self._writing.pop(txn_id, None)
        if writing is not None:
            turnstile, version, directory = writing
            turnstile.done(version)
            self._catalog.storage.remove_tree(directory)
        return True

    def _planned_table(self, db: str, table: str, txn_id: int, handle: TableHandle | None) -> TableHandle:
        """The table, provided it is the one the transaction was planned against: the planner's `handle`
        refreshed, or (none given) the table looked up by name.

        Raises:
            TableDropped: the table is gone or was re-created since (the transaction is aborted).
            TableNotFound, DatabaseNotFound: the transaction recorded no table identity.
        """
        txn = self._txns.get(txn_id)
        planned = txn.table_uuid if txn is not None else None
        try:
            if handle is None or planned is None:
                handle = self._catalog.load(db, table)
            else:
                refresh_same_table(handle, planned)
        except (TableNotFound, DatabaseNotFound, TableDropped):
            if planned is None:
                raise
            handle = None
        if planned is not None and (handle is None or table_identity(handle) != planned):
            error = TableDropped(planned)
            self.abort(txn_id, error.message)
            raise error
        assert handle is not None
        return handle

    # -- label states: the transaction store changes only through the writer ----------------------------
    def begin(self, db: str, table: str, label: str, *, table_uuid: str | None = None) -> int:
        """Claim a label for a load (PREPARE); returns its transaction id.

        Raises:
            LabelAlreadyExists: the label is held.
        """
        return self._txns.begin(db, table, label, table_uuid=table_uuid)

    def claim(self, db: str, table: str, label: str, *, table_uuid: str | None = None) -> Claim:
        """`begin` in two steps (`TransactionStore.claim`): `claimed` must follow."""
        return self._txns.claim(db, table, label, table_uuid=table_uuid)

    def claimed(self, claim: Claim) -> int:
        """Raises: LabelAlreadyExists (`begin`)."""
        return self._txns.claimed(claim)

    def abort(self, txn_id: int, reason: str | None = None, *, expect: tuple[str, ...] = (PREPARE,)) -> bool:
        """Abort a transaction that has not committed (frees its label); True when it was in `expect`."""
        return self._txns.transition(txn_id, expect, ABORTED, reason=reason)

    def reopen(self, txn_id: int) -> bool:
        """An aborted load that is owed (an acknowledged async group-commit load replayed) runs again."""
        return self._txns.transition(txn_id, (ABORTED,), PREPARE)

    def _recheck(
        self,
        handle: TableHandle,
        files: list[str],
        seen: frozenset[str] | None,
        directory: Location,
        *,
        later: bool = True,
    ) -> list[str]:
        """In the commit turn of a positional table: compare the rows of `files` with those of the data files
        committed since the lookup saw `seen` (every data file without a lookup), and position-delete the loser
        of each key; returns the delete files. Nothing to do (no Spark job) when nothing committed meanwhile."""
        theirs = [plain_path(f.file_path) for f in live_data_files(handle.iceberg)]
        if seen is not None:
            theirs = [path for path in theirs if path not in seen]
        mine = set(files)
        theirs = [path for path in theirs if path not in mine]
        if not files or not theirs:
            return []
        if self.resolver is None:
            raise DorisError(f"table {handle.definition.name} needs the merge-on-write re-check, which has no engine")
        return self.resolver(handle, files, theirs, directory, later)

    def _trim_snapshots(self, handle: TableHandle, turnstile: Turnstile) -> None:
        """In the commit turn (no other commit can race it): past twice `snapshot_keep_count` snapshots,
        expire down to that many. Commit time grows with the snapshots a table keeps (pyiceberg copies and
        rewrites all of them per commit), so a steady stream of small loads must not let them pile up
        until the next maintenance pass. A failure is logged: the load is committed either way."""
        from tables.maintenance import expire_snapshots

        keep = self.snapshot_keep_count
        if keep is None or len(handle.iceberg.metadata.snapshots) <= 2 * keep:
            return
        try:
            expire_snapshots(handle, self._txns, keep_seconds=float("inf"), now=0.0, keep_count=keep)
            turnstile.last_metadata = handle.iceberg.metadata_location
        except Exception:
            log.exception("could not trim the snapshots of %s", handle.definition.name)

    def _aborted(self, txn_id: int) -> TxnAborted:
        txn = self._txns.get(txn_id)
        return TxnAborted(txn_id, txn.reason if txn else None)

    @contextmanager
    def _deciding(self, txn_id: int) -> Iterator[None]:
        """Commit and abort of one transaction exclude each other (striped locks keep this cheap)."""
        with self._stripes[txn_id % len(self._stripes)]:
            yield

    def commit_precommitted(self, txn: Txn) -> None:
        """Publish a PRECOMMITTED transaction: its files get the next version, then one snapshot.

        The version is taken now, so the commit order (not the precommit order) decides ties, as in Doris.
        Also finishes a COMMITTED transaction whose snapshot a crash interrupted.

        Raises:
            TxnStateError: the transaction is not precommitted (any more).
            TableDropped: its table was dropped or re-created since the precommit (the transaction is aborted).
        """
        handle = self._precommitted_table(txn)
        turnstile = self._turnstile(handle)
        version = turnstile.take()
        directory = txn_directory(handle, txn.txn_id)
        try:
            with turnstile.turn(version), self._deciding(txn.txn_id):
                try:
                    refresh_same_table(handle, table_identity(handle))  # dropped while waiting for the turn?
                except TableDropped as exc:
                    self._txns.transition(txn.txn_id, (PRECOMMITTED, COMMITTED), ABORTED, reason=exc.message)
                    raise
                self._abort_if_schema_changed(handle, txn.txn_id, directory)
                if not self._txns.transition(txn.txn_id, (PRECOMMITTED, COMMITTED), COMMITTED):
                    current = self._txns.get(txn.txn_id)
                    raise TxnStateError(current.state if current else UNKNOWN, current.reason if current else None)
                files = rowset_files(directory)
                if files:
                    if not _committed(handle, txn.txn_id):
                        restamp_version(files, version)
                        _fsync_files(files, directory)
                        pending = PendingRowset(handle, txn.txn_id, txn.label, version, directory, files)
                        if handle.definition.positional:  # a crash may have left an earlier attempt's deletes
                            for old in list_files(directory, f"{DELETE_FILE_PREFIX}*.parquet"):
                                delete_file(old)
                            pending.deletes = self._recheck(handle, files, None, directory)
                        _append(handle, pending, version)
                    turnstile.last_metadata = handle.iceberg.metadata_location
                self._txns.set_state(txn.txn_id, VISIBLE)
        finally:
            turnstile.done(version)

    def _precommitted_table(self, txn: Txn) -> TableHandle:
        """The table of a 2PC transaction, provided it is still the one its files were written for.

        Raises:
            TxnStateError: the transaction is not precommitted (any more).
            TableDropped: the table is gone or was re-created (the transaction is aborted).
        """
        current = self._txns.get(txn.txn_id)
        if current is None or current.state not in (PRECOMMITTED, COMMITTED):
            raise TxnStateError(current.state if current else UNKNOWN, current.reason if current else None)
        try:
            handle: TableHandle | None = self._catalog.load(txn.db, txn.table)
        except (TableNotFound, DatabaseNotFound):
            handle = None
        planned = current.table_uuid
        if handle is not None and (planned is None or table_identity(handle) == planned):
            return handle
        companion = self._catalog.temporary(handle) if handle is not None else None
        if companion is not None and table_identity(companion) == planned:
            return companion  # a load into temporary partitions
        error = TableDropped(planned or f"{txn.db}.{txn.table}")
        with self._deciding(txn.txn_id):
            self._txns.transition(txn.txn_id, (PRECOMMITTED, COMMITTED), ABORTED, reason=error.message)
        raise error

    def _abort_if_schema_changed(self, handle: TableHandle, txn_id: int, directory: Location) -> None:
        """A precommitted load whose table changed schema since it was planned cannot be published: its
        files lack what the change added. It is aborted, as a running load would fail at its commit.

        Raises:
            TxnStateError: ABORTED, with the reason.
        """
        current = self._txns.get(txn_id)
        if current is None or current.state != PRECOMMITTED or current.schema_version is None:
            return
        handle.iceberg.refresh()
        now = TableDef.from_json(handle.iceberg.properties[DEFINITION_PROPERTY]).schema_version
        if now == current.schema_version:
            return
        reason = (
            f"the schema of table {handle.definition.name} changed after the load was precommitted (schema "
            f"version {current.schema_version} → {now}); no data was loaded, retry the load"
        )
        if self._txns.transition(txn_id, (PRECOMMITTED,), ABORTED, reason=reason):
            self._catalog.storage.remove_tree(directory)
        latest = self._txns.get(txn_id)
        raise TxnStateError(latest.state if latest else UNKNOWN, latest.reason if latest else reason)

    def alter(
        self,
        db: str,
        table: str,
        change: Callable[[TableDef, int], tuple[TableDef, list[SchemaOp]]],
        *,
        schema: bool = True,
        iceberg: Callable[[Transaction, int], None] | None = None,
    ) -> TableDef:
        """Apply a metadata change in its own version turn: every load before it has committed. A schema
        change (`schema`) also fails every load planned against the old schema that commits after it
        (`SchemaChanged`); a DELETE predicate does not (later loads are not affected by it).

        `change` gets the current definition and the change's version and returns the new definition and
        the Iceberg column operations; both land in one Iceberg commit, with what `iceberg` adds to it (given the
        transaction and the version).
        """
        handle = self._catalog.load(db, table)
        turnstile = self._turnstile(handle)
        version = turnstile.take()
        try:
            with turnstile.turn(version):
                private = self._catalog.private_table(handle.iceberg)  # its transaction copies its metadata
                current = TableDef.from_json(private.properties[DEFINITION_PROPERTY])
                new, ops = change(current, version)
                new = new.model_copy(
                    update={"meta_version": version, **({"schema_version": version} if schema else {})}
                )
                with private.transaction() as tx:
                    if ops:
                        with tx.update_schema() as update:
                            apply_ops(update, ops)
                    if iceberg is not None:
                        iceberg(tx, version)
                    tx.set_properties({DEFINITION_PROPERTY: new.to_json()})
                turnstile.last_metadata = private.metadata_location
                return new
        finally:
            turnstile.done(version)

    def abort_txn(self, txn_id: int, reason: str) -> None:
        """Abort a PREPARE or PRECOMMITTED transaction and remove its files.

        Raises:
            TxnStateError: it is already committed, visible or aborted.
        """
        with self._deciding(txn_id):
            txn = self._txns.get(txn_id)
            if txn is None or not self._txns.transition(txn_id, (PREPARE, PRECOMMITTED), ABORTED, reason=reason):
                current = self._txns.get(txn_id)
                raise TxnStateError(current.state if current else UNKNOWN, current.reason if current else None)
        if txn.state == PRECOMMITTED:
            try:
                handle = self._catalog.load(txn.db, txn.table)
            except DorisError:
                return
            self._catalog.storage.remove_tree(txn_directory(handle, txn_id))

    def drop_table(self, db: str, table: str, *, if_exists: bool = False, force: bool = False) -> None:
        """DROP TABLE: Doris's refusal while a transaction of the table is COMMITTED and not yet visible
        (unless `force`), then every unfinished transaction of the table aborted, then the table dropped.

        Raises:
            DorisError: a COMMITTED transaction without `force` (Doris's text), unknown table or database.
        """
        identity: str | None
        try:
            handle = self._catalog.load(db, table)
            name, identity = handle.definition.name, table_identity(handle)
        except TableNotFound:
            if if_exists:
                return
            raise
        except BrokenTable as exc:  # unreadable metadata: its transactions are found by name, and it still drops
            name, identity = exc.table, None
        unfinished = self._txns.unfinished(db, table=name, table_uuid=identity)
        if not force and any(t.state == COMMITTED for t in unfinished):
            raise DorisError(_committed_refusal(f"table [{name}]", "DROP table FORCE"))
        self._abort_unfinished(unfinished, TableDropped(identity or f"{db}.{name}").message, force=force)
        self._catalog.drop_table(db, name)
        if identity is not None:
            self._forget(identity)

    def drop_database(self, db: str, *, if_exists: bool = False, force: bool = False) -> None:
        """DROP DATABASE: the same rule as `drop_table`, for every transaction of the database.

        Raises:
            DorisError: a COMMITTED transaction without `force` (Doris's text), unknown database.
        """
        if not self._catalog.database_exists(db):
            self._catalog.drop_database(db, if_exists=if_exists)  # Doris's "doesn't exist" text, or nothing
            return
        unfinished = self._txns.unfinished(db)
        if not force and any(t.state == COMMITTED for t in unfinished):
            raise DorisError(_committed_refusal(f"database [{db}]", "DROP database FORCE"))
        identities: dict[str, str] = {}
        for name in self._catalog.list_tables(db):
            try:
                identities[name] = table_identity(self._catalog.load(db, name))
            except DorisError:
                continue  # dropped meanwhile
        for txn in unfinished:
            identity = txn.table_uuid or identities.get(txn.table, f"{db}.{txn.table}")
            self._abort_unfinished([txn], TableDropped(identity).message, force=force)
        self._catalog.drop_database(db)
        for identity in identities.values():
            self._forget(identity)

    def _abort_unfinished(self, txns: list[Txn], reason: str, *, force: bool) -> None:
        """Abort a dropped table's transactions: a running load then fails at its commit and leaves nothing,
        a precommitted one can no longer be committed. A load that commits first is dropped with the table."""
        states = (PREPARE, PRECOMMITTED, COMMITTED) if force else (PREPARE, PRECOMMITTED)
        for txn in txns:
            with self._deciding(txn.txn_id):
                if self._txns.transition(txn.txn_id, states, ABORTED, reason=reason):
                    log.info("transaction %d of %s.%s aborted: its table is dropped", txn.txn_id, txn.db, txn.table)

    def _forget(self, identity: str) -> None:
        """Drop the version counter of a dropped table (a re-created one has another uuid, hence its own)."""
        with self._guard:
            turnstile = self._turnstiles.get(identity)
            if turnstile is not None and not (isinstance(turnstile, _Turnstile) and turnstile.in_flight):
                del self._turnstiles[identity]

    @contextmanager
    def commit_lock(self, handle: TableHandle) -> Iterator[None]:
        """Hold the table's commit lock (a metadata-only commit, a snapshot expiry): no load or compaction commits
        meanwhile, on this server or (PostgreSQL) any other."""
        with self._turnstile(handle).commit_lock:
            yield

    @contextmanager
    def rewrite(self, db: str, table: str, *, label: str, planned: TableDef) -> Iterator[PendingRewrite]:
        """Let the caller write files replacing some of the table's data files (a compaction), then commit
        one overwrite snapshot that deletes `replaced` and adds `files`, between load commits.

        The rewrite takes no version: its snapshot carries the table's current one. It gives way
        (`RowsetsChanged`, `SchemaChanged`) when a file it replaces left the snapshot meanwhile or the
        schema changed; any exception removes its files and aborts its transaction.
        """
        handle = self._catalog.load(db, table)
        txn_id = self._txns.begin(db, handle.definition.name, label, table_uuid=table_identity(handle))
        pending = PendingRewrite(
            handle=handle,
            txn_id=txn_id,
            label=label,
            directory=txn_directory(handle, txn_id),
            seen=frozenset(plain_path(f.file_path) for f in live_data_files(handle.iceberg)),
        )
        try:
            yield pending
            if pending.files:
                _fsync_files(pending.files, pending.directory)
            turnstile = self._turnstile(handle)
            with turnstile.commit_lock:
                refresh_same_table(handle, table_identity(handle))
                check_schema(handle, planned)
                deletes: list[str] = []
                if handle.definition.positional or (pending.definition is not None and pending.definition.positional):
                    # loads that committed while the rewrite ran superseded rows it copied
                    deletes = self._recheck(handle, pending.files, pending.seen, pending.directory, later=False)
                replace_files(handle, pending, deletes)
                turnstile.last_metadata = handle.iceberg.metadata_location
            self._txns.set_state(txn_id, VISIBLE)
        except BaseException:
            self._catalog.storage.remove_tree(pending.directory)
            self._txns.set_state(txn_id, ABORTED)
            raise

    def truncate(self, db: str, table: str, partitions: AbstractSet[int] | None = None) -> None:
        """Remove every row of a table (of some of its partitions) in one snapshot, keeping its schema and version
        counter. A whole table's truncation drops its temporary partitions too, with their files (Doris's
        `dropAllTempPartitions`)."""
        handle = self._catalog.load(db, table)
        turnstile = self._turnstile(handle)
        version = turnstile.take()
        companion: TableHandle | None = None
        try:
            with turnstile.turn(version):
                handle.iceberg.refresh()
                current = TableDef.from_json(handle.iceberg.properties[DEFINITION_PROPERTY])
                temps = current.partitioning is not None and any(p.temporary for p in current.partitioning.partitions)
                if partitions is not None:
                    live = files_of_partitions(handle.iceberg, partitions)
                else:
                    live = [f.file_path for f in live_data_files(handle.iceberg)]
                    live += [f.file_path for f in live_delete_files(handle.iceberg)]
                    companion = self._catalog.temporary(handle)
                if live or (partitions is None and temps):
                    with _CachedMetadataTransaction(handle.iceberg) as tx:
                        if live:
                            with RowDelta(tx, {VERSION_PROPERTY: str(version)}) as delta:
                                delta.remove(live)
                        if partitions is None and temps and current.partitioning is not None:
                            formal = current.partitioning.formal()
                            kept = current.partitioning.model_copy(update={"partitions": formal})
                            emptied = current.model_copy(update={"partitioning": kept})
                            tx.set_properties({DEFINITION_PROPERTY: emptied.to_json()})
                if companion is not None:
                    # no snapshot of the table references its files any more: they go with its catalog entry
                    self._catalog.drop_temporary(handle)
                    self._catalog.storage.remove_tree(companion.place)
        finally:
            turnstile.done(version)

    def replace_partitions(
        self,
        db: str,
        table: str,
        change: Callable[[TableDef, int], tuple[TableDef, list[SchemaOp]]],
        *,
        dropped: AbstractSet[int],
        moved: AbstractSet[int],
    ) -> TableDef:
        """`ALTER TABLE ... REPLACE PARTITION (p) WITH TEMPORARY PARTITION (tp)` in one snapshot of the table: the
        files of the replaced partitions (`dropped`, filled by `change`) out, the data and delete files of the
        temporary ones (`moved`) in as they are (they carry their partition's id, which stays), and the new
        definition. Then the companion forgets them.

        It holds the companion's commit turn and then the table's: a load into a temporary partition commits
        before it or fails after it (the companion's schema version moves on). The table's version counter first
        moves past every version the companion handed out, so the moved rows stay older than any later load of
        the table and a later load of the partition wins over them by the usual rules.
        """
        handle = self._catalog.load(db, table)
        companion = self._catalog.temporary(handle)
        if companion is None:
            return self.alter(db, table, change)  # no temporary partition: the change raises Doris's error
        theirs = self._turnstile(companion)
        their_version = theirs.take()
        try:
            with theirs.turn(their_version):
                refresh_same_table(companion, table_identity(companion))
                mine = self._turnstile(handle)
                with mine.cond:
                    mine.next_version = max(mine.next_version, theirs.next_version)
                version = mine.take()
                try:
                    with mine.turn(version):
                        new = self._replace(handle, companion, change, version, dropped, moved)
                        mine.last_metadata = handle.iceberg.metadata_location
                finally:
                    mine.done(version)
                self._forget_partitions(companion, moved, their_version, remove=False)
                theirs.last_metadata = companion.iceberg.metadata_location
                return new
        finally:
            theirs.done(their_version)

    def _replace(
        self,
        handle: TableHandle,
        companion: TableHandle,
        change: Callable[[TableDef, int], tuple[TableDef, list[SchemaOp]]],
        version: int,
        dropped: AbstractSet[int],
        moved: AbstractSet[int],
    ) -> TableDef:
        handle.iceberg.refresh()
        current = TableDef.from_json(handle.iceberg.properties[DEFINITION_PROPERTY])
        new, _ = change(current, version)
        new = new.model_copy(update={"meta_version": version, "schema_version": version})
        gone = files_of_partitions(handle.iceberg, dropped)
        theirs = [*live_data_files(companion.iceberg), *live_delete_files(companion.iceberg)]
        theirs = [f for f in theirs if file_partition(companion.iceberg, f) in moved]
        data = [f.file_path for f in theirs if f.content == DataFileContent.DATA and f.record_count > 0]
        deletes = [plain_path(f.file_path) for f in theirs if f.content != DataFileContent.DATA]
        summary = {"doris.replace_partitions": ",".join(str(i) for i in sorted(moved)), VERSION_PROPERTY: str(version)}
        with _CachedMetadataTransaction(handle.iceberg) as tx:
            fit_time_field(lambda: new)(tx, version)
            added = [parquet_file_to_data_file(tx._table.io, tx.table_metadata, path) for path in data]  # noqa: SLF001
            spec_id = tx.table_metadata.default_spec_id
            placed = split_by_partition(
                deletes,
                {f.file_path: (spec_id, f.partition) for f in added},
                default_partition(tx._table),  # noqa: SLF001
            )
            if gone or added or placed:
                with RowDelta(tx, summary) as delta:
                    delta.remove(gone)
                    for data_file in added:
                        delta.add(data_file)
                    for path, partition in placed:
                        delta.add(delete_file_entry(path, partition))
            tx.set_properties({DEFINITION_PROPERTY: new.to_json()})
        return new

    def forget_temporary(self, db: str, table: str, ids: AbstractSet[int]) -> None:
        """After `DROP TEMPORARY PARTITION`: the companion drops the partitions' files (from disk too: no snapshot
        of the table ever held them), in its commit turn, and its schema version moves on so that a load into them
        planned before fails instead of committing rows no partition shows."""
        handle = self._catalog.load(db, table)
        companion = self._catalog.temporary(handle)
        if companion is None or not ids:
            return
        theirs = self._turnstile(companion)
        their_version = theirs.take()
        try:
            with theirs.turn(their_version):
                refresh_same_table(companion, table_identity(companion))
                self._forget_partitions(companion, ids, their_version, remove=True)
                theirs.last_metadata = companion.iceberg.metadata_location
        finally:
            theirs.done(their_version)

    def _forget_partitions(self, companion: TableHandle, ids: AbstractSet[int], version: int, *, remove: bool) -> None:
        companion.iceberg.refresh()
        paths = files_of_partitions(companion.iceberg, ids)
        stored = TableDef.from_json(companion.iceberg.properties[DEFINITION_PROPERTY])
        stored = stored.model_copy(update={"schema_version": version, "meta_version": version})
        with _CachedMetadataTransaction(companion.iceberg) as tx:
            if paths:
                with RowDelta(tx, {VERSION_PROPERTY: str(version)}) as delta:
                    delta.remove(paths)
            tx.set_properties({DEFINITION_PROPERTY: stored.to_json()})
        if remove:
            for path in paths:
                delete_file(as_location(plain_path(path)))


def files_of_partitions(table: Table, ids: AbstractSet[int]) -> list[str]:
    """The live data and delete files of these Doris partitions: what dropping or truncating them removes (a delete
    file sits in the partition of the data files it names)."""
    live = [*live_data_files(table), *live_delete_files(table)]
    return [f.file_path for f in live if file_partition(table, f) in ids]


def remove_partitions(ids: AbstractSet[int]) -> Callable[[Transaction, int], None]:
    """The Iceberg change of `ALTER TABLE ... DROP PARTITION`: its files go in the commit of the definition."""

    def change(tx: Transaction, version: int) -> None:
        if not ids:  # nothing dropped: no manifest to read
            return
        paths = files_of_partitions(tx._table, ids)  # noqa: SLF001 (the table the transaction commits to)
        if paths:
            with RowDelta(tx, {VERSION_PROPERTY: str(version)}) as delta:
                delta.remove(paths)

    return change


Change = Callable[[TableDef, int], tuple[TableDef, list[SchemaOp]]]


def partition_change(change: Change, dropped: AbstractSet[int]) -> tuple[Change, Callable[[Transaction, int], None]]:
    """A definition change that may drop partitions or add ranges, and the Iceberg change that goes with it
    (`TableWriter.alter`'s `iceberg`): the dropped partitions' files removed (`dropped` is filled by the change),
    and the spec's time-unit field dropped when the new partitions no longer fit it (`fit_time_field`)."""
    made: list[TableDef] = []

    def recorded(current: TableDef, version: int) -> tuple[TableDef, list[SchemaOp]]:
        new, ops = change(current, version)
        made.append(new)
        return new, ops

    def iceberg(tx: Transaction, version: int) -> None:
        remove_partitions(dropped)(tx, version)
        fit_time_field(lambda: made[-1] if made else None)(tx, version)

    return recorded, iceberg


def fit_time_field(new_definition: Callable[[], TableDef | None]) -> Callable[[Transaction, int], None]:
    """The Iceberg change that drops the spec's time-unit field (`day(col)`, ...) once some partition of the new
    definition is not one aligned unit of it any more (a manual range, another dynamic unit): its files could not
    be named by the field. Files already written keep their spec; foreign readers just prune less."""

    def change(tx: Transaction, version: int) -> None:
        new = new_definition()
        if new is None or new.partitioning is None:
            return
        spec = tx.table_metadata.spec()
        timed = [f for f in spec.fields if f.name not in (BUCKET_COL, PARTITION_COL)]
        if not timed:
            return
        field = timed[0]
        unit = str(field.transform).upper()  # day, month, year, hour
        if aligned_unit(new.partitioning, new.partition_types(), unit) != unit:
            with tx.update_spec() as update:
                update.remove_field(field.name)

    return change


def _committed_refusal(what: str, statement: str) -> str:
    """Doris's `InternalCatalog.dropTable` / `dropDb` text."""
    return (
        f"There are still some transactions in the COMMITTED state waiting to be completed. The {what} cannot "
        f'be dropped. If you want to forcibly drop(cannot be recovered), please use "{statement}".'
    )


def table_identity(handle: TableHandle) -> str:
    """The Iceberg uuid of a table: a table dropped and re-created under the same name gets another."""
    return str(handle.iceberg.metadata.table_uuid)


def refresh_same_table(handle: TableHandle, table_uuid: str) -> None:
    """Reload the table's metadata, provided the name still refers to the same table.

    Raises:
        TableDropped: the table was dropped, or dropped and re-created, since `table_uuid` was read.
    """
    if table_identity(handle) != table_uuid:
        raise TableDropped(table_uuid)
    try:
        handle.iceberg.refresh()  # pyiceberg refuses (ValueError) to adopt metadata of another uuid
    except NoSuchTableError:
        raise TableDropped(table_uuid) from None
    except ValueError:
        if _current_identity(handle) != table_uuid:
            raise TableDropped(table_uuid) from None
        raise


def _current_identity(handle: TableHandle) -> str | None:
    try:
        return str(handle.iceberg.catalog.load_table(handle.iceberg.name()).metadata.table_uuid)
    except NoSuchTableError:
        return None


def check_schema(handle: TableHandle, planned: TableDef | None) -> None:
    """Raises: SchemaChanged when a schema change committed after the load was planned."""
    if planned is None:
        return
    current = TableDef.from_json(handle.iceberg.properties[DEFINITION_PROPERTY])
    if current.schema_version != planned.schema_version:
        raise SchemaChanged(
            f"the schema of table {planned.name} changed while the load was running (schema version "
            f"{planned.schema_version} → {current.schema_version}); no data was loaded, retry the load"
        )


def _append(handle: TableHandle, pending: PendingRowset, version: int) -> None:
    """Add the rowset's files in one snapshot; a concurrent housekeeping commit means refresh and retry.

    A positional table's rowset also adds its position delete files, and hides its own delete-signed rows."""
    summary = {"doris.label": pending.label, "doris.txn_id": str(pending.txn_id), VERSION_PROPERTY: str(version)}
    if pending.group:
        summary[GROUP_PROPERTY] = ",".join(str(t) for t in (pending.txn_id, *pending.group))
    deletes = list(pending.deletes)
    grown = with_auto_partitions(handle, pending.files)
    if handle.definition.positional:
        hidden = write_position_deletes(pending.directory, tombstone_positions(pending.files, DELETE_SIGN))
        deletes += [hidden] if hidden else []
    placed: list[tuple[str, Partition]] = []
    added: list[DataFile] = []
    if deletes:
        table = handle.iceberg
        added = [parquet_file_to_data_file(table.io, table.metadata, path) for path in pending.files]
        placed = split_by_partition(deletes, partitions_of(table, added), default_partition(table))
        _fsync_files([path for path, _ in placed], pending.directory)
    for attempt in range(3):
        try:
            with _CachedMetadataTransaction(handle.iceberg) as tx:
                if grown is not None:  # AUTO PARTITION: the partitions the rows need appear with them
                    tx.set_properties({DEFINITION_PROPERTY: grown.to_json()})
                if not placed:
                    tx.add_files(pending.files, snapshot_properties=summary, check_duplicate_files=False)
                else:
                    with RowDelta(tx, summary) as delta:
                        if attempt:  # after a refresh: the files' entries under the table's metadata as it is now
                            added = [
                                parquet_file_to_data_file(tx._table.io, tx.table_metadata, p) for p in pending.files
                            ]
                        for data_file in added:
                            delta.add(data_file)
                        for path, partition in placed:
                            delta.add(delete_file_entry(path, partition))
            return
        except CommitFailedException:
            if attempt == 2:
                raise
            # a commit to a re-created table fails pyiceberg's uuid requirement: the refresh must not adopt it
            refresh_same_table(handle, pending.table_uuid or table_identity(handle))


MAX_AUTO_PARTITIONS = 2000  # Doris FE config max_auto_partition_num: the partitions an AUTO PARTITION table holds


def with_auto_partitions(handle: TableHandle, files: list[str]) -> TableDef | None:
    """The table's definition with the AUTO partitions its new `files` need and it does not have yet (None when
    there are none), learnt from the files: each holds one partition, whose id says a RANGE partition's range
    (`tables.partitions.auto_range`); a LIST partition's values are read from the file's first row.

    Raises:
        DorisError: a new RANGE partition overlaps one the table has (Doris refuses the load the same way).
    """
    planned = handle.definition.partitioning
    if planned is None or not planned.auto or not files:
        return None  # before reading the definition again: every commit comes here
    current = TableDef.from_json(handle.iceberg.properties[DEFINITION_PROPERTY])
    partitioning = current.partitioning
    if partitioning is None or not partitioning.auto:
        return None
    import pyarrow.parquet as pq

    known = {p.id for p in partitioning.partitions}
    types = current.partition_types()
    taken = {p.name.lower() for p in partitioning.partitions}
    table = handle.iceberg
    at = [f.name for f in table.spec().fields].index(PARTITION_COL)  # a new file is of the default spec
    added: list[PartitionDef] = []
    for path in files:
        data_file = parquet_file_to_data_file(table.io, table.metadata, path)
        pid = data_file.partition[at]
        if pid is None or pid in known or data_file.record_count == 0:
            continue
        known.add(pid)
        if partitioning.kind is PartitionKind.RANGE:
            new = auto_range(pid, partitioning.auto_unit or "DAY", types[0])
        else:
            first = (
                pq.ParquetFile(arrow_path(as_location(path)))
                .read_row_group(0, columns=list(partitioning.columns))
                .slice(0, 1)
            )
            row = first.to_pylist()[0]
            values = tuple(None if row[c] is None else value_text(row[c]) for c in partitioning.columns)
            new = auto_list(pid, values, taken)
        taken.add(new.name.lower())
        check_new(partitioning.model_copy(update={"partitions": (*partitioning.partitions, *added)}), new, types)
        added.append(new.model_copy(update={"create_time": dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")}))
    if not added:
        return None
    if len(partitioning.partitions) + len(added) > MAX_AUTO_PARTITIONS:
        raise DorisError("create partition failed. partition numbers will exceed limit variable max_auto_partition_num")
    grown = partitioning.model_copy(update={"partitions": (*partitioning.partitions, *added)})
    return current.model_copy(update={"partitioning": grown})


def partitions_of(table: Table, added: list[DataFile]) -> dict[str, Partition]:
    """The partition of every data file a delete of this commit may name: the live ones and those it adds."""
    out = {f.file_path: partition_of(table, f) for f in live_data_files(table)}
    spec_id = table.metadata.default_spec_id  # what the commit adds takes the default spec
    out.update((f.file_path, (spec_id, f.partition)) for f in added)
    return out


def default_partition(table: Table) -> Partition:
    """Where a delete naming a file that is no longer live goes: the default spec's "no bucket" partition."""
    spec = table.spec()
    return spec.spec_id, Record(*[None] * len(spec.fields))


def rowset_files(directory: Location) -> list[str]:
    """The data files a load wrote into its directory (not its position delete files)."""
    return [str(p) for p in list_files(directory, "*.parquet") if not name_of(p).startswith(DELETE_FILE_PREFIX)]


def txn_directory(handle: TableHandle, txn_id: int) -> Location:
    """Where a transaction's rowset files go: `<table location>/data/txn_<id>` (`tables/warehouse.py`)."""
    return child_of(handle.place, "data", f"txn_{txn_id}")


def replace_files(handle: TableHandle, pending: PendingRewrite, deletes: list[str] | None = None) -> None:
    """One overwrite snapshot: the replaced files out, the new (non-empty) files in, the version kept.

    On a positional table the position delete files that name only replaced files go too (the rewrite
    applied them), its own delete-signed rows are hidden, and `deletes` (the re-check's) are added.

    Raises:
        RowsetsChanged: a replaced file is no longer in the current snapshot.
    """
    table = handle.iceberg
    wanted = set(pending.replaced)
    old = [f for f in live_data_files(table) if plain_path(f.file_path) in wanted]  # empty files too
    if len(old) != len(wanted):
        raise RowsetsChanged("the rowsets being compacted changed meanwhile; the compaction gave way")
    new = [parquet_file_to_data_file(table.io, table.metadata, path) for path in pending.files]
    for data_file in new:
        if data_file.record_count == 0:
            delete_file(as_location(data_file.file_path))
    kept = [f for f in new if f.record_count > 0]
    pending.output_rows = sum(f.record_count for f in new)
    definition = pending.definition or handle.definition
    added_deletes = list(deletes or [])
    applied: list[str] = []
    placed: list[tuple[str, Partition]] = []
    if definition.positional:
        hidden = write_position_deletes(
            pending.directory, tombstone_positions([plain_path(f.file_path) for f in kept], DELETE_SIGN)
        )
        added_deletes += [hidden] if hidden else []
        placed = split_by_partition(added_deletes, partitions_of(table, kept), default_partition(table))
        _fsync_files([path for path, _ in placed], pending.directory)
        applied = [
            f.file_path for f in live_delete_files(table) if referenced_data_paths(plain_path(f.file_path)) <= wanted
        ]
    summary = {
        "doris.compaction": pending.label,
        "doris.txn_id": str(pending.txn_id),
        VERSION_PROPERTY: str(handle.current_version()),
    }
    with _CachedMetadataTransaction(table) as tx:
        if old or kept or placed or applied:
            with RowDelta(tx, summary) as delta:
                delta.remove([f.file_path for f in old] + applied)
                for data_file in kept:
                    delta.add(data_file)
                for path, partition in placed:
                    delta.add(delete_file_entry(path, partition))
        if pending.definition is not None:
            tx.set_properties({DEFINITION_PROPERTY: pending.definition.to_json()})


class _CachedMetadataTransaction(Transaction):
    """`Table.add_files`'s transaction, computing its staged metadata once per change instead of per read.

    pyiceberg's `Transaction.table_metadata` re-applies the staged updates and deep-copies the whole
    metadata (every snapshot) on each read, and one append reads it more than a dozen times: commit
    time grew with the snapshot count (23 → 70 ms over 150 one-row loads; 14 → 24 ms with this cache).
    The metadata models are frozen, and the cache is dropped whenever the table or the staged updates change.
    Every commit of shared metadata goes through it: a deep copy of that metadata raced the loads filling its
    schemas' lazy caches ("dictionary changed size during iteration").
    """

    _cached: tuple[TableMetadata, tuple[TableUpdate, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        cached = self._cached
        if cached is None or cached[0] is not base or cached[1] is not updates:
            cached = self._cached = (base, updates, updated_metadata(base, updates))
        return cached[2]


def _fsync_files(files: list[str], directory: Location) -> None:
    """Make the rowset durable before it is referenced: Spark does not fsync what it writes (a local warehouse's
    files and directory are synced; through pyarrow a file is durable once written, `tables.warehouse`)."""
    sync_written(files, directory)


def _committed(handle: TableHandle, txn_id: int) -> bool:
    """Whether a snapshot of the table carries this transaction (alone or in a group-commit rowset)."""
    wanted = str(txn_id)
    for snap in handle.iceberg.snapshots():
        props = snap.summary.additional_properties if snap.summary else {}
        if props.get("doris.txn_id") == wanted or wanted in props.get(GROUP_PROPERTY, "").split(","):
            return True
    return False


def recover_prepared(catalog: Catalog, txns: TransactionStore, *, owner: str | None = None) -> tuple[int, int]:
    """Resolve transactions left PREPARE by a crash: VISIBLE if their snapshot committed, else ABORTED.
    With `owner` (several servers share the store), only those that server began.

    Returns (made visible, aborted).
    """
    visible = aborted = 0
    for txn in txns.in_state(PREPARE):
        if owner is not None and txn.owner != owner:
            continue
        committed = False
        try:
            handle = catalog.load(txn.db, txn.table)
        except Exception:  # the table is gone: nothing of the load can be visible
            handle = None
        if handle is not None and txn.table_uuid is not None and table_identity(handle) != txn.table_uuid:
            handle = catalog.temporary(handle) or handle  # a load into temporary partitions commits to the companion
        if handle is not None:
            committed = _committed(handle, txn.txn_id)
            if not committed:
                catalog.storage.remove_tree(txn_directory(handle, txn.txn_id))
        txns.set_state(txn.txn_id, VISIBLE if committed else ABORTED)
        visible += committed
        aborted += not committed
    return visible, aborted
