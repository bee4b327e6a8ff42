"""Buckets in the files: each data file of a bucketed table (`TableDef.bucketed`) holds one bucket, or says that it
holds several.

A row's bucket is `pmod(hash(distribution columns), buckets)` over its stored values: the partition Spark's
`repartition(buckets, columns)` sends it to, so a big rowset written with one Spark partition per bucket has one
bucket per task. The bucket is written into the file as `BUCKET_COL` (an Iceberg column no statement sees, the
source of the table's identity partition field), so the file's partition comes from its own statistics when it is
registered. Spark's writer splits each task's rows by bucket (`partitionBy` on a copy of the column), so a file
holds one bucket however the job's last shuffle partitioned them (a small load's one task writes a file per
bucket); the files are then moved out of Spark's partition directories, their bucket in their names. A tiny
rowset written in the server's process (`small_rowset`) is one file of any bucket: NULL there, the partition of
"any bucket", which every lookup reads.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_runner.columns import named
from spark_runner.sqltext import lit, q, storage_type_sql
from tables.catalog import TableHandle
from tables.model import BUCKET_COL, TableDef
from tables.partitions import PARTITION_COL, auto_id_sql, partition_sql, range_splits
from tables.types import DorisType
from tables.warehouse import Location, child_of, delete_dir, list_dirs, list_files, move, name_of

_SPLIT = "__sl_bucket"  # the copy Spark's writer splits by (and drops from the files)


def bucket_sql(table: TableDef, *, per_bucket: bool) -> str:
    """SQL for a row's bucket (every bucket is 0 in a one-bucket table), or NULL without `per_bucket` (a file of
    several buckets). The values are hashed in their storage
    types (an INT key and a BIGINT one hash differently), whatever types the row has yet."""
    if table.buckets == 1:
        return "CAST(0 AS INT)"
    if not per_bucket or not table.distribution_columns:
        return "CAST(NULL AS INT)"
    values = ", ".join(_stored_sql(table, table.distribution_columns))
    return f"CAST(pmod(hash({values}), {table.buckets}) AS INT)"


def _stored_sql(table: TableDef, columns: Iterable[str]) -> list[str]:
    by_name = {c.name: c for c in table.all_columns()}
    return [f"CAST({q(c)} AS {storage_type_sql(by_name[c].type)})" for c in columns]


def stored_values(table: TableDef, columns: Iterable[str]) -> list[Column]:
    """The columns in their storage types: `repartition(buckets, *stored_values(...))` puts a row in the Spark
    partition numbered by its bucket (Spark's hash partitioning is `pmod(hash(...), n)`)."""
    return [F.expr(sql) for sql in _stored_sql(table, columns)]


def with_bucket(df: DataFrame, table: TableDef, field_id: int, *, per_bucket: bool) -> DataFrame:
    """`df` (the rowset's stored columns) with `BUCKET_COL` added, carrying its Iceberg field id."""
    return df.withColumn(BUCKET_COL, named(BUCKET_COL, bucket_sql(table, per_bucket=per_bucket), field_id))


def with_partition(df: DataFrame, table: TableDef, field_ids: dict[str, int]) -> DataFrame:
    """`df` with `PARTITION_COL` added when the files get it (`stored_field_ids`): the id of the row's partition,
    computed from its partition columns (a row no partition holds was filtered before)."""
    if PARTITION_COL not in field_ids or table.partitioning is None:
        return df
    metadata = {"parquet.field.id": field_ids[PARTITION_COL]}
    return with_partition_id(df, table, PARTITION_COL, metadata=metadata)


_VALUE = "__sl_pvalue"
_SLOT = "__sl_pslot"


def with_partition_id(
    df: DataFrame,
    table: TableDef,
    name: str,
    *,
    ids: AbstractSet[int] | None = None,
    metadata: dict[str, Any] | None = None,
) -> DataFrame:
    """`df` with column `name`: the id of the partition (of `ids`, when given) holding each row, NULL for none.

    A one-column RANGE partitioning is a binary search (Spark's `Bucketizer` over the bounds on a number line,
    `tables.partitions.range_splits`): a CASE over hundreds of ranges defeats Spark's code generation (~10 µs a
    row for 366 daily partitions, against ~0.1 µs). LIST and multi-column ranges are a CASE (`partition_sql`).
    """
    assert table.partitioning is not None
    placed = _existing_partition(df, table, name, ids)
    if table.partitioning.auto and ids is None:  # a row no partition holds gets the one it needs
        columns = [q(c) for c in table.partitioning.columns]
        auto = F.expr(auto_id_sql(table.partitioning, columns, table.partition_types()))
        placed = placed.withColumn(name, F.coalesce(F.col(name), auto))
    return placed.withColumn(name, F.col(name).alias(name, metadata=metadata or {}))


def _existing_partition(df: DataFrame, table: TableDef, name: str, ids: AbstractSet[int] | None) -> DataFrame:
    assert table.partitioning is not None
    types = table.partition_types()
    found = range_splits(table.partitioning, types, ids)
    if found is None:
        columns = [q(c) for c in table.partitioning.columns]
        return df.withColumn(name, F.expr(partition_sql(table.partitioning, columns, types, ids=ids)))
    splits, owners = found
    # NULL sorts below every value, as Doris places it: in the first range, when that starts at MINVALUE
    value = f"coalesce({_number_sql(q(table.partitioning.columns[0]), types[0])}, CAST('-Infinity' AS DOUBLE))"
    step = _even_step(splits)
    if step is not None:  # evenly spaced bounds (days, hours, integer ranges): the slot is arithmetic
        first, inner = splits[1], len(splits) - 3  # slots 1..inner lie between splits[1] and splits[-2]
        slot = (
            f"CASE WHEN {_VALUE} < {first!r} THEN 0 WHEN {_VALUE} >= {splits[-2]!r} THEN {inner + 1} "
            f"ELSE CAST(floor(({_VALUE} - {first!r}) / {step!r}) AS INT) + 1 END"
        )
        placed = df.withColumn(_VALUE, F.expr(value)).withColumn(_SLOT, F.expr(slot))
    else:
        from pyspark.ml.feature import Bucketizer

        search = Bucketizer(splits=splits, inputCol=_VALUE, outputCol=_SLOT, handleInvalid="keep")
        placed = search.transform(df.withColumn(_VALUE, F.expr(value)))
    return placed.withColumn(name, F.expr(_slot_owner(owners))).drop(_VALUE, _SLOT)


MAX_RUNS = 32  # slot ranges of one id offset beyond which a slot's owner is read from an array


def _even_step(splits: list[float]) -> float | None:
    """The spacing of the finite splits when it is one (at least two intervals), else None."""
    inner = splits[1:-1]
    if len(inner) < 3:
        return None
    step = inner[1] - inner[0]
    return step if all(b - a == step for a, b in zip(inner, inner[1:], strict=False)) else None


def _slot_owner(owners: list[int | None]) -> str:
    """SQL for the partition id of slot `_SLOT`: runs of slots whose id is the slot plus a constant (partitions
    made in the order of their ranges) as a short CASE; an array of ids past `MAX_RUNS` runs (analysing a
    literal array of a thousand ids costs a load ~85 ms)."""
    runs: list[list[int]] = []  # [first slot, last slot, id - slot]
    for at, owner in enumerate(owners):
        if owner is None:
            continue
        if runs and runs[-1][1] == at - 1 and runs[-1][2] == owner - at:
            runs[-1][1] = at
        else:
            runs.append([at, at, owner - at])
    slot = f"CAST({_SLOT} AS INT)"
    if len(runs) <= MAX_RUNS:
        cases = " ".join(f"WHEN {slot} BETWEEN {a} AND {b} THEN {slot} + {d}" for a, b, d in runs)
        return f"CAST(CASE {cases} END AS INT)" if runs else "CAST(NULL AS INT)"
    slots = "array(" + ", ".join("CAST(NULL AS INT)" if o is None else str(o) for o in owners) + ")"
    return f"element_at({slots}, {slot} + 1)"


def _number_sql(column: str, t: DorisType) -> str:
    """A range partition column's value on the number line of `tables.partitions.number_of`."""
    if t.name == "DATE":
        return f"CAST(unix_date({column}) AS DOUBLE)"
    if t.name == "DATETIME":  # whole seconds: every bound is a whole second, so the floor sorts the same
        return (
            f"CAST(unix_date(CAST({column} AS DATE)) AS DOUBLE) * 86400 + hour({column}) * 3600 "
            f"+ minute({column}) * 60 + second({column})"
        )
    return f"CAST({column} AS DOUBLE)"


def stored_field_ids(handle: TableHandle, table: TableDef | None = None) -> dict[str, int]:
    """The Iceberg field id of every stored column (the table's columns, hidden ones and, when it is bucketed,
    `BUCKET_COL`, and when it is partitioned `PARTITION_COL`: the files get these columns exactly when this holds
    them), for the handle's definition or `table`."""
    table = table or handle.definition
    ids = {c.name: handle.field_id(c.name) for c in table.all_columns()}
    names = {f.name: f.field_id for f in handle.iceberg.schema().fields}
    if table.bucketed and BUCKET_COL in names:
        ids[BUCKET_COL] = names[BUCKET_COL]
    if table.partitioned and PARTITION_COL in names:
        ids[PARTITION_COL] = names[PARTITION_COL]
    return ids


def write_rows(out: DataFrame, directory: Location, *, sort: Iterable[str], buckets: int = 0) -> None:
    """Write the rowset's rows into a new `directory` as Parquet, sorted by `sort` within each file; rows with a
    bucket column (`with_bucket`) are written one bucket per file (several, where the bucket is NULL).

    `buckets`: the number of buckets when the rows were repartitioned one Spark partition per bucket. When that
    repartition is the plan's only exchange, each task holds one bucket already and writes its file as is;
    otherwise Spark's writer splits each task's rows by bucket, which makes the sort `(bucket, key)` and costs a
    big load ~15% (a constant first sort key defeats Spark's prefix sort)."""
    order = [F.col(q(c)) for c in sort]
    partitioned = PARTITION_COL in out.columns
    if BUCKET_COL not in out.columns or (not partitioned and buckets > 1 and one_bucket_per_task(out, buckets)):
        (out.sortWithinPartitions(*order) if order else out).write.mode("errorifexists").parquet(str(directory))
        return
    tag = F.col(q(BUCKET_COL))
    if partitioned:  # a file holds one bucket of one partition: `p10001-b3-part-...`
        bucket = F.coalesce(tag.cast("string"), F.lit("x"))
        tag = F.concat(F.lit("p"), F.col(q(PARTITION_COL)).cast("string"), F.lit("-b"), bucket)
    split = out.withColumn(_SPLIT, tag).sortWithinPartitions(F.col(_SPLIT), *order)
    split.write.partitionBy(_SPLIT).mode("errorifexists").parquet(str(directory))
    _flatten(directory)


def one_bucket_per_task(df: DataFrame, buckets: int) -> bool:
    """Whether the plan's only exchange is a repartition into `buckets` partitions by hash (`stored_values`):
    then Spark partition `i` holds the rows of bucket `i`, and every task writes one bucket. Read off the
    physical plan before adaptive execution (which may remove an exchange, never add one)."""
    plan = str(df._jdf.queryExecution().sparkPlan().toString())  # noqa: SLF001 (no public API for the plan)
    exchanges = re.findall(r"Exchange [^\n]*", plan)
    return len(exchanges) == 1 and bool(re.search(rf"hashpartitioning\(.*, {buckets}\), REPARTITION_BY_NUM", plan))


def _flatten(directory: Location) -> None:
    """Move the files out of Spark's partition directories (`__sl_bucket=3/`), the bucket in their names (an
    object store copies each: a URI warehouse, `tables/warehouse.py`)."""
    for part in list_dirs(directory, f"{_SPLIT}=*"):
        tag = name_of(part).split("=", 1)[1]
        prefix = f"b{tag}-" if tag.isdigit() else f"{tag}-" if tag.startswith("p") else "bx-"
        for path in list_files(part, "*.parquet"):
            move(path, child_of(directory, f"{prefix}{name_of(path)}"))
        delete_dir(part)  # Spark's checksum files


MAX_KEYS = 64  # combinations of values beyond which every bucket is read


def key_buckets(spark: SparkSession, table: TableDef, pinned: dict[str, list[Any]]) -> frozenset[int] | None:
    """The buckets of rows whose columns hold the `pinned` values (every combination, evaluated by Spark's constant
    folding: no job), or None, every bucket, when a distribution column is not pinned or holds NULL."""
    columns = table.distribution_columns
    if not table.bucketed or table.buckets <= 1 or not columns or any(c not in pinned for c in columns):
        return None
    combos = list(itertools.islice(itertools.product(*[pinned[c] for c in columns]), MAX_KEYS + 1))
    if len(combos) > MAX_KEYS or any(v is None for combo in combos for v in combo):
        return None
    if not combos:
        return frozenset()
    by_name = {c.name: c for c in table.all_columns()}
    exprs = []
    for combo in combos:
        casts = ", ".join(
            f"CAST({_literal(v)} AS {storage_type_sql(by_name[c].type)})" for c, v in zip(columns, combo, strict=True)
        )
        exprs.append(f"pmod(hash({casts}), {table.buckets})")
    try:
        row = spark.sql("SELECT " + ", ".join(exprs)).collect()[0]
    except PySparkException:  # a value its column's type cannot hold: no row can equal it, but read every bucket
        return None
    return frozenset(int(v) for v in row)


def _literal(value: Any) -> str:
    return str(int(value)) if isinstance(value, int) else lit(str(value))


# Spark's `hash` (Murmur3, x86 32-bit, seed 42) in Python, for the integer and string types: a small load's keys
# get their buckets in the server's process (`value_buckets`), with neither a Spark job nor a query to plan
_M32 = 0xFFFFFFFF
_SEED = 42
_INTEGERS = ("TINYINT", "SMALLINT", "INT")
_STRINGS = ("CHAR", "VARCHAR", "STRING")


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix_k1(k1: int) -> int:
    return (_rotl((k1 * 0xCC9E2D51) & _M32, 15) * 0x1B873593) & _M32


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _M32


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    return h1 ^ (h1 >> 16)


def spark_hash(value: int | str, kind: str) -> int:
    """Spark's `hash(value)` of one non-NULL value stored as a 32-bit integer (`kind` "int"), a 64-bit one
    ("long") or a string ("string"), as the signed 32-bit integer Spark returns."""
    if kind == "int":
        h1 = _fmix(_mix_h1(_SEED, _mix_k1(int(value) & _M32)), 4)
    elif kind == "long":
        number = int(value) & 0xFFFFFFFFFFFFFFFF
        h1 = _fmix(_mix_h1(_mix_h1(_SEED, _mix_k1(number & _M32)), _mix_k1(number >> 32)), 8)
    else:
        raw = str(value).encode()
        aligned = len(raw) - len(raw) % 4
        h1 = _SEED
        for at in range(0, aligned, 4):
            h1 = _mix_h1(h1, _mix_k1(int.from_bytes(raw[at : at + 4], "little")))
        for byte in raw[aligned:]:  # each trailing byte as a signed int, one at a time (Spark's own variant)
            h1 = _mix_h1(h1, _mix_k1((byte - 256 if byte > 127 else byte) & _M32))
        h1 = _fmix(h1, len(raw))
    return h1 - (1 << 32) if h1 > 0x7FFFFFFF else h1


def value_buckets(table: TableDef, values: Iterable[Any]) -> dict[Any, int] | None:
    """The bucket of each value of a table hashed by one column of an integer or string type (`bucket_sql`:
    `pmod(hash(column), buckets)`); None for another table, type or a NULL value."""
    columns = table.distribution_columns
    if not table.bucketed or table.buckets <= 1 or len(columns) != 1:
        return None
    name = {c.name: c for c in table.all_columns()}[columns[0]].type.name
    kind = "int" if name in _INTEGERS else "long" if name == "BIGINT" else "string" if name in _STRINGS else None
    wanted = list(values)
    if kind is None or any(v is None or isinstance(v, bool) for v in wanted):
        return None
    if not all(isinstance(v, str if kind == "string" else int) for v in wanted):
        return None
    return {v: spark_hash(v, kind) % table.buckets for v in wanted}  # Python's % is pmod for a positive modulus
