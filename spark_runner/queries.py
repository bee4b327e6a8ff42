"""Merge-on-read queries: each table becomes a view of its merged rows, then Spark runs the SELECT.

The Spark side of `sql/`: the statements there check and bind their trees, and everything that touches Spark
(views, `spark.sql`, collecting rows, cancelling a statement's jobs and wording its errors) happens here.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import itertools
import logging
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType, TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from spark_runner.arrow_frames import arrow_frame
from spark_runner.buckets import key_buckets
from spark_runner.merge import merge_rows
from spark_runner.query_memory import bounded_rows, check_query_memory, query_session
from spark_runner.sqltext import default_sql, lit, q, storage_type_sql, value_type_sql
from spark_runner.supervisor import NO_BACKEND_FOR_QUERY, backend_stopped, overdue
from spark_runner.types import storage_schema
from tables.catalog import TableHandle
from tables.errors import DorisError, SqlError
from tables.model import DELETE_SIGN, SEQUENCE_COL, VERSION_COL
from tables.row_delta import live_delete_files
from tables.rowsets import FileFilter, keeps_uris, plain_path
from tables.sized_cache import sized_cache
from tables.warehouse import arrow_path, as_location, file_stamp

log = logging.getLogger(__name__)

FILE = "__rfile"  # a stored row's data file (its plain path)
ROW = "__rpos"  # its row number in that file


def read_rowsets(
    spark: SparkSession,
    handle: TableHandle,
    files: list[str] | None = None,
    *,
    positions: bool = False,
    deleted: Deleted | None = None,
    tombstones: bool = False,
    cache: bool = False,
    only: KeyValues | None = None,
) -> DataFrame:
    """Every stored row of the table's current snapshot (or of the given data files), in storage types.

    Rows read as the table defines them now: columns added later read their DEFAULT, and stored delete
    predicates (DELETE on duplicate and aggregate tables) drop the rows loaded before them. `positions` adds
    each row's data file and row number (`FILE`, `ROW`), as position delete files name rows. `deleted` drops
    the rows it names, except delete-signed ones with `tombstones`; `cache` keeps the tiny files' relation for
    the next read of the same files (`scan_files`). `only`: the caller needs only the rows whose column holds one
    of the values (others may come too), which a few values' read may take in this process (`scan_files`).
    """
    cols = [(c, handle.field_id(c.name)) for c in handle.definition.all_columns()]
    schema = storage_schema(cols)
    files = handle.data_files() if files is None else files
    extra = [f"CAST(NULL AS STRING) AS {FILE}", f"CAST(NULL AS BIGINT) AS {ROW}"] if positions else []
    if not files:  # an empty in-memory relation (not an empty RDD): Spark's optimizer drops the joins it meets
        empty = arrow_frame(spark, to_arrow_schema(schema).empty_table(), schema)
        return _mark_keyed(empty.selectExpr("*", *extra) if positions else empty, empty if only is not None else None)
    keep = DELETE_SIGN if tombstones and handle.definition.delete_sign else None
    if only is not None and only.columns is not None and handle.definition.delete_predicates:
        only = replace(only, columns=None)  # a predicate below may read any column
    df = scan_files(spark, schema, files, positions=positions, deleted=deleted, keep=keep, cache=cache, only=only)
    leaf = keyed_leaf(df)
    for pred in handle.definition.delete_predicates:
        df = df.where(f"NOT ({q(VERSION_COL)} < {pred.version} AND coalesce(({pred.condition}), false))")
    late = {c.name for c in handle.definition.columns if c.since_version and c.default is not None}
    if not late:
        return _mark_keyed(df, leaf)
    # rows loaded before ALTER TABLE ADD COLUMN read the column's DEFAULT (their files lack the field;
    # a compaction since wrote the merged value, e.g. a SUM of defaults, which stands)
    late_read = df.selectExpr(
        *[
            f"CASE WHEN {q(VERSION_COL)} < {c.since_version} AND {q(c.name)} IS NULL THEN CAST({default_sql(c)} AS "
            f"{storage_type_sql(c.type)}) ELSE {q(c.name)} END AS {q(c.name)}"
            if c.name in late
            else q(c.name)
            for c, _ in cols
        ],
        *([FILE, ROW] if positions else []),
    )
    return _mark_keyed(late_read, leaf)


_KEYED = "_sl_keyed_leaf"


def keyed_leaf(df: DataFrame) -> DataFrame | None:
    """The in-memory relation under `df` when `df` (a read given `KeyValues`) holds exactly the rows of those
    values, each file's read and filtered in this process (`_exact_rows`): a plan over it needs no filter by key
    of its own, and may serve a later read of other values with their relation in its place
    (`spark_runner.prepared`). None when Spark reads a file or joins the deleted positions."""
    leaf = getattr(df, _KEYED, None)
    return leaf if isinstance(leaf, DataFrame) else None


def _mark_keyed(df: DataFrame, leaf: DataFrame | None) -> DataFrame:
    if leaf is not None:
        setattr(df, _KEYED, leaf)
    return df


# Tiny data files (a small load's rowset) are read in the server's process and handed to Spark as one Arrow
# relation: Spark's cost is per file (a task opens each), so 200 tiny rowsets cost a query ~10x one compacted
# file. Files of at most SMALL_FILE_ROWS rows, at most DRIVER_READ_ROWS rows per read. Their deleted rows are
# dropped here too: a predicate term per file made Spark's analysis and the filter cost more than the scan.
SMALL_FILE_ROWS = 1000
DRIVER_READ_ROWS = 200_000

# A read of a few key values (a small load's merge-on-write lookup) takes the larger files' rows that hold them in
# this process too: a file is sorted by key, so the statistics of its row groups name those that may hold a value;
# their key column is decoded and only the matching rows' other columns are kept. At most KEYED_READ_VALUES values
# of an integer or string column, over row groups of at most KEYED_READ_ROWS rows in all: a Spark job reading the
# same row groups cost a 10-row load into a 5M-row table ~1.5 s (planning, then ~1M rows read for 10 keys). A row
# group is decoded KEYED_GROUP_ROWS rows at a time (`_group_batches`), the bound of the memory a lookup takes: a
# file Spark wrote with one row group of millions of rows (a table of one bucket) is read here too, not by Spark.
KEYED_READ_VALUES = 1000
KEYED_READ_ROWS = 8_000_000
KEYED_GROUP_ROWS = 1_000_000


@dataclass(frozen=True)
class KeyValues:
    """The rows a read needs (`read_rowsets`' `only`): those whose `column` holds one of `values`, or, in a file
    `per_file` names, one of the values listed for it (a file of one bucket holds only that bucket's keys)."""

    column: str
    values: tuple[Any, ...]
    per_file: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    # the only columns whose values the caller reads (None: all): a read in this process decodes only them, and
    # the others are NULL (a full-row upsert decides by key, sequence, version and sign, never by the values)
    columns: tuple[str, ...] | None = None


def scan_files(
    spark: SparkSession,
    schema: T.StructType,
    files: list[str],
    *,
    positions: bool,
    deleted: Deleted | None = None,
    keep: str | None = None,
    cache: bool = False,
    only: KeyValues | None = None,
) -> DataFrame:
    """The rows of these data files in `schema` (columns matched by Iceberg field id), with `FILE` and `ROW`
    when `positions`: tiny files read in this process, the others by Spark's Parquet reader, or, when the caller
    needs `only` the rows of a few values (`KEYED_READ_VALUES`), their rows holding them read in this process
    (`_keyed_parts`). The rows `deleted` names are dropped, except those whose `keep` column is 1: a file's read in
    this process before Spark sees them. With `cache` the tiny files' relation is kept for the next read of the
    same file versions and deletes."""
    stamps = {path: _stamp(path) for path in files}
    small: list[str] = []
    budget = DRIVER_READ_ROWS
    for path in files:
        rows = _file_rows(path, stamps[path])
        if rows <= SMALL_FILE_ROWS and rows <= budget:
            small.append(path)
            budget -= rows
    by_file = deleted.by_file if deleted is not None else {}
    join = deleted.frame if deleted is not None else None
    located = positions or join is not None  # the join needs each row's position
    if only is not None and join is None and not cache:
        try:
            exact = _exact_rows(spark, schema, files, stamps, small, only, positions=positions, drop=by_file, keep=keep)
        except (pa.ArrowException, ValueError, KeyError, TypeError, OverflowError):  # a value or type not cast
            log.warning("rows of %d values read by Spark instead", len(only.values), exc_info=True)
            exact = None
        if exact is not None:
            return exact
    frames: list[DataFrame] = []
    if small:
        try:
            frames.append(
                _local_rows(
                    spark,
                    schema,
                    [(p, stamps[p]) for p in small],
                    positions=located,
                    drop=by_file,
                    keep=keep,
                    cache=cache,
                )
            )
        except (pa.ArrowException, ValueError, KeyError, TypeError):  # a type the cast does not know: Spark reads
            log.warning("tiny files read by Spark instead", exc_info=True)
            small = []
    chosen = set(small)
    big = [p for p in files if p not in chosen]
    if big and only is not None:
        try:
            keyed = _keyed_parts(
                schema, [(p, stamps[p]) for p in big], only, positions=located, drop=by_file, keep=keep
            )
        except (pa.ArrowException, ValueError, KeyError, TypeError):  # a type the cast does not know: Spark reads
            log.warning("rows of %d values read by Spark instead", len(only.values), exc_info=True)
            keyed = None
        if keyed is not None:
            frames.append(_relation(spark, schema, keyed, positions=located)[1])
            big = []
    if big:
        named = {p: by_file[p] for p in big if p in by_file}
        df = spark.read.schema(schema).parquet(*big)
        if located or named:
            df = df.select("*", *row_positions())
        if len(named) > INLINE_DELETED_FILES:
            df = _drop_positions(df, _positions_frame(spark, named), keep)
        elif named:
            terms = " OR ".join(
                f"({FILE} = {lit(path)} AND {ROW} IN ({', '.join(str(p) for p in sorted(rows))}))"
                for path, rows in named.items()
            )
            df = df.where(f"{q(keep)} = 1 OR NOT ({terms})" if keep else f"NOT ({terms})")
        frames.append(df if located or not named else df.drop(FILE, ROW))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    if join is not None:
        out = _drop_positions(out, join, keep, merge=deleted is not None and deleted.positions > BROADCAST_DELETES)
    return out.drop(FILE, ROW) if located and not positions else out


def _drop_positions(rows: DataFrame, gone: DataFrame, keep: str | None, *, merge: bool = False) -> DataFrame:
    """`rows` without those at the positions `gone` names (`FILE`, `ROW`, possibly repeated), except those whose
    `keep` column is 1. `merge`: a sort-merge join, never a broadcast of `gone` (`BROADCAST_DELETES`); else a
    broadcast of `gone`, said outright (a query's session broadcasts nothing by Spark's estimate,
    `spark_runner.query_memory`)."""
    if keep is None:
        return rows.join(gone.hint("merge") if merge else F.broadcast(gone), [FILE, ROW], "left_anti")
    marked = gone.distinct().withColumn("__gone", F.lit(True))
    marked = marked.hint("merge") if merge else F.broadcast(marked)
    return rows.join(marked, [FILE, ROW], "left").where(f"__gone IS NULL OR {q(keep)} = 1").drop("__gone")


def _positions_frame(spark: SparkSession, by_file: Mapping[str, frozenset[int]]) -> DataFrame:
    """Positions read in this process as a relation of `FILE`, `ROW` to join with."""
    paths = [path for path, rows in by_file.items() for _ in rows]
    rows = [row for positions in by_file.values() for row in positions]
    table = pa.table({FILE: pa.array(paths, pa.string()), ROW: pa.array(rows, pa.int64())})
    schema = T.StructType([T.StructField(FILE, T.StringType()), T.StructField(ROW, T.LongType())])
    return arrow_frame(spark, table, schema)


Stamp = tuple[int, int, int]


def _local_rows(
    spark: SparkSession,
    schema: T.StructType,
    files: list[tuple[str, Stamp]],
    *,
    positions: bool,
    drop: Mapping[str, frozenset[int]],
    keep: str | None,
    cache: bool,
) -> DataFrame:
    """Tiny files' rows as one Arrow relation, without the rows `drop` names (but those whose `keep` column is 1)."""
    key = (schema.json(), positions, keep, tuple((path, stamp, drop.get(path)) for path, stamp in files))
    if cache and (hit := _RELATIONS.get(spark, key)) is not None:
        return hit
    parts = []
    for path, stamp in files:
        stored = _file_table(path, stamp)
        parts.append(_stored_part(schema, path, stored, None, positions=positions, gone=drop.get(path), keep=keep))
    combined, df = _relation(spark, schema, parts, positions=positions)
    if cache:
        _RELATIONS.put(spark, key, df, combined.num_rows)
    return df


def _stored_part(
    schema: T.StructType,
    path: str,
    stored: pa.Table,
    rows: pa.Array | None,
    *,
    positions: bool,
    gone: frozenset[int] | None,
    keep: str | None,
) -> pa.Table:
    """Rows of a data file (`stored`: all of them, or those at the positions `rows`) in `schema`'s columns, matched
    by Iceberg field id (a column the file lacks is NULL), with `FILE` and `ROW` when `positions`; without the rows
    at the positions `gone` names, but those whose `keep` column is 1."""
    target = to_arrow_schema(schema)
    names = {
        int(f.metadata[b"PARQUET:field_id"]): f.name
        for f in stored.schema
        if f.metadata and b"PARQUET:field_id" in f.metadata
    }
    numbers = rows if rows is not None else pa.array(range(stored.num_rows), pa.int64())
    columns = {}
    for f in schema.fields:
        fid, kind = int(f.metadata["parquet.field.id"]), target.field(f.name).type
        columns[f.name] = stored.column(names[fid]).cast(kind) if fid in names else pa.nulls(stored.num_rows, kind)
    if positions:
        columns[FILE] = pa.array([path] * stored.num_rows, pa.string())
        columns[ROW] = numbers
    part = pa.table(columns)
    if gone:
        mask = pc.invert(pc.is_in(numbers, value_set=pa.array(sorted(gone), pa.int64())))
        if keep is not None:
            mask = pc.or_(mask, pc.fill_null(pc.equal(part.column(keep), 1), False))
        part = part.filter(mask)
    return part


def _relation(
    spark: SparkSession, schema: T.StructType, parts: list[pa.Table], *, positions: bool
) -> tuple[pa.Table, DataFrame]:
    """Rows read in this process (`_stored_part`) as one Arrow relation."""
    full = T.StructType(
        [T.StructField(f.name, f.dataType, True) for f in schema.fields]
        + ([T.StructField(FILE, T.StringType()), T.StructField(ROW, T.LongType())] if positions else [])
    )
    # one record batch: pyspark dropped the rows after an empty batch (a rowset that kept no row)
    combined = pa.concat_tables(parts).combine_chunks() if parts else to_arrow_schema(full).empty_table()
    return combined, arrow_frame(spark, combined, full)


def _exact_rows(
    spark: SparkSession,
    schema: T.StructType,
    files: list[str],
    stamps: Mapping[str, Stamp],
    small: list[str],
    only: KeyValues,
    *,
    positions: bool,
    drop: Mapping[str, frozenset[int]],
    keep: str | None,
) -> DataFrame | None:
    """The rows of these files whose column holds one of the values `only` lists, every file read in this
    process: the tiny ones (`small`) whole, then filtered by value, the others by `_keyed_parts`; one Arrow
    relation (`keyed_leaf`), or None when a file is not read here."""
    kind = _keyed_kind(schema, only)
    if kind is None:
        return None
    chosen = set(small)
    big = [(path, stamps[path]) for path in files if path not in chosen]
    parts = _keyed_parts(schema, big, only, positions=positions, drop=drop, keep=keep) if big else []
    if parts is None:
        return None
    for path in small:
        part = _stored_part(
            schema, path, _file_table(path, stamps[path]), None, positions=positions, gone=drop.get(path), keep=keep
        )
        values = only.per_file.get(path, only.values)
        column = part.column(only.column)
        hit = pc.fill_null(pc.is_in(column, value_set=pa.array([v for v in values if v is not None], kind)), False)
        if None in values:
            hit = pc.or_(hit, pc.is_null(column))
        parts.append(part.filter(hit))
    _, df = _relation(spark, schema, parts, positions=positions)
    return _mark_keyed(df, df)


def _keyed_kind(schema: T.StructType, only: KeyValues) -> pa.DataType | None:
    """The Arrow type of the column `only` names, if its values may be read in this process (`KEYED_READ_VALUES`
    values at most, of an integer or string column)."""
    if len(only.values) > KEYED_READ_VALUES or only.column not in schema.fieldNames():
        return None
    kind = to_arrow_schema(schema).field(only.column).type
    return kind if pa.types.is_integer(kind) or pa.types.is_string(kind) else None


def stored_rows_of(schema: T.StructType, files: list[str], only: KeyValues) -> list[pa.Table] | None:
    """The rows of these data files whose column holds one of the values `only` lists, as stored (no delete
    applied), with `FILE` and `ROW`, read in this process (`_keyed_parts`); None when they cannot be read so."""
    return _keyed_parts(schema, [(path, _stamp(path)) for path in files], only, positions=True, drop={}, keep=None)


def _keyed_parts(
    schema: T.StructType,
    files: list[tuple[str, Stamp]],
    only: KeyValues,
    *,
    positions: bool,
    drop: Mapping[str, frozenset[int]],
    keep: str | None,
) -> list[pa.Table] | None:
    """The rows of these files whose column holds one of the values `only` lists, read in this process (see
    `KEYED_READ_VALUES`), without the rows `drop` names (but those whose `keep` column is 1); or None: Spark reads
    the files (too many values or rows, a column of another type, a file without it)."""
    column = only.column
    kind = _keyed_kind(schema, only)
    if kind is None:
        return None
    fid = int(schema[column].metadata["parquet.field.id"])
    keep_fid = int(schema[keep].metadata["parquet.field.id"]) if keep is not None else None
    plans: list[tuple[str, pq.FileMetaData, str, pa.Array, bool, list[int]]] = []
    budget = KEYED_READ_ROWS
    for path, stamp in files:
        values = only.per_file.get(path, only.values)
        try:
            value_set = pa.array([v for v in values if v is not None], kind)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):  # a value the column cannot hold
            return None
        meta = _file_meta(path, stamp)
        found = _column_of(meta, fid)
        if found is None:
            return None
        index, name = found
        nulls = None in values
        groups = [g for g in range(meta.num_row_groups) if _group_may_hold(meta, g, index, value_set, nulls)]
        sizes = [meta.row_group(g).num_rows for g in groups]
        budget -= sum(sizes)
        if budget < 0:
            return None
        plans.append((path, meta, name, value_set, nulls, groups))
    parts: list[pa.Table] = []
    decoded = 0
    needed = None
    if only.columns is not None:
        needed = {int(schema[c].metadata["parquet.field.id"]) for c in only.columns if c in schema.fieldNames()}
    for path, meta, name, value_set, nulls, groups in plans:
        reader = pq.ParquetFile(arrow_path(as_location(path)), metadata=meta)
        read = None  # every column; else those of `needed` the file has (the others are NULL: `_stored_part`)
        if needed is not None:
            read = [
                f.name
                for f in meta.schema.to_arrow_schema()
                if f.metadata and int(f.metadata.get(b"PARQUET:field_id", b"-1")) in needed
            ]
        starts = list(itertools.accumulate((meta.row_group(g).num_rows for g in range(meta.num_row_groups)), initial=0))
        gone = drop.get(path, frozenset())
        for g in groups:
            hits: list[pa.Array] = []  # the rows of the group holding a value, in order
            for start, batch in _group_batches(reader, g, [name]):
                keys = batch.column(0).cast(kind)
                decoded += len(keys)
                hit = pc.fill_null(pc.is_in(keys, value_set=value_set), False)
                if nulls:
                    hit = pc.or_(hit, pc.is_null(keys))
                hits.append(pc.add(pc.indices_nonzero(hit).cast(pa.int64()), start))
            found_rows = pa.concat_arrays(hits) if hits else pa.array([], pa.int64())
            numbers = pc.add(found_rows, starts[g])
            if gone and len(numbers):
                kept = pc.invert(pc.is_in(numbers, value_set=pa.array(sorted(gone), pa.int64())))
                if keep_fid is not None and not pc.all(kept).as_py():
                    signs = _column_of(meta, keep_fid)
                    if signs is not None:  # a file without the column holds no tombstone
                        marked = _group_rows(reader, g, [signs[1]], found_rows).column(0)
                        kept = pc.or_(kept, pc.fill_null(pc.equal(marked, 1), False))
                found_rows, numbers = found_rows.filter(kept), numbers.filter(kept)
            if not len(found_rows):  # no row of the values, or each one superseded
                continue
            rows = _group_rows(reader, g, read, found_rows)
            parts.append(_stored_part(schema, path, rows, numbers, positions=positions, gone=None, keep=keep))
    log.debug(
        "%d values of %s: %d rows of %d files read in this process (%d row groups, %d keys decoded)",
        len(only.values),
        column,
        sum(p.num_rows for p in parts),
        len(plans),
        sum(len(p[5]) for p in plans),
        decoded,
    )
    return parts


def _group_batches(
    reader: pq.ParquetFile, group: int, columns: list[str] | None
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """A row group's columns (all with None), `KEYED_GROUP_ROWS` rows at a time, each batch with the group's row
    number of its first row: whatever a row group's size, no more is decoded at once."""
    start = 0
    for batch in reader.iter_batches(batch_size=KEYED_GROUP_ROWS, row_groups=[group], columns=columns):
        yield start, batch
        start += batch.num_rows


def _group_rows(reader: pq.ParquetFile, group: int, columns: list[str] | None, rows: pa.Array) -> pa.Table:
    """The rows at these positions of a row group (ascending, at least one), decoded a batch at a time up to the
    batch of the last (`_group_batches`)."""
    last = rows[-1].as_py()
    pieces = []
    for start, batch in _group_batches(reader, group, columns):
        if start > last:
            break
        inside = rows.filter(pc.and_(pc.greater_equal(rows, start), pc.less(rows, start + batch.num_rows)))
        if len(inside):
            pieces.append(pa.Table.from_batches([batch]).take(pc.subtract(inside, start)))
    return pa.concat_tables(pieces)


def _column_of(meta: pq.FileMetaData, field_id: int) -> tuple[int, str] | None:
    """The index and name of the file's top-level column with this Iceberg field id, or None."""
    for index, f in enumerate(meta.schema.to_arrow_schema()):
        if f.metadata and f.metadata.get(b"PARQUET:field_id") == str(field_id).encode():
            return index, f.name
    return None


def _group_may_hold(meta: pq.FileMetaData, group: int, column: int, values: pa.Array, nulls: bool) -> bool:
    """Whether the row group may hold one of `values` (or a NULL, with `nulls`) in the column, by its statistics."""
    stats = meta.row_group(group).column(column).statistics
    if stats is None:
        return True
    if nulls and (not stats.has_null_count or stats.null_count > 0):
        return True
    if not stats.has_min_max:
        return True
    low, high = stats.min, stats.max
    for value in values.to_pylist():
        if type(value) is not type(low) or type(value) is not type(high):
            return True  # statistics of another kind (bytes for a string): they do not compare
        if low <= value <= high:
            return True
    return False


class _Relations:
    """Tiny files' relations kept for the next read of the same file versions and deletes: a DataFrame made from
    Arrow holds its rows in the JVM and serves any number of queries, so a repeated query neither converts nor
    ships them again. At most `rows` rows in all, the least recently used out first. An entry serves its own
    session only (a query's temporary view of it must be in the session that runs the query: loads and queries
    run in two, `spark_runner.query_memory`); an entry of a replaced JVM (`spark_runner.supervisor`) is never
    served."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self._held = 0
        # keyed by the session's identity; the entry holds the session, so no other object takes its id
        self._entries: OrderedDict[tuple[int, Hashable], tuple[object, DataFrame, int]] = OrderedDict()
        self._context: object = None  # the JVM of the entries
        self._lock = threading.Lock()

    def get(self, spark: SparkSession, key: Hashable) -> DataFrame | None:
        session = spark._jsparkSession
        with self._lock:
            self._same_jvm(spark)
            entry = self._entries.get((id(session), key))
            if entry is None or entry[0] is not session:
                return None
            self._entries.move_to_end((id(session), key))
            return entry[1]

    def put(self, spark: SparkSession, key: Hashable, df: DataFrame, rows: int) -> None:
        if rows > self.rows:
            return
        session = spark._jsparkSession
        with self._lock:
            self._same_jvm(spark)
            self._forget((id(session), key))
            self._entries[(id(session), key)] = (session, df, rows)
            self._held += rows
            while self._held > self.rows:
                self._forget(next(iter(self._entries)))

    def _same_jvm(self, spark: SparkSession) -> None:
        """A new JVM: every entry of the old one is gone."""
        context = spark.sparkContext._jsc
        if context is not self._context:
            self._entries.clear()
            self._held = 0
            self._context = context

    def _forget(self, key: tuple[int, Hashable]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._held -= entry[2]


RELATION_CACHE_ROWS = 400_000
_RELATIONS = _Relations(RELATION_CACHE_ROWS)


def _stamp(path: str) -> Stamp:
    """What tells one version of a file from another: a two-phase commit stamps its files' version in place
    (a new file moved over the old), so a cache keyed by path alone could serve the old rows."""
    return file_stamp(as_location(path))


@functools.lru_cache(maxsize=8192)
def _file_rows(path: str, stamp: Stamp) -> int:
    return int(_file_meta(path, stamp).num_rows)


def _meta_bytes(meta: pq.FileMetaData) -> int:
    """What a file's parsed footer keeps alive: about 8 times its serialized size (19 KB for 2.4 KB)."""
    return 8 * int(meta.serialized_size) + 2048


def _table_bytes(table: pa.Table) -> int:
    """What a tiny file's table keeps alive: its buffers, and about 2.5 KB a column of schema and C++ structures
    (a 4-row table of 8 columns: 22 KB)."""
    return int(table.nbytes) + 2560 * int(table.num_columns) + 2048


FILE_META_CACHE_BYTES = 8 << 20  # parsed footers (row-group statistics of the keyed reads)
TINY_FILE_CACHE_BYTES = 16 << 20  # tiny files' tables


@sized_cache(max_bytes=FILE_META_CACHE_BYTES, cost=_meta_bytes)
def _file_meta(path: str, stamp: Stamp) -> pq.FileMetaData:
    return pq.read_metadata(arrow_path(as_location(path)))


@sized_cache(max_bytes=TINY_FILE_CACHE_BYTES, cost=_table_bytes)
def _file_table(path: str, stamp: Stamp) -> pa.Table:
    """A tiny data file, read once per version of it (`_stamp`)."""
    return pq.read_table(arrow_path(as_location(path)))


def row_positions() -> list[Column]:
    """A Parquet row's data file (the plain path, as manifests and position delete files name it) and its row
    number in that file. Spark reports the file as a URI: `file:` comes off and %-escapes are decoded (a `+`
    is kept: `url_decode` would read it as a space). A warehouse through pyarrow (`tables/warehouse.py`) records
    URIs, a `file:` one as Hadoop writes it (`file:/abs`): that form stays."""
    local = "file:" if keeps_uris() else ""
    path = F.expr(f"url_decode(replace(regexp_replace(_metadata.file_path, '^file:(//)?', '{local}'), '+', '%2B'))")
    return [path.alias(FILE), F.col("_metadata.row_index").alias(ROW)]


# up to this many deleted positions are read in this process: a tiny file's are dropped before Spark sees its
# rows, a larger file's with a filter (no join, no extra Spark job); beyond it, an anti-join with the delete files
INLINE_DELETES = 20_000
INLINE_DELETED_FILES = 200  # ... of at most this many larger data files (one term of the filter each)
# Past this many positions the anti-join with the delete files is a sort-merge join (it spills), never a
# broadcast: Spark sizes the delete files on disk (a few MB for millions of positions, their file path column
# dictionary-encoded) and broadcast them, building a hash relation of ~400 bytes a position outside its
# memory limits. 1.6M positions (a 2M-row reload) filled a 512 MB heap and the JVM died in `SELECT count(*)`.
BROADCAST_DELETES = 100_000


@dataclass(frozen=True)
class Deleted:
    """The rows a table's position delete files name: the positions per data file when they are few (read in
    this process, `by_file`), else a DataFrame of `FILE`, `ROW` (possibly repeated) to join with (`frame`)."""

    by_file: Mapping[str, frozenset[int]] = field(default_factory=dict)
    frame: DataFrame | None = None
    positions: int = 0  # how many the delete files name (repeats included)


def deleted_positions(spark: SparkSession, handle: TableHandle) -> Deleted | None:
    """What the table's position delete files name, or None when it has none."""
    files = live_delete_files(handle.iceberg)
    if not files:
        return None
    paths = tuple(sorted(plain_path(f.file_path) for f in files))
    if sum(f.record_count for f in files) <= INLINE_DELETES:
        return Deleted(by_file=_positions_by_file(paths))
    schema = T.StructType([T.StructField("file_path", T.StringType()), T.StructField("pos", T.LongType())])
    frame = spark.read.schema(schema).parquet(*paths).selectExpr(f"file_path AS {FILE}", f"pos AS {ROW}")
    return Deleted(frame=frame, positions=sum(f.record_count for f in files))


def _by_file_bytes(by_file: Mapping[str, frozenset[int]]) -> int:
    return sum(256 + 48 * len(rows) for rows in by_file.values()) + 512


def _positions_bytes(positions: tuple[tuple[str, tuple[int, ...]], ...]) -> int:
    return sum(256 + 40 * len(rows) for _, rows in positions) + 256


DELETES_CACHE_BYTES = 16 << 20  # each of the two caches of deleted positions


@sized_cache(max_bytes=DELETES_CACHE_BYTES, cost=_by_file_bytes, max_entries=64)
def _positions_by_file(delete_files: tuple[str, ...]) -> Mapping[str, frozenset[int]]:
    """The positions these delete files name, per data file (the same sets for the same delete files: a cache
    key of `_local_rows` compares them)."""
    by_file: dict[str, set[int]] = {}
    for delete_file in delete_files:
        for path, rows in _positions_of(delete_file):
            by_file.setdefault(plain_path(path), set()).update(rows)
    return MappingProxyType({path: frozenset(rows) for path, rows in by_file.items()})


@sized_cache(max_bytes=DELETES_CACHE_BYTES, cost=_positions_bytes)
def _positions_of(delete_file: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The positions a delete file names, per data file (read once: a delete file never changes)."""
    table = pq.read_table(
        arrow_path(as_location(delete_file)), columns=["file_path", "pos"]
    )  # Spark's or pyarrow's: same columns
    by_file: dict[str, list[int]] = {}
    for path, pos in zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True):
        by_file.setdefault(path, []).append(pos)
    return tuple((path, tuple(rows)) for path, rows in by_file.items())


def live_rows(spark: SparkSession, handle: TableHandle, files: list[str] | None = None) -> DataFrame:
    """The rows of a positional table (or of the given data files) that no position delete names: one per key,
    no delete-signed rows. The tiny files' relation is kept for the next query of the same files (`scan_files`)."""
    return read_rowsets(spark, handle, files, deleted=deleted_positions(spark, handle), cache=True)


def lookup_rows(
    spark: SparkSession, handle: TableHandle, files: list[str] | None = None, *, only: KeyValues | None = None
) -> DataFrame:
    """What a merge-on-write load compares against: the rows not superseded (no position delete names them)
    plus every delete-signed row, superseded or not (a deleted key keeps its sequence; a tombstone is always
    position-deleted so that foreign readers do not see it, and a superseded one always loses the merge to
    the row that superseded it). With `FILE` and `ROW`. `only`: the caller needs only the rows of these values
    of a key column (`read_rowsets`)."""
    deleted = deleted_positions(spark, handle)
    return read_rowsets(spark, handle, files, positions=True, deleted=deleted, tombstones=True, only=only)


def merged_rows(
    spark: SparkSession, handle: TableHandle, *, show_hidden: bool = False, wanted: FileFilter | None = None
) -> DataFrame:
    """The table as queries see it: one row per key (unique), delete-signed keys hidden unless asked.

    A positional table reads its live rows and merges nothing; with `show_hidden` its winning delete-signed
    rows are shown too (merged with the live ones: the only merge left, for a debugging variable). With
    `wanted`, only the keys it asks for need be right (a query whose filter keeps no other): the files that
    cannot hold them stay unread.
    """
    table = handle.definition
    seq = q(SEQUENCE_COL) if table.has_sequence else None
    files = handle.data_files(wanted) if wanted is not None else None
    if table.positional and not show_hidden:
        df = live_rows(spark, handle, files)
    elif table.positional:
        df = merge_rows(lookup_rows(spark, handle, files).drop(FILE, ROW), table, q(VERSION_COL), sequence=seq)
    else:
        df = merge_rows(read_rowsets(spark, handle, files), table, q(VERSION_COL), sequence=seq)
    if table.is_unique and table.delete_sign and not show_hidden:
        df = df.where(f"{q(DELETE_SIGN)} = 0")
    columns = list(table.columns) + (list(table.shown_hidden_columns()) if show_hidden else [])
    return df.selectExpr(*[f"CAST({q(c.name)} AS {value_type_sql(c.type)}) AS {q(c.name)}" for c in columns])


class QueryViews:
    """The temporary views one statement's queries read, each a table's merged rows; dropped on exit.

    `sql.select.bind_tables` asks for a view per table reference and rewrites the tree to read it; the checked,
    rendered query then runs here (`frame`).
    """

    def __init__(self, spark: SparkSession) -> None:
        self.spark = query_session(spark)  # (`spark_runner.query_memory`)
        self.names: list[str] = []

    def __enter__(self) -> QueryViews:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.drop()
        except Exception:
            if exc is not None:  # as `JobGuard.__exit__`
                raise
            log.debug("the views of a statement went with its JVM", exc_info=True)  # (an INSERT ... SELECT committed)

    def merged_view(
        self,
        handle: TableHandle,
        *,
        show_hidden: bool,
        pinned: dict[str, list[Any]] | None = None,
        partitions: frozenset[int] | None = None,
    ) -> str:
        """A new view of the table's merged rows (`merged_rows`); returns its name. `pinned`: the only values of
        some key columns the query can keep (its filter says so); the view then reads only the files that may
        hold them: their buckets' (when every distribution column is pinned) and those whose bounds can.
        `partitions`: the only Doris partitions it reads (named, or all its filter can keep)."""
        view = f"__v_{uuid.uuid4().hex}"
        wanted = None
        if pinned or partitions is not None:
            wanted = FileFilter(
                buckets=key_buckets(self.spark, handle.definition, pinned) if pinned else None,
                values=tuple((column, tuple(values)) for column, values in (pinned or {}).items()),
                partitions=partitions,
            )
        merged_rows(self.spark, handle, show_hidden=show_hidden, wanted=wanted).createOrReplaceTempView(view)
        self.names.append(view)
        return view

    def frame(self, text: str, *, names_from: str, value_bytes: int = 10 * 1024 * 1024) -> DataFrame:
        """The query `text` as a DataFrame, with the column names of `names_from`, the same query as the caller
        wrote it (`text` may wrap calls in checks that rename its columns; naming analyses only: nothing runs)."""
        frame = self.spark.sql(text)
        check_query_memory(frame, value_bytes=value_bytes)
        if text != names_from:
            frame = frame.toDF(*self.spark.sql(names_from).columns)
        return frame

    def drop(self) -> None:
        for view in self.names:
            self.spark.catalog.dropTempView(view)
        self.names.clear()


def query_width(frame: DataFrame) -> int:
    """The number of columns of an analysed query (nothing runs)."""
    return len(frame.columns)


def first_value(frame: DataFrame) -> Any:
    """The first column of the query's first row.

    Raises:
        SqlError: Spark could not compute it (the first line of its error).
    """
    try:
        return frame.collect()[0][0]
    except PySparkException as exc:
        raise SqlError(str(exc).splitlines()[0]) from None


def rows_per_bucket(spark: SparkSession, handle: TableHandle) -> dict[int, int]:
    """Stored rows (all versions) per bucket: the hash of the key modulo the bucket count, as loads write."""
    table = handle.definition
    keys = [F.col(q(k)) for k in table.distribution_columns]
    if not handle.data_files():
        return {}
    df = read_rowsets(spark, handle)
    bucket = F.pmod(F.hash(*keys), F.lit(table.buckets)) if keys else F.lit(0)
    return {int(r[0]): int(r[1]) for r in df.groupBy(bucket.alias("b")).count().collect()}


_MYSQL_TYPES: list[tuple[type[T.DataType], str]] = [
    (T.ByteType, "TINYINT"),
    (T.ShortType, "SMALLINT"),
    (T.IntegerType, "INT"),
    (T.LongType, "BIGINT"),
    (T.FloatType, "FLOAT"),
    (T.DoubleType, "DOUBLE"),
    (T.DecimalType, "DECIMAL"),
    (T.StringType, "VARCHAR"),
    (T.DateType, "DATE"),
    (T.TimestampNTZType, "DATETIME"),
    (T.TimestampType, "DATETIME"),
    (T.BooleanType, "BOOLEAN"),
]


def mysql_type_name(t: T.DataType) -> str:
    for cls, name in _MYSQL_TYPES:
        if isinstance(t, cls):
            return name
    return t.simpleString().upper()


def render_value(value: Any) -> Any:
    """A result value as Doris's HTTP SQL endpoint shows it: dates as strings, other values as scalars."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ", timespec="microseconds" if value.microsecond else "seconds")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        exponent = value.as_tuple().exponent
        return int(value) if isinstance(exponent, int) and exponent >= 0 else float(value)
    return str(value)


@dataclass(frozen=True)
class ResultSet:
    columns: list[tuple[str, str]]
    rows: list[list[Any]]
    time_ms: int


DEFAULT_MAX_RESULT_BYTES = 256 * 1024 * 1024


def collect_result(df: DataFrame, *, limit: int | None = None, max_bytes: int | None = None) -> ResultSet:
    """Run a query DataFrame and render its rows and metadata: at most `limit` rows and `max_bytes` bytes
    (estimated as Spark holds them, `query_memory.bounded_rows`).

    Raises:
        SqlError: the result is larger than `max_bytes`.
    """
    start = time.monotonic()
    if max_bytes is None:
        data = df.limit(limit).collect() if limit is not None else df.collect()
    else:
        data = bounded_rows(df, limit, max_bytes)
    meta = [(f.name, mysql_type_name(f.dataType)) for f in df.schema.fields]
    rows = [[render_value(v) for v in row] for row in data]
    return ResultSet(columns=meta, rows=rows, time_ms=int((time.monotonic() - start) * 1000))


class JobGuard:
    """The Spark jobs of one statement, under one job tag: cancelled past a deadline or when asked.

    Spark cancels only jobs already running, so once cancelled the watcher keeps cancelling the tag until
    the statement ends (a statement may start several jobs). Job tags belong to the calling thread.
    """

    _running: set[JobGuard] = set()  # every statement running in this process (`cancel_all`)
    _running_lock = threading.Lock()

    def __init__(self, spark: SparkSession, *, timeout_seconds: float) -> None:
        self.spark = spark
        self.tag = f"sl-statement-{uuid.uuid4().hex}"
        self.deadline = time.monotonic() + timeout_seconds
        self.reason: str | None = None
        self._done = threading.Event()
        self._tagged = False
        self._watcher = threading.Thread(target=self._watch, name=self.tag, daemon=True)

    def __enter__(self) -> JobGuard:
        try:
            self.spark.sparkContext.addJobTag(self.tag)
        except Exception:  # no JVM (stopped, being replaced): nothing to tag; a Spark call of the statement fails
            log.debug("statement %s runs without a job tag", self.tag, exc_info=True)
            return self
        self._tagged = True
        self._watcher.start()
        with JobGuard._running_lock:
            JobGuard._running.add(self)
        return self

    @classmethod
    def cancel_all(cls, reason: str) -> int:
        """Cancel every running statement (`cancel`); returns how many were running."""
        with cls._running_lock:
            running = list(cls._running)
        for guard in running:
            guard.cancel(reason)
        return len(running)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._done.set()
        overdue.returned(self.tag)
        if not self._tagged:
            return
        with JobGuard._running_lock:
            JobGuard._running.discard(self)
        try:
            self.spark.sparkContext.removeJobTag(self.tag)
        except Exception:
            if exc is not None:  # a failed statement's error is then the stopped JVM's (`statement_error`)
                raise
            # it succeeded as the JVM stopped: its tags went with it, and its outcome stands (an INSERT committed)
            log.debug("statement %s: its job tag went with its JVM", self.tag, exc_info=True)
        finally:
            self._watcher.join()

    def cancel(self, reason: str) -> None:
        """Cancel the statement's jobs, now and any it starts later."""
        if self.reason is None:
            self.reason = reason

    def _watch(self) -> None:
        while not self._done.wait(0.2 if self.reason else max(0.0, min(self.deadline - time.monotonic(), 0.2))):
            if self.reason is None and time.monotonic() >= self.deadline:
                self.reason = "timeout"
            if self.reason is not None:
                overdue.cancelled(self.tag, f"statement {self.tag}")  # until it returns (`supervisor`)
                try:
                    self.spark.sparkContext.cancelJobsWithTag(self.tag)
                except Exception:  # a stopped JVM has no jobs left: the statement fails on its own
                    log.warning("cancelling the jobs of %s failed", self.tag, exc_info=True)
                    return


_RAISED = re.compile(r"\[USER_RAISED_EXCEPTION\]\s*(.*?)\s*(?:SQLSTATE|$)", re.S)


def statement_error(exc: Exception, guard: JobGuard, text: str) -> SqlError:
    """A failed statement's error: the cancellation reason first, then a cap's own text, then the cause's."""
    if guard.reason == "timeout":
        return SqlError(f"query timeout, query id = {guard.tag}")
    if guard.reason is not None:
        return SqlError(guard.reason)
    if (raised := _RAISED.search(str(exc))) is not None:
        return SqlError(raised[1].strip())  # a growth cap (`sql.select.cap_growth`) or the query's raise_error
    if isinstance(exc, SqlError):
        return exc
    if isinstance(exc, DorisError):  # a LoadError's message is its text, without the [CODE]
        return SqlError(exc.message)
    if isinstance(exc, PySparkException):
        return SqlError(str(exc).strip().splitlines()[0])
    # the JVM died under the statement (out of memory, killed): Doris's answer when no backend is alive
    connection_lost = isinstance(exc, ConnectionError | Py4JError) and not isinstance(exc, Py4JJavaError)
    if connection_lost and backend_stopped(guard.spark, wait=1.0):
        return SqlError(NO_BACKEND_FOR_QUERY)
    # anything unexpected still gets the FE's error shape; the trace goes to the log
    # the statement's own text can hold values a user would not want in a log (a literal, a password): only its
    # first word and its size are logged, with the job tag that names it in Spark's UI and log
    verb = text.lstrip().split(None, 1)[0].upper()[:16] if text.strip() else ""
    log.exception("statement %s failed: %s, %d characters", guard.tag, verb or "(empty)", len(text))
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return SqlError(f"{type(exc).__name__}: {first}")
