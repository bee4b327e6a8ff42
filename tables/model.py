"""The Doris table model: columns, key model, sequence settings and the hidden columns they imply.

A `TableDef` is stored as JSON in the Iceberg table properties (`doris.definition`), so the
catalog is the single source of truth for it.
"""

from __future__ import annotations

import functools
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from tables.partitions import Partitioning
from tables.types import DorisType

DELETE_SIGN = "__DORIS_DELETE_SIGN__"
VERSION_COL = "__DORIS_VERSION_COL__"
SEQUENCE_COL = "__DORIS_SEQUENCE_COL__"
HIDDEN_PREFIX = "__DORIS_"
# the storage format new tables get (`TableDef.storage_format`); older merge-on-write tables are converted at start
POSITIONAL_FORMAT = 2  # merge-on-write unique tables keep one live row per key (`TableDef.positional`)
BUCKETED_FORMAT = 3  # every file holds one bucket, named in the Iceberg partition spec (`TableDef.bucketed`)
STORAGE_FORMAT = BUCKETED_FORMAT
# the Iceberg column (not a Doris column: no statement sees it) holding a file's bucket, the source of the
# identity partition field; NULL in a file that holds rows of several buckets (a small load's)
BUCKET_COL = "__DORIS_BUCKET__"

DEFINITION_PROPERTY = "doris.definition"


class KeysType(StrEnum):
    UNIQUE = "UNIQUE_KEYS"
    DUPLICATE = "DUP_KEYS"
    AGGREGATE = "AGG_KEYS"


class ColumnDef(BaseModel):
    """One column as declared in CREATE TABLE (or a hidden column the table model adds)."""

    model_config = ConfigDict(frozen=True)

    name: str
    type: DorisType
    nullable: bool = True
    default: str | None = None
    has_default: bool = False
    comment: str = ""
    is_key: bool = False
    aggregation: str | None = None
    hidden: bool = False
    # a column added by ALTER TABLE: rows of earlier loads (version below this) read its DEFAULT
    since_version: int = 0

    @property
    def default_is_current_timestamp(self) -> bool:
        return self.has_default and (self.default or "").upper() in ("CURRENT_TIMESTAMP", "NOW()")


class AlterJob(BaseModel):
    """A finished schema change, as `SHOW ALTER TABLE COLUMN` lists it (light schema changes are instant)."""

    model_config = ConfigDict(frozen=True)

    job_id: int
    create_time: str
    finish_time: str
    schema_version: int


class DeletePredicate(BaseModel):
    """A DELETE on a duplicate or aggregate table: rows loaded before `version` that match are gone."""

    model_config = ConfigDict(frozen=True)

    version: int
    condition: str  # Spark SQL over the stored columns, built from an allow-listed predicate
    display: str  # as `SHOW DELETE` prints it: k1 EQ "1" AND k2 GT "3"
    columns: tuple[str, ...]
    create_time: str
    partitions: tuple[str, ...] = ()  # `DELETE FROM t PARTITION (...)`: the names, for `SHOW DELETE`


class TableDef(BaseModel):
    """A Doris table: key model, columns, buckets and the properties that change load and merge rules."""

    model_config = ConfigDict(frozen=True)

    db: str
    name: str
    keys_type: KeysType
    columns: tuple[ColumnDef, ...]
    key_columns: tuple[str, ...]
    bucket_columns: tuple[str, ...] = ()
    buckets: int = 1
    sequence_type: DorisType | None = None
    sequence_col: str | None = None
    merge_on_write: bool = True
    delete_sign: bool = True
    replace_if_not_null: bool = False  # unique tables: a NULL input keeps the stored value
    replace_version_column: str | None = None  # aggregate tables: REPLACE columns follow this MAX column
    # unique merge-on-read tables: sequence column → the value columns it orders (000_0c520fff6485a702.txt)
    sequence_mapping: dict[str, tuple[str, ...]] = {}
    comment: str = ""
    properties: dict[str, str] = {}
    # the load version of the last schema change: loads planned against an older schema may not commit
    schema_version: int = 0
    # the load version of the last metadata change (schema change or DELETE predicate), which takes a
    # version without writing a snapshot
    meta_version: int = 0
    alter_jobs: tuple[AlterJob, ...] = ()
    delete_predicates: tuple[DeletePredicate, ...] = ()
    # how the table's files hold its rows: 1 (every release before issue 18) appends rowsets that reads merge;
    # 2 keeps merge-on-write unique tables merged in Iceberg's own terms (`positional`); 3 adds the bucket to
    # the Iceberg partition spec (`bucketed`); see `STORAGE_FORMAT`
    storage_format: int = 1
    # `PARTITION BY RANGE|LIST`: None for an unpartitioned table (Doris's single partition named as the table)
    partitioning: Partitioning | None = None

    # -- columns -------------------------------------------------------------------------
    def column(self, name: str) -> ColumnDef | None:
        """Look a visible or hidden column up by name, case-insensitively as Doris does."""
        lower = name.lower()
        for col in self.all_columns():
            if col.name.lower() == lower:
                return col
        return None

    def hidden_columns(self) -> tuple[ColumnDef, ...]:
        """Hidden columns in storage and `SELECT *` order: delete sign, version, sequence.

        Every model stores the load version (it orders REPLACE columns and tells which rows predate a
        schema change), but only unique tables show it, as in Doris: see `shown_hidden_columns`.
        """
        sequence = self.effective_sequence_type() if self.has_sequence else None
        return _hidden_columns(self.is_unique and self.delete_sign, sequence)

    def shown_hidden_columns(self) -> tuple[ColumnDef, ...]:
        """The hidden columns `show_hidden_columns` reveals: unique tables only."""
        return self.hidden_columns() if self.is_unique else ()

    def all_columns(self) -> tuple[ColumnDef, ...]:
        return self.columns + self.hidden_columns()

    def value_columns(self) -> tuple[ColumnDef, ...]:
        return tuple(c for c in self.columns if not c.is_key)

    # -- model ---------------------------------------------------------------------------
    @property
    def is_unique(self) -> bool:
        return self.keys_type is KeysType.UNIQUE

    @property
    def is_aggregate(self) -> bool:
        return self.keys_type is KeysType.AGGREGATE

    @property
    def is_duplicate(self) -> bool:
        return self.keys_type is KeysType.DUPLICATE

    @property
    def positional(self) -> bool:
        """Merge-on-write in Iceberg's terms: one live row per key, superseded rows (and delete-signed ones)
        named by position delete files, so reads merge nothing and any Iceberg reader sees the answer."""
        return (
            self.is_unique
            and self.merge_on_write
            and not self.sequence_mapping
            and self.storage_format >= POSITIONAL_FORMAT
        )

    @property
    def bucketed(self) -> bool:
        """The table's Iceberg schema has `BUCKET_COL` and its partition spec an identity field on it: reads and
        lookups of some keys open only the files of their buckets (and the files of no single bucket)."""
        return self.storage_format >= BUCKETED_FORMAT

    @property
    def distribution_columns(self) -> tuple[str, ...]:
        """The columns whose hash picks a row's bucket: `DISTRIBUTED BY HASH(...)`, else the key. A unique or
        aggregate table's rows of one key always share a bucket (Doris requires its distribution columns to be
        keys; the key is used when they are not)."""
        if self.bucket_columns and (self.is_duplicate or set(self.bucket_columns) <= set(self.key_columns)):
            return self.bucket_columns
        return self.key_columns

    @property
    def partitioned(self) -> bool:
        """The table has `PARTITION BY`: its Iceberg schema has `PARTITION_COL` and its spec an identity field on
        it, so every file holds one partition's rows."""
        return self.partitioning is not None

    def partition_types(self) -> tuple[DorisType, ...]:
        """The types of the partition columns, in their order."""
        if self.partitioning is None:
            return ()
        return tuple(self._column_type(c) for c in self.partitioning.columns)

    def _column_type(self, name: str) -> DorisType:
        col = self.column(name)
        if col is None:
            raise ValueError(f"table {self.name} has no column {name}")
        return col.type

    def sequence_group(self, column: str) -> str | None:
        """The mapped sequence column ordering `column` (itself for a sequence column), if any."""
        lower = column.lower()
        for seq, values in self.sequence_mapping.items():
            if seq.lower() == lower or any(v.lower() == lower for v in values):
                return seq
        return None

    @property
    def has_sequence(self) -> bool:
        return self.is_unique and (self.sequence_type is not None or self.sequence_col is not None)

    def effective_sequence_type(self) -> DorisType:
        """The type of `__DORIS_SEQUENCE_COL__`: the mapped column's type, else `sequence_type`."""
        if self.sequence_col is not None:
            col = next(c for c in self.columns if c.name.lower() == self.sequence_col.lower())
            return col.type
        if self.sequence_type is None:
            raise ValueError(f"table {self.name} has no sequence column")
        return self.sequence_type

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> TableDef:
        """The definition stored as `text`; definitions are immutable, so the same text parses once (a table of
        a thousand partitions takes ~8 ms, and every load and query reads its table's definition)."""
        return _parsed(text)


@functools.lru_cache(maxsize=64)
def _hidden_columns(delete_sign: bool, sequence: DorisType | None) -> tuple[ColumnDef, ...]:
    """`TableDef.hidden_columns` of a table with a delete sign or not, and a sequence of this type or none: built
    once (`TableDef.column` looks through them, several times in a load's planning; three models built each
    time were 4% of the server's Python under small async loads, py-spy `--gil`)."""

    def filled(name: str, type_name: str) -> ColumnDef:  # NOT NULL, 0 unless a load sets it
        kind = DorisType(name=type_name)
        return ColumnDef(
            name=name, type=kind, nullable=False, default="0", has_default=True, hidden=True, aggregation="REPLACE"
        )

    out = [filled(DELETE_SIGN, "TINYINT")] if delete_sign else []
    out.append(filled(VERSION_COL, "BIGINT"))
    if sequence is not None:
        out.append(ColumnDef(name=SEQUENCE_COL, type=sequence, nullable=True, hidden=True, aggregation="REPLACE"))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> TableDef:
    return TableDef.model_validate_json(text)
