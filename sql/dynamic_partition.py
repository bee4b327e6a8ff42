"""Dynamic partitions: the `dynamic_partition.*` table properties, checked as Doris checks them, and the scheduler
that creates a RANGE table's partitions ahead of time and drops those past `start` (Doris's
`DynamicPartitionScheduler`, every `dynamic_partition_check_interval_seconds`; also right after CREATE TABLE and
after `ALTER TABLE ... SET ("dynamic_partition....")`).

Partitions are one time unit each, named `<prefix><time>` as Doris names them (`p20240102` by DAY, `p2024010203`
by HOUR, `p2024_01` by WEEK, `p202401` by MONTH, `p2024` by YEAR), in the table's `dynamic_partition.time_zone`
(default: the server's). A partition that would overlap one the table has is not created; a partition whose range
ends at or before the start of the window is dropped with its files (one commit with the definition).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sql.partition_ddl import PartitionDesc, add_partition, check_partition_name
from tables.catalog import Catalog
from tables.commit import TableWriter, partition_change
from tables.errors import DorisError, SqlError
from tables.model import TableDef
from tables.partitions import MAXVALUE, MINVALUE, PartitionKind, parse_value
from tables.schema_change import SchemaOp

log = logging.getLogger(__name__)

PREFIX = "dynamic_partition."
UNITS = ("HOUR", "DAY", "WEEK", "MONTH", "YEAR")
NO_START = -2147483648  # Doris's default `start`: nothing is dropped
MAX_PARTITIONS = 500  # Doris FE config max_dynamic_partition_num
KEYS = (
    "enable",
    "time_unit",
    "start",
    "end",
    "prefix",
    "buckets",
    "time_zone",
    "create_history_partition",
    "history_partition_num",
    "start_day_of_week",
    "start_day_of_month",
    "replication_num",
    "replication_allocation",
    "reserved_history_periods",
    "hot_partition_num",
    "storage_medium",
)


@dataclass(frozen=True)
class DynamicPartition:
    enable: bool
    time_unit: str
    start: int
    end: int
    prefix: str
    time_zone: str
    create_history_partition: bool
    history_partition_num: int
    start_day_of_week: int  # 1 = Monday
    start_day_of_month: int


def _int(props: dict[str, str], key: str, default: int) -> int:
    text = props.get(PREFIX + key)
    if text is None:
        return default
    try:
        return int(text.strip())
    except ValueError:
        raise SqlError(f"Invalid properties: {PREFIX}{key}: {text} is not a number") from None


def dynamic_spec(props: dict[str, str]) -> DynamicPartition | None:
    """The table's dynamic partition settings, None when it has none.

    Raises: SqlError with Doris's text for a value it refuses.
    """
    given = {k[len(PREFIX) :]: v for k, v in props.items() if k.startswith(PREFIX)}
    if not given:
        return None
    for key in given:
        if key not in KEYS:
            raise SqlError(f"Unknown dynamic partition property: {PREFIX}{key}")
    unit = given.get("time_unit", "").strip().upper()
    if not unit:
        raise SqlError("Must assign dynamic_partition.time_unit properties")
    if unit not in UNITS:
        raise SqlError(f"Unsupported time unit {given['time_unit']}. Expect HOUR/DAY/WEEK/MONTH/YEAR.")
    if "end" not in given:
        raise SqlError("Must assign dynamic_partition.end properties")
    enable = given.get("enable", "true").strip().lower()
    if enable not in ("true", "false"):
        raise SqlError(f"Invalid properties: {PREFIX}enable: {given['enable']} must be true or false")
    start, end = _int(props, "start", NO_START), _int(props, "end", 0)
    if start >= 0:
        raise SqlError("Dynamic partition start must less than 0")
    if end <= 0:
        raise SqlError("Dynamic partition end must greater than 0")
    history = given.get("create_history_partition", "false").strip().lower() == "true"
    history_num = _int(props, "history_partition_num", -1)
    if history and start == NO_START and history_num < 0:
        raise SqlError("Provide start or history_partition_num property when creating history partition")
    zone = given.get("time_zone", "").strip()
    if zone:
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise SqlError(f"Unknown or incorrect time zone: '{zone}'") from None
    week_day, month_day = _int(props, "start_day_of_week", 1), _int(props, "start_day_of_month", 1)
    if not 1 <= week_day <= 7:
        raise SqlError(f"{PREFIX}start_day_of_week should between 1 and 7")
    if not 1 <= month_day <= 28:
        raise SqlError(f"{PREFIX}start_day_of_month should between 1 and 28")
    spec = DynamicPartition(
        enable=enable == "true",
        time_unit=unit,
        start=start,
        end=end,
        prefix=given.get("prefix", "p"),
        time_zone=zone,
        create_history_partition=history,
        history_partition_num=history_num,
        start_day_of_week=week_day,
        start_day_of_month=month_day,
    )
    first = max(start, -history_num) if history and history_num >= 0 else start
    count = end - (first if history else 0) + 1
    if count > MAX_PARTITIONS:
        raise SqlError(f"Too many dynamic partitions: {count}. Limit: {MAX_PARTITIONS}")
    return spec


def check_table(table: TableDef) -> DynamicPartition | None:
    """Doris's checks of a table with dynamic partition properties.

    Raises: SqlError with Doris's text: not RANGE on one DATE / DATETIME column, a bad property.
    """
    spec = dynamic_spec(table.properties)
    if spec is None:
        return None
    partitioning = table.partitioning
    if partitioning is None or partitioning.kind is not PartitionKind.RANGE:
        raise SqlError("Only support dynamic partition properties on range partition table")
    if partitioning.auto:  # since Doris 2.1.3: the scheduler would drop partitions the loads created
        raise SqlError("Can't use Dynamic Partition and Auto Partition at the same time")
    if len(partitioning.columns) != 1:
        raise SqlError("Dynamic partition only support single-column range partition")
    t = table.partition_types()[0]
    if t.name not in ("DATE", "DATETIME"):
        raise SqlError(f"Dynamic partition only support DATE or DATETIME partition column, not {t.sql()}")
    try:  # the prefix starts every partition name the scheduler makes
        check_partition_name(spec.prefix + "0")
    except SqlError:
        raise SqlError(f"Invalid dynamic partition prefix: {spec.prefix}") from None
    if spec.time_unit == "HOUR" and t.name != "DATETIME":
        raise SqlError("time_unit HOUR of dynamic partition needs a DATETIME partition column")
    return spec


# -- the window -----------------------------------------------------------------------------------


def unit_start(moment: dt.datetime, spec: DynamicPartition) -> dt.datetime:
    """The start of the time unit holding `moment` (naive, in the table's time zone)."""
    moment = moment.replace(minute=0, second=0, microsecond=0)
    if spec.time_unit == "HOUR":
        return moment
    day = moment.replace(hour=0)
    if spec.time_unit == "DAY":
        return day
    if spec.time_unit == "WEEK":
        return day - dt.timedelta(days=(day.isoweekday() - spec.start_day_of_week) % 7)
    if spec.time_unit == "MONTH":
        start = day.replace(day=spec.start_day_of_month)
        return start if start <= day else _months(start, -1)
    return day.replace(month=1, day=1)


def shift(moment: dt.datetime, spec: DynamicPartition, n: int) -> dt.datetime:
    """`moment` moved by n time units."""
    if spec.time_unit == "HOUR":
        return moment + dt.timedelta(hours=n)
    if spec.time_unit == "DAY":
        return moment + dt.timedelta(days=n)
    if spec.time_unit == "WEEK":
        return moment + dt.timedelta(weeks=n)
    if spec.time_unit == "MONTH":
        return _months(moment, n)
    return moment.replace(year=moment.year + n)


def _months(moment: dt.datetime, n: int) -> dt.datetime:
    months = moment.month - 1 + n
    return moment.replace(year=moment.year + months // 12, month=months % 12 + 1)


def partition_name(moment: dt.datetime, spec: DynamicPartition) -> str:
    """Doris's name of the dynamic partition starting at `moment`."""
    if spec.time_unit == "HOUR":
        return spec.prefix + moment.strftime("%Y%m%d%H")
    if spec.time_unit == "DAY":
        return spec.prefix + moment.strftime("%Y%m%d")
    if spec.time_unit == "WEEK":
        year, week, _ = moment.isocalendar()
        return f"{spec.prefix}{year}_{week:02d}"
    if spec.time_unit == "MONTH":
        return spec.prefix + moment.strftime("%Y%m")
    return spec.prefix + moment.strftime("%Y")


def _now(spec: DynamicPartition, now: dt.datetime) -> dt.datetime:
    """`now` (aware) as a naive time in the table's zone (the server's when it names none)."""
    zone = ZoneInfo(spec.time_zone) if spec.time_zone else None
    local = now.astimezone(zone) if zone else now.astimezone()
    return local.replace(tzinfo=None)


def plan(table: TableDef, now: dt.datetime, created: str) -> tuple[TableDef, set[int]]:
    """The table with its window of dynamic partitions created and the partitions past `start` removed, and the
    ids of those removed (their files go in the same commit)."""
    spec = check_table(table)
    partitioning = table.partitioning
    if spec is None or not spec.enable or partitioning is None:
        return table, set()
    types = table.partition_types()
    t = types[0]
    here = unit_start(_now(spec, now), spec)
    first = 0
    if spec.create_history_partition:
        first = max(spec.start, -spec.history_partition_num) if spec.history_partition_num >= 0 else spec.start
    for n in range(first, spec.end + 1):
        low, high = shift(here, spec, n), shift(here, spec, n + 1)
        desc = PartitionDesc(name=partition_name(low, spec), lower=(_text(low, t.name),), upper=(_text(high, t.name),))
        if partitioning.find(desc.name) is not None:
            continue
        try:
            partitioning = add_partition(partitioning, desc, types, created=created)
        except SqlError:  # overlaps a partition the table has: Doris skips it too
            continue
    dropped: set[int] = set()
    if spec.start != NO_START:
        edge = shift(here, spec, spec.start)
        for p in partitioning.formal():
            upper = p.upper[0]
            if upper not in (MAXVALUE, MINVALUE) and _as_datetime(parse_value(upper, t)) <= edge:
                dropped.add(p.id)
        kept = tuple(p for p in partitioning.partitions if p.id not in dropped)
        partitioning = partitioning.model_copy(update={"partitions": kept})
    return table.model_copy(update={"partitioning": partitioning}), dropped


def _text(moment: dt.datetime, type_name: str) -> str:
    return moment.date().isoformat() if type_name == "DATE" else moment.strftime("%Y-%m-%d %H:%M:%S")


def _as_datetime(value: dt.date) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime(value.year, value.month, value.day)


# -- the scheduler ---------------------------------------------------------------------------------


def schedule_table(writer: TableWriter, table: TableDef, now: Callable[[], dt.datetime]) -> tuple[int, int]:
    """Bring one table's dynamic partitions up to date in one change; (created, dropped)."""
    counts = [0, 0]
    dropped: set[int] = set()

    def change(current: TableDef, version: int) -> tuple[TableDef, list[SchemaOp]]:
        created = now().strftime("%Y-%m-%d %H:%M:%S")
        new, gone = plan(current, now(), created)
        dropped.update(gone)
        before = {p.id for p in (current.partitioning.partitions if current.partitioning else ())}
        after = {p.id for p in (new.partitioning.partitions if new.partitioning else ())}
        counts[:] = [len(after - before), len(gone)]
        return new, []

    current = plan(table, now(), "")
    if current[0].partitioning == table.partitioning:
        return 0, 0  # nothing to do: no version taken
    recorded, iceberg = partition_change(change, dropped)
    writer.alter(table.db, table.name, recorded, schema=bool(current[1]), iceberg=iceberg)
    return counts[0], counts[1]


def schedule_all(catalog: Catalog, writer: TableWriter, now: Callable[[], dt.datetime] | None = None) -> int:
    """One pass of the scheduler over every table with dynamic partitions; the partitions created or dropped."""
    clock = now or (lambda: dt.datetime.now(dt.UTC))
    changed = 0
    for db in catalog.list_databases():
        for name in catalog.list_tables(db):
            try:
                table = catalog.load(db, name).definition
                if dynamic_spec(table.properties) is None:
                    continue
                created, dropped = schedule_table(writer, table, clock)
            except DorisError as exc:  # a dropped table, a broken one: the next pass sees it again
                log.warning("dynamic partitions of %s.%s: %s", db, name, exc.message)
                continue
            if created or dropped:
                log.info("dynamic partitions of %s.%s: %d created, %d dropped", db, name, created, dropped)
            changed += created + dropped
    return changed
