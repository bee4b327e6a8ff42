"""Domain errors of the bottom layer, each with the Doris wording users match on.

DorisError                  message already in Doris's words
├── DatabaseNotFound
├── TableNotFound
├── AlreadyExists
├── LabelAlreadyExists      carries the existing transaction's state
├── SchemaChanged           a load planned against an older schema tried to commit
├── TxnAborted              the transaction was aborted (2PC abort, timeout) while its load ran
├── TxnStateError           a 2PC commit/abort found the transaction in another state
└── TableDropped            the table a load was planned against was dropped (or re-created) before its commit
"""

from __future__ import annotations


class DorisError(Exception):
    """An error whose message is shown to the user as is (after Doris's own prefixes)."""

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
