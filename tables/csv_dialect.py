"""The CSV dialect of a load: the object every CSV reader of a load reads, which also picks the path a staged
body takes (a spec that crosses layers, so it lives here beside `LoadRequest`; `\\N` is NULL).

A CSV body takes one of two paths (`spark_runner.load_job.csv_source`):
    fast       the server splits the body itself (`spark_runner.arrow_csv`), exactly as the general path
               splits it, and hands Spark the raw fields: inline (a `VALUES` relation) when the body is
               small, as a Parquet file beside the staged body when it is large;
    general    Spark reads the lines (its text source) and splits each one, with `from_csv` when
               `enclose` / `escape` protect separators.
The fast path is taken only where it cannot differ (`CsvDialect.path_for`): one staged file, no `enclose` /
`escape`, a size in one of the two bands set by the settings. What only the bytes tell (a UTF-8 byte-order
mark, bytes that are not UTF-8, no line at all) sends the body back to the general path while it is split.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tables.load_spec import LoadRequest

NULL_MARKER = "\\N"
BOM = b"\xef\xbb\xbf"  # Spark's line reader drops it; the fast path leaves such a body to it


class CsvPath(StrEnum):
    """Where a CSV body is split, and how its fields reach Spark."""

    INLINE = "fast inline"  # split by the server, handed over as a VALUES relation
    PARQUET = "fast parquet"  # split by the server, handed over as a Parquet file
    GENERAL = "general"  # split by Spark, line by line


@dataclass(frozen=True)
class CsvDialect:
    """How one load frames its CSV: built once from the `LoadRequest`, read by every path."""

    column_separator: str
    line_delimiter: str
    enclose: str | None
    escape: str | None
    trim_double_quotes: bool
    empty_field_as_null: bool
    skip_lines: int
    field_count: int  # the source fields a line should have (the `columns` header's, else the table's)
    inline_max_bytes: int
    inline_max_lines: int
    parquet_min_bytes: int

    @classmethod
    def of(cls, request: LoadRequest, field_count: int) -> CsvDialect:
        limits = request.limits
        return cls(
            column_separator=request.column_separator,
            line_delimiter=request.line_delimiter,
            enclose=request.enclose,
            escape=request.escape,
            trim_double_quotes=request.trim_double_quotes,
            empty_field_as_null=request.empty_field_as_null,
            skip_lines=request.skip_lines,
            field_count=field_count,
            inline_max_bytes=limits.csv_inline_max_bytes,
            inline_max_lines=limits.csv_inline_max_lines,
            parquet_min_bytes=limits.csv_parquet_min_bytes,
        )

    @property
    def quoted(self) -> bool:
        """`enclose` or `escape` set: a separator may be part of a field, which only Spark's CSV parser knows."""
        return bool(self.enclose or self.escape)

    def path_for(self, size: int | None) -> CsvPath:
        """The path of a body of `size` bytes; None for several files (a group commit's directory, a glob).

        Bodies between the two bands take the general path: for them the split costs as much as it saves.
        """
        if size is None or self.quoted:
            return CsvPath.GENERAL
        if size <= self.inline_max_bytes:
            return CsvPath.INLINE
        if size >= self.parquet_min_bytes:
            return CsvPath.PARQUET
        return CsvPath.GENERAL
