"""Spark errors translated where they are caught, into load errors users can read."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException, PySparkException

from tables.errors import AnalysisError, LoadError


@contextmanager
def spark_errors() -> Iterator[None]:
    """Turn Spark analysis and execution errors into `LoadError`s with Doris's codes."""
    try:
        yield
    except AnalysisException as exc:
        raise AnalysisError(_first_line(str(exc))) from exc
    except PySparkException as exc:
        raise LoadError(_first_line(str(exc))) from exc
    except Py4JJavaError as exc:  # "An error occurred while calling oN.x." says nothing: the Java cause does
        raise LoadError(_java_cause(exc)) from exc


def _java_cause(exc: Py4JJavaError) -> str:
    """The innermost Java exception's message, without its class name."""
    cause = exc.java_exception
    while cause.getCause() is not None:
        cause = cause.getCause()
    return _first_line(str(cause.getMessage() or cause.toString()))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
