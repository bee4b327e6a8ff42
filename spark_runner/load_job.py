"""The load job: source rows → mapped, converted, filtered, signed and sequenced rows → one rowset.

Steps (each a DataFrame → DataFrame function, each one `selectExpr` of generated Spark SQL):
    map_columns        source fields and derived `columns` expressions, in order
    convert_targets    table columns converted to their types, DEFAULTs, reject reasons (data quality)
    mark_flags         unselected (`where`), delete sign from merge_type / `delete` / a mapped sign, sequence
    dedup              one row per key: largest (sequence, position) — `merge.latest_per_key`
then the rowset is written bucketed by key, sorted, with Iceberg field ids, in one Spark action whose
observed metrics are the load's counts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.storagelevel import StorageLevel

from spark_runner import arrow_csv, prepared, small_rowset
from spark_runner.arrow_frames import arrow_frame, collect_local, relation_rows
from spark_runner.buckets import (
    bucket_sql,
    stored_values,
    with_bucket,
    with_partition,
    with_partition_id,
    write_rows,
)
from spark_runner.columns import context_cache, named, select_expr, select_named, sql_text
from spark_runner.merge import beats, latest_rows, merge_rows
from spark_runner.mow import (
    LOCAL_JOIN,
    STORED_FILE,
    STORED_POS,
    WINS,
    decision_columns,
    keys_match,
    stored_winners,
    write_deletes,
)
from spark_runner.planning import LoadPlan
from spark_runner.queries import FILE, ROW, keyed_leaf
from spark_runner.sqltext import convert_sql, default_sql, lit, q, storage_type_sql
from tables.commit import rowset_files
from tables.csv_dialect import NULL_MARKER, CsvDialect, CsvPath
from tables.errors import LoadError
from tables.load_spec import ColumnMapping, LoadCounts, MergeType
from tables.model import BUCKET_COL, DELETE_SIGN, SEQUENCE_COL, VERSION_COL, ColumnDef, TableDef
from tables.partitions import NO_PARTITION, PARTITION_COL
from tables.row_delta import write_position_deletes
from tables.rowsets import FileFilter
from tables.warehouse import Location, name_of

if TYPE_CHECKING:
    import pyarrow as pa

POS = "__pos"
LINE = "__line"
NCOLS = "__ncols"
REASON = "__reason"
UNSELECTED = "__unselected"
SIGN = "__sign"
SEQ = "__seq"
MAX_ERROR_ROWS = 50
QUOTED = lit('^"(.*)"$')  # trim_double_quotes: one pair of outer double quotes

log = logging.getLogger(__name__)

# the stored rows a load reads, from the files that may hold the keys it writes (None: every file)
StoredRows = Callable[[FileFilter | None], DataFrame]


@dataclass(frozen=True)
class JobOutcome:
    counts: LoadCounts
    files: list[str]
    errors: list[str]  # first rejected rows, error-log lines
    metrics: dict[str, Any] | None = None  # the caller's `extra_metrics`, by name (counts, or arrays of counts)
    deletes: list[str] = field(default_factory=list)  # position delete files of the stored rows it supersedes
    paired: bool = False  # decided against the stored rows of its keys in the server's process (`pair`)
    folded: bool = False  # no job ran: every row was loaded, and the caller's `extra_metrics` were not computed


def _field(i: int) -> str:
    return f"__f{i}"


def _converted(i: int) -> str:
    return f"__c{i}"


def csv_source(spark: SparkSession, path: Path, plan: LoadPlan) -> DataFrame:
    """Read a staged CSV body as Doris does: no quoting, `\\N` is NULL, blank lines skipped.

    The load's dialect picks the path (`CsvDialect.path_for`): the fast one, where the server splits the
    body (`arrow_csv`) and hands Spark its fields inline or as Parquet, or the general one, Spark's text
    source. A body the fast path turns out not to fit takes the general one.
    """
    dialect = CsvDialect.of(plan.request, len(plan.source_fields))
    # a directory of bodies (a group commit's) or a glob (a broker load's) takes the general path
    single = Path(path).is_file()
    route = dialect.path_for(Path(path).stat().st_size if single else None)
    source = None
    if route is CsvPath.INLINE:
        source = _inline_source(spark, Path(path), dialect)
    elif route is CsvPath.PARQUET:
        source = _parquet_source(spark, Path(path), dialect)
    if source is None:
        route, source = CsvPath.GENERAL, _text_source(spark, path, dialect)
    log.debug("CSV body %s: %s path", Path(path).name, route)
    return source


def _text_source(spark: SparkSession, path: Path, dialect: CsvDialect) -> DataFrame:
    """The general path: Spark reads the lines and splits each one (with its CSV parser when quoted)."""
    text = spark.read.text(str(path), lineSep=dialect.line_delimiter)
    text = text.selectExpr(f"monotonically_increasing_id() AS {POS}", "value")
    if dialect.skip_lines:
        text = text.where(f"{POS} >= {dialect.skip_lines}")
    sep = dialect.column_separator
    if dialect.quoted:
        parsed, split = _quoted_split(dialect)  # the line parsed once, its fields taken in the next projection
        lines = text.where("value != ''").selectExpr(POS, "value", f"{parsed} AS __csv")
        parts = lines.selectExpr(POS, "value", f"{split} AS __parts")
    else:
        pattern = f"\\Q{sep}\\E" if "\\E" not in sep else "".join(f"\\x{{{ord(ch):x}}}" for ch in sep)
        parts = text.where("value != ''").selectExpr(POS, "value", f"split(value, {lit(pattern)}, -1) AS __parts")
    fields = _csv_fields(dialect, [f"get(__parts, {i})" for i in range(dialect.field_count)])
    return parts.selectExpr(POS, f"value AS {LINE}", f"size(__parts) AS {NCOLS}", *fields)


def _csv_fields(dialect: CsvDialect, raw: list[str]) -> list[str]:
    """The source fields from raw field text: `\\N` is NULL, optional quote trimming and empty-as-NULL."""
    fields = []
    for i, value in enumerate(raw):
        if dialect.trim_double_quotes:
            value = f"regexp_replace({value}, {QUOTED}, '$1')"
        empty = f" WHEN {value} = '' THEN NULL" if dialect.empty_field_as_null else ""
        fields.append(f"CASE WHEN {value} = {lit(NULL_MARKER)} THEN NULL{empty} ELSE {value} END AS {_field(i)}")
    return fields


def _split_fields_source(frame: DataFrame, dialect: CsvDialect, position: str) -> DataFrame:
    """The source rows of a body the fast path split (`arrow_csv`): the line is its fields and the rest of a
    longer line joined by the separator (concat_ws skips the NULLs past a short line's end)."""
    raw = [arrow_csv.field_name(i) for i in range(dialect.field_count)]
    line = f"concat_ws({lit(dialect.column_separator)}, {', '.join([*raw, arrow_csv.REST])})"
    return select_expr(
        frame,
        [
            f"{position} AS {POS}",
            f"{line} AS {LINE}",
            f"coalesce({arrow_csv.FIELD_COUNT}, {dialect.field_count}) AS {NCOLS}",
            *_csv_fields(dialect, raw),
        ],
    )


def _inline_source(spark: SparkSession, path: Path, dialect: CsvDialect) -> DataFrame | None:
    """A small body's fields as one `VALUES` list (a local relation: no file listing, no scan), or None."""
    split = arrow_csv.split_small(path, dialect)
    if split is None:
        return None
    return inline_fields(spark, split, dialect)


def inline_fields(
    spark: SparkSession, split: pa.Table, dialect: CsvDialect, positions: Sequence[int] | None = None
) -> DataFrame:
    """Fields split by the server (`arrow_csv`) as one small in-memory source, row `i` at `positions[i]` (else
    `i`): several bodies' lines in one relation (a group commit's) keep their own order.

    The Arrow table goes to Spark as it is (`createDataFrame`): no SQL text is built from the data, and its
    cost hardly grows with the rows (a `VALUES` list of 2,048 rows took ~160 ms to parse and analyze, this
    ~30 ms), so a group of many small loads stays one small source."""
    import pyarrow as pa

    pos = pa.array(positions if positions is not None else range(split.num_rows), pa.int64())
    fields = [T.StructField(POS, T.LongType(), nullable=False)]
    fields += [
        T.StructField(name, T.IntegerType() if name == arrow_csv.FIELD_COUNT else T.StringType())
        for name in split.column_names
    ]
    table = split.add_column(0, POS, pos)
    inline = arrow_frame(spark, table, T.StructType(fields))
    chain = prepared.deferred(lambda: _split_fields_source(inline, dialect, POS), spark)
    source = prepared.mark_leaf(chain, inline)
    return small_rowset.mark_small(source, rows=split.num_rows)


def _parquet_source(spark: SparkSession, path: Path, dialect: CsvDialect) -> DataFrame | None:
    """A large body's fields, written as Parquet beside it and read back by Spark, or None. A body split while
    it was received (`arrow_csv.prestage`) has its fields already, or is being finished."""
    taken = arrow_csv.take_prestaged(path, dialect)
    staged = arrow_csv.stage_fields(path, dialect) if isinstance(taken, arrow_csv.NotPrestaged) else taken
    if staged is None:
        return None
    names = arrow_csv.column_names(dialect)
    schema = T.StructType(
        [T.StructField(name, T.StringType()) for name in names[:-1]]
        + [T.StructField(arrow_csv.FIELD_COUNT, T.IntegerType())]
    )
    frame = spark.read.schema(schema).parquet(str(staged))
    return _split_fields_source(frame, dialect, "monotonically_increasing_id()")


MISSING = "\u0001__missing__\u0001"  # from_csv's null value: never in data, so NULL means "no such field"


def _quoted_split(dialect: CsvDialect) -> tuple[str, str]:
    """Fields of one line with `enclose` protecting separators and `escape` escaping the enclose character:
    the line parsed into a struct (`__csv`), and its fields from that struct.

    Spark's CSV parser per line; one extra field in the schema reveals lines with too many fields, and a
    NULL marks a missing one, so the column count is exact. `\\N` keeps its meaning (handled by the caller).
    The struct is built in a projection of its own: `from_csv` once per field repeated the schema of every field
    (2,000 `columns` took more than 60 s to plan).
    """
    width = dialect.field_count + 1
    schema = lit(", ".join(f"f{i} STRING" for i in range(width)))
    options = {
        "sep": dialect.column_separator,
        "quote": dialect.enclose or "\u0000",
        "escape": dialect.escape or dialect.enclose or "\\",
        "nullValue": MISSING,
        "emptyValue": "",
        "ignoreLeadingWhiteSpace": "false",
        "ignoreTrailingWhiteSpace": "false",
        "mode": "PERMISSIVE",
    }
    rendered = "map(" + ", ".join(f"{lit(k)}, {lit(v)}" for k, v in options.items()) + ")"
    parsed = f"from_csv(value, {schema}, {rendered})"
    fields = ", ".join(f"__csv.f{i}" for i in range(width))
    return parsed, f"filter(array({fields}), x -> x IS NOT NULL)"


NOT_ARRAY = "JSON data is not an array-object, `strip_outer_array` must be FALSE."
IS_ARRAY = "JSON data is array-object, `strip_outer_array` must be TRUE."


def json_source(spark: SparkSession, path: Path, plan: LoadPlan) -> DataFrame:
    """Read a staged JSON body: one object per line, one array of objects (`strip_outer_array`), or one
    object (`read_json_by_line: false`).

    `json_root` picks the node to read from; `jsonpaths` extract the source fields in order, else keys are
    matched to the source names. A missing key is NULL; every value is read as text so the same conversions
    as CSV apply. A record that is not a JSON object is filtered, with the reason Doris's JSON reader gives.
    """
    req = plan.request
    names = plan.source_fields
    root = f"get_json_object(value, {lit(req.json_root)})" if req.json_root else "value"
    # the node json_root names is absent from a document that parses
    no_root = "get_json_object(value, '$') IS NOT NULL AND __root IS NULL" if req.json_root else "false"
    if req.strip_outer_array:
        text = spark.read.text(str(path), wholetext=True).where("trim(value) != ''")
        rooted = text.selectExpr("value", f"{root} AS __root")
        # the document's own checks, once per document: an element's row carries their outcome and its own text
        # only (evaluated per element over the whole document, a 640 KB array of 80,000 objects took > 200 s)
        checked = rooted.selectExpr(
            "from_json(__root, 'array<string>') AS __elements",
            f"CASE WHEN {no_root} THEN 'JSON Root not found.' "
            f"WHEN json_array_length(__root) IS NULL AND json_object_keys(__root) IS NOT NULL THEN {lit(NOT_ARRAY)} "
            "END AS __docbad",
            "CASE WHEN from_json(__root, 'array<string>') IS NULL THEN coalesce(__root, value) END AS __whole",
        )
        # a body that is no array still gives one row, so that it is counted and filtered
        elements = "coalesce(__elements, array(CAST(NULL AS STRING)))"
        docs = checked.selectExpr("__docbad", "__whole", f"posexplode({elements}) AS ({POS}, __doc)")
        reason = "coalesce(__docbad, CASE WHEN json_object_keys(__doc) IS NULL THEN 'Parse json data failed' END)"
        # a `null` element's line is its own text, as any other element's (it was the whole document)
        line = "coalesce(__doc, __whole, 'null')"
    else:
        if req.read_json_by_line:
            text = spark.read.text(str(path), lineSep=req.line_delimiter)
        else:  # the whole body is one document (a pretty-printed object, say)
            text = spark.read.text(str(path), wholetext=True)
        text = text.where("trim(value) != ''")
        docs = text.selectExpr(f"monotonically_increasing_id() AS {POS}", "value", f"{root} AS __root").selectExpr(
            "*", "__root AS __doc"
        )
        reason = (
            f"CASE WHEN {no_root} THEN 'JSON Root not found.' "
            f"WHEN json_array_length(__doc) IS NOT NULL THEN {lit(IS_ARRAY)} "
            "WHEN json_object_keys(__doc) IS NULL THEN 'Parse json data failed' END"
        )
        line = "coalesce(__doc, value)"
    if req.jsonpaths is not None:
        paths = list(req.jsonpaths) + [None] * (len(names) - len(req.jsonpaths))
        fields = [
            f"get_json_object(__doc, {lit(p)}) AS {_field(i)}" if p else f"CAST(NULL AS STRING) AS {_field(i)}"
            for i, p in enumerate(paths[: len(names)])
        ]
    else:
        # the document parsed once into a struct, its fields taken from it in the next projection (one
        # `from_json` per field repeated the schema of every field: SQL text quadratic in the names)
        schema = lit("struct<" + ", ".join(f"{q(n)}: string" for n in names) + ">")
        parsed = docs.selectExpr(
            POS,
            f"{line} AS {LINE}",
            f"{len(names)} AS {NCOLS}",
            f"{reason} AS __bad",
            f"from_json(__doc, {schema}) AS __s",
        )
        fields = [f"__s.{q(n)} AS {_field(i)}" for i, n in enumerate(names)]
        return parsed.selectExpr(POS, LINE, NCOLS, "__bad", *fields)
    return docs.selectExpr(POS, f"{line} AS {LINE}", f"{len(names)} AS {NCOLS}", f"{reason} AS __bad", *fields)


def check_columnar_file(path: Path, fmt: str) -> None:
    """Read the file's footer before Spark does, so a body that is no such file gets a plain reason.

    Raises:
        LoadError: the body is not a Parquet / ORC file (or its footer is damaged).
    """
    import pyarrow.orc as orc
    import pyarrow.parquet as pq

    try:
        if fmt == "parquet":
            pq.read_metadata(str(path))
        else:
            orc.ORCFile(str(path))
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError or others for a damaged file
        raise LoadError(f"the body is not a {fmt} file: {exc}") from None


def columnar_source(spark: SparkSession, path: Path, plan: LoadPlan) -> DataFrame:
    """Read a staged Parquet or ORC body: columns are matched to the source names (case-insensitive);
    a name the file lacks is NULL. Values go through the same conversions as text."""
    check_columnar_file(path, plan.request.format)
    frame = spark.read.format(plan.request.format).load(str(path))
    present = {c.lower(): c for c in frame.columns}
    fields = [
        f"CAST({q(present[n.lower()])} AS STRING) AS {_field(i)}"
        if n.lower() in present
        else f"CAST(NULL AS STRING) AS {_field(i)}"
        for i, n in enumerate(plan.source_fields)
    ]
    line = "to_json(struct(" + ", ".join(q(c) for c in frame.columns) + "))"
    return frame.selectExpr(
        f"monotonically_increasing_id() AS {POS}",
        f"{line} AS {LINE}",
        f"{len(plan.source_fields)} AS {NCOLS}",
        *fields,
    )


def rows_source(spark: SparkSession, rows: list[list[str | None]], plan: LoadPlan) -> DataFrame:
    """Rows given as values (INSERT ... VALUES), already split into fields; None is NULL."""
    n = len(plan.source_fields)
    schema = T.StructType(
        [T.StructField(POS, T.LongType()), T.StructField(LINE, T.StringType()), T.StructField(NCOLS, T.IntegerType())]
        + [T.StructField(_field(i), T.StringType()) for i in range(n)]
    )
    import pyarrow as pa

    fields = [(row + [None] * (n - len(row)))[:n] for row in rows]
    columns = {
        POS: pa.array(range(len(rows)), pa.int64()),
        LINE: pa.array(["(" + ", ".join("NULL" if v is None else v for v in row) + ")" for row in rows], pa.string()),
        NCOLS: pa.array([len(row) for row in rows], pa.int32()),
        **{_field(i): pa.array([values[i] for values in fields], pa.string()) for i in range(n)},
    }
    frame = arrow_frame(spark, pa.table(columns), schema)  # an in-memory relation, as a small body's
    if len(rows) > plan.request.limits.csv_inline_max_lines:
        return frame
    return small_rowset.mark_small(prepared.mark_leaf(frame, frame), rows=len(rows))


def frame_source(df: DataFrame, plan: LoadPlan) -> DataFrame:
    """Rows of a query result (INSERT ... SELECT) as load source fields."""
    names = df.columns
    line = "concat_ws(', ', " + ", ".join(f"coalesce(CAST({q(n)} AS STRING), 'NULL')" for n in names) + ")"
    return df.selectExpr(
        f"monotonically_increasing_id() AS {POS}",
        f"{line} AS {LINE}",
        f"{len(names)} AS {NCOLS}",
        *[f"CAST({q(n)} AS STRING) AS {_field(i)}" for i, n in enumerate(names)],
    )


def map_columns(df: DataFrame, plan: LoadPlan) -> DataFrame:
    """Name the source fields and evaluate derived columns in order (later ones may use earlier ones)."""
    extra = ["__bad"] if "__bad" in df.columns else []
    fields = [f"{_field(i)} AS {q(name)}" for i, name in enumerate(plan.source_fields)]
    out = select_expr(df, [POS, LINE, NCOLS, *extra, *fields])
    for layer in derived_layers(plan.source_fields, plan.derived):
        out = select_expr(out, ["*", *(f"({m.expr.spark_sql}) AS {q(m.name)}" for m in layer if m.expr is not None)])
    return out


def derived_layers(sources: Sequence[str], derived: Sequence[ColumnMapping]) -> list[list[ColumnMapping]]:
    """The derived `columns` entries in order, as few projections as their dependencies allow: an entry starts a
    new projection when it reads an entry of the current one, or names a column that exists already (as one
    projection per entry did, it then sees every earlier entry). One projection per entry made Spark's analyzer
    walk the whole chain again for each (1,500 constant entries kept it busy for minutes)."""
    layers: list[list[ColumnMapping]] = []
    before = {name.lower() for name in sources}  # the columns the current projection reads
    current: set[str] = set()  # the names the current projection defines
    for mapping in derived:
        assert mapping.expr is not None
        name = mapping.name.lower()
        reads = {ref.lower() for ref in mapping.expr.refs}
        if not layers or reads & current or name in current or name in before:
            before |= current
            current = set()
            layers.append([])
        layers[-1].append(mapping)
        current.add(name)
    return layers


def _reason_sql(column: ColumnDef, raw: str | None, value: str, strict: bool, max_string: int) -> str:
    """The first data-quality reason of one column, or NULL: length, then strict conversion, then NOT NULL."""
    name = column.name
    checks: list[str] = []
    t = column.type
    if t.is_string and t.name != "STRING" and t.length is not None:
        checks.append(
            f"CASE WHEN octet_length({value}) > {t.length} THEN concat("
            f"{lit(f'column({name}) the length of input is too long than schema. schema length: {t.length}; ')}, "
            f"'actual length: ', CAST(octet_length({value}) AS STRING)) END"
        )
    if t.is_string:
        # Doris's string_type_length_soft_limit_bytes: a longer value is a filtered row, with its first 32 bytes
        too_long = (
            f"column({name}) the length of input string is too long than vec schema. first 32 bytes of input str: ["
        )
        checks.append(
            f"CASE WHEN octet_length({value}) > {max_string} THEN concat({lit(too_long)}, left({value}, 32), "
            f"{lit(f'] limit length: {max_string}; actual length: ')}, CAST(octet_length({value}) AS STRING), '; ') END"
        )
    if strict and raw is not None:
        checks.append(
            f"CASE WHEN {raw} IS NOT NULL AND {value} IS NULL THEN concat("
            f"{lit(f'column({name}) value is incorrect while strict mode is true, src value is ')}, "
            f"CAST({raw} AS STRING)) END"
        )
    if not column.nullable:
        checks.append(
            f"CASE WHEN {value} IS NULL THEN {lit(f'column({name}) values is null while columns is not nullable')} END"
        )
    if not checks:
        return "CAST(NULL AS STRING)"
    return checks[0] if len(checks) == 1 else "coalesce(" + ", ".join(checks) + ")"


def _count_reason(plan: LoadPlan) -> str:
    if plan.request.source != "stream_load":
        return "CAST(NULL AS STRING)"
    if plan.request.format == "json":
        fields = [q(n) for n in plan.source_fields]
        empty = " AND ".join(f"{f} IS NULL" for f in fields) or "false"
        return f"coalesce(__bad, CASE WHEN {empty} THEN 'All fields is null, this is a invalid row.' END)"
    expected = len(plan.source_fields)
    detail = f"concat({{}}, CAST({NCOLS} AS STRING), {lit(f', schema column number: {expected}')})"
    more = detail.format(lit("actual column number in csv file is  more than  schema column number.actual number: "))
    less = detail.format(lit("actual column number in csv file is  less than  schema column number.actual number: "))
    return f"CASE WHEN {NCOLS} > {expected} THEN {more} WHEN {NCOLS} < {expected} THEN {less} END"


def loose_names(plan: LoadPlan) -> list[str]:
    """The names of the load's scope (source fields and `columns` entries) that are no table column: carried
    through the per-row steps for `where`, `delete` and the sequence to read."""
    table_names = {t.column.name.lower() for t in plan.targets}
    return [name for name in plan.scope if name.lower() not in table_names]


def convert_targets(df: DataFrame, plan: LoadPlan) -> DataFrame:
    """Convert every table column to its type (or DEFAULT) and record the first reject reason of each row."""
    loose = loose_names(plan)
    converted: list[str] = []
    for i, target in enumerate(plan.targets):
        if target.source is None:
            value = default_sql(target.column)
        else:
            value = convert_sql(q(target.source), target.column.type, from_text=target.source in plan.source_fields)
        converted.append(f"{value} AS {_converted(i)}")
    raw_names = [q(n) for n in plan.scope]
    extra = ["__bad"] if "__bad" in df.columns else []
    step = select_expr(df, [POS, LINE, NCOLS, *extra, *raw_names, *converted])
    reasons = [_count_reason(plan)] + [
        _reason_sql(
            t.column,
            q(t.source) if t.source else None,
            _converted(i),
            plan.request.strict_mode,
            plan.request.limits.max_string_bytes,
        )
        for i, t in enumerate(plan.targets)
        if t.source is not None or not plan.partial  # unlisted columns of a partial update come from the table
    ]
    return select_expr(
        step,
        [
            POS,
            LINE,
            *[f"{_converted(i)} AS {q(t.column.name)}" for i, t in enumerate(plan.targets)],
            *[q(n) for n in loose],
            f"coalesce({', '.join(reasons)}) AS {REASON}",
        ],
    )


def mark_flags(df: DataFrame, plan: LoadPlan) -> DataFrame:
    """Add the unselected flag (`where` not true), the delete sign and the sequence value."""
    req = plan.request
    table = plan.table
    reason = REASON
    exprs = [f"coalesce(NOT ({req.where.spark_sql}), true)" if req.where is not None else "false"]
    if table.is_unique and table.delete_sign:
        if req.merge_type is MergeType.DELETE:
            sign = "1"
        elif req.merge_type is MergeType.MERGE:
            assert req.delete is not None
            sign = f"CASE WHEN coalesce(({req.delete.spark_sql}), false) THEN 1 ELSE 0 END"
        elif plan.delete_sign_source is not None:
            raw = q(plan.delete_sign_source)
            text = f"lower(trim(CAST({raw} AS STRING)))"
            sign = (
                f"CASE WHEN {text} = 'true' THEN 1 WHEN {text} = 'false' THEN 0 "
                f"WHEN {text} IN ('0', '1') THEN CAST({text} AS INT) END"
            )
            bad = lit(f"column({DELETE_SIGN}) value is invalid: [")
            invalid = f"CASE WHEN ({sign}) IS NULL THEN concat({bad}, CAST({raw} AS STRING), ']') END"
            reason = f"coalesce({REASON}, {invalid})"
        else:
            sign = "0"
        exprs.append(f"{sign} AS {SIGN}")
    if table.has_sequence:
        seq_type = table.effective_sequence_type()
        source = plan.sequence_source
        if source is None:
            seq = convert_sql("NULL", seq_type, from_text=False)
        elif any(t.column.name == source for t in plan.targets):
            seq = q(source)
        else:
            seq = convert_sql(q(source), seq_type, from_text=source in plan.source_fields)
        exprs.append(f"{seq} AS {SEQ}")
    if table.partitioning is not None:  # a selected row no (named) partition holds is filtered
        df = with_partition_id(df, table, _PARTITION, ids=plan.partition_ids)
        missing = f"CASE WHEN NOT ({exprs[0]}) AND {_PARTITION} IS NULL THEN {lit(NO_PARTITION)} END"
        reason = f"coalesce({reason}, {missing})"
    unselected = f"{REASON} IS NULL AND {exprs[0]}"
    kept = [c for c in df.columns if c not in (REASON, _PARTITION)]
    flags = [f"{reason} AS {REASON}", f"{unselected} AS {UNSELECTED}", *exprs[1:]]
    return select_expr(df, [*[q(c) for c in kept], *flags])


_PARTITION = "__partition"  # the row's partition id, while its reject reason is decided


def prepare_rows(source: DataFrame, plan: LoadPlan) -> DataFrame:
    """All per-row steps, before counting and dedup."""
    return mark_flags(convert_targets(map_columns(source, plan), plan), plan)


NEW_KEY = "__new"


def left_join(batch: DataFrame, stored: DataFrame, on: str, *, local: bool) -> DataFrame:
    """`batch` left-joined with `stored` rows; `local`: both are a few rows, joined in one partition as they are
    (`mow.LOCAL_JOIN`)."""
    if local:
        batch, stored = batch.coalesce(1), stored.coalesce(1).hint(LOCAL_JOIN)
    return batch.join(stored, on=F.expr(on), how="left")


def fill_from_stored(batch: DataFrame, stored: DataFrame, plan: LoadPlan, *, local: bool = False) -> DataFrame:
    """Partial update: unlisted columns keep the stored row's values (contract §6.8); with
    `enable_unique_key_replace_if_not_null` a NULL input keeps the stored value too.

    A key whose stored row is missing or deleted is a new row: unlisted columns take their DEFAULT.
    A load that does not set the sequence keeps the stored row's sequence. Marks new rows in `__new`.
    `local`: see `left_join`.
    """
    table = plan.table
    keys = table.key_columns
    hidden = {c.name for c in table.hidden_columns()}
    picked = [f"{q(k)} AS __sk{i}" for i, k in enumerate(keys)]
    picked += [f"{q(c.name)} AS __sv{i}" for i, c in enumerate(table.columns)]
    picked.append(f"{q(DELETE_SIGN)} AS __ssign" if DELETE_SIGN in hidden else "0 AS __ssign")
    picked.append(f"{q(SEQUENCE_COL)} AS __sseq" if SEQUENCE_COL in hidden else "NULL AS __sseq")
    positioned = FILE in stored.columns  # a positional table's lookup rows: carry the winner's position
    if positioned:
        picked += [f"{FILE} AS {STORED_FILE}", f"{ROW} AS {STORED_POS}"]
    on = keys_match(table, lambda _, k: q(k), lambda i, _: f"__sk{i}")
    joined = left_join(batch, stored.selectExpr(*picked, "true AS __sfound"), on, local=local)
    live = "(coalesce(__sfound, false) AND __ssign = 0)"
    listed = {t.column.name for t in plan.targets if t.source is not None}
    out: list[str] = []
    for i, c in enumerate(table.columns):
        if c.is_key:
            out.append(q(c.name))
        elif plan.partial and c.name not in listed:
            out.append(f"IF({live}, __sv{i}, {q(c.name)}) AS {q(c.name)}")
        elif table.replace_if_not_null:
            out.append(f"IF({live} AND {q(c.name)} IS NULL, __sv{i}, {q(c.name)}) AS {q(c.name)}")
        else:
            out.append(q(c.name))
    rest = [c for c in batch.columns if c not in {col.name for col in table.columns}]
    for name in rest:
        if name == SEQ and plan.inherit_sequence:
            # a new key gets the mapped column's value (its DEFAULT), or no sequence on a sequence_type table
            fresh = SEQ if table.sequence_col else f"CAST(NULL AS {storage_type_sql(table.effective_sequence_type())})"
            out.append(f"CASE WHEN coalesce(__sfound, false) THEN __sseq ELSE {fresh} END AS {SEQ}")
        else:
            out.append(q(name))
    deleting = f"{SIGN} = 1" if SIGN in batch.columns else "false"
    out.append(f"NOT {live} AND NOT ({deleting}) AS {NEW_KEY}")
    if positioned:
        out += [STORED_FILE, STORED_POS, "__sseq", "__sfound"]
    return joined.selectExpr(*out)


def attach_winners(batch: DataFrame, winners: DataFrame, table: TableDef, *, local: bool = False) -> DataFrame:
    """Each incoming row with its key's stored winner: found, sequence and position (merge-on-write). `local`:
    see `left_join`."""
    keys = table.key_columns
    picked = [f"{q(k)} AS __sk{i}" for i, k in enumerate(keys)]
    picked.append(f"{q(SEQUENCE_COL)} AS __sseq" if table.has_sequence else "NULL AS __sseq")
    picked += [f"{FILE} AS {STORED_FILE}", f"{ROW} AS {STORED_POS}", "true AS __sfound"]
    on = keys_match(table, lambda _, k: q(k), lambda i, _: f"__sk{i}")
    joined = left_join(batch, winners.selectExpr(*picked), on, local=local)
    return joined.selectExpr(*[q(c) for c in batch.columns], STORED_FILE, STORED_POS, "__sseq", "__sfound")


def winning(table: TableDef) -> str:
    """SQL: an incoming row (after `attach_winners` or a positional `fill_from_stored`) beats its key's stored
    winner, or the key is new."""
    return f"NOT coalesce(__sfound, false) OR {beats(table, SEQ if table.has_sequence else 'NULL', '__sseq')}"


def key_frame(batch: DataFrame, table: TableDef) -> DataFrame:
    """The values of a (small) batch's first key column, with each row's bucket in a table of several."""
    key = table.key_columns[0]
    bucketed = table.bucketed and table.buckets > 1
    picked = [F.col(q(key)).alias("k")] + ([F.expr(bucket_sql(table, per_bucket=True)).alias("b")] if bucketed else [])
    return batch.select(*picked)


def keys_of_batch(keys: DataFrame, table: TableDef) -> FileFilter:
    """The files a (small) batch's lookup reads, from its `key_frame`: its buckets (None: every bucket, for a
    table whose files do not record theirs) and the distinct values of its first key column, per bucket. The
    batch's few rows are collected as they are (no `distinct`: a projection of an in-memory relation needs no
    Spark job)."""
    key = table.key_columns[0]
    rows = list({tuple(r) for r in keys.collect()})
    values = tuple({r[0] for r in rows})
    if not (table.bucketed and table.buckets > 1):
        return FileFilter(values=((key, values),))
    by_bucket: dict[int, set[Any]] = {}
    for r in rows:
        by_bucket.setdefault(int(r[1]), set()).add(r[0])
    return FileFilter(
        buckets=frozenset(by_bucket),
        values=((key, values),),
        by_bucket=tuple((b, tuple(v)) for b, v in sorted(by_bucket.items())),
    )


def only_keys(stored: DataFrame, wanted: FileFilter) -> DataFrame:
    """The stored rows whose first key column holds one of the values `wanted` lists (collected first, so that the
    filter reaches the Parquet reader as literals and skips the row groups and pages, files being sorted by key,
    that cannot hold them: a 10-row partial update of a 5M-row table reads a few pages, not the table)."""
    key, values = wanted.values[0]
    column = F.col(q(key))
    condition = column.isin([v for v in values if v is not None])
    if None in values:
        condition = condition | column.isNull()
    return stored.where(condition)


def check_new_keys(plan: LoadPlan, new_rows: int, first_new_key: str | None) -> None:
    """Doris's rules for new keys in a partial update: ERROR policy, and unlisted NOT NULL columns.

    Raises:
        LoadError: with Doris's message.
    """
    if not new_rows:
        return
    if plan.request.partial_update_new_key_behavior == "ERROR":
        raise LoadError(
            "[E-7003]Can't append new rows in partial update when partial_update_new_key_behavior is ERROR. "
            f"Row with key=[{first_new_key}] is not in table."
        )
    for target in plan.targets:
        col = target.column
        if target.source is None and not col.nullable and not col.has_default:
            raise LoadError(
                f"the unmentioned column `{col.name}` should have default value or be nullable for newly "
                "inserted rows in non-strict mode partial update"
            )


def storage_columns(plan: LoadPlan, version: int) -> list[tuple[str, str]]:
    """The rowset's columns in table storage order: (name, SQL) each."""
    out: list[tuple[str, str]] = []
    for column in plan.table.all_columns():
        if column.name == VERSION_COL:
            value = str(version)
        elif column.name == SEQUENCE_COL:
            value = SEQ
        elif column.name == DELETE_SIGN:
            value = SIGN
        elif plan.request.negative and column.aggregation == "SUM" and not column.is_key:
            value = f"-{q(column.name)}"
        else:
            value = q(column.name)
        out.append((column.name, f"CAST({value} AS {storage_type_sql(column.type)})"))
    return out


def stored_select(df: DataFrame, columns: Sequence[tuple[str, str]], field_ids: dict[str, int]) -> DataFrame:
    """`df` as the rowset's columns (name, SQL), each with its Iceberg field id, which Spark writes into the
    Parquet schema; one projection of columns built once per shape (`spark_runner.columns`)."""
    return select_named(df, [(name, sql, field_ids.get(name)) for name, sql in columns])


def with_field_ids(df: DataFrame, field_ids: dict[str, int]) -> DataFrame:
    """Attach each column's Iceberg field id, which Spark writes into the Parquet schema (other columns, such as
    a merge-on-write decision, are kept as they are)."""
    return select_named(df, [(c, None, field_ids.get(c)) for c in df.columns])


TOO_LONG = "error log is too long"


def clip_error_line(line: str, max_bytes: int) -> str:
    """Doris's load_error_log_limit_bytes: a longer line keeps its first bytes and says it was cut."""
    raw = line.encode()
    if len(raw) <= max_bytes:
        return line
    return raw[:max_bytes].decode(errors="ignore") + TOO_LONG


def error_lines(rows: DataFrame, max_bytes: int) -> list[str]:
    """The first rejected rows as error-log lines; each is cut in Spark already, so that no more than
    `MAX_ERROR_ROWS` short strings reach the driver, however long the rows were."""
    # reason first, as Doris writes it, so that a long source line cannot push the reason out
    text = f"left(concat('Reason: ', {REASON}, '. src line [', {LINE}, ']; '), {max_bytes + 1})"
    bad = rows.where(f"{REASON} IS NOT NULL").selectExpr(f"{text} AS line").limit(MAX_ERROR_ROWS).collect()
    return [clip_error_line(r["line"], max_bytes) for r in bad]


ACCEPTED = f"{REASON} IS NULL AND NOT {UNSELECTED}"


def _rowset(
    source: DataFrame,
    plan: LoadPlan,
    observation: Observation | None,
    field_ids: dict[str, int],
    buckets: int,
    stored_rows: DataFrame | None,
    lookup: bool,
    extra_metrics: tuple[Column, ...],
    collected: bool,
    version: int,
    name: str,
    prepared_rows: DataFrame | None,
    carried: Sequence[str] | None = None,
) -> tuple[DataFrame, DataFrame, Observation | None]:
    """The load's prepared rows (before counting: its error lines come from them; `prepared_rows` when the
    lookup built them already), its rowset (a collected one sorted by key) and the observation of a partial
    update's new keys. `stored_rows`: what `_stored_rows` read. No `observation`: a folded rowset (`_folded_load`),
    projections and filters alone (no counts, no partitioning, no sort). `carried`: the rows are not merged;
    these columns of theirs (position, sequence) come along, for the caller's merge (`merge.latest_rows`)."""
    if prepared_rows is None:
        prepared_rows = prepare_rows(source, plan)
    loose = set(loose_names(plan))
    if loose:  # read by `where` / `delete` / the sequence only (`mark_flags`): not carried into the counted rows,
        # whose node keeps Spark from pruning them (2,000 of them: seconds to compile the job's generated code)
        prepared_rows = select_expr(prepared_rows, [q(c) for c in prepared_rows.columns if c not in loose])
    rows = prepared_rows
    if observation is not None:
        rows = prepared_rows.observe(
            observation,
            named("total", "count(1)"),
            named("filtered", f"count_if({REASON} IS NOT NULL)"),
            named("unselected", f"count_if({UNSELECTED})"),
            *extra_metrics,
        )
    good = rows.where(ACCEPTED)
    table = plan.table
    keys = list(table.key_columns)
    spread = list(table.distribution_columns)
    if observation is None:  # folded: one row, nothing to partition
        pass
    elif buckets == 1:
        good = good.coalesce(1)  # one partition needs no shuffle: scan, dedup and write in one stage
    elif spread:  # Spark partition = bucket (`buckets.bucket_sql`); a key's rows share one
        good = good.repartition(buckets, *stored_values(table, spread))
    else:
        good = good.repartition(buckets)
    kept = [c for c in good.columns if c not in (LINE, REASON, UNSELECTED)]
    good = select_expr(good, [q(c) for c in kept])
    # a partial update that keeps the stored sequence orders its own rows by position only
    seq = SEQ if table.has_sequence and not plan.inherit_sequence else None
    lines = small_rowset.known_rows(source)
    if carried is None and (lines is None or lines > 1):  # one row (or none) the merge returns as it is: its
        good = merge_rows(good, table, POS, sequence=seq)  # aggregate and sort are most of a one-row load's work
    # a small load's rows and the stored rows of its one-column keys (merge-on-write reads those alone; a
    # merge-on-read partial update reads the whole table): a few rows each, joined in one partition
    local = collected and len(keys) == 1 and table.positional
    if stored_rows is not None and table.positional:
        if not plan.reads_stored:  # the decision needs keys, sequence and position: the values stay unread
            stored_rows = select_expr(stored_rows, [q(c) for c in decision_columns(table)])
        stored_rows = stored_winners(stored_rows, good, table, local=local)
    partial_metrics: Observation | None = None
    if lookup and not plan.reads_stored:
        assert stored_rows is not None, "a merge-on-write load compares with the stored rows"
        good = attach_winners(good, stored_rows, table, local=local)
    if plan.reads_stored:
        assert stored_rows is not None, "this load reads the table's current rows"
        good = fill_from_stored(good, stored_rows, plan, local=local)
        key_text = "concat_ws(', ', " + ", ".join(f"CAST({q(k)} AS STRING)" for k in keys) + ")"
        partial_metrics = Observation(f"partial_{name}")
        good = good.observe(
            partial_metrics,
            F.expr(f"count_if({NEW_KEY})").alias("new_rows"),
            F.expr(f"min_by(CASE WHEN {NEW_KEY} THEN {key_text} END, CASE WHEN {NEW_KEY} THEN {POS} END)").alias(
                "first_new_key"
            ),
        )
    if lookup:
        good = good.withColumn(WINS, named(WINS, winning(table)))
    # a collected rowset gets its version after the job: a literal would be compiled into the job's
    # generated code, so every load would compile it anew (~20 ms of a one-row load)
    decision = [WINS, STORED_FILE, STORED_POS] if lookup else []
    storage = storage_columns(plan, 0 if collected else version)
    out = stored_select(good, [*storage, *[(name, q(name)) for name in (*decision, *(carried or ()))]], field_ids)
    if BUCKET_COL in field_ids:
        # Spark's writer splits its rows by bucket; the one file a collected rowset becomes holds any bucket
        out = with_bucket(out, table, field_ids[BUCKET_COL], per_bucket=not collected)
    out = with_partition(out, table, field_ids)
    if collected and keys and observation is not None:
        out = out.sortWithinPartitions(*[named(k) for k in keys])
    return rows, out, partial_metrics


KEYS = "keys"  # the shape key's last part for the chain of a load's keys (`_stored_rows`)
FOLDED = "folded"  # the shape key's last part for a small load's rowset without its counts (`_folded_load`)
_UNFOLDED = "_sl_unfolded"  # the shapes whose folded rowset Spark still runs as a job (per JVM)
MAX_UNFOLDED = 1024
# most rows of a load whose rowset may be folded: Spark's optimizer evaluates the chain row by row, interpreted,
# where the job's generated code is faster past a few thousand rows
MAX_FOLDED_ROWS = 4096


def _folded_load(
    spark: SparkSession,
    source: DataFrame,
    plan: LoadPlan,
    shaped: tuple[tuple[Any, ...], dict[str, DataFrame]],
    field_ids: dict[str, int],
    version: int,
    directory: Location,
    pair: Callable[[pa.Table], tuple[pa.Table, pa.Table] | None] | None,
    lines: int,
) -> JobOutcome | None:
    """A small load (`lines` rows, up to `MAX_FOLDED_ROWS`) whose rowset Spark computes without a job: its chain
    of projections and filters over the rows, without the counts' `observe` node (only a job fills one) and
    without the merge's aggregate, is folded by Spark's optimizer into one in-memory relation, which the driver
    hands out (`arrow_frames.collect_local`). When every row comes back, every row was loaded; rows of one key
    are then merged in the server's process (`merge.latest_rows`, by the positions and sequences carried along).
    None when a row does not come back (filtered or unselected: the counted job says which, and gives the error
    lines), when the merge is not a choice of rows, or when the shape's plan is not folded (remembered per
    shape): the caller runs the job. `shaped`: the load's shape key and leaves (`prepared`)."""
    shape, leaves = shaped
    key = (*shape, FOLDED)
    unfolded = context_cache(_UNFOLDED)
    if unfolded is not None and key in unfolded:
        return None
    table = plan.table
    sequence = SEQ if table.has_sequence and not plan.inherit_sequence else None
    carried = None if lines <= 1 else [POS, *([sequence] if sequence is not None else [])]
    reused = prepared.reuse(spark, key, leaves)
    if reused is not None:
        out = reused[0]
    else:
        _, out, _ = _rowset(source, plan, None, field_ids, 1, None, False, (), True, version, "", None, carried)
    relation = prepared.folded_relation(out)
    rows = relation_rows(relation, out.schema) if relation is not None else None
    if rows is None:
        rows = collect_local(out)
    optional: list[str] = []
    if rows is not None and carried is not None and rows.num_rows == lines:
        merged = latest_rows(rows, table, POS, sequence=sequence)  # None: not for this table (its shape)
        rows = merged.drop_columns(carried) if merged is not None else None
        if table.is_unique:  # as Spark's merge leaves them (`merge.latest_per_key`: each value of a struct)
            fixed = {*table.key_columns, VERSION_COL, BUCKET_COL, PARTITION_COL}
            optional = [c for c in out.columns if c not in fixed]
    elif rows is not None and rows.num_rows != lines:  # a row filtered or unselected
        if reused is None:
            prepared.remember(key, out, "", leaves, folded=True)
        return None
    if rows is None:
        if unfolded is not None:
            if len(unfolded) >= MAX_UNFOLDED:
                unfolded.clear()
            unfolded[key] = True
        return None
    if reused is None:
        prepared.remember(key, out, "", leaves, folded=True)
    files, positions = small_rowset.write_collected(
        out, directory, version=version, decide=pair, collected=rows, optional=optional
    )
    paired = pair is not None and positions is not None
    deletes = []
    if positions is not None:
        written = write_position_deletes(directory, positions)
        deletes = [written] if written else []
    counts = LoadCounts(total=lines, loaded=lines)
    return JobOutcome(counts=counts, files=files, errors=[], deletes=deletes, paired=paired, folded=True)


def _stored_rows(
    spark: SparkSession,
    source: DataFrame,
    plan: LoadPlan,
    stored: StoredRows,
    shape: tuple[Any, ...] | None,
    leaf: DataFrame | None,
) -> tuple[DataFrame, DataFrame | None]:
    """The stored rows a load compares with or fills from, and the load's prepared rows if this built them.

    A small positional load's are those of its keys only (merge-on-write reads those alone; a merge-on-read
    partial update reads the whole table). Its keys come from its prepared rows, a chain of projections and
    filters over its in-memory rows that Spark's optimizer evaluates itself (no job), prepared once per shape
    like its rowset. The stored rows read by key in the server's process are exactly those (`keyed_leaf`);
    others are filtered by them in the plan (`only_keys`).
    """
    table = plan.table
    if not (table.positional and small_rowset.is_small(source)):
        return stored(None), None
    keyed = (*shape, KEYS) if shape is not None and leaf is not None else None
    found = prepared.reuse(spark, keyed, {prepared.LOAD: leaf}) if keyed is not None and leaf is not None else None
    built = None
    if found is not None:
        batch = found[0]
    else:
        built = prepare_rows(source, plan)
        batch = key_frame(built.where(ACCEPTED), table)
    wanted = keys_of_batch(batch, table)
    if keyed is not None and leaf is not None and found is None:
        prepared.remember(keyed, batch, "", {prepared.LOAD: leaf})
    rows = stored(wanted)
    return (rows if keyed_leaf(rows) is not None else only_keys(rows, wanted)), built


def run_load_job(
    spark: SparkSession,
    source: DataFrame,
    plan: LoadPlan,
    *,
    directory: Location,
    version: int,
    field_ids: dict[str, int],
    buckets: int,
    stored: StoredRows | None = None,
    lookup: bool = False,
    extra_metrics: tuple[Column, ...] = (),
    pair: Callable[[pa.Table], tuple[pa.Table, pa.Table] | None] | None = None,
) -> JobOutcome:
    """Run the load as one Spark action writing the rowset; counts come from an observation of that action.

    `stored`: the table's current rows (merged, for a partial update of a merge-on-read table) or a positional
    table's lookup rows (`queries.lookup_rows`), for the buckets the load writes (a small load's are known
    before its job). With `lookup` the load is merged into them (`spark_runner.mow`):
    only the rows that beat the stored ones are written, and the stored rows they beat are named in position
    delete files (`JobOutcome.deletes`). `extra_metrics` are further named aggregates over the prepared rows
    (group commit counts per load), left uncomputed when no job runs (`JobOutcome.folded`: every row was
    loaded). `pair`: a collected rowset's rows are decided against the stored rows of
    their keys in the server's process (`mow.pair_rows`, `JobOutcome.paired`) instead.
    """
    table = plan.table
    keys = list(table.key_columns)
    lines = small_rowset.known_rows(source)
    collected = buckets == 1 and small_rowset.is_small(source) and (lookup or not plan.reads_stored)
    leaf = prepared.leaf_of(source) if collected else None
    shape = None
    if leaf is not None:  # a plan over the load's own rows: its analyzed plan serves the loads of its shape
        merged = lines is None or lines > 1
        per_load = tuple(sql_text(c) for c in extra_metrics)  # a group's counts per load (their SQL)
        shape = prepared.shape_key(plan, leaf, tuple(sorted(field_ids.items())), merged, per_load)
    leaves = {prepared.LOAD: leaf} if leaf is not None else {}
    stored_rows: DataFrame | None = None
    built: DataFrame | None = None
    if stored is not None:
        stored_rows, built = _stored_rows(spark, source, plan, stored, shape, leaf)
        stored_leaf = keyed_leaf(stored_rows)
        if shape is not None and stored_leaf is not None:  # and the stored rows of its keys, as a relation
            shape = (*shape, stored_leaf.schema.json())
            leaves[prepared.STORED] = stored_leaf
        else:
            shape = None
    if shape is not None and lines is not None and not (stored or lookup) and 0 < lines <= MAX_FOLDED_ROWS:
        folded = _folded_load(spark, source, plan, (shape, leaves), field_ids, version, directory, pair, lines)
        if folded is not None:
            return folded
    reused = prepared.reuse(spark, shape, leaves) if shape is not None else None
    rows: DataFrame | None = None
    observation: Observation | None = None
    partial_metrics: Observation | None = None
    # a merge-on-write decision: the row wins, the stored file and row it beats
    decision = [WINS, STORED_FILE, STORED_POS] if lookup else []
    if reused is not None:
        out, name = reused
    else:
        name = name_of(directory)
        observation = Observation(f"load_{name}")
        rows, out, partial_metrics = _rowset(
            source,
            plan,
            observation,
            field_ids,
            buckets,
            stored_rows,
            lookup,
            extra_metrics,
            collected,
            version,
            name,
            built,
        )
    deletes: list[str] = []
    paired = False
    if collected:
        # one partition, in key order; the decision columns split into the rows and the position deletes
        files, positions = small_rowset.write_collected(
            out, directory, version=version, decision=decision, decide=None if lookup else pair
        )
        paired = pair is not None and not lookup and positions is not None
        if positions is not None:
            written = write_position_deletes(directory, positions)
            deletes = [written] if written else []
    elif decision:
        out = out.persist(StorageLevel.MEMORY_AND_DISK)  # the rows and the deletes come from one computation
        try:
            write_rows(out.where(WINS).drop(*decision), directory, sort=keys, buckets=buckets)
            files = rowset_files(directory)
            beaten = out.where(f"{WINS} AND {STORED_FILE} IS NOT NULL")
            deletes = write_deletes(beaten.selectExpr(f"{STORED_FILE} AS file_path", f"{STORED_POS} AS pos"), directory)
        finally:
            out.unpersist()
    else:
        write_rows(out, directory, sort=keys, buckets=buckets)
        files = rowset_files(directory)
    if partial_metrics is not None or (reused is not None and plan.reads_stored):
        found = partial_metrics.get if partial_metrics is not None else prepared.observed(out, f"partial_{name}")
        check_new_keys(plan, int(found.get("new_rows") or 0), found.get("first_new_key"))
    metrics = observation.get if observation is not None else prepared.observed(out, f"load_{name}")
    if shape is not None and reused is None:
        prepared.remember(shape, out, name, leaves)
    total = int(metrics.get("total") or 0)
    filtered = int(metrics.get("filtered") or 0)
    unselected = int(metrics.get("unselected") or 0)
    counts = LoadCounts(total=total, filtered=filtered, unselected=unselected, loaded=total - filtered - unselected)
    errors: list[str] = []
    if filtered:
        if rows is None:  # a reused plan: the error lines come from a chain built for them
            rows = prepare_rows(source, plan)
        errors = error_lines(rows, plan.request.limits.error_log_line_bytes)
    extra = {name: value for name, value in metrics.items() if name not in ("total", "filtered", "unselected")}
    return JobOutcome(counts=counts, files=files, errors=errors, metrics=extra or None, deletes=deletes, paired=paired)
