"""Spark SQL text for load and merge steps: one `selectExpr` per step instead of thousands of JVM calls.

Every identifier is quoted and every literal escaped here; user expressions arrive already rendered by
`loaders.expressions` from an allow-listed tree.
"""

from __future__ import annotations

from tables.model import ColumnDef
from tables.types import DorisType


def q(name: str) -> str:
    """A quoted identifier: dots, spaces and backticks are part of the name."""
    return "`" + name.replace("`", "``") + "`"


def lit(text: str) -> str:
    """A string literal (Spark processes backslash escapes in literals)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def storage_type_sql(t: DorisType) -> str:
    """The Spark SQL type a column is stored as (matches `DorisType.iceberg_type`)."""
    if t.name in ("TINYINT", "SMALLINT", "INT"):
        return "INT"
    if t.name == "LARGEINT":
        return "DECIMAL(38,0)"
    if t.name == "DECIMAL":
        return f"DECIMAL({t.precision},{t.scale})"
    if t.name == "DATETIME":
        return "TIMESTAMP_NTZ"
    if t.name in ("CHAR", "VARCHAR", "STRING"):
        return "STRING"
    return t.name  # BIGINT, FLOAT, DOUBLE, DATE, BOOLEAN


def value_type_sql(t: DorisType) -> str:
    """The Spark SQL type values are converted to (narrow integers keep their width)."""
    if t.name in ("TINYINT", "SMALLINT"):
        return t.name
    return storage_type_sql(t)


INTEGER_TEXT = r"^\s*[-+]?\d+\s*$"


def convert_sql(raw: str, t: DorisType, *, from_text: bool = True) -> str:
    """Convert a value to the column type; NULL when it does not convert (Doris's non-strict rule).

    `from_text` says the value is a payload field (a string): integer columns then refuse fractions.
    """
    if t.is_string:
        return f"CAST({raw} AS STRING)"
    if t.name == "BOOLEAN":
        text = f"lower(trim(CAST({raw} AS STRING)))"
        return f"CASE WHEN {text} IN ('true', '1') THEN true WHEN {text} IN ('false', '0') THEN false END"
    converted = f"try_cast({raw} AS {value_type_sql(t)})"
    if t.is_integer and t.name != "LARGEINT" and from_text:
        # Text that prints back unchanged ("42", "-7") is an integer; only other text needs the regex
        # (which is the rule; the first test only skips it for the common case).
        text = f"CAST({raw} AS STRING)"
        return (
            f"CASE WHEN CAST({converted} AS STRING) = {text} THEN {converted} "
            f"WHEN {text} RLIKE {lit(INTEGER_TEXT)} THEN {converted} END"
        )
    return converted


def default_sql(col: ColumnDef) -> str:
    """The column DEFAULT converted to the column type (CURRENT_TIMESTAMP included), else NULL."""
    if col.default is None:
        return f"CAST(NULL AS {value_type_sql(col.type)})"
    if col.default_is_current_timestamp:
        return convert_sql("CAST(current_timestamp() AS TIMESTAMP_NTZ)", col.type, from_text=False)
    return convert_sql(lit(col.default), col.type)
