"""The load options: every stream-load header, and the LOAD / CREATE ROUTINE LOAD properties standing for one,
declared once (contract §2).

Each `LoadOption` gives the option's name, type, default, allowed values, description and how a value is read,
with Doris's text for a bad one. The table drives everything that knows the options:

    HTTP headers ───────────────┐
    LOAD LABEL ... PROPERTIES ──┼─► OptionValues ──(each value read through LOAD_OPTIONS)──► build_request ──►
    CREATE ROUTINE LOAD ... ────┘                                        (loaders/headers.py)   LoadRequest
    LOAD_OPTIONS ──► the OpenAPI parameters of the stream-load route (app/openapi.py) and docs/headers.md

Names are case-insensitive (the values of `allowed` too); a value is stripped unless the option keeps spaces.
Values are read when the request builder asks for them, so which error a load with two bad options gets stays
where the builder states Doris's order. Options that only tune Doris internals are read (the integer ones must
parse as Doris parses them) and ignored: every value is read as text already, and Spark sizes its own memory.
"""

from __future__ import annotations

import json
import re
import zoneinfo
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loaders.formats.csv import decode_separator
from tables.errors import BadHeader
from tables.names import LABEL_REGEX, InvalidName, check_label

Kind = Literal["string", "boolean", "integer", "number"]
Statement = Literal["broker", "routine"]  # SQL statements whose PROPERTIES set the option

MAX_TIMEOUT_S = 259200
MAX_SKIP_LINES = 2**31 - 1
FLEXIBLE_COLUMNS = "UPDATE_FLEXIBLE_COLUMNS"
HEADER_LINES = {"csv_with_names": 1, "csv_with_names_and_types": 2}  # lines a CSV format skips itself
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
CONTENT_ENCODINGS: dict[str, Literal["gz", "lz4", "zstd", "deflate"]] = {
    "gzip": "gz",
    "lz4": "lz4",
    "zstd": "zstd",
    "deflate": "deflate",
}
# Headers whose features are not built yet: a load sending one is refused rather than silently misapplied.
NOT_BUILT_HEADERS: tuple[str, ...] = ()

_SAME = object()  # `LoadOption.doc_default` when the documented default is the default itself


def validate_label(label: str) -> str:
    """Raises: BadHeader when the label breaks Doris's label rule (Doris's `FeNameFormat.checkLabel` text)."""
    try:
        return check_label(label)
    except InvalidName as exc:
        raise BadHeader(exc.message) from None


def parse_format(value: str) -> str:
    """`format`, lower case. Raises: BadHeader for arrow (not built) or a format Doris does not know."""
    fmt = value.lower()
    if fmt == "arrow":
        raise BadHeader("format arrow is not supported by this server yet; use csv, json, parquet or orc")
    if fmt not in ("csv", "json", "parquet", "orc", *HEADER_LINES):
        raise BadHeader(f"unknown data format, format={value}", code="DATA_FILE_TYPE_ERROR")
    return fmt


def parse_skip_lines(value: str) -> int:
    """Raises: BadHeader for a value that is not a non-negative integer Spark can compare."""
    if re.fullmatch(r"-\d+", value):
        raise BadHeader(f"Invalid 'skip_lines': {value}")
    if not value.isdigit():
        raise BadHeader(f"skip_lines must be a non-negative integer, got {value}")
    if int(value) > MAX_SKIP_LINES:  # Spark compares positions as 64-bit integers
        raise BadHeader(f"skip_lines must be at most {MAX_SKIP_LINES}, got {value}")
    return int(value)


def parse_jsonpaths(text: str) -> tuple[str, ...]:
    """`["$.id", "$.name"]` → the paths, `$.` read as the root.

    Raises:
        BadHeader: not a JSON array of paths starting with `$`.
    """
    try:
        paths = json.loads(text)
    except (ValueError, RecursionError):  # (nesting deeper than Python's recursion limit)
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


def _leading_integer(message: str) -> Callable[[str], str]:
    """A tuning value Doris parses with `std::stoll` / `stoi`: it must start as an integer (then it is ignored)."""

    def read(value: str) -> str:
        if not re.match(r"^[+-]?\d", value):
            raise BadHeader(message)
        return value

    return read


def _names(value: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in value.split(",") if n.strip())


@dataclass(frozen=True)
class LoadOption:
    """One load option. Without `read`, a value is read from the declaration: a boolean is true only when it says
    `true` (Doris's rule) unless `allowed` restricts it; a string is matched against `allowed`; numbers are
    parsed and held within `minimum`..`maximum`. `error` and `range_error` are Doris's texts (`{value}`: the
    value as sent, `{upper}`: in upper case)."""

    name: str
    kind: Kind
    description: str
    default: Any = None  # the value when the option is absent
    allowed: tuple[str, ...] = ()  # in their canonical case; the first spelling matching in any case is read
    not_built: tuple[str, ...] = ()  # allowed by Doris, refused here: left out of the documented values
    error: str = ""
    range_error: str = ""
    minimum: float | None = None
    maximum: float | None = None
    pattern: str | None = None
    read: Callable[[str], Any] | None = None
    aliases: tuple[str, ...] = ()  # other names of the option; the option's own name wins
    strip: bool = True  # False: the value is kept exactly as sent (separators, comments)
    empty_is_absent: bool = True  # False: an empty value is read (and usually refused)
    doc_default: Any = _SAME  # the default as documented, when it differs (None: not documented)
    ignored: bool = False  # only tunes Doris internals: checked, then not used
    properties: frozenset[Statement] = frozenset()  # LOAD / CREATE ROUTINE LOAD properties passed to the load
    property_error: str = ""  # CREATE ROUTINE LOAD's text for a bad value, where it differs from the header's

    def parse(self, value: str) -> Any:
        """The typed value of one sent value. Raises: BadHeader with Doris's text."""
        if self.read is not None:
            return self.read(value)
        if self.kind == "integer":
            if not re.fullmatch(r"-?\d+", value):
                raise BadHeader(self.error.format(value=value))
            return self._in_range(int(value), value)
        if self.kind == "number":
            try:
                number = float(value)
            except ValueError:
                raise BadHeader(self.error.format(value=value)) from None
            return self._in_range(number, value)
        if self.allowed:
            match = next((a for a in self.allowed if a.lower() == value.lower()), None)
            if match is None:
                raise BadHeader(self.error.format(value=value, upper=value.upper()))
            return match == "true" if self.kind == "boolean" else match
        return value.lower() == "true" if self.kind == "boolean" else value

    def _in_range(self, number: float, value: str) -> Any:
        low = self.minimum if self.minimum is not None else number
        high = self.maximum if self.maximum is not None else number
        if not low <= number <= high:  # NaN is outside every range
            raise BadHeader(self.range_error.format(value=value))
        return number

    @property
    def documented_default(self) -> Any:
        return self.default if self.doc_default is _SAME else self.doc_default

    @property
    def documented_values(self) -> tuple[str, ...]:
        return tuple(a for a in self.allowed if a not in self.not_built)


def _bool(name: str, description: str, **more: Any) -> LoadOption:
    return LoadOption(name, "boolean", description, default=False, **more)


def _text(name: str, description: str, **more: Any) -> LoadOption:
    return LoadOption(name, "string", description, **more)


def _separator_option(name: str, what: str, default: str, default_name: str) -> LoadOption:
    """A CSV separator: kept as sent (spaces too), an empty one refused. Its default is only in the text: a raw
    newline cannot travel in a header, and openapi-python-client 0.29 escapes a backslash in a default twice,
    so a generated SDK would send `\\\\n`."""
    return _text(
        name,
        f"{what}, any length; `\\t`, `\\n`, `\\xNN` escapes. Default: {default_name}.",
        default=default,
        doc_default=None,
        read=lambda value: decode_separator(value, header=name),
        strip=False,
        empty_is_absent=False,
    )


def _single_char(name: str, description: str) -> LoadOption:
    """`enclose` / `escape`: one byte, written as itself or as `\\xNN` (kept as sent: a space is a character)."""

    def read(raw: str) -> str:
        value = decode_separator(raw, header=name)
        if len(value.encode()) != 1:
            raise BadHeader(f"{name} must be single-char, actually is {raw}")
        return value

    return _text(name, description, read=read, strip=False, properties=frozenset({"routine"}))


def _tuning(name: str, kind: Kind, **more: Any) -> LoadOption:
    what = "checked to start as an integer, then ignored" if kind == "integer" else "accepted and ignored"
    # no documented default: a generated client would send one with every load
    return LoadOption(name, kind, f"Tunes Doris internals: {what}.", ignored=True, doc_default=None, **more)


# Every option, in the order the OpenAPI spec and docs/headers.md list them.
LOAD_OPTIONS: tuple[LoadOption, ...] = (
    _text(
        "label",
        "Unique label of the load within the database: a retried load with the same label is not applied twice. "
        "Default: a generated UUID.",
        pattern=LABEL_REGEX,
        read=validate_label,
    ),
    _text(
        "format",
        "Payload format.",
        default="csv",
        allowed=("csv", "csv_with_names", "csv_with_names_and_types", "json", "parquet", "orc", "arrow"),
        not_built=("arrow",),
        read=parse_format,
        properties=frozenset({"routine"}),
    ),
    _separator_option("column_separator", "CSV column separator", "\t", "tab"),
    _separator_option("line_delimiter", "CSV line delimiter", "\n", "newline"),
    LoadOption(
        "skip_lines",
        "integer",
        "CSV lines skipped at the start of the payload.",
        default=0,
        minimum=0,
        read=parse_skip_lines,
    ),
    _single_char("enclose", "CSV enclosing character (one byte): separators inside it are data."),
    _single_char("escape", "CSV escape character (one byte) inside enclosed fields."),
    _bool("trim_double_quotes", "Strip the outer double quotes of each CSV field."),
    _bool("empty_field_as_null", "Read empty CSV fields as NULL.", properties=frozenset({"routine"})),
    _text(
        "compress_type",
        "Compression of the payload.",
        allowed=(*sorted(COMPRESS_TYPES), *NOT_BUILT_COMPRESSION),
        not_built=NOT_BUILT_COMPRESSION,
        read=str,  # read with Content-Encoding and format (`parse_compression`): its errors name them
    ),
    _text(
        "Content-Encoding",
        "HTTP compression of the payload, used when `compress_type` is not set.",
        allowed=("identity", *CONTENT_ENCODINGS),
        read=str,
        strip=False,
    ),
    _text(
        "columns",
        "Column mapping, e.g. `k, tmp, v = upper(tmp)`: payload fields in order, derived columns after.",
    ),
    _text(
        "hidden_columns",
        "Hidden columns the payload carries, e.g. `__DORIS_DELETE_SIGN__`.",
        default=(),
        doc_default=None,
        read=_names,
    ),
    _text("where", "Filter: rows not matching it are counted as unselected."),
    _text(
        "merge_type",
        "APPEND adds rows, DELETE deletes their keys, MERGE decides per row by `delete`.",
        default="APPEND",
        allowed=("APPEND", "DELETE", "MERGE"),
        error="Invalid merge type {value}",
    ),
    _text("delete", "Condition marking rows as deletes; required with merge_type MERGE, refused otherwise."),
    _text("function_column.sequence_col", "Column whose value is the row's sequence (tables with sequence_type)."),
    LoadOption(
        "max_filter_ratio",
        "number",
        "Largest fraction of rows that may be filtered for bad data before the load fails.",
        default=0,
        minimum=0,
        maximum=1,
        error="Invalid max_filter_ratio format: {value}",
        range_error="max_filter_ratio must be between 0 and 1, got {value}",
        properties=frozenset({"broker"}),
    ),
    _bool(
        "strict_mode",
        "Reject rows whose values do not convert, instead of loading NULL.",
        allowed=("true", "false"),
        error="Invalid strict mode format. Must be bool type",
        empty_is_absent=False,
        properties=frozenset({"broker", "routine"}),
        property_error="strict_mode should be a boolean",
    ),
    LoadOption(
        "timeout",
        "integer",
        "Seconds the load may take.",
        default=MAX_TIMEOUT_S,
        minimum=1,
        maximum=MAX_TIMEOUT_S,
        error="Invalid timeout format",
        range_error="Invalid timeout: {value}, must be between 1 and " + f"{MAX_TIMEOUT_S} seconds",
        properties=frozenset({"broker"}),
    ),
    _text(
        "timezone",
        "Time zone of the load (name or offset such as +08:00); default: the server's session zone.",
        read=parse_time_zone,
        aliases=("time_zone",),
        properties=frozenset({"broker", "routine"}),
    ),
    _text("comment", "Comment echoed in the reply.", default="", doc_default=None, strip=False),
    # no documented default for these two: whether they are sent at all decides how JSON is read
    _bool(
        "strip_outer_array",
        "JSON: the payload is one array of rows (at most SL_MAX_JSON_BODY_BYTES).",
        doc_default=None,
    ),
    _bool(
        "read_json_by_line",
        "JSON: one row per line (the default when neither this nor strip_outer_array is sent); false reads "
        "the payload as one document (at most SL_MAX_JSON_BODY_BYTES).",
        doc_default=None,
    ),
    _text(
        "jsonpaths",
        'JSON: where each column is found, e.g. `["$.id", "$.name"]`.',
        read=parse_jsonpaths,
        properties=frozenset({"routine"}),
    ),
    _text("json_root", "JSON: the path of the rows inside each document.", properties=frozenset({"routine"})),
    _bool(
        "partial_columns",
        "Partial-column update of a merge-on-write unique table (same as UPDATE_FIXED_COLUMNS).",
        properties=frozenset({"routine"}),
    ),
    _text(
        "unique_key_update_mode",
        "Unique-key update mode; when absent, UPSERT unless `partial_columns` is true.",
        # no default: a sent UPSERT overrides `partial_columns`
        allowed=("UPSERT", "UPDATE_FIXED_COLUMNS", FLEXIBLE_COLUMNS),
        not_built=(FLEXIBLE_COLUMNS,),
        error="Invalid unique_key_partial_mode {value}, must be one of 'UPSERT', 'UPDATE_FIXED_COLUMNS' "
        "or 'UPDATE_FLEXIBLE_COLUMNS'",
        empty_is_absent=False,
        properties=frozenset({"routine"}),
    ),
    _text(
        "partial_update_new_key_behavior",
        "Partial update of a key not in the table: APPEND inserts it, ERROR fails the load.",
        default="APPEND",
        allowed=("APPEND", "ERROR"),
        error="Invalid partial_update_new_key_behavior {upper}, must be one of {{'APPEND', 'ERROR'}}",
        properties=frozenset({"routine"}),
    ),
    _text(
        "partitions",
        "`p1, p2`: load only into these partitions of a partitioned table; rows of other partitions are filtered "
        "(`no partition for this tuple`, counted against `max_filter_ratio`). Not used with group commit.",
    ),
    _text(
        "temporary_partitions",
        "`tp1, tp2`: load into these temporary partitions (`ALTER TABLE ... ADD TEMPORARY PARTITION`), which no "
        "query sees until `REPLACE PARTITION`; rows of no named one are filtered (`no partition for this tuple`). "
        "Not with `partitions` (`Can not specify both partitions and temporary partitions`) nor group commit.",
    ),
    _text(
        "group_commit",
        "Group commit mode: loads of one table with the same options arriving close together share one Spark "
        "job and one snapshot; sync_mode answers once visible, async_mode once the body is durable, off_mode "
        "loads alone. When absent, the table's `group_commit_mode` property decides. Not used for two-phase "
        "commit or partial updates.",
        allowed=("async_mode", "sync_mode", "off_mode"),
        error="group_commit can only be [async_mode, sync_mode, off_mode]",
    ),
    _text(
        "two_phase_commit",
        "Two-phase commit: `true` leaves the load PRECOMMITTED until `/api/{db}/_stream_load_2pc` commits or "
        "aborts it. Only the exact text `true` turns it on.",
        default=False,
        doc_default="false",
        allowed=("true", "false"),
        read=lambda value: value == "true",  # compared as the exact string, as the BE does: `True` is not 2PC
    ),
    _bool(
        "negative",
        "Negative load (aggregate tables): SUM columns are negated; fails unless every value column is SUM.",
    ),
    _tuning(
        "exec_mem_limit",
        "integer",
        read=_leading_integer("Invalid mem limit format, stoll"),
        properties=frozenset({"broker"}),
    ),
    _tuning("send_batch_parallelism", "integer", read=_leading_integer("Invalid send_batch_parallelism format")),
    _tuning("load_stream_per_node", "integer", read=_leading_integer("Invalid load_stream_per_node format")),
    _tuning("load_to_single_tablet", "boolean", default=False),
    _tuning("memtable_on_sink_node", "boolean", default=False),
    _tuning("fuzzy_parse", "boolean", default=False),
    _tuning("num_as_string", "boolean", default=False),
)
OPTIONS: dict[str, LoadOption] = {option.name.lower(): option for option in LOAD_OPTIONS}
# the keys a value is looked up under, by option name as the table spells it: its name, then its aliases
_KEYS = {o.name: tuple(n.lower() for n in (o.name, *o.aliases)) for o in LOAD_OPTIONS}
# every header a load's options are read from (`OptionValues`: names, aliases, and `Content-Encoding`, which
# `compress_type` gives way to); a test checks that building a request looks up no other
OPTION_HEADERS = frozenset(key for keys in _KEYS.values() for key in keys) | {"content-encoding"}


def option(name: str) -> LoadOption:
    return OPTIONS[name.lower()]


def statement_options(statement: Statement) -> tuple[str, ...]:
    """The options a statement's PROPERTIES pass to its load (other keys it accepts are its own)."""
    return tuple(o.name for o in LOAD_OPTIONS if statement in o.properties)


class OptionValues:
    """The options one load was given, read through the table when asked for.

    `sent` maps option names (any case) to text as sent: HTTP headers, or a SQL statement's clauses and
    PROPERTIES. `given` holds values a SQL parser already typed (a `MERGE` keyword, `NEGATIVE`): they are used
    as they are.
    """

    def __init__(self, sent: Mapping[str, str], given: Mapping[str, Any] | None = None) -> None:
        self._sent = sent
        self._given = dict(given or {})
        self._texts: dict[str, str | None] = {}  # a request reads some options twice: looked up once

    def text(self, name: str) -> str | None:
        """The value as sent (stripped unless the option keeps spaces), None when absent; an empty value of the
        option's own name gives way to an alias's."""
        if name in self._texts:
            return self._texts[name]
        found: str | None = None
        known = OPTIONS.get(name.lower())
        for key in _KEYS.get(name) or (name.lower(),):
            raw = self._sent.get(key)
            if raw is None:
                continue
            value = raw.strip() if known is None or known.strip else raw
            if value:
                found = value
                break
            found = value if found is None else found
        self._texts[name] = found
        return found

    def sent(self, name: str) -> bool:
        return name in self._given or self.text(name) is not None

    def value(self, name: str) -> Any:
        """The typed value, or the option's default when absent. Raises: BadHeader with Doris's text."""
        if name in self._given:
            return self._given[name]
        known = option(name)
        text = self.text(name)
        if text is None or (text == "" and known.empty_is_absent):
            return known.default
        return known.parse(text)

    def check(self, names: Iterable[str]) -> None:
        """Read each option (in this order) for its errors alone."""
        for name in names:
            self.value(name)


DOCS_PATH = Path(__file__).resolve().parents[1] / "docs" / "headers.md"


def _cell(value: Any) -> str:
    if value is None or value == "":
        return ""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return f"`{text}`"


def markdown() -> str:
    """docs/headers.md: the option table as the user reads it (a test keeps the file equal to this)."""
    lines = [
        "# Stream-load headers",
        "",
        "Generated from the option table (`loaders/options.py`) by `python -m loaders.options`; a test fails when",
        "this file drifts from it. Header names are case-insensitive, and so are the listed values.",
        "",
        "| Header | Type | Default | Values | Description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for opt in LOAD_OPTIONS:
        names = " ".join(f"`{n}`" for n in (opt.name, *opt.aliases))
        values = ", ".join(f"`{v}`" for v in opt.documented_values)
        lines.append(f"| {names} | {opt.kind} | {_cell(opt.documented_default)} | {values} | {opt.description} |")
    statements = {"broker": "LOAD LABEL ... PROPERTIES", "routine": "CREATE ROUTINE LOAD ... PROPERTIES"}
    if NOT_BUILT_HEADERS:
        lines += ["", "Refused (not supported by this server yet): " + ", ".join(f"`{n}`" for n in NOT_BUILT_HEADERS)]
    lines += [
        "",
        "SQL properties that set a load option, read as the header is (CREATE ROUTINE LOAD keeps its own texts",
        "for a bad `strict_mode` or `format`, and reads only csv and json):",
        "",
    ]
    for statement, title in statements.items():
        lines.append(f"- {title}: " + ", ".join(f"`{n}`" for n in statement_options(statement)))  # type: ignore[arg-type]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    DOCS_PATH.write_text(markdown())
    print(f"wrote {DOCS_PATH}")
