"""SQL errors, worded as Doris's FE words them (`errCode = 2, detailMessage = ...`)."""

from __future__ import annotations


class SqlError(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    @property
    def doris_message(self) -> str:
        return f"errCode = 2, detailMessage = {self.detail}"
