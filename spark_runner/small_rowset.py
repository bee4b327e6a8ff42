"""A tiny rowset's file written from the Spark job's result, without Spark's file-commit protocol.

For a load of a few rows, Spark's Parquet write (output committer, temporary directories, task and job
commits, writer set-up) costs more than computing the rows. The Spark job still produces the rowset:
its rows come back as Arrow (`toArrow`, the job's action, which also fills the load's observations)
and are written as one Parquet file the way Spark writes it: one file even when no row is left, Spark's
nullability and physical types, Iceberg field ids, snappy pages, the job's row order (sorted by key).
Only inline sources (a small CSV body split by the server, `arrow_csv`; INSERT ... VALUES) qualify: their size
is known to be small.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from spark_runner.arrow_frames import collect_arrow
from tables.model import VERSION_COL
from tables.partitions import PARTITION_COL
from tables.warehouse import Location, arrow_path, child_of, make_dirs

if TYPE_CHECKING:
    import pyarrow as pa

FIELD_ID = b"PARQUET:field_id"
_MARK = "_sl_small_source"
_ROWS = "_sl_source_rows"


def mark_small(source: DataFrame, rows: int | None = None) -> DataFrame:
    """Mark a load source as small (an inline relation of a few rows): its rowset may take `write_collected`.
    `rows`: how many rows it holds, when the server built it and knows."""
    setattr(source, _MARK, True)
    setattr(source, _ROWS, rows)
    return source


def is_small(source: DataFrame) -> bool:
    return bool(getattr(source, _MARK, False))


def known_rows(source: DataFrame) -> int | None:
    """The rows of a small source the server built, if it knows them (`mark_small`)."""
    rows = getattr(source, _ROWS, None)
    return rows if isinstance(rows, int) else None


def write_collected(
    out: DataFrame,
    directory: Location,
    *,
    version: int,
    decision: Sequence[str] = (),
    decide: Callable[[pa.Table], tuple[pa.Table, pa.Table] | None] | None = None,
    collected: pa.Table | None = None,
    optional: Collection[str] = (),
) -> tuple[list[str], pa.Table | None]:
    """Run `out` (the rowset, one partition) and write its rows to a new `directory`, with `version` in
    the version column (the job leaves it 0, so its generated code does not change from load to load);
    returns the file, and the position delete rows when `out` carries a merge-on-write `decision` (the
    columns: the row wins, the stored file and row it beats): only winning rows are written. `decide`
    makes that decision in the server's process instead (`mow.pair_rows`: the rows to write and the positions
    to delete, or None when it cannot, and the position delete rows are None). `collected`: the rows of `out`
    already collected (`arrow_frames.collect_local`): `out` is not run again. `optional`: columns written as
    nullable whatever `out` says (those a merge in Spark's plan would have made nullable)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    spark_fields = {f.name: f for f in out.schema.fields}
    rows = collect_arrow(out) if collected is None else collected
    positions: pa.Table | None = None
    if decision:
        wins, stored_file, stored_pos = decision
        rows = rows.filter(rows.column(wins))
        beaten = rows.filter(pa.compute.is_valid(rows.column(stored_file)))
        positions = pa.table({"file_path": beaten.column(stored_file), "pos": beaten.column(stored_pos)})
        rows = rows.drop_columns(list(decision))
    elif decide is not None and (decided := decide(rows)) is not None:
        rows, positions = decided
    if VERSION_COL in rows.column_names:
        at = rows.column_names.index(VERSION_COL)
        rows = rows.set_column(at, VERSION_COL, pa.array([version] * rows.num_rows, pa.int64()))
    schema = pa.schema(
        [
            pa.field(
                f.name,
                f.type,
                nullable=spark_fields[f.name].nullable or f.name in optional,
                metadata={FIELD_ID: str(spark_fields[f.name].metadata["parquet.field.id"]).encode()},
            )
            for f in rows.schema
        ]
    )
    make_dirs(directory, exist_ok=False)  # like Spark's `errorifexists`
    rows = rows.cast(schema)
    pieces: list[tuple[str, pa.Table]] = [("", rows)]
    if PARTITION_COL in rows.column_names:  # a file holds one partition's rows (`tables.partitions`)
        ids = rows.column(PARTITION_COL)
        pieces = [(f"p{pid}-", rows.filter(pa.compute.equal(ids, pid))) for pid in ids.unique().to_pylist()]
    files = []
    for prefix, piece in pieces:
        if piece.num_rows == 0:  # every row lost to a stored one (sequence column) or was deleted: no empty file
            continue
        path = child_of(directory, f"{prefix}part-00000-{uuid.uuid4()}-c000.snappy.parquet")
        # decimals of precision <= 18 as INT32 / INT64, as Spark writes them
        pq.write_table(piece, arrow_path(path), compression="snappy", store_decimal_as_integer=True)
        files.append(str(path))
    return files, positions
