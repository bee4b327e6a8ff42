"""Routine load statements, read with the token cursor:

    CREATE ROUTINE LOAD [db.]job ON table [WITH APPEND|DELETE|MERGE]
        [COLUMNS TERMINATED BY "x"] [, COLUMNS(...)] [, WHERE ...] [, DELETE ON ...] [, ORDER BY col]
        [PROPERTIES (...)] FROM KAFKA (...) [COMMENT "..."]
    PAUSE [ALL] ROUTINE LOAD [FOR [db.]job] · RESUME [ALL] ROUTINE LOAD [FOR [db.]job] · STOP ROUTINE LOAD FOR [db.]job
    SHOW [ALL] ROUTINE LOAD [FOR [db.]job] [LIKE "pattern"] · SHOW ROUTINE LOAD TASK [FROM db] WHERE JobName = "job"

Property checks and their texts follow Doris's `CreateRoutineLoadInfo` and `KafkaDataSourceProperties`;
`property.*` Kafka client settings pass an allow-list (`tables/routine_load.py`, unlike Doris). The properties
that set a load option (`loaders/options.py`, marked `routine`) are read through the option table, into the
`LoadRequest` every batch of the job runs.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlglot import TokenType

from loaders.headers import build_request
from loaders.options import OptionValues, option, statement_options
from sql.tokens import Cursor
from tables.errors import BadHeader, KafkaPropertyError, SqlError
from tables.load_spec import LoadRequest, MergeType
from tables.routine_load import (
    KAFKA_DEFAULT_OFFSETS,
    OFFSET_BEGINNING,
    OFFSET_END,
    RoutineLoadSpec,
    kafka_client_config,
)

# the job's own properties (SHOW ROUTINE LOAD prints them; the Doris tuning ones are accepted and ignored)
JOB_ONLY_PROPERTIES = {
    "desired_concurrent_number",
    "max_error_number",
    "max_filter_ratio",
    "max_batch_interval",
    "max_batch_rows",
    "max_batch_size",
    "exec_mem_limit",
    "send_batch_parallelism",
    "load_to_single_tablet",
    "workload_group",
    "strip_outer_array",  # applied when a batch is staged: JSON arrays become one row per line
    "num_as_string",
    "fuzzy_parse",
}
LOAD_PROPERTIES = statement_options("routine")  # properties that set an option of the batches' load
JOB_PROPERTIES = JOB_ONLY_PROPERTIES | set(LOAD_PROPERTIES)
KAFKA_PROPERTIES = {"kafka_broker_list", "kafka_topic", "kafka_partitions", "kafka_offsets", "kafka_default_offsets"}
ENDPOINT_REGEX = "[^:]+:\\d+"
NAME_PATTERN = re.compile(r"^[a-zA-Z][a-zA-Z0-9\-_]{0,63}$")
_CLAUSE_WORDS = ("ORDER BY", "PROPERTIES", "FROM", "PARTITION", "PRECEDING", "COLUMNS", "WHERE", "COMMENT")


@dataclass(frozen=True)
class CreateRoutineLoad:
    db: str | None
    name: str
    table: str | None
    merge_type: str
    column_separator: str | None
    columns: str | None
    where: str | None
    delete_on: str | None
    sequence_col: str | None
    properties: dict[str, str]
    source_type: str
    source: dict[str, str]
    comment: str
    partitions: str | None = None  # `PARTITION(p1, p2)`: rows of other partitions are filtered
    temporary_partitions: bool = False  # `TEMPORARY PARTITION(tp1, tp2)`: the names are temporary partitions


@dataclass(frozen=True)
class JobCommand:
    """PAUSE / RESUME / STOP (name None with ALL: every job of the database)."""

    verb: str
    db: str | None
    name: str | None


@dataclass(frozen=True)
class ShowRoutineLoad:
    db: str | None
    name: str | None
    include_history: bool
    pattern: str | None


@dataclass(frozen=True)
class ShowRoutineLoadTask:
    db: str | None
    name: str


RoutineLoadStatement = CreateRoutineLoad | JobCommand | ShowRoutineLoad | ShowRoutineLoadTask


def is_routine_load(cur: Cursor) -> bool:
    """The statement is one of the routine load statements (the cursor is not moved)."""
    words = [cur.word(i) for i in range(4)]
    if words[0] in ("CREATE", "STOP") or (words[0] in ("PAUSE", "RESUME", "SHOW") and words[1] != "ALL"):
        return words[1:3] == ["ROUTINE", "LOAD"]
    return words[0] in ("PAUSE", "RESUME", "SHOW") and words[1:4] == ["ALL", "ROUTINE", "LOAD"]


def parse_routine_load(text: str) -> RoutineLoadStatement:
    """Raises: SqlError on a syntax error."""
    cur = Cursor(text)
    verb = cur.next().text.upper()
    include_all = cur.accept("ALL")
    cur.expect("ROUTINE", "LOAD")
    if verb == "CREATE":
        return _create(cur)
    if verb == "SHOW":
        if cur.accept("TASK"):
            return _show_task(cur)
        db = name = pattern = None
        if cur.accept("FOR"):
            db, name = cur.qualified_name()
        elif cur.accept("LIKE"):
            pattern = cur.string()
        _end(cur)
        return ShowRoutineLoad(db=db, name=name, include_history=include_all, pattern=pattern)
    db = name = None
    if not include_all or verb == "STOP":
        cur.expect("FOR")
        db, name = cur.qualified_name()
    _end(cur)
    return JobCommand(verb=verb, db=db, name=name)


def _end(cur: Cursor) -> None:
    if not cur.at_end():
        raise cur.error("end of statement")


def _show_task(cur: Cursor) -> ShowRoutineLoadTask:
    db = None
    if cur.accept("FROM") or cur.accept("IN"):
        db = cur.name()
    cur.expect("WHERE")
    if cur.name().lower() != "jobname":
        raise SqlError('show routine load job only support one equal expr which is sames like JobName="ILoveDoris"')
    cur.expect_type(TokenType.EQ, "=")
    name = cur.string()
    _end(cur)
    return ShowRoutineLoadTask(db=db, name=name)


def _raw_until_clause(cur: Cursor) -> str:
    """The source text of an expression up to the next top-level comma or load clause."""
    start = cur.i
    depth = 0
    while not cur.at_end():
        tok = cur.peek()
        assert tok is not None
        if depth == 0 and (
            tok.token_type == TokenType.COMMA
            or cur.word() in _CLAUSE_WORDS
            or (cur.word() == "DELETE" and cur.word(1) == "ON")
        ):
            break
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
        cur.i += 1
    if cur.i == start:
        raise cur.error("an expression")
    return cur.text[cur.tokens[start].start : cur.tokens[cur.i - 1].end + 1].strip()


def _parenthesised_raw(cur: Cursor) -> str:
    start = cur.i
    cur.skip_parens()
    open_tok, close_tok = cur.tokens[start], cur.tokens[cur.i - 1]
    return cur.text[open_tok.end + 1 : close_tok.start].strip()


def _key_values(cur: Cursor) -> dict[str, str]:
    cur.expect_type(TokenType.L_PAREN, "(")
    props: dict[str, str] = {}
    while not cur.accept_type(TokenType.R_PAREN):
        key = cur.string()
        cur.expect_type(TokenType.EQ, "=")
        props[key] = cur.string()
        if not cur.accept_type(TokenType.COMMA):
            cur.expect_type(TokenType.R_PAREN, ")")
            break
    return props


def _create(cur: Cursor) -> CreateRoutineLoad:
    db, name = cur.qualified_name()
    table = None
    if cur.accept("ON"):
        table = cur.name()
    merge_type = "APPEND"
    if cur.accept("WITH"):
        merge_type = cur.next().text.upper()
        if merge_type not in ("APPEND", "DELETE", "MERGE"):
            raise SqlError(f"Syntax error: unknown merge type {merge_type}, expected APPEND, DELETE or MERGE")
    separator = columns = where = delete_on = sequence = partitions = None
    temporary = False
    while True:
        if cur.accept("COLUMNS", "TERMINATED", "BY"):
            separator = cur.string()
        elif cur.word() == "COLUMNS" and cur.peek(1) is not None and cur.word(1) == "(":
            cur.i += 1
            columns = _parenthesised_raw(cur)
        elif cur.accept("WHERE"):
            where = _raw_until_clause(cur)
        elif cur.accept("DELETE", "ON"):
            delete_on = _raw_until_clause(cur)
        elif cur.accept("ORDER BY"):
            sequence = cur.name()
        elif cur.accept("PARTITION"):
            partitions = _parenthesised_raw(cur)
        elif cur.accept("TEMPORARY", "PARTITION"):
            partitions, temporary = _parenthesised_raw(cur), True
        elif cur.word() in ("TEMPORARY", "PRECEDING"):
            raise SqlError(f"{cur.word()} clause of routine load is not supported by this server yet")
        else:
            break
        cur.accept_type(TokenType.COMMA)
    properties = _key_values(cur) if cur.accept("PROPERTIES") else {}
    cur.expect("FROM")
    source_type = cur.name().upper()
    source = _key_values(cur) if cur.at(TokenType.L_PAREN) else {}
    comment = cur.string() if cur.accept("COMMENT") else ""
    _end(cur)
    return CreateRoutineLoad(
        db=db,
        name=name,
        table=table,
        merge_type=merge_type,
        column_separator=separator,
        columns=columns,
        where=where,
        delete_on=delete_on,
        sequence_col=sequence,
        partitions=partitions,
        temporary_partitions=temporary,
        properties=properties,
        source_type=source_type,
        source=source,
        comment=comment,
    )


def build_spec(
    stmt: CreateRoutineLoad, current_db: str, *, min_batch_rows: int, cert_dir: Path | None = None
) -> RoutineLoadSpec:
    """Validate a CREATE ROUTINE LOAD and turn it into the job's spec (table checks come later).

    Raises:
        SqlError: with Doris's message for a bad name, property or data source.
    """
    if not NAME_PATTERN.match(stmt.name):
        raise SqlError(
            f"Incorrect ROUTINE LOAD NAME name '{stmt.name}' Maybe routine load job name is longer than 64 or "
            "contains illegal characters"
        )
    if stmt.table is None:
        raise SqlError("multi-table routine load (no ON clause) is not supported by this server yet")
    if stmt.source_type != "KAFKA":
        raise SqlError(f"Unknown data source type: {stmt.source_type}")
    if stmt.merge_type != "MERGE" and stmt.delete_on is not None:
        raise SqlError("not support DELETE ON clause when merge type is not MERGE.")
    if stmt.merge_type == "MERGE" and stmt.delete_on is None:
        raise SqlError("Excepted DELETE ON clause when merge type is MERGE.")
    props = stmt.properties
    for key in props:
        if key not in JOB_PROPERTIES:
            raise SqlError(f"{key} is invalid property")

    def number(key: str, default: int, message: str) -> int:
        raw = props.get(key)
        if raw is None:
            return default
        try:
            return int(raw.strip())
        except ValueError:
            raise SqlError(message) from None

    concurrency = number("desired_concurrent_number", 256, "desired_concurrent_number must be greater than 0")
    if concurrency <= 0:
        raise SqlError("desired_concurrent_number must be greater than 0")
    max_errors = number("max_error_number", 0, "max_error_number should >= 0")
    if max_errors < 0:
        raise SqlError("max_error_number should >= 0")
    try:
        ratio = float(props.get("max_filter_ratio", "1.0"))
    except ValueError:
        raise SqlError("max_filter_ratio should between 0 and 1") from None
    if not 0 <= ratio <= 1:
        raise SqlError("max_filter_ratio should between 0 and 1")
    interval = number("max_batch_interval", 60, "max_batch_interval should >= 1")
    if interval < 1:
        raise SqlError("max_batch_interval should >= 1")
    rows = number("max_batch_rows", 20000000, f"max_batch_rows should > {min_batch_rows}")
    if rows < min_batch_rows:
        raise SqlError(f"max_batch_rows should > {min_batch_rows}")
    size = number("max_batch_size", 1024 * 1024 * 1024, "max_batch_size should between 100MB and 10GB")
    if not 100 * 1024 * 1024 <= size <= 10 * 1024 * 1024 * 1024:
        raise SqlError("max_batch_size should between 100MB and 10GB")
    strict = _load_property("strict_mode", props.get("strict_mode", "false").strip())
    fmt = props.get("format", "csv").strip().lower()
    if fmt not in ("csv", "json"):
        raise SqlError(f"format:{props.get('format')} is not supported.")
    zone = _load_property("timezone", props.get("timezone", "")) or "UTC"

    job_properties = {
        "partitions": stmt.partitions or "*",
        "columnToColumnExpr": stmt.columns or "*",
        "precedingFilter": "*",
        "whereExpr": stmt.where or "*",
        "delete": stmt.delete_on or "*",
        "sequence_col": stmt.sequence_col or "*",
        "partial_columns": props.get("partial_columns", "false"),
        "max_error_number": str(max_errors),
        "max_filter_ratio": str(ratio),
        "max_batch_interval": str(interval),
        "max_batch_rows": str(rows),
        "max_batch_size": str(size),
        "desired_concurrent_number": str(concurrency),
        "exec_mem_limit": props.get("exec_mem_limit", str(2 * 1024 * 1024 * 1024)),
        "merge_type": stmt.merge_type,
        "strict_mode": str(strict).lower(),
        "timezone": zone,
        "format": fmt,
        "jsonpaths": props.get("jsonpaths", ""),
        "json_root": props.get("json_root", ""),
        "strip_outer_array": props.get("strip_outer_array", "false"),
        "num_as_string": props.get("num_as_string", "false"),
        "fuzzy_parse": props.get("fuzzy_parse", "false"),
        "send_batch_parallelism": props.get("send_batch_parallelism", "1"),
        "load_to_single_tablet": props.get("load_to_single_tablet", "false"),
    }
    if fmt == "csv":
        job_properties["column_separator"] = f"'{stmt.column_separator if stmt.column_separator else chr(9)}'"
        job_properties["line_delimiter"] = "\n"

    source = _kafka_source(stmt, cert_dir)
    return RoutineLoadSpec(
        name=stmt.name,
        db=stmt.db or current_db,
        table=stmt.table,
        merge_type=stmt.merge_type,
        strip_outer_array=fmt == "json" and props.get("strip_outer_array", "false").strip().lower() == "true",
        job_properties=job_properties,
        desired_concurrent_number=concurrency,
        max_error_number=max_errors,
        max_filter_ratio=ratio,
        max_batch_interval_s=interval,
        max_batch_rows=rows,
        max_batch_size=size,
        comment=stmt.comment,
        **source,
    )


def _load_property(name: str, value: str) -> Any:
    """A load option set as a job property, read through the option table.

    Raises:
        SqlError: the option refuses the value (CREATE ROUTINE LOAD's text where it has its own).
    """
    try:
        return option(name).parse(value)
    except BadHeader as exc:
        raise SqlError(option(name).property_error or exc.text) from None


def batch_request(stmt: CreateRoutineLoad, spec: RoutineLoadSpec, table: str) -> LoadRequest:
    """The load every batch of the job runs (labelled with the job's name; each batch gets a label of its own):
    the statement's clauses and load properties, read through the option table. A batch's bad rows are
    filtered, not fatal (max_filter_ratio 1): the job's error window decides.

    Raises:
        LoadError: an option value the table refuses, or a clause that does not parse.
    """
    sent = {name: stmt.properties[name] for name in LOAD_PROPERTIES if name in stmt.properties}
    clauses = {
        "columns": stmt.columns,
        "where": stmt.where,
        "delete": stmt.delete_on,
        "function_column.sequence_col": stmt.sequence_col,
        "temporary_partitions" if stmt.temporary_partitions else "partitions": stmt.partitions,
    }
    sent |= {name: text for name, text in clauses.items() if text}
    if stmt.column_separator is not None:
        sent["column_separator"] = stmt.column_separator
    given: dict[str, Any] = {
        "label": spec.name,
        "format": spec.job_properties["format"],
        "merge_type": MergeType(stmt.merge_type),
        "max_filter_ratio": 1.0,
    }
    if "timezone" in stmt.properties:
        given["timezone"] = spec.job_properties["timezone"]
    return build_request(spec.db, table, OptionValues(sent, given))


def _kafka_source(stmt: CreateRoutineLoad, cert_dir: Path | None) -> dict[str, object]:
    """Raises: SqlError with Doris's data source messages, or naming a client property that is not allowed."""
    src = stmt.source
    for key in src:
        if key not in KAFKA_PROPERTIES and not key.startswith("property."):
            raise SqlError(f"{key} is invalid kafka property or can not be set")
    brokers = (src.get("kafka_broker_list") or "").strip()
    if not brokers:
        raise SqlError("kafka_broker_list is a required property")
    for broker in brokers.split(","):
        if not re.fullmatch(ENDPOINT_REGEX, broker.strip()):
            raise SqlError(f"kafka_broker_list:{broker} not match pattern {ENDPOINT_REGEX}")
    topic = (src.get("kafka_topic") or "").strip()
    if not topic:
        raise SqlError("kafka_topic is a required property")
    custom: dict[str, str] = {}
    for key, value in src.items():
        if key.startswith("property."):
            name = key[len("property.") :]
            if not name:
                raise SqlError("kafka property value could not be a empty string")
            custom[name] = value
    try:  # refused at CREATE, naming the key; the job's consumer checks again before it connects
        kafka_client_config(custom, cert_dir)
    except KafkaPropertyError as exc:
        raise SqlError(exc.message) from None
    partitions: list[int] = []
    if (raw := (src.get("kafka_partitions") or "").strip()) != "":
        try:
            partitions = [int(p) for p in raw.split(",")]
        except ValueError:
            raise SqlError(f"kafka_partitions must be a number string with comma-separated, got {raw}") from None
    default_raw = custom.get(KAFKA_DEFAULT_OFFSETS) or src.get(KAFKA_DEFAULT_OFFSETS)
    offsets_raw = (src.get("kafka_offsets") or "").strip()
    if offsets_raw and default_raw:
        raise SqlError("Only one of kafka_offsets and kafka_default_offsets can be set.")
    offsets: list[int] = []
    if offsets_raw:
        parts = [o.strip() for o in offsets_raw.split(",")]
        if len(parts) != len(partitions):
            raise SqlError("Partitions number should be equals to offsets number")
        for part in parts:
            if part.upper() == "OFFSET_BEGINNING":
                offsets.append(OFFSET_BEGINNING)
            elif part.upper() == "OFFSET_END":
                offsets.append(OFFSET_END)
            elif part.isdigit():
                offsets.append(int(part))
            elif re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", part):
                raise SqlError("kafka_offsets as a date time is not supported by this server yet")
            else:
                raise SqlError("kafka_offsets must be an integer or a date time")
    default = (default_raw or "OFFSET_END").strip().upper()
    if default not in ("OFFSET_BEGINNING", "OFFSET_END"):
        raise SqlError("kafka_default_offsets can only be set to OFFSET_BEGINNING, OFFSET_END or date time")
    custom[KAFKA_DEFAULT_OFFSETS] = default
    custom.setdefault("group.id", f"{stmt.name}_{uuid.uuid4()}")
    default_offset = OFFSET_BEGINNING if default == "OFFSET_BEGINNING" else OFFSET_END
    if partitions and not offsets:
        offsets = [default_offset] * len(partitions)
    return {
        "broker_list": brokers,
        "topic": topic,
        "partitions": tuple(partitions),
        "start_offsets": tuple(offsets),
        "default_offset": default_offset,
        "custom_properties": custom,
    }
