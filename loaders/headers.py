"""Stream-load headers → a frozen `LoadRequest`, with Doris's defaults and error texts (contract §2).

Header names are case-insensitive; unknown headers are ignored, as Doris does, and so are the ones that only
tune Doris internals (`exec_mem_limit`, `send_batch_parallelism`, `load_to_single_tablet`,
`memtable_on_sink_node`, `fuzzy_parse`, `num_as_string`: every value is read as text already), though the
integer ones must parse as Doris parses them. Booleans follow Doris: any value other than `true` is false.
"""

from __future__ import annotations

import json
import re
import uuid
import zoneinfo
from collections.abc import Iterable, Mapping
from typing import Literal

from loaders.expressions import DEFAULT_LIMITS, Size, parse_columns, parse_condition
from loaders.formats.csv import decode_separator
from tables.errors import BadHeader
from tables.load_spec import InputLimits, LoadRequest, MergeType
from tables.names import LABEL_REGEX, InvalidName, check_label

LABEL_PATTERN = re.compile(LABEL_REGEX)
MAX_TIMEOUT_S = 259200
MAX_SKIP_LINES = 2**31 - 1

# Headers whose features are not built yet: refused rather than silently misapplied.
_NOT_YET = {
    "partitions": "partitions",
    "temporary_partitions": "temporary_partitions",
}


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


def _bool(headers: Mapping[str, str], name: str) -> bool:
    return headers.get(name, "false").strip().lower() == "true"


def _get(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    return value if value is None else value.strip()


COMPRESS_TYPES: dict[str, Literal["gz", "bz2", "lz4", "zstd", "deflate"]] = {
    "GZ": "gz",
    "GZIP": "gz",
    "BZ2": "bz2",
    "LZ4": "lz4",
    "LZ4FRAME": "lz4",
    "ZSTD": "zstd",
    "DEFLATE": "deflate",
}
NOT_BUILT_COMPRESSION = ("LZO", "LZOP", "LZ4_BLOCK", "SNAPPY_BLOCK")


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
    if encoding in ("gzip", "lz4", "zstd", "deflate"):
        return {"gzip": "gz", "lz4": "lz4", "zstd": "zstd", "deflate": "deflate"}[encoding]  # type: ignore[return-value]
    raise BadHeader(f"unsupported Content-Encoding: {content_encoding}")


def parse_jsonpaths(text: str) -> tuple[str, ...]:
    """`["$.id", "$.name"]` → the paths, `$.` read as the root.

    Raises:
        BadHeader: not a JSON array of paths starting with `$`.
    """
    try:
        paths = json.loads(text)
    except ValueError:
        raise BadHeader(f"Invalid json path: {text}") from None
    if not isinstance(paths, list) or not all(isinstance(p, str) and p.startswith("$") for p in paths):
        raise BadHeader(f"Invalid json path: {text}")
    return tuple("$" if p in ("$", "$.") else p for p in paths)


OFFSET = re.compile(r"^[+-](0\d|1[0-4]):[0-5]\d$")


def parse_time_zone(value: str | None) -> str | None:
    """A time zone name (`Asia/Shanghai`, `UTC`) or offset (`+08:00`).

    Raises:
        BadHeader: an unknown zone.
    """
    if not value:
        return None
    if OFFSET.match(value):
        return value
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise BadHeader(f"Unknown or incorrect time zone: '{value}'") from None
    return value


def _single_char(headers: Mapping[str, str], name: str) -> str | None:
    """`enclose` / `escape`: one byte, written as itself or as `\\xNN`.

    Raises:
        BadHeader: longer than one character.
    """
    raw = headers.get(name)
    if not raw:
        return None
    value = decode_separator(raw, header=name)
    if len(value.encode()) != 1:
        raise BadHeader(f"{name} must be single-char, actually is {raw}")
    return value


# tuning headers Doris parses as integers (std::stoll / stoi) and otherwise ignores here
_INTEGER_HEADERS = {
    "exec_mem_limit": "Invalid mem limit format, stoll",
    "send_batch_parallelism": "Invalid send_batch_parallelism format",
    "load_stream_per_node": "Invalid load_stream_per_node format",
}


def _check_integers(headers: Mapping[str, str]) -> None:
    """Raises: BadHeader when a tuning header is not an integer (Doris's message)."""
    for name, message in _INTEGER_HEADERS.items():
        value = _get(headers, name)
        if value and not re.match(r"^[+-]?\d", value):
            raise BadHeader(message)


def validate_label(label: str) -> str:
    """Raises: BadHeader when the label breaks Doris's label rule (Doris's `FeNameFormat.checkLabel` text)."""
    try:
        return check_label(label)
    except InvalidName as exc:
        raise BadHeader(exc.message) from None


def parse_load_request(
    db: str, table: str, headers: Mapping[str, str], *, limits: InputLimits = DEFAULT_LIMITS
) -> LoadRequest:
    """Build the `LoadRequest` a stream load asks for; `limits` bound what its expressions may build.

    Raises:
        BadHeader: a header value Doris refuses, with a message naming the header.
        BadExpression: `columns`, `where` or `delete` does not parse or uses something not allowed.
    """
    label = _get(headers, "label") or str(uuid.uuid4())
    validate_label(label)

    fmt = (_get(headers, "format") or "csv").lower()
    skip_lines = 0
    if fmt in ("csv_with_names", "csv_with_names_and_types"):
        skip_lines = 1 if fmt == "csv_with_names" else 2
    elif fmt == "arrow":
        raise BadHeader("format arrow is not supported by this server yet; use csv, json, parquet or orc")
    elif fmt not in ("csv", "json", "parquet", "orc"):
        raise BadHeader(f"unknown data format, format={_get(headers, 'format')}", code="DATA_FILE_TYPE_ERROR")
    raw_skip = _get(headers, "skip_lines")
    if raw_skip and not skip_lines:
        if re.fullmatch(r"-\d+", raw_skip):
            raise BadHeader(f"Invalid 'skip_lines': {raw_skip}")
        if not raw_skip.isdigit():
            raise BadHeader(f"skip_lines must be a non-negative integer, got {raw_skip}")
        skip_lines = int(raw_skip)
        if skip_lines > MAX_SKIP_LINES:  # Spark compares positions as 64-bit integers
            raise BadHeader(f"skip_lines must be at most {MAX_SKIP_LINES}, got {raw_skip}")

    compression = parse_compression(
        _get(headers, "compress_type"), headers.get("content-encoding"), format_header=_get(headers, "format") or ""
    )
    for name, feature in _NOT_YET.items():
        if _get(headers, name):
            raise BadHeader(f"header {feature} is not supported by this server yet")
    mode_raw = _get(headers, "unique_key_update_mode")
    if mode_raw is not None:
        mode = mode_raw.upper()
        if mode not in ("UPSERT", "UPDATE_FIXED_COLUMNS", "UPDATE_FLEXIBLE_COLUMNS"):
            raise BadHeader(
                f"Invalid unique_key_partial_mode {mode_raw}, must be one of 'UPSERT', 'UPDATE_FIXED_COLUMNS' "
                "or 'UPDATE_FLEXIBLE_COLUMNS'"
            )
        if mode == "UPDATE_FLEXIBLE_COLUMNS" and fmt != "json":
            raise BadHeader("flexible partial update only support json format as input file currently")
        if mode == "UPDATE_FLEXIBLE_COLUMNS":
            raise BadHeader("unique_key_update_mode UPDATE_FLEXIBLE_COLUMNS is not supported by this server yet")
        partial_columns = mode == "UPDATE_FIXED_COLUMNS"
    else:
        partial_columns = _bool(headers, "partial_columns")
    behavior_raw = _get(headers, "partial_update_new_key_behavior")
    behavior = (behavior_raw or "APPEND").upper()
    if behavior not in ("APPEND", "ERROR"):
        raise BadHeader(f"Invalid partial_update_new_key_behavior {behavior}, must be one of {{'APPEND', 'ERROR'}}")
    # compared as the exact string, as the BE does: `True` is not two-phase
    two_phase_commit = _get(headers, "two_phase_commit") == "true"
    group_commit = _get(headers, "group_commit")
    if group_commit and group_commit.lower() not in ("async_mode", "sync_mode", "off_mode"):
        raise BadHeader("group_commit can only be [async_mode, sync_mode, off_mode]")
    # Doris uses group commit only for plain loads; there a label of the client's own is refused
    plain = not two_phase_commit and not partial_columns and mode_raw is None
    if group_commit and group_commit.lower() != "off_mode" and plain and _get(headers, "label"):
        raise BadHeader("label and group_commit can't be set at the same time")
    _check_integers(headers)

    merge_raw = _get(headers, "merge_type")
    try:
        merge_type = MergeType((merge_raw or "APPEND").upper())
    except ValueError:
        raise BadHeader(f"Invalid merge type {merge_raw}") from None
    delete_text = _get(headers, "delete")
    if merge_type is MergeType.MERGE and not delete_text:
        raise BadHeader("Excepted DELETE ON clause when merge type is MERGE.")
    if merge_type is not MergeType.MERGE and delete_text:
        raise BadHeader("Not support DELETE ON clause when merge type is not MERGE.")

    ratio_raw = _get(headers, "max_filter_ratio")
    max_filter_ratio = 0.0
    if ratio_raw:
        try:
            max_filter_ratio = float(ratio_raw)
        except ValueError:
            raise BadHeader(f"Invalid max_filter_ratio format: {ratio_raw}") from None
        if not 0.0 <= max_filter_ratio <= 1.0:
            raise BadHeader(f"max_filter_ratio must be between 0 and 1, got {ratio_raw}")

    strict_raw = _get(headers, "strict_mode")
    if strict_raw is not None and strict_raw.lower() not in ("true", "false"):
        raise BadHeader("Invalid strict mode format. Must be bool type")

    timeout_raw = _get(headers, "timeout")
    timeout_s = MAX_TIMEOUT_S
    if timeout_raw:
        if not re.fullmatch(r"-?\d+", timeout_raw):
            raise BadHeader("Invalid timeout format")
        timeout_s = int(timeout_raw)
        if not 1 <= timeout_s <= MAX_TIMEOUT_S:
            raise BadHeader(f"Invalid timeout: {timeout_raw}, must be between 1 and {MAX_TIMEOUT_S} seconds")

    enclose, escape = _single_char(headers, "enclose"), _single_char(headers, "escape")
    strip_outer_array = _bool(headers, "strip_outer_array")
    if fmt == "json" and strip_outer_array and _bool(headers, "read_json_by_line"):
        raise BadHeader("Don't support both strip_outer_array and read_json_by_line, choose one of them")

    columns_text = _get(headers, "columns")
    hidden = _get(headers, "hidden_columns")
    where_text = _get(headers, "where")
    derived: dict[str, Size] = {}  # `where` and `delete` may read `columns` entries: their bounds carry over
    columns = parse_columns(columns_text, limits=limits, sizes=derived) if columns_text else None
    return LoadRequest(
        db=db,
        table=table,
        label=label,
        columns=columns,
        hidden_columns=tuple(h.strip() for h in hidden.split(",") if h.strip()) if hidden else (),
        column_separator=decode_separator(headers.get("column_separator", "\t"), header="column_separator"),
        line_delimiter=decode_separator(headers.get("line_delimiter", "\n"), header="line_delimiter"),
        skip_lines=skip_lines,
        where=parse_condition(where_text, header="where", limits=limits, derived=derived) if where_text else None,
        merge_type=merge_type,
        delete=(parse_condition(delete_text, header="delete", limits=limits, derived=derived) if delete_text else None),
        sequence_col=_get(headers, "function_column.sequence_col") or None,
        max_filter_ratio=max_filter_ratio,
        strict_mode=(strict_raw or "false").lower() == "true",
        timeout_s=timeout_s,
        # `timezone` wins over its alias `time_zone`
        time_zone=parse_time_zone(_get(headers, "timezone") or _get(headers, "time_zone")),
        comment=headers.get("comment", ""),
        format=fmt if fmt in ("json", "parquet", "orc") else "csv",
        compression=compression,
        trim_double_quotes=_bool(headers, "trim_double_quotes"),
        enclose=enclose,
        escape=escape,
        empty_field_as_null=_bool(headers, "empty_field_as_null"),
        strip_outer_array=fmt == "json" and strip_outer_array,
        # newest Doris: when neither header is sent, one object per line; otherwise the header decides
        read_json_by_line=(
            _bool(headers, "read_json_by_line")
            if _get(headers, "read_json_by_line") is not None
            else _get(headers, "strip_outer_array") is None
        ),
        jsonpaths=parse_jsonpaths(jsonpaths) if fmt == "json" and (jsonpaths := _get(headers, "jsonpaths")) else None,
        json_root=(_get(headers, "json_root") or None) if fmt == "json" else None,
        partial_columns=partial_columns,
        negative=_bool(headers, "negative"),
        partial_update_new_key_behavior="ERROR" if behavior == "ERROR" else "APPEND",
        two_phase_commit=two_phase_commit,
        group_commit=group_commit.lower() if group_commit else None,
        limits=limits,
    )
