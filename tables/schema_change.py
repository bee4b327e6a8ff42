"""Light schema change: metadata-only column operations on the Iceberg schema.

Columns are read by Iceberg field id, so a rename keeps a column's values, a dropped column's values
are never read again (a re-added name gets a new field id), and a widened type reads old files as is.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table.update.schema import UpdateSchema

from tables.model import ColumnDef


@dataclass(frozen=True)
class AddColumn:
    column: ColumnDef


@dataclass(frozen=True)
class DropColumn:
    name: str


@dataclass(frozen=True)
class RenameColumn:
    old: str
    new: str


@dataclass(frozen=True)
class WidenColumn:
    column: ColumnDef  # the column with its new type


SchemaOp = AddColumn | DropColumn | RenameColumn | WidenColumn


def apply_ops(update: UpdateSchema, ops: list[SchemaOp]) -> None:
    """Stage the operations on an Iceberg schema update (all columns optional, as Spark writes them)."""
    for op in ops:
        if isinstance(op, AddColumn):
            # a tuple: Doris allows `.` in a column name, which a string path would read as nesting
            update.add_column((op.column.name,), op.column.type.iceberg_type(), required=False)
        elif isinstance(op, DropColumn):
            update.delete_column(op.name)
        elif isinstance(op, RenameColumn):
            update.rename_column(op.old, op.new)
        else:
            update.update_column(op.column.name, field_type=op.column.type.iceberg_type())
