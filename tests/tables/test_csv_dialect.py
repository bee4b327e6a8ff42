"""`tables.csv_dialect.CsvDialect`: built once from a `LoadRequest`, it picks the path of a CSV body."""

from __future__ import annotations

from typing import Any

import pytest

from tables.csv_dialect import CsvDialect, CsvPath
from tables.load_spec import InputLimits, LoadRequest

SIZES = InputLimits(csv_inline_max_bytes=100, csv_inline_max_lines=5, csv_parquet_min_bytes=1000)


def dialect(**options: Any) -> CsvDialect:
    request = LoadRequest(db="d", table="t", label="l", limits=SIZES, **options)
    return CsvDialect.of(request, field_count=3)


@pytest.mark.parametrize(
    ("options", "size", "path"),
    [
        ({}, 0, CsvPath.INLINE),
        ({}, 100, CsvPath.INLINE),
        ({}, 101, CsvPath.GENERAL),  # between the two sizes: Spark splits it
        ({}, 999, CsvPath.GENERAL),
        ({}, 1000, CsvPath.PARQUET),
        ({}, None, CsvPath.GENERAL),  # several files: a group commit's directory, a broker load's glob
        ({"enclose": '"'}, 10, CsvPath.GENERAL),  # only Spark's CSV parser knows a quoted separator
        ({"escape": "\\"}, 5000, CsvPath.GENERAL),
        ({"column_separator": "||", "line_delimiter": "\r\n", "skip_lines": 2}, 50, CsvPath.INLINE),
        ({"trim_double_quotes": True, "empty_field_as_null": True}, 5000, CsvPath.PARQUET),
    ],
)
def test_path_for(options: dict[str, Any], size: int | None, path: CsvPath) -> None:
    assert dialect(**options).path_for(size) is path


def test_dialect_reads_the_request_and_its_sizes() -> None:
    got = dialect(column_separator=",", line_delimiter="\r\n", skip_lines=1, trim_double_quotes=True)
    assert (got.column_separator, got.line_delimiter, got.skip_lines, got.field_count) == (",", "\r\n", 1, 3)
    assert (got.trim_double_quotes, got.empty_field_as_null, got.quoted) == (True, False, False)
    assert (got.inline_max_bytes, got.inline_max_lines, got.parquet_min_bytes) == (100, 5, 1000)


def test_settings_pass_the_sizes_down() -> None:
    from app.settings import Settings

    limits = Settings(csv_inline_max_bytes=-1, csv_inline_max_lines=7, csv_parquet_min_bytes=0).input_limits()
    assert (limits.csv_inline_max_bytes, limits.csv_inline_max_lines, limits.csv_parquet_min_bytes) == (-1, 7, 0)
