"""Load errors: every failure a load can report, each rendered as a Doris `Fail` reply.

    LoadError                   status "Fail", Message "[<code>]<text>"
    ├── BadHeader               a header value Doris would refuse
    ├── BadExpression           `columns` / `where` / `delete` outside the grammar or the allow-list
    ├── NotAuthorized           missing or wrong Basic credentials
    ├── BadRequest              body framing, size, a table or column the load cannot use
    ├── ServiceUnavailable      the server is draining for shutdown
    ├── LoadTimeout             the load outlived its `timeout` header
    └── DataQualityError        too many filtered rows; carries the error-log URL

`tables.errors.LabelAlreadyExists` is rendered with status "Label Already Exists".
"""

from __future__ import annotations


class LoadError(Exception):
    """A load failure with Doris's error code and text."""

    status = "Fail"
    code = "INTERNAL_ERROR"

    def __init__(self, text: str, *, code: str | None = None) -> None:
        super().__init__(text)
        self.text = text
        if code is not None:
            self.code = code

    @property
    def doris_message(self) -> str:
        return f"[{self.code}]{self.text}"


class BadHeader(LoadError):
    code = "INVALID_ARGUMENT"


class BadExpression(LoadError):
    code = "ANALYSIS_ERROR"

    @property
    def doris_message(self) -> str:
        return f"[{self.code}]TStatus: errCode = 2, detailMessage = {self.text}"


class AnalysisError(BadExpression):
    """A planning error the FE would report (unknown column, sequence rules, ...)."""


class NotAuthorized(LoadError):
    code = "NOT_AUTHORIZED"


class BadRequest(LoadError):
    code = "INVALID_ARGUMENT"


class LoadTimeout(LoadError):
    code = "TIMEOUT"


class ServiceUnavailable(LoadError):
    code = "SERVICE_UNAVAILABLE"


class DataQualityError(LoadError):
    code = "DATA_QUALITY_ERROR"

    def __init__(self, text: str, *, error_url: str | None = None) -> None:
        super().__init__(text)
        self.error_url = error_url
