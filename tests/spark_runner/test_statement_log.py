"""An unexpected statement failure is logged without the statement's text (it can hold a secret)."""

from __future__ import annotations

import logging

import pytest

from spark_runner.queries import JobGuard, statement_error


def test_an_unexpected_failure_logs_the_statement_kind_not_its_values(caplog: pytest.LogCaptureFixture) -> None:
    guard = JobGuard(None, timeout_seconds=60)  # type: ignore[arg-type]  # statement_error reads only its tag here
    text = "SELECT * FROM t WHERE secret = 'hunter2-do-not-log'"
    with caplog.at_level(logging.ERROR, logger="spark_runner.queries"):
        error = statement_error(RuntimeError("boom"), guard, text)
    assert error.detail == "RuntimeError: boom"
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert guard.tag in logged and "SELECT" in logged
    assert "hunter2" not in logged
