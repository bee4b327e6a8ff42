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
        # The rule is the regex; the first test only skips it for the common case, text exactly as long as its
        # value printed ("42", "-7"). `try_cast` takes digits with an optional sign, trimmed of blanks and of
        # control characters, which the rule refuses: text it takes that is not its value printed is longer.
        text = f"CAST({raw} AS STRING)"
        printed = _printed_length(converted, INTEGER_DIGITS[value_type_sql(t)])
        return (
            f"CASE WHEN octet_length({text}) = {printed} THEN {converted} "
            f"WHEN {text} RLIKE {lit(INTEGER_TEXT)} THEN {converted} END"
        )
    return converted


INTEGER_DIGITS = {"TINYINT": 3, "SMALLINT": 5, "INT": 10, "BIGINT": 19}  # digits of the type's widest value


def _printed_length(value: str, digits: int) -> str:
    """The length of an integer `value` printed (a sign and its digits), by comparisons: printing it to compare
    the text with (`CAST(... AS STRING)`), a string per field and row, cost ~0.3 s of a 5M-row load's job
    (standalone; bench/README, session 34)."""
    positive = " ".join(f"WHEN {value} < {10**k} THEN {k}" for k in range(1, digits))
    negative = " ".join(f"WHEN {value} > -{10**k} THEN {k + 1}" for k in range(1, digits))
    signed = f"CASE {negative} ELSE {digits + 1} END"
    return f"CASE WHEN {value} >= 0 THEN CASE {positive} ELSE {digits} END ELSE {signed} END"


def default_sql(col: ColumnDef) -> str:
    """The column DEFAULT converted to the column type (CURRENT_TIMESTAMP included), else NULL."""
    if col.default is None:
        return f"CAST(NULL AS {value_type_sql(col.type)})"
    if col.default_is_current_timestamp:
        return convert_sql("CAST(current_timestamp() AS TIMESTAMP_NTZ)", col.type, from_text=False)
    return convert_sql(lit(col.default), col.type)
