"""What a statement returns: a result set or an execution status (affected rows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ResultSet:
    columns: list[tuple[str, str]]  # (name, MySQL type name)
    rows: list[list[Any]]
    time_ms: int = 0


@dataclass(frozen=True)
class ExecStatus:
    affected_rows: int = 0
    time_ms: int = 0
    info: dict[str, Any] = field(default_factory=dict)


StatementResult = ResultSet | ExecStatus
