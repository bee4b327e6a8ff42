"""The typed specs that cross layers: what a load asks for (`LoadRequest`) and what it did (`LoadResult`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tables.errors import DorisError, LabelAlreadyExists, LoadError


class MergeType(StrEnum):
    APPEND = "APPEND"
    DELETE = "DELETE"
    MERGE = "MERGE"


class Expr(BaseModel):
    """A user expression that passed the allow-list: Spark SQL text, the columns it reads, the original text."""

    model_config = ConfigDict(frozen=True)

    spark_sql: str
    refs: tuple[str, ...] = ()
    text: str = ""


class ColumnMapping(BaseModel):
    """One entry of the `columns` header: a source field (`expr is None`) or `name = expr`."""

    model_config = ConfigDict(frozen=True)

    name: str
    expr: Expr | None = None


MIB = 1024 * 1024


class InputLimits(BaseModel):
    """Caps on what one load's input may make the server build (settings `SL_MAX_*`, docs/security.md), and the
    sizes that pick a CSV body's path (settings `SL_CSV_*`)."""

    model_config = ConfigDict(frozen=True)

    max_line_bytes: int = 64 * MIB  # one CSV / JSON line, as read (a body without newlines is one line)
    max_string_bytes: int = 1048576  # one STRING value: Doris's string_type_length_soft_limit_bytes
    max_expression_bytes: int = 256 * MIB  # the largest value a `columns` / `where` / `delete` expression may build
    error_log_line_bytes: int = 64 * 1024  # one error-log line: Doris's load_error_log_limit_bytes
    # the sizes that pick a CSV body's path (tables.csv_dialect.CsvDialect.path_for), not caps
    csv_inline_max_bytes: int = 16 * 1024  # at most this: split by the server, handed to Spark inline
    csv_inline_max_lines: int = 256  # ... and at most this many lines (INSERT ... VALUES: rows)
    csv_parquet_min_bytes: int = MIB  # at least this: split by the server into a Parquet file
    # unfinished transactions of a database a two-phase load may begin beside (Doris's max_running_txn_num_per_db)
    max_running_txn_num_per_db: int = 1000


class LoadRequest(BaseModel):
    """Everything a load needs, decided from the headers (or the INSERT statement) before any data is read."""

    model_config = ConfigDict(frozen=True)

    db: str
    table: str
    label: str
    columns: tuple[ColumnMapping, ...] | None = None
    hidden_columns: tuple[str, ...] = ()
    column_separator: str = "\t"
    line_delimiter: str = "\n"
    skip_lines: int = 0
    format: Literal["csv", "json", "parquet", "orc"] = "csv"
    compression: Literal["gz", "bz2", "lz4", "zstd", "deflate"] | None = None
    trim_double_quotes: bool = False
    enclose: str | None = None
    escape: str | None = None
    empty_field_as_null: bool = False
    strip_outer_array: bool = False
    read_json_by_line: bool = True  # False: the body is one JSON document (Doris's older default)
    jsonpaths: tuple[str, ...] | None = None
    json_root: str | None = None
    where: Expr | None = None
    merge_type: MergeType = MergeType.APPEND
    delete: Expr | None = None
    sequence_col: str | None = None
    max_filter_ratio: float = 0.0
    strict_mode: bool = False
    timeout_s: int = 259200
    time_zone: str | None = None
    comment: str = ""
    partial_columns: bool = False
    negative: bool = False  # aggregate tables: SUM columns are negated (contract §6.9)
    partial_update_new_key_behavior: Literal["APPEND", "ERROR"] = "APPEND"
    source: Literal["stream_load", "insert", "broker_load"] = "stream_load"
    two_phase_commit: bool = False
    group_commit: Literal["async_mode", "sync_mode", "off_mode"] | None = None  # None: the table property decides
    partitions: tuple[str, ...] = ()  # the `partitions` header: rows of other partitions are filtered
    temporary_partitions: bool = False  # `partitions` names temporary partitions (the `temporary_partitions` header)
    limits: InputLimits = InputLimits()


GROUP_COMMIT_OMITS = ("TwoPhaseCommit", "BeginTxnTimeMs", "CommitAndPublishTimeMs")  # absent from its replies

Status = Literal["Success", "Publish Timeout", "Label Already Exists", "Fail"]


class LoadResult(BaseModel):
    """The Doris stream-load reply (contract §3.1), fields in Doris's emission order."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    txn_id: int = Field(-1, alias="TxnId")
    label: str = Field("", alias="Label")
    comment: str = Field("", alias="Comment")
    two_phase_commit: str | None = Field("false", alias="TwoPhaseCommit")  # None in group commit
    group_commit: bool | None = Field(None, alias="GroupCommit")
    group_commit_mode: str | None = Field(None, alias="GroupCommitMode")
    load_id: str | None = Field(None, alias="LoadId")
    status: Status = Field("Success", alias="Status")
    existing_job_status: str | None = Field(None, alias="ExistingJobStatus")
    message: str = Field("OK", alias="Message")
    number_total_rows: int = Field(0, alias="NumberTotalRows")
    number_loaded_rows: int = Field(0, alias="NumberLoadedRows")
    number_filtered_rows: int = Field(0, alias="NumberFilteredRows")
    number_unselected_rows: int = Field(0, alias="NumberUnselectedRows")
    load_bytes: int = Field(0, alias="LoadBytes")
    load_time_ms: int = Field(0, alias="LoadTimeMs")
    begin_txn_time_ms: int | None = Field(0, alias="BeginTxnTimeMs")  # None in group commit
    stream_load_put_time_ms: int = Field(0, alias="StreamLoadPutTimeMs")
    read_data_time_ms: int = Field(0, alias="ReadDataTimeMs")
    write_data_time_ms: int = Field(0, alias="WriteDataTimeMs")
    receive_data_time_ms: int = Field(0, alias="ReceiveDataTimeMs")
    commit_and_publish_time_ms: int | None = Field(0, alias="CommitAndPublishTimeMs")  # None in group commit
    error_url: str | None = Field(None, alias="ErrorURL")
    first_error_msg: str | None = Field(None, alias="FirstErrorMsg")

    def to_doris(self) -> dict[str, object]:
        """The reply as Doris prints it: aliases, optional fields only when set."""
        return self.model_dump(by_alias=True, exclude_none=True)


class LoadCounts(BaseModel):
    """Row counts of one load job."""

    model_config = ConfigDict(frozen=True)

    total: int = 0
    loaded: int = 0
    filtered: int = 0
    unselected: int = 0


def failure_message(error: BaseException) -> str:
    """The `Message` of a failed load: a load error's own `[CODE]text`, another Doris error as the FE's
    analysis error, anything else (a bug) as an internal error."""
    if isinstance(error, LoadError):
        return error.doris_message
    if isinstance(error, DorisError):
        return f"[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = {error.message}"
    return f"[INTERNAL_ERROR]{error}"


def render_load(error: BaseException | None = None, **fields: Any) -> LoadResult:
    """The one builder of a load's reply, from its fields and, for a failure, the error that ended it.

    A label clash is `Label Already Exists` with the holder's job status and no transaction of its own; any
    other error is `Fail`, loads nothing, and states `failure_message` (unless the caller words it) and the
    error log the error carries (unless the caller has one).
    """
    if isinstance(error, LabelAlreadyExists):
        fields |= {
            "txn_id": -1,
            "status": "Label Already Exists",
            "existing_job_status": error.existing_job_status,
            "message": f"[LABEL_ALREADY_EXISTS]TStatus: errCode = 2, detailMessage = {error.message}",
        }
    elif error is not None:
        fields = {"message": failure_message(error), **fields, "status": "Fail", "number_loaded_rows": 0}
        if fields.get("error_url") is None:
            fields["error_url"] = getattr(error, "error_url", None)
    return LoadResult(**fields)
