"""Small CSV bodies as an inline table: split in Python exactly as the text path splits them, handed to
Spark as one `VALUES` list (a local relation: no file listing, no scan), then the same load job.

A one-row load spends a sizeable part of its time reading its own few bytes through Spark's file
source; the rows, as literals, skip that. The split is the text path's, step by step:
    lines     the body split at `line_delimiter`, the empty piece after a final delimiter dropped
              (Hadoop's line reader), every line keeping its position for `skip_lines` and ordering
    skip      lines at positions below `skip_lines`, then empty lines
    fields    the line split at `column_separator` with every empty field kept (Java's split, limit -1);
              fields past the line's end are NULL, the field count is kept for the count check
Bodies with `enclose` / `escape`, a UTF-8 byte-order mark, bytes that are not UTF-8, or more than
`MAX_LINES` lines / `MAX_BYTES` bytes take the file path (`load_job.csv_source`).
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from spark_runner.planning import LoadPlan
from spark_runner.sqltext import lit

MAX_BYTES = 16 * 1024
MAX_LINES = 256
BOM = "\ufeff"

Line = tuple[int, str, list[str]]  # position, line, fields


def split_body(path: Path, plan: LoadPlan) -> list[Line] | None:
    """The body's lines as the text path reads them, or None when it must take the file path."""
    req = plan.request
    if req.format != "csv" or req.enclose or req.escape:
        return None
    if path.stat().st_size > MAX_BYTES:
        return None
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.startswith(BOM):
        return None
    lines = text.split(req.line_delimiter)
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) > MAX_LINES:
        return None
    return [
        (pos, line, line.split(req.column_separator))
        for pos, line in enumerate(lines)
        if pos >= req.skip_lines and line != ""
    ]


def inline_source(spark: SparkSession, lines: list[Line], plan: LoadPlan, columns: list[str]) -> DataFrame | None:
    """The lines as a relation with `columns` = position, line, field count and the raw fields (NULL past
    the line's end); None when there is no line (an inline table needs one)."""
    if not lines:
        return None
    n = len(plan.source_fields)
    rows = []
    for pos, line, parts in lines:
        values = [lit(p) for p in parts[:n]] + ["CAST(NULL AS STRING)"] * (n - len(parts))
        rows.append(f"({pos}L, {lit(line)}, {len(parts)}, {', '.join(values)})")
    return spark.sql(f"SELECT * FROM VALUES {', '.join(rows)} AS inline({', '.join(columns)})")
