"""Every error the server reports, in one tree under one root, each worded as Doris words it.

This is the bottom layer's module so that every layer raises from the same tree without importing another
layer for it. The boundary renders them: `app.responses` (one FastAPI exception handler for HTTP) and
`app.mysql_server.doris_error` (one mapping to MySQL error packets).

    DorisError                      `message`: the text shown to the user (after Doris's own prefixes)
    ├── DatabaseNotFound
    ├── TableNotFound
    ├── AlreadyExists
    ├── LabelAlreadyExists          carries the existing transaction's state
    ├── SchemaChanged               a load planned against an older schema tried to commit
    ├── TxnAborted                  the transaction was aborted (2PC abort, timeout) while its load ran
    ├── TxnStateError               a 2PC commit/abort found the transaction in another state
    ├── TableDropped                the table a load was planned against was dropped before its commit
    ├── SourcePathError             a broker-load path the server may not read
    ├── KafkaPropertyError          a routine-load `property.*` that is not allowed
    ├── KafkaSourceError            the topic, a partition or the brokers cannot be read (the job pauses)
    │   └── KafkaConfigError        a stored client property no longer allowed
    ├── TxnOperationError           a refused 2PC operation: Doris's status name and message
    ├── SqlError                    a statement's error, `errCode = 2, detailMessage = ...`
    └── LoadError                   a load's `Fail` reply, Message "[<code>]<text>"
        ├── BadHeader               a header value Doris would refuse
        ├── BadExpression           `columns` / `where` / `delete` outside the grammar or the allow-list
        │   └── AnalysisError       a planning error the FE would report (unknown column, sequence rules)
        ├── NotAuthorized           missing or wrong Basic credentials
        │   └── AccessDenied        a privilege the user does not hold (Doris's 1044 / 1142 / 1227 texts)
        ├── BadRequest              body framing, size, a table or column the load cannot use
        ├── ServiceUnavailable      the server is draining for shutdown, or its Spark backend is down
        ├── StoreUnavailable        the catalog's database (PostgreSQL) cannot be reached: nothing was changed
        ├── StoreFailed             the catalog's database refused a statement (disk full, locked, read-only)
        ├── LoadTimeout             the load outlived its `timeout` header
        └── DataQualityError        too many filtered rows; carries the error-log URL

`LabelAlreadyExists` is rendered in a load reply with status "Label Already Exists".
"""

from __future__ import annotations


class DorisError(Exception):
    """The root: an error whose `message` is shown to the user as is (after Doris's own prefixes)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class DatabaseNotFound(DorisError):
    def __init__(self, db: str) -> None:
        super().__init__(f"Unknown database '{db}'")


class TableNotFound(DorisError):
    def __init__(self, db: str, table: str) -> None:
        super().__init__(f"Unknown table '{table}' in database '{db}'")


class AlreadyExists(DorisError):
    pass


class LabelAlreadyExists(DorisError):
    """The label is held by a transaction that is not aborted (contract §4)."""

    def __init__(self, label: str, txn_id: int, state: str) -> None:
        self.label = label
        self.txn_id = txn_id
        self.state = state
        super().__init__(f"Label [{label}] has already been used, relate to txn [{txn_id}], status [{state}].")

    @property
    def existing_job_status(self) -> str:
        if self.state in ("UNKNOWN", "PREPARE"):
            return "RUNNING"
        if self.state == "PRECOMMITTED":
            return "PRECOMMITTED"
        return "FINISHED"


class SchemaChanged(DorisError):
    pass


class TxnAborted(DorisError):
    def __init__(self, txn_id: int, reason: str | None) -> None:
        super().__init__(f"transaction [{txn_id}] is already aborted, abort reason: {reason or 'User Abort'}")


class TxnStateError(DorisError):
    """The transaction's current state forbids the operation; the caller words the Doris message."""

    def __init__(self, state: str, reason: str | None) -> None:
        super().__init__(f"transaction is {state}")
        self.state = state
        self.reason = reason


class TableDropped(DorisError):
    """Doris's text when a transaction's table is gone at commit (`Database.getTablesOnIdOrderOrThrowException`);
    the id is the Iceberg uuid the load recorded when it was planned."""

    def __init__(self, table_uuid: str) -> None:
        super().__init__(f"unknown table, tableId={table_uuid}")
        self.table_uuid = table_uuid


class SourcePathError(DorisError):
    """A path a load may not read; the message is shown as is."""


class KafkaPropertyError(DorisError):
    """A `property.*` of a routine load that is not allowed; the message names it."""


class KafkaSourceError(DorisError):
    """The topic, a partition or the brokers cannot be read; the job pauses with this text."""


class KafkaConfigError(KafkaSourceError):
    """A client property the job was stored with is not allowed (now): the job pauses before connecting."""


class TxnOperationError(DorisError):
    """A refused 2PC operation: Doris's status code name and message."""

    def __init__(self, status: str, msg: str) -> None:
        super().__init__(msg)
        self.status = status
        self.msg = msg


class SqlError(DorisError):
    """A statement's error, worded as Doris's FE words it (`errCode = 2, detailMessage = ...`)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    @property
    def doris_message(self) -> str:
        return f"errCode = 2, detailMessage = {self.detail}"


class LoadError(DorisError):
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


class AccessDenied(NotAuthorized):
    """The user logged in but lacks the privilege; rendered as a refused login is (Doris's UnauthorizedException)."""


class BadRequest(LoadError):
    code = "INVALID_ARGUMENT"


class LoadTimeout(LoadError):
    code = "TIMEOUT"


class ServiceUnavailable(LoadError):
    code = "SERVICE_UNAVAILABLE"


class StoreUnavailable(LoadError):
    """The database of the catalog and the store cannot be reached (down, restarting, unreachable): the
    operation changed nothing; the next one connects again."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"catalog database unavailable: {reason}")


class StoreFailed(LoadError):
    """The catalog's database (SQLite or PostgreSQL) refused a statement: its disk is full, another process
    holds it locked past the wait, it is read-only, or its file cannot be written. The transaction was rolled
    back: the operation changed nothing, and the next one tries again (`tables.store.store_failure` words it)."""


class DataQualityError(LoadError):
    code = "DATA_QUALITY_ERROR"

    def __init__(self, text: str, *, error_url: str | None = None) -> None:
        super().__init__(text)
        self.error_url = error_url
