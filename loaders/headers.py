"""Stream-load headers (or a SQL statement's load options) → a frozen `LoadRequest`, with Doris's defaults and
error texts (contract §2).

Each value is read through the option table (`loaders/options.py`: names, types, defaults, allowed values and
the texts for a bad one); this module holds the rules between options, in Doris's order. Header names are
case-insensitive; unknown headers are ignored, as Doris does.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Literal

from loaders.expressions import DEFAULT_LIMITS, Size, parse_columns, parse_condition
from loaders.options import (
    COMPRESS_TYPES,
    CONTENT_ENCODINGS,
    FLEXIBLE_COLUMNS,
    HEADER_LINES,
    LOAD_OPTIONS,
    NOT_BUILT_COMPRESSION,
    NOT_BUILT_HEADERS,
    OPTION_HEADERS,
    OptionValues,
)
from tables.errors import BadHeader
from tables.load_spec import InputLimits, LoadRequest, MergeType
from tables.names import LABEL_REGEX

LABEL_PATTERN = re.compile(LABEL_REGEX)


def decode_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Header values as UTF-8 text, names lower case, the first of a repeated name winning (as Starlette's
    `Headers.get`); HTTP servers hand values over as Latin-1, which turns `café` into `cafÃ©`.

    Raises:
        BadHeader: a value that is not UTF-8 (Doris compares the bytes; text that is no text cannot match).
    """
    out: dict[str, str] = {}
    for name_bytes, value_bytes in raw:
        name = name_bytes.decode("latin-1").lower()
        if name in out:
            continue
        try:
            out[name] = value_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise BadHeader(f"header {name} is not valid UTF-8") from None
    return out


def parse_compression(
    compress_type: str | None, content_encoding: str | None, *, format_header: str = ""
) -> Literal["gz", "bz2", "lz4", "zstd", "deflate"] | None:
    """`compress_type`, else `Content-Encoding` (doris-streamloader sends both for one layer: the header wins).

    Raises:
        BadHeader: an unknown or unsupported compression.
    """
    if compress_type:
        upper = compress_type.upper()
        if upper in COMPRESS_TYPES:
            return COMPRESS_TYPES[upper]
        if upper in NOT_BUILT_COMPRESSION:
            raise BadHeader(f"compress_type {compress_type} is not supported by this server yet")
        # Doris's parse_format finds no format for an unknown compression and names the format header;
        # the compress_type is added so the message names the header at fault
        raise BadHeader(
            f"unknown data format, format={format_header}, compress_type={compress_type}", code="DATA_FILE_TYPE_ERROR"
        )
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in CONTENT_ENCODINGS:
        return CONTENT_ENCODINGS[encoding]
    raise BadHeader(f"unsupported Content-Encoding: {content_encoding}")


def parse_load_request(
    db: str, table: str, headers: Mapping[str, str], *, limits: InputLimits = DEFAULT_LIMITS
) -> LoadRequest:
    """Build the `LoadRequest` a stream load asks for; `limits` bound what its expressions may build.

    Raises:
        BadHeader: a header value Doris refuses, with a message naming the header.
        BadExpression: `columns`, `where` or `delete` does not parse or uses something not allowed.
    """
    options = OptionValues(headers)
    labelled = bool(options.text("label"))
    shape: list[tuple[str, str]] = []
    size = 0
    for name, value in headers.items():
        if name in OPTION_HEADERS and name != "label":
            shape.append((name, value))
            size += len(value)
    if size > MAX_SHAPE_CHARS:  # a long `columns` or `jsonpaths`: built each time, never kept
        return build_request(db, table, options, limits=limits)
    key = (db, table, limits, labelled, tuple(shape))
    template = _SHAPES.get(key)
    if template is None:
        request = build_request(db, table, options, limits=limits)
        with _SHAPES_LOCK:  # the event loop's, and the warm-up's thread at start
            if len(_SHAPES) >= MAX_SHAPES:
                del _SHAPES[next(iter(_SHAPES))]  # the oldest shape
            _SHAPES[key] = request
        return request
    # the same options as a request built before: only the label is the load's own (checked, or a new uuid)
    return template.model_copy(update={"label": options.value("label") or str(uuid.uuid4())})


# Requests by shape (db, table, limits and every option header but `label`): a service sends loads of one shape
# all day, and building one (its options read and checked, `columns` / `where` parsed) costs ~25 µs of the event
# loop. Only requests that were built without error are kept; a shape of more than `MAX_SHAPE_CHARS` is not.
MAX_SHAPES = 256
MAX_SHAPE_CHARS = 1024
_SHAPES: dict[tuple[object, ...], LoadRequest] = {}
_SHAPES_LOCK = threading.Lock()


def build_request(db: str, table: str, options: OptionValues, *, limits: InputLimits = DEFAULT_LIMITS) -> LoadRequest:
    """The `LoadRequest` of a load's options (headers, or a LOAD / CREATE ROUTINE LOAD statement's), checked in
    Doris's order: the first error a load would meet in Doris is the one it gets.

    Raises:
        BadHeader: an option value Doris refuses, with a message naming the option.
        BadExpression: `columns`, `where` or `delete` does not parse or uses something not allowed.
    """
    label = options.value("label") or str(uuid.uuid4())
    fmt = options.value("format")
    skip_lines = HEADER_LINES.get(fmt) or options.value("skip_lines")  # CSV with names skips its own lines
    compression = parse_compression(
        options.text("compress_type"), options.text("Content-Encoding"), format_header=options.text("format") or ""
    )
    if options.text("partitions") and options.text("temporary_partitions"):
        raise BadHeader("Can not specify both partitions and temporary partitions")
    for name in NOT_BUILT_HEADERS:
        if options.text(name):
            raise BadHeader(f"header {name} is not supported by this server yet")
    partial_columns = _partial_columns(options, fmt)
    behavior = options.value("partial_update_new_key_behavior")
    two_phase_commit = options.value("two_phase_commit")
    group_commit = options.value("group_commit")
    # Doris uses group commit only for plain loads; there a label of the client's own is refused
    plain = (
        not two_phase_commit
        and not partial_columns
        and not options.sent("unique_key_update_mode")
        and not options.text("partitions")
        and not options.text("temporary_partitions")
    )
    if group_commit and group_commit != "off_mode" and plain and options.text("label"):
        raise BadHeader("label and group_commit can't be set at the same time")
    options.check(o.name for o in LOAD_OPTIONS if o.ignored)

    merge_type = MergeType(options.value("merge_type"))
    delete_text = options.value("delete")
    if merge_type is MergeType.MERGE and not delete_text:
        raise BadHeader("Excepted DELETE ON clause when merge type is MERGE.")
    if merge_type is not MergeType.MERGE and delete_text:
        raise BadHeader("Not support DELETE ON clause when merge type is not MERGE.")
    max_filter_ratio = options.value("max_filter_ratio")
    strict_mode = options.value("strict_mode")
    timeout_s = options.value("timeout")
    enclose, escape = options.value("enclose"), options.value("escape")
    strip_outer_array = fmt == "json" and options.value("strip_outer_array")
    if strip_outer_array and options.value("read_json_by_line"):
        raise BadHeader("Don't support both strip_outer_array and read_json_by_line, choose one of them")

    columns_text, where_text = options.value("columns"), options.value("where")
    derived: dict[str, Size] = {}  # `where` and `delete` may read `columns` entries: their bounds carry over
    columns = parse_columns(columns_text, limits=limits, sizes=derived) if columns_text else None
    return LoadRequest(
        db=db,
        table=table,
        label=label,
        columns=columns,
        hidden_columns=options.value("hidden_columns"),
        column_separator=options.value("column_separator"),
        line_delimiter=options.value("line_delimiter"),
        skip_lines=skip_lines,
        where=parse_condition(where_text, header="where", limits=limits, derived=derived) if where_text else None,
        merge_type=merge_type,
        delete=(parse_condition(delete_text, header="delete", limits=limits, derived=derived) if delete_text else None),
        sequence_col=options.value("function_column.sequence_col") or None,
        max_filter_ratio=max_filter_ratio,
        strict_mode=strict_mode,
        timeout_s=timeout_s,
        time_zone=options.value("timezone"),  # `timezone` wins over its alias `time_zone`
        comment=options.value("comment"),
        format=fmt if fmt in ("json", "parquet", "orc") else "csv",
        compression=compression,
        trim_double_quotes=options.value("trim_double_quotes"),
        enclose=enclose,
        escape=escape,
        empty_field_as_null=options.value("empty_field_as_null"),
        strip_outer_array=strip_outer_array,
        # newest Doris: when neither header is sent, one object per line; otherwise the header decides
        read_json_by_line=(
            options.value("read_json_by_line")
            if options.sent("read_json_by_line")
            else not options.sent("strip_outer_array")
        ),
        jsonpaths=options.value("jsonpaths") if fmt == "json" else None,
        json_root=(options.value("json_root") or None) if fmt == "json" else None,
        partial_columns=partial_columns,
        negative=options.value("negative"),
        partial_update_new_key_behavior=behavior,
        two_phase_commit=two_phase_commit,
        group_commit=group_commit,
        partitions=partition_names(options.text("partitions") or options.text("temporary_partitions") or ""),
        temporary_partitions=bool(options.text("temporary_partitions")),
        limits=limits,
    )


def partition_names(text: str) -> tuple[str, ...]:
    """`p1, p2` (the `partitions` header, a PARTITION clause's list) as names, quotes and spaces stripped."""
    return tuple(n.strip().strip("`") for n in text.split(",") if n.strip().strip("`"))


def _partial_columns(options: OptionValues, fmt: str) -> bool:
    """`unique_key_update_mode` when sent, else `partial_columns`.

    Raises:
        BadHeader: an unknown mode, or flexible columns (JSON only in Doris, not built here).
    """
    mode = options.value("unique_key_update_mode")
    if mode is None:
        return bool(options.value("partial_columns"))
    if mode == FLEXIBLE_COLUMNS and fmt != "json":
        raise BadHeader("flexible partial update only support json format as input file currently")
    if mode == FLEXIBLE_COLUMNS:
        raise BadHeader("unique_key_update_mode UPDATE_FLEXIBLE_COLUMNS is not supported by this server yet")
    return bool(mode == "UPDATE_FIXED_COLUMNS")
