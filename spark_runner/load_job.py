"""The load job: source rows → mapped, converted, filtered, signed and sequenced rows → one rowset.

Steps (each a DataFrame → DataFrame function):
    map_columns        source fields and derived `columns` expressions, in order
    convert_targets    table columns converted to their types, DEFAULTs, reject reasons (data quality)
    mark_flags         filtered (reason) and unselected (`where`) flags, observed for the counts
    sign_and_sequence  delete sign from merge_type / `delete` / a mapped sign; the sequence value
    dedup              one row per key: largest (sequence, position) — `merge.latest_per_key`
then the rowset is written bucketed by key, sorted, with Iceberg field ids, in one Spark action.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from loaders.formats.csv import NULL_MARKER
from spark_runner.columns import col
from spark_runner.merge import latest_per_key, sequence_order
from spark_runner.planning import LoadPlan
from spark_runner.types import convert, default_value, storage_type, value_type
from tables.load_spec import LoadCounts, MergeType
from tables.model import DELETE_SIGN, SEQUENCE_COL, VERSION_COL
from tables.types import DorisType

POS = "__pos"
LINE = "__line"
NCOLS = "__ncols"
REASON = "__reason"
UNSELECTED = "__unselected"
SEQ = "__seq"
MAX_ERROR_ROWS = 50


@dataclass(frozen=True)
class JobOutcome:
    counts: LoadCounts
    files: list[str]
    errors: list[str]  # first rejected rows, error-log lines


def _field(i: int) -> str:
    return f"__f{i}"


def csv_source(spark: SparkSession, path: Path, plan: LoadPlan) -> DataFrame:
    """Read a staged CSV body as Doris does: no quoting, `\\N` is NULL, blank lines skipped."""
    req = plan.request
    text = spark.read.text(str(path), lineSep=req.line_delimiter)
    text = text.withColumn(POS, F.monotonically_increasing_id())
    if req.skip_lines:
        text = text.filter(F.col(POS) >= req.skip_lines)
    text = text.filter(F.col("value") != "")
    sep = req.column_separator
    pattern = f"\\Q{sep}\\E" if "\\E" not in sep else "".join(f"\\x{{{ord(ch):x}}}" for ch in sep)
    parts = F.split(F.col("value"), pattern, -1)
    fields = [
        F.when(F.get(parts, i) == NULL_MARKER, F.lit(None)).otherwise(F.get(parts, i)).alias(_field(i))
        for i in range(len(plan.source_fields))
    ]
    return text.select(F.col(POS), F.col("value").alias(LINE), F.size(parts).alias(NCOLS), *fields)


def rows_source(spark: SparkSession, rows: list[list[str | None]], plan: LoadPlan) -> DataFrame:
    """Rows given as values (INSERT ... VALUES), already split into fields; None is NULL."""
    n = len(plan.source_fields)
    schema = T.StructType(
        [T.StructField(POS, T.LongType()), T.StructField(LINE, T.StringType()), T.StructField(NCOLS, T.IntegerType())]
        + [T.StructField(_field(i), T.StringType()) for i in range(n)]
    )
    data = [
        (
            i,
            "(" + ", ".join("NULL" if v is None else v for v in row) + ")",
            len(row),
            *(row + [None] * (n - len(row)))[:n],
        )
        for i, row in enumerate(rows)
    ]
    return spark.createDataFrame(data, schema)


def map_columns(df: DataFrame, plan: LoadPlan) -> DataFrame:
    """Name the source fields and evaluate derived columns in order (later ones may use earlier ones)."""
    out = df.select(POS, LINE, NCOLS, *[F.col(_field(i)).alias(name) for i, name in enumerate(plan.source_fields)])
    for mapping in plan.derived:
        assert mapping.expr is not None
        out = out.withColumn(mapping.name, F.expr(mapping.expr.spark_sql))
    return out


def _reason_for(name: str, raw: Column, value: Column, plan: LoadPlan, col_type: DorisType, nullable: bool) -> Column:
    strict = plan.request.strict_mode
    reasons = F.lit(None).cast(T.StringType())
    if not nullable:
        reasons = F.when(
            value.isNull(), F.lit(f"column({name}) values is null while columns is not nullable")
        ).otherwise(reasons)
    if strict:
        reasons = F.when(
            raw.isNotNull() & value.isNull(),
            F.concat(F.lit(f"column({name}) value is incorrect in strict mode: ["), raw.cast("string"), F.lit("]")),
        ).otherwise(reasons)
    if col_type.is_string and col_type.name != "STRING" and col_type.length is not None:
        reasons = F.when(
            F.octet_length(value) > col_type.length,
            F.concat(
                F.lit(
                    f"column({name}) the length of input is too long than schema. schema length: "
                    f"{col_type.length}; actual length: "
                ),
                F.octet_length(value).cast("string"),
            ),
        ).otherwise(reasons)
    return reasons


def convert_targets(df: DataFrame, plan: LoadPlan) -> DataFrame:
    """Convert every table column to its type (or DEFAULT) and record the first reject reason of each row."""
    expected = len(plan.source_fields)
    count_reason = (
        F.when(
            F.col(NCOLS) > expected,
            F.concat(
                F.lit("actual column number in csv file is  more than  schema column number.actual number: "),
                F.col(NCOLS).cast("string"),
                F.lit(f", schema column number: {expected}"),
            ),
        ).when(
            F.col(NCOLS) < expected,
            F.concat(
                F.lit("actual column number in csv file is  less than  schema column number.actual number: "),
                F.col(NCOLS).cast("string"),
                F.lit(f", schema column number: {expected}"),
            ),
        )
        if plan.request.source == "stream_load"
        else F.lit(None).cast(T.StringType())
    )
    table_names = {t.column.name.lower() for t in plan.targets}
    selects: list[Column] = [F.col(POS), F.col(LINE)]
    reasons: list[Column] = [count_reason]
    for target in plan.targets:
        column = target.column
        if target.source is None:
            value = default_value(column)
            raw = F.lit(None)
        else:
            raw = col(target.source)
            value = convert(raw, column.type, from_text=target.source in plan.source_fields)
        selects.append(value.alias(column.name))
        reasons.append(_reason_for(column.name, raw, value, plan, column.type, column.nullable))
    # names of the load that are not table columns stay visible to `where` / `delete`
    for name in plan.scope:
        if name.lower() not in table_names:
            selects.append(col(name))
    return df.select(*selects, F.coalesce(*reasons).alias(REASON))


def _integer_sign(value: Column) -> Column:
    text = F.lower(F.trim(value.cast("string")))
    return (
        F.when(text == "true", F.lit(1))
        .when(text == "false", F.lit(0))
        .otherwise(convert(value, _tinyint()).cast("int"))
    )


def _tinyint() -> DorisType:
    return DorisType(name="TINYINT")


def mark_flags(df: DataFrame, plan: LoadPlan) -> DataFrame:
    """Add the unselected flag (`where` not true) and the delete sign and sequence values."""
    req = plan.request
    table = plan.table
    out = df
    if req.where is not None:
        out = out.withColumn(
            UNSELECTED, F.col(REASON).isNull() & ~F.coalesce(F.expr(req.where.spark_sql), F.lit(False))
        )
    else:
        out = out.withColumn(UNSELECTED, F.lit(False))
    if table.is_unique and table.delete_sign:
        if req.merge_type is MergeType.DELETE:
            sign = F.lit(1)
        elif req.merge_type is MergeType.MERGE:
            assert req.delete is not None
            sign = F.when(F.coalesce(F.expr(req.delete.spark_sql), F.lit(False)), F.lit(1)).otherwise(F.lit(0))
        elif plan.delete_sign_source is not None:
            raw = col(plan.delete_sign_source)
            sign = _integer_sign(raw)
            out = out.withColumn(
                REASON,
                F.coalesce(
                    F.col(REASON),
                    F.when(
                        sign.isNull() | ~sign.isin(0, 1),
                        F.concat(F.lit(f"column({DELETE_SIGN}) value is invalid: ["), raw.cast("string"), F.lit("]")),
                    ),
                ),
            )
        else:
            sign = F.lit(0)
        out = out.withColumn(DELETE_SIGN, sign.cast("int"))
    if table.has_sequence:
        seq_type = table.effective_sequence_type()
        source = plan.sequence_source
        if source is None:
            seq = F.lit(None).cast(value_type(seq_type))
        elif any(t.column.name == source for t in plan.targets):
            seq = col(source)
        else:
            seq = convert(col(source), seq_type, from_text=source in plan.source_fields)
        out = out.withColumn(SEQ, seq)
    return out


def prepare_rows(source: DataFrame, plan: LoadPlan) -> DataFrame:
    """All per-row steps, before counting and dedup."""
    return mark_flags(convert_targets(map_columns(source, plan), plan), plan)


def storage_columns(plan: LoadPlan, field_ids: dict[str, int], version: int) -> list[Column]:
    """The rowset's columns in table storage order, with their field ids."""
    table = plan.table
    cols: list[Column] = []
    for column in table.all_columns():
        if column.name == VERSION_COL:
            value = F.lit(version)
        elif column.name == SEQUENCE_COL:
            value = F.col(SEQ)
        else:
            value = col(column.name)
        cols.append(
            value.cast(storage_type(column.type)).alias(
                column.name, metadata={"parquet.field.id": field_ids[column.name]}
            )
        )
    return cols


def run_load_job(
    spark: SparkSession,
    source: DataFrame,
    plan: LoadPlan,
    *,
    directory: Path,
    version: int,
    field_ids: dict[str, int],
    buckets: int,
) -> JobOutcome:
    """Run the load as one Spark action writing the rowset; counts come from an observation of that action."""
    rows = prepare_rows(source, plan)
    observation = Observation(f"load_{directory.name}")
    rows = rows.observe(
        observation,
        F.count(F.lit(1)).alias("total"),
        F.sum(F.when(F.col(REASON).isNotNull(), 1).otherwise(0)).alias("filtered"),
        F.sum(F.when(F.col(UNSELECTED), 1).otherwise(0)).alias("unselected"),
    )
    good = rows.filter(F.col(REASON).isNull() & ~F.col(UNSELECTED))
    table = plan.table
    keys = list(table.key_columns)
    if buckets == 1:
        good = good.coalesce(1)  # one partition needs no shuffle: scan, dedup and write in one stage
    elif keys:
        good = good.repartition(buckets, *[col(k) for k in keys])
    else:
        good = good.repartition(buckets)
    if table.is_unique:
        seq = F.col(SEQ) if table.has_sequence else None
        kept = [k for k in good.columns if k not in (LINE, REASON, UNSELECTED)]
        good = latest_per_key(good.select(*kept), keys, sequence_order(seq, F.col(POS)))
    out = good.select(*storage_columns(plan, field_ids, version))
    if keys:
        out = out.sortWithinPartitions(*[col(k) for k in keys])
    out.write.mode("errorifexists").parquet(str(directory))
    metrics = observation.get
    total = int(metrics.get("total") or 0)
    filtered = int(metrics.get("filtered") or 0)
    unselected = int(metrics.get("unselected") or 0)
    counts = LoadCounts(total=total, filtered=filtered, unselected=unselected, loaded=total - filtered - unselected)
    errors: list[str] = []
    if filtered:
        bad = rows.filter(F.col(REASON).isNotNull()).select(REASON, LINE).limit(MAX_ERROR_ROWS).collect()
        errors = [f"Reason: {r[REASON]}. src line [{r[LINE]}]; " for r in bad]
    files = sorted(str(p) for p in directory.glob("*.parquet"))
    return JobOutcome(counts=counts, files=files, errors=errors)


def frame_source(df: DataFrame, plan: LoadPlan) -> DataFrame:
    """Rows of a query result (INSERT ... SELECT) as load source fields."""
    fields = [col(name).cast("string").alias(_field(i)) for i, name in enumerate(df.columns)]
    return df.select(
        F.monotonically_increasing_id().alias(POS),
        F.concat_ws(", ", *[F.coalesce(col(n).cast("string"), F.lit("NULL")) for n in df.columns]).alias(LINE),
        F.lit(len(df.columns)).alias(NCOLS),
        *fields,
    )
