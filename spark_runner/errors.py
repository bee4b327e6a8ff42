"""Spark errors translated where they are caught, into load errors users can read."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.errors import AnalysisException, PySparkException

from loaders.errors import AnalysisError, LoadError


@contextmanager
def spark_errors() -> Iterator[None]:
    """Turn Spark analysis and execution errors into `LoadError`s with Doris's codes."""
    try:
        yield
    except AnalysisException as exc:
        raise AnalysisError(_first_line(str(exc))) from exc
    except PySparkException as exc:
        raise LoadError(_first_line(str(exc))) from exc


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
