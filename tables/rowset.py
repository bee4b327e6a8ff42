"""Rowset files after they are written: stamping a precommitted rowset with the version of its commit.

A two-phase load writes its rows before it knows its version (the commit order decides it), so its
files carry a placeholder; the commit rewrites the version column in place. Only that one constant
column changes; the Parquet field ids and every other column are kept as written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tables.model import VERSION_COL
from tables.warehouse import arrow_path, as_location


def restamp_version(files: list[str], version: int) -> None:
    """Set the version column of every row of these files to `version` (atomically per file)."""
    for name in files:
        location = as_location(name)
        table = pq.read_table(arrow_path(location))
        index = table.schema.get_field_index(VERSION_COL)
        if index < 0:
            raise ValueError(f"{name} has no {VERSION_COL} column")
        field = table.schema.field(index)
        column = pa.array([version] * table.num_rows, type=field.type)
        table = table.set_column(index, field, column)
        if not isinstance(location, Path):
            # a URI warehouse (tables/warehouse.py): an object store replaces an object whole on its PUT
            pq.write_table(table, arrow_path(location))
            continue
        tmp = location.with_name(f".restamp-{location.name}")
        pq.write_table(table, tmp)
        os.replace(tmp, location)
        # Spark verifies a file against its `.crc` sibling when one exists: the old one no longer matches
        location.with_name(f".{location.name}.crc").unlink(missing_ok=True)
