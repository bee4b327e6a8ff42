"""Merge-on-write in Iceberg's terms: a load finds the stored rows of its keys and supersedes them by position.

    lookup      the stored rows a load compares against (`queries.lookup_rows`): live rows and tombstones, with
                their data file and row number; only the winner per key of those matching the load's keys counts
    decide      per incoming row (one per key after the load's own merge): it wins unless the stored winner has
                a larger sequence (NULL lowest; a tie goes to the load, the later version: Doris's rule). In
                the job of a partial update (or of a small load of many rows), or for a few rows in the
                server's process once the job has computed them (`pair_rows`), a winner is written and the
                stored row it beats is named in a position delete file; a loser is not written at all. A
                large load writes every row, then pairs them with the stored rows of their keys (`resolve`)
                as the re-check below does
    re-check    at the commit, rows that other commits added since the lookup (loads, a compaction's output) are
                compared with the load's written rows the same way (`resolve`): the loser of each pair, on
                either side, is position-deleted. Two-phase loads, written before their commit order is known,
                are checked against the whole table at their commit.

The comparison is `merge.sequence_order`, the one ordering of the sequenced merge; the version breaks ties
(incoming rows are always the later version).
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_runner.arrow_frames import arrow_frame
from spark_runner.buckets import value_buckets
from spark_runner.merge import beats, later_wins, latest_per_key, order_key, sequence_order
from spark_runner.queries import FILE, KEYED_READ_VALUES, ROW, KeyValues, read_rowsets, stored_rows_of
from spark_runner.sqltext import lit, q
from spark_runner.types import storage_schema, storage_type
from tables.catalog import TableHandle
from tables.model import DELETE_SIGN, SEQUENCE_COL, VERSION_COL, TableDef
from tables.row_delta import DELETE_FILE_PREFIX, write_position_deletes
from tables.rowsets import FileFilter, wanted_values
from tables.sized_cache import sized_cache
from tables.warehouse import Location, arrow_path, as_location, child_of, delete_dir, list_dirs, list_files, move

WINS = "__wins"  # an incoming row beats the stored winner of its key (or there is none)
STORED_FILE = "__sfile"
STORED_POS = "__spos"
_FIELD_IDS = {"file_path": 2147483546, "pos": 2147483545}


# a join of a small load's rows with the stored rows of their keys, both in one partition: a hash join of the two
# as they are, in the job's one stage (a broadcast join runs a job of its own to build and ship its table, and AQE
# splits the exchanges of a sort-merge join into jobs: most of the time of a one-row load into a large table)
LOCAL_JOIN = "shuffle_hash"


def keys_match(table: TableDef, left: Callable[[int, str], str], right: Callable[[int, str], str]) -> str:
    """SQL: two rows' keys are equal, `left(i, key)` and `right(i, key)` naming each side's key column. A NOT NULL
    key column (it never held a NULL: no ALTER makes a nullable column NOT NULL) compares with `=`, the others with
    `<=>` (a NULL key is a key). A join on `=` leaves its output partitioned by the key, which the aggregate and
    the join after it keep: on `<=>` Spark partitions by expressions of the key, and a partial update's job
    shuffled the table's rows twice more (a 5M-row partial update of a 4M-row table: 40 s, 32 s on `=`)."""
    return " AND ".join(
        f"{left(i, k)} {'<=>' if (c := table.column(k)) is None or c.nullable else '='} {right(i, k)}"
        for i, k in enumerate(table.key_columns)
    )


def stored_winners(stored: DataFrame, incoming: DataFrame, table: TableDef, *, local: bool = False) -> DataFrame:
    """The stored winner of each key the load writes: the lookup rows of those keys merged by sequence and
    version (a key may have superseded tombstones beside its winner). `local`: `stored` holds only rows of the
    load's keys, a few, and the winners go to a join in one partition (`LOCAL_JOIN`)."""
    keys = list(table.key_columns)
    if local:  # the stored rows of the load's keys only: a winner of another key would join no incoming row
        matched = stored.coalesce(1)
    else:
        on = keys_match(table, lambda _, k: f"s.{q(k)}", lambda _, k: f"i.{q(k)}")
        wanted = incoming.selectExpr(*[q(k) for k in keys]).alias("i")
        matched = stored.alias("s").join(wanted, on=F.expr(on), how="left_semi")
    seq = q(SEQUENCE_COL) if table.has_sequence else None
    return latest_per_key(matched, keys, sequence_order(seq, q(VERSION_COL)))


def supersede_positions(
    spark: SparkSession, handle: TableHandle, mine: list[str], theirs: list[str], *, mine_is_later: bool = True
) -> DataFrame:
    """The re-check: rows of the data files `mine` against the rows of the data files `theirs`, key by key;
    returns the positions (`file_path`, `pos`) of each pair's loser (either side). `mine_is_later` says whose
    rows carry the later versions (a load against what committed before it; a compaction's output is the
    earlier side against the loads that committed while it ran).

    Rows are compared as stored, position deletes aside: every row a commit adds beats the winner of its key
    at that commit, so the rows of a key, in commit order, only grow in (sequence, version); a row deleted
    meanwhile loses to a later one, and deleting the loser of every pair leaves exactly the largest row."""
    columns = _compared(handle.definition)
    a = read_rowsets(spark, handle, mine, positions=True).selectExpr(*[q(c) for c in columns])
    b = read_rowsets(spark, handle, theirs, positions=True).selectExpr(*[q(c) for c in columns])
    return _losers(handle.definition, a, b, FILE, mine_is_later).withColumnsRenamed({FILE: "file_path", ROW: "pos"})


def _losers(table: TableDef, mine: DataFrame, theirs: DataFrame, file: str, mine_is_later: bool) -> DataFrame:
    """The loser's (`file`, `ROW`) of each pair of rows of one key, one of `mine` and one of `theirs`."""
    on = keys_match(table, lambda _, k: f"a.{q(k)}", lambda _, k: f"b.{q(k)}")
    pairs = mine.alias("a").join(theirs.alias("b"), on=F.expr(on))
    seq_a = f"a.{q(SEQUENCE_COL)}" if table.has_sequence else "NULL"
    seq_b = f"b.{q(SEQUENCE_COL)}" if table.has_sequence else "NULL"
    a_wins = beats(table, seq_a, seq_b) if mine_is_later else f"NOT ({beats(table, seq_b, seq_a)})"
    return pairs.selectExpr(f"IF({a_wins}, b.{file}, a.{file}) AS {file}", f"IF({a_wins}, b.{ROW}, a.{ROW}) AS {ROW}")


# A data file's number in the re-check of many rows (`supersede_by_number`), where its path would be a ~100-byte
# string carried through the shuffle, the sort and the merge of both sides' rows: found by the hash of the file's
# name (every writer names its files with a fresh UUID), and turned back into the path as the deletes are written.
# Measured on 2 cores, a 5M-row load against a 4M-row table: 10.8 s with the paths (in one task: 16.3 s), ~5 s so.
FILE_NUMBER = "__fno"
_FILE_HASH = "__fhash"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]+")  # a name Spark reports as it is (`_metadata.file_name` is decoded)


def file_numbers(spark: SparkSession, files: Sequence[str]) -> dict[int, int] | None:
    """The hash of each file's name as Spark computes it from `_metadata.file_name` -> the file's index in
    `files`; None when two names or hashes are equal, or a name is not plain."""
    names = [PurePosixPath(path).name for path in files]
    if len(set(names)) != len(names) or not all(_PLAIN_NAME.fullmatch(name) for name in names):
        return None
    frame = arrow_frame(spark, pa.table({"n": names}), T.StructType([T.StructField("n", T.StringType())]))
    hashes = [row[0] for row in frame.selectExpr("xxhash64(n)").collect()]  # folded: no Spark job
    return dict(zip(hashes, range(len(files)), strict=True)) if len(set(hashes)) == len(hashes) else None


def supersede_by_number(
    spark: SparkSession,
    handle: TableHandle,
    mine: list[str],
    theirs: list[str],
    directory: Location,
    *,
    mine_is_later: bool = True,
) -> list[str] | None:
    """`supersede_positions` and `write_deletes` for many rows, each row's file named by its number
    (`FILE_NUMBER`) until the deletes are written; None when the files cannot be numbered so (`file_numbers`), or
    the table's reads change the compared columns (a stored DELETE predicate, a column added with a default)."""
    table = handle.definition
    compared = [c for c in table.all_columns() if c.name in _compared(table)]
    if table.delete_predicates or any(c.since_version and c.default is not None for c in compared):
        return None
    paths = sorted(dict.fromkeys([*mine, *theirs]))  # a number's order is its path's: deletes sort by path
    numbers = file_numbers(spark, paths)
    if numbers is None:
        return None
    schema = storage_schema([(c, handle.field_id(c.name)) for c in compared])

    def rows(files: list[str]) -> DataFrame:  # as stored, position deletes aside, as `read_rowsets` reads them
        return (
            spark.read.schema(schema)
            .parquet(*files)
            .select(
                *[F.col(q(c.name)) for c in compared],
                F.expr("xxhash64(_metadata.file_name)").alias(_FILE_HASH),
                F.col("_metadata.row_index").alias(ROW),
            )
        )

    losers = _losers(table, rows(mine), rows(theirs), _FILE_HASH, mine_is_later)
    number_of = arrow_frame(
        spark,
        pa.table({_FILE_HASH: list(numbers), FILE_NUMBER: list(numbers.values())}),
        T.StructType([T.StructField(_FILE_HASH, T.LongType()), T.StructField(FILE_NUMBER, T.LongType())]),
    )
    numbered = losers.join(F.broadcast(number_of), _FILE_HASH).select(FILE_NUMBER, ROW)
    named = numbered.sortWithinPartitions(FILE_NUMBER, ROW).select(
        F.col(FILE_NUMBER),
        F.expr(f"element_at(array({', '.join(lit(p) for p in paths)}), CAST({FILE_NUMBER} AS INT) + 1)").alias(
            "file_path"
        ),
        F.col(ROW).alias("pos"),
    )
    return _write_delete_parts(named, directory, by=FILE_NUMBER)


def _compared(table: TableDef) -> list[str]:
    return [*table.key_columns, *([SEQUENCE_COL] if table.has_sequence else []), FILE, ROW]


# below this many rows on both sides the re-check runs in the server's process: a Spark job in the commit
# turn of a one-row load costs more than the load (concurrent small loads of one table re-check each other)
DRIVER_RECHECK_ROWS = 100_000


def supersede_in_driver(handle: TableHandle, mine: list[str], theirs: list[str], *, mine_is_later: bool) -> pa.Table:
    """`supersede_positions` for a few rows, with pyarrow and a dict: the same rule (`beats`) in Python."""
    table = handle.definition
    wanted = tuple(handle.field_id(c) for c in (*table.key_columns, *([SEQUENCE_COL] if table.has_sequence else [])))
    width = len(table.key_columns)
    paths: list[str] = []
    positions: list[int] = []
    my_rows_of = [(path, _keyed_rows(path, wanted, width)) for path in mine]
    # each small file read once and kept (`_keyed_rows`); of a larger one (a compaction's), only the rows holding
    # my keys: read whole, it was read again by every re-check until the table passed `DRIVER_RECHECK_ROWS` (a
    # group commit's re-check of a table compacted into a 60,000-row file: half the server's Python, and the
    # async loads/s of a 60-s run fell by a quarter)
    small = [path for path in theirs if _row_count(path) <= CACHED_FILE_ROWS]
    their_rows = [(path, _keyed_rows(path, wanted, width)) for path in small]
    large = [path for path in theirs if _row_count(path) > CACHED_FILE_ROWS]
    if large:
        their_rows += _keyed_rows_of_keys(handle, large, {key[0] for _, keyed in my_rows_of for key in keyed}) or [
            (path, _read_keyed_rows(path, wanted, width)) for path in large
        ]
    for my_path, my_keyed in my_rows_of:
        for key, my_rows in my_keyed.items():
            for their_path, keyed in their_rows:
                for their_seq, their_pos in keyed.get(key, ()):
                    for my_seq, my_pos in my_rows:
                        pair = (my_path, my_seq, my_pos), (their_path, their_seq, their_pos)
                        _pair_loser(table, *pair, mine_is_later, paths, positions)
    return _positions(paths, positions)


def _keyed_rows_of_keys(
    handle: TableHandle, files: list[str], values: set[Any]
) -> list[tuple[str, dict[tuple[Any, ...], list[tuple[Any, int]]]]] | None:
    """`_keyed_rows` of these files, of only the rows whose first key column holds one of `values`
    (`_stored_of_keys`); None when they cannot be read so."""
    stored = _stored_of_keys(handle, files, values) if values else {}
    if stored is None:
        return None
    by_file: dict[str, dict[tuple[Any, ...], list[tuple[Any, int]]]] = {path: {} for path in files}
    for key, rows in stored.items():
        for sequence, _, path, position in rows:
            by_file.setdefault(path, {}).setdefault(key, []).append((sequence, position))
    return list(by_file.items())


# a load (`pair_rows`) or a re-check (`supersede_keyed`) of at most this many rows reads, of the other side's
# files, only the rows holding its keys, in this process: a small load into a large table meets a few stored rows
KEYED_RECHECK_ROWS = KEYED_READ_VALUES


def supersede_keyed(handle: TableHandle, mine: list[str], theirs: list[str], *, mine_is_later: bool) -> pa.Table | None:
    """`supersede_in_driver` for a few rows of `mine` against data files of any size: of `theirs`, only the rows
    holding the first key column's values of `mine` are read (`_stored_of_keys`). None when they cannot be read so."""
    table = handle.definition
    compared = [*table.key_columns, *([SEQUENCE_COL] if table.has_sequence else [])]
    wanted = tuple(handle.field_id(c) for c in compared)
    my_rows = [(path, _keyed_rows(path, wanted, len(table.key_columns))) for path in mine]
    their_rows = _stored_of_keys(handle, theirs, {key[0] for _, keyed in my_rows for key in keyed})
    if their_rows is None:
        return None
    paths: list[str] = []
    positions: list[int] = []
    for my_path, keyed in my_rows:
        for key, mine_of_key in keyed.items():
            for their_seq, _, their_path, their_pos in their_rows.get(key, ()):
                for my_seq, my_pos in mine_of_key:
                    _pair_loser(
                        table,
                        (my_path, my_seq, my_pos),
                        (their_path, their_seq, their_pos),
                        mine_is_later,
                        paths,
                        positions,
                    )
    return _positions(paths, positions)


def can_pair(table: TableDef) -> bool:
    """Whether `pair_rows` may read the stored rows of a load's keys: its first key column is an integer or a
    string (`queries.KEYED_READ_VALUES`); for others the lookup stays in the load's job, where Spark's reader
    skips row groups by the keys as literals."""
    first = next(c for c in table.all_columns() if c.name == table.key_columns[0])
    return isinstance(storage_type(first.type), (T.IntegerType, T.LongType, T.StringType))


def pair_rows(handle: TableHandle, theirs: list[str], rows: pa.Table) -> tuple[pa.Table, pa.Table] | None:
    """A small load's rows (its job's result: one per key, in storage columns, not yet written) decided against the
    stored rows of their keys in the data files `theirs`, as stored (`_stored_of_keys`), as a lookup in its job
    decides them: a row that does not beat the largest stored row of its key is not written; the largest stored
    row of a key a row beats is position-deleted (the others were superseded by it already). Returns the rows to
    write and the positions to delete; None when the stored rows cannot be read so (the load is then resolved
    after its write: `resolve`)."""
    table = handle.definition
    keys = list(table.key_columns)
    if not rows.num_rows:
        return rows, _positions([], [])
    stored = _stored_of_keys(handle, theirs, set(rows.column(keys[0]).to_pylist()))
    if stored is None:
        return None
    mine = rows.select([*keys, *([SEQUENCE_COL] if table.has_sequence else [])]).to_pylist()
    kept: list[bool] = []
    paths: list[str] = []
    positions: list[int] = []
    for row in mine:
        found = stored.get(tuple(row[k] for k in keys))
        if not found:
            kept.append(True)
            continue
        seq, _, path, pos = max(found, key=lambda r: order_key(r[0], r[1]))
        wins = later_wins(table, row.get(SEQUENCE_COL), seq)
        kept.append(wins)
        if wins:
            paths.append(path)
            positions.append(pos)
    return rows.filter(pa.array(kept, pa.bool_())), _positions(paths, positions)


def _stored_of_keys(
    handle: TableHandle, files: list[str], values: set[Any]
) -> dict[tuple[Any, ...], list[tuple[Any, int, str, int]]] | None:
    """The rows of these data files whose first key column holds one of `values`, as stored (position deletes
    aside), by key: (sequence, version, file, position) each; read in the server's process
    (`queries.stored_rows_of`: the row groups whose key statistics may hold them, their key, sequence and version
    decoded), or None when they cannot be read so."""
    table = handle.definition
    keys = list(table.key_columns)
    compared = [*keys, *([SEQUENCE_COL] if table.has_sequence else []), VERSION_COL]
    columns = [(c, handle.field_id(c.name)) for c in table.all_columns() if c.name in compared]
    per_file: dict[str, tuple[Any, ...]] = {}  # a file of one bucket may hold only that bucket's values
    buckets = value_buckets(table, values) if tuple(table.distribution_columns) == (keys[0],) else None
    if buckets is not None:
        by_bucket: dict[int, list[Any]] = {}
        for value, bucket in buckets.items():
            by_bucket.setdefault(bucket, []).append(value)
        listed = tuple((b, tuple(v)) for b, v in sorted(by_bucket.items()))
        per_file = wanted_values(handle.iceberg, FileFilter(values=((keys[0], tuple(values)),), by_bucket=listed))
    only = KeyValues(keys[0], tuple(values), per_file=per_file, columns=tuple(compared))
    parts = stored_rows_of(storage_schema(columns), files, only) if values else []
    if parts is None:
        return None
    out: dict[tuple[Any, ...], list[tuple[Any, int, str, int]]] = {}
    for part in parts:
        for row in part.to_pylist():
            found = (row.get(SEQUENCE_COL), row[VERSION_COL], row[FILE], row[ROW])
            out.setdefault(tuple(row[k] for k in keys), []).append(found)
    return out


def _pair_loser(
    table: TableDef,
    mine: tuple[str, Any, int],
    theirs: tuple[str, Any, int],
    mine_is_later: bool,
    paths: list[str],
    positions: list[int],
) -> None:
    """Append the position of the loser of a pair of rows of one key, (file, sequence, position) each."""
    later, earlier = (mine[1], theirs[1]) if mine_is_later else (theirs[1], mine[1])
    won = later_wins(table, later, earlier)
    loser = theirs if (won if mine_is_later else not won) else mine
    paths.append(loser[0])
    positions.append(loser[2])


def _positions(paths: list[str], positions: list[int]) -> pa.Table:
    return pa.table({"file_path": pa.array(paths, pa.string()), "pos": pa.array(positions, pa.int64())})


def _keyed_rows(path: str, wanted: tuple[int, ...], width: int) -> dict[tuple[Any, ...], list[tuple[Any, int]]]:
    """A data file's rows by key: (sequence, position) each. A small file is read once: a data file's keys and
    sequences never change (a two-phase commit restamps only the version), so a small load's commit reads only
    the small files new to it; the cache holds files of at most `CACHED_FILE_ROWS` rows, `KEYED_ROWS_CACHE_BYTES`
    in all."""
    if _row_count(path) <= CACHED_FILE_ROWS:
        return _cached_keyed_rows(path, wanted, width)
    return _read_keyed_rows(path, wanted, width)


CACHED_FILE_ROWS = 1000


def _keyed_bytes(keyed: dict[tuple[Any, ...], list[tuple[Any, int]]]) -> int:
    """What a file's keyed rows keep alive: about 250 bytes a row (its key, its sequence and position)."""
    return 1024 + 250 * sum(len(rows) for rows in keyed.values())


KEYED_ROWS_CACHE_BYTES = 16 << 20


@sized_cache(max_bytes=KEYED_ROWS_CACHE_BYTES, cost=_keyed_bytes)
def _cached_keyed_rows(path: str, wanted: tuple[int, ...], width: int) -> dict[tuple[Any, ...], list[tuple[Any, int]]]:
    return _read_keyed_rows(path, wanted, width)


def _read_keyed_rows(path: str, wanted: tuple[int, ...], width: int) -> dict[tuple[Any, ...], list[tuple[Any, int]]]:
    # one open of the file (its footer read once), its columns to Python column by column: ~3x faster than a read
    # of the schema, then of the table, then a dict per row (a group commit's re-check reads its own new file)
    with pq.ParquetFile(arrow_path(as_location(path))) as parquet:
        # by Iceberg field id, as Spark reads them: a renamed column keeps its id, not its name
        ids = {int(f.metadata[b"PARQUET:field_id"]): f.name for f in parquet.schema_arrow if f.metadata}
        data = parquet.read(columns=[ids[i] for i in wanted if i in ids], use_threads=False)
    # a file written before the sequence column was added (ENABLE FEATURE) has none: NULL
    columns = [data.column(ids[i]).to_pylist() if i in ids else [None] * data.num_rows for i in wanted]
    sequences = columns[width] if len(columns) > width else [None] * data.num_rows
    out: dict[tuple[Any, ...], list[tuple[Any, int]]] = {}
    for pos, (key, sequence) in enumerate(zip(zip(*columns[:width], strict=True), sequences, strict=True)):
        out.setdefault(key, []).append((sequence, pos))
    return out


@functools.lru_cache(maxsize=4096)
def _row_count(path: str) -> int:
    return int(pq.read_metadata(arrow_path(as_location(path))).num_rows)


def write_deletes(positions: DataFrame, directory: Location) -> list[str]:
    """Write position delete rows (`file_path`, `pos`) computed by Spark as sorted Parquet files named
    `delete-*.parquet` in `directory` (the load's own directory), one per data file and partition of
    `positions` (a hash of the path splits them); returns the files."""
    named = positions.select(F.xxhash64("file_path").alias(_FILE_HASH), "file_path", "pos")
    return _write_delete_parts(named.sortWithinPartitions(_FILE_HASH, "file_path", "pos"), directory, by=_FILE_HASH)


def _write_delete_parts(positions: DataFrame, directory: Location, *, by: str | None = None) -> list[str]:
    """Each partition of `positions` (`file_path`, `pos`, sorted) as a position delete file in `directory`; with
    `by` (a column the rows are sorted by first), one file per value of it: a file naming one data file is in
    that file's table partition as it is (`row_delta.split_by_partition` rewrote 4M positions in ~3 s)."""
    out = positions.select(
        *([by] if by else []),
        *[F.col(name).alias(name, metadata={"parquet.field.id": fid}) for name, fid in _FIELD_IDS.items()],
    )
    scratch = child_of(directory, f"_deletes-{uuid.uuid4().hex}")
    (out.write.partitionBy(by) if by else out.write).mode("errorifexists").parquet(str(scratch))
    files: list[str] = []
    parts = [*list_files(scratch, "*.parquet"), *[f for d in list_dirs(scratch) for f in list_files(d, "*.parquet")]]
    for part in parts:
        if pq.read_metadata(arrow_path(part)).num_rows == 0:
            continue  # nothing superseded: no delete file (an empty one crashes DuckDB's reader)
        target = child_of(directory, f"{DELETE_FILE_PREFIX}{uuid.uuid4()}.parquet")
        move(part, target)
        files.append(str(target))
    delete_dir(scratch)
    return files


def resolve(
    spark: SparkSession,
    handle: TableHandle,
    mine: list[str],
    theirs: list[str],
    directory: Location,
    *,
    mine_is_later: bool = True,
) -> list[str]:
    """The commit-time re-check (see the module docstring), written as position delete files in `directory`."""
    if not mine or not theirs:
        return []
    found = None
    if sum(_row_count(p) for p in (*mine, *theirs)) <= DRIVER_RECHECK_ROWS:
        found = supersede_in_driver(handle, mine, theirs, mine_is_later=mine_is_later)
    elif sum(_row_count(p) for p in mine) <= KEYED_RECHECK_ROWS:
        found = supersede_keyed(handle, mine, theirs, mine_is_later=mine_is_later)
    if found is not None:
        written = write_position_deletes(directory, found)
        return [written] if written else []
    numbered = supersede_by_number(spark, handle, mine, theirs, directory, mine_is_later=mine_is_later)
    if numbered is not None:
        return numbered
    positions = supersede_positions(spark, handle, mine, theirs, mine_is_later=mine_is_later)
    return write_deletes(positions, directory)


def decision_columns(table: TableDef) -> list[str]:
    """The stored columns a merge-on-write decision needs (a partial update also reads the values it fills)."""
    return [
        *table.key_columns,
        *([SEQUENCE_COL] if table.has_sequence else []),
        VERSION_COL,
        *([DELETE_SIGN] if table.delete_sign else []),
        FILE,
        ROW,
    ]
