"""The pure parsers of `sql/` as tables of cases (sqlglot's `Validator` style): a statement and what it parses
to, or the exact error text. No Spark session, no catalog: these run in a second."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from sql.alter import AlterTable, Clause, parse_alter, plan_alter
from sql.broker_load import parse_load
from sql.catalog_statements import Truncate
from sql.ddl import parse_create_table
from sql.partition_ddl import PartitionDesc
from sql.routine_load import JobCommand, ShowRoutineLoad, ShowRoutineLoadTask, parse_routine_load
from sql.statements import statement_kind
from sql.tokens import Cursor, Target
from tables.errors import SqlError
from tables.model import KeysType, TableDef
from tables.types import DorisType

TABLE_CLAUSES = "DISTRIBUTED BY HASH(k) BUCKETS 1"


def error_of(parse: Any, *args: Any) -> str:
    with pytest.raises(SqlError) as caught:
        parse(*args)
    return caught.value.detail


# -- CREATE TABLE ------------------------------------------------------------------------------------------------
def table_of(text: str) -> TableDef:
    return parse_create_table(text, "cur").definition


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "CREATE TABLE t (k INT, v VARCHAR(10)) UNIQUE KEY(k) " + TABLE_CLAUSES,
            {"db": "cur", "name": "t", "keys_type": KeysType.UNIQUE, "key_columns": ("k",), "merge_on_write": True},
            id="unique-merge-on-write-by-default",
        ),
        pytest.param(
            "CREATE TABLE d.t (k INT, v BIGINT SUM) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 4",
            {"db": "d", "keys_type": KeysType.AGGREGATE, "buckets": 4, "bucket_columns": ("k",)},
            id="aggregate-qualified",
        ),
        pytest.param(
            "CREATE TABLE t (a INT, b INT, c INT, d INT)",
            {"keys_type": KeysType.DUPLICATE, "key_columns": ("a", "b", "c"), "buckets": 10},
            id="duplicate-keys-default-to-three-columns",
        ),
        pytest.param(
            "CREATE TABLE t (k INT, v INT, s INT) UNIQUE KEY(k) " + TABLE_CLAUSES + " PROPERTIES "
            "('enable_unique_key_merge_on_write' = 'false', 'function_column.sequence_col' = 's')",
            {"merge_on_write": False, "sequence_col": "s"},
            id="sequence-column",
        ),
        pytest.param(
            "CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) " + TABLE_CLAUSES + " PROPERTIES "
            "('function_column.sequence_type' = 'bigint',)",
            {"sequence_type": DorisType(name="BIGINT")},
            id="sequence-type-trailing-comma",
        ),
    ],
)
def test_create_table_parses(text: str, expected: dict[str, Any]) -> None:
    table = table_of(text)
    assert {key: getattr(table, key) for key in expected} == expected


def test_create_table_if_not_exists() -> None:
    assert parse_create_table("CREATE TABLE IF NOT EXISTS t (k INT)", "d").if_not_exists is True
    assert parse_create_table("CREATE EXTERNAL TABLE t (k INT)", "d").if_not_exists is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("CREATE TABLE t (k INT", "Syntax error: expected ) at end of statement", id="unclosed"),
        pytest.param(
            "CREATE TABLE t (k DATE) AUTO PARTITION BY RANGE (date_trunc(k, 'day')) ()",
            "AUTO RANGE PARTITION doesn't support NULL column",
            id="auto-partition-nullable",
        ),
        pytest.param(
            "CREATE TABLE t (k DATE NOT NULL) AUTO PARTITION BY RANGE (year(k)) ()",
            "auto create partition only support date_trunc function of RANGE partition.",
            id="auto-partition-function",
        ),
        pytest.param(
            "CREATE TABLE t (k INT) PARTITION BY HASH(k) ()",
            "Syntax error at line 1, column 40: expected RANGE or LIST, found 'HASH'",
            id="partition-by-hash",
        ),
        pytest.param("CREATE TABLE t (k INT) ENGINE = mysql", "Unsupported engine: mysql", id="engine"),
        pytest.param(
            "CREATE TABLE t (k INT, v INT) UNIQUE KEY(x) " + TABLE_CLAUSES, "Key column[x] doesn't exist.", id="key"
        ),
        pytest.param(
            "CREATE TABLE t (k INT, v INT) UNIQUE KEY(v) " + TABLE_CLAUSES,
            "Key columns should be a ordered prefix of the schema. KeyColumns[0] (starts from zero) is v, "
            "but corresponding column is k in the previous columns declaration.",
            id="key-prefix",
        ),
        pytest.param(
            "CREATE TABLE t (k INT, v INT) AGGREGATE KEY(k)",
            "AGG_KEYS table should specify aggregate type for non-key column[v]",
            id="aggregate-without-function",
        ),
        pytest.param(
            "CREATE TABLE t (k INT, v INT SUM) UNIQUE KEY(k)",
            "UNIQUE_KEYS table should not specify aggregate type for non-key column[v]",
            id="unique-with-function",
        ),
        pytest.param(
            "CREATE TABLE t (k FLOAT, v INT) UNIQUE KEY(k)",
            "Float or double can not used as a key, use decimal instead. column: k",
            id="float-key",
        ),
        pytest.param(
            "CREATE TABLE t (k INT, __DORIS_x INT)",
            "Incorrect column name '__DORIS_x'. Column name can not start with '__DORIS_'",
            id="hidden-prefix",
        ),
        pytest.param("CREATE TABLE t (k INT, K INT)", "Duplicate column name", id="duplicate-column"),
        pytest.param(
            "CREATE TABLE t (k INT, v ARRAY<INT>)",
            "Unsupported data type: ARRAY<...> (complex types are not supported)",
            id="complex-type",
        ),
        pytest.param(
            "CREATE TABLE t (k INT, v INT SUM) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1000",
            "Number of buckets (1000) exceeds the maximum allowed value (768). Generally, a large number of buckets "
            "is not needed. If you have a specific use case requiring more buckets, please review your schema "
            "design or modify the FE config 'max_bucket_num_per_partition' to adjust this limit.",
            id="bucket-cap",
        ),
        pytest.param(
            "CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(v) BUCKETS 1",
            "Distribution column[v] is not key column",
            id="distribution-not-key",
        ),
        pytest.param(
            "CREATE TABLE t (k INT, v INT) DUPLICATE KEY(k) " + TABLE_CLAUSES + " PROPERTIES "
            "('function_column.sequence_col' = 'v')",
            "sequence column only support UNIQUE_KEYS",
            id="sequence-on-duplicate",
        ),
        pytest.param(
            "CREATE TABLE t (k INT, v INT, s VARCHAR(3)) UNIQUE KEY(k) " + TABLE_CLAUSES + " PROPERTIES "
            "('function_column.sequence_col' = 's')",
            "Sequence type only support integer types and date types",
            id="sequence-type",
        ),
        pytest.param(
            "CREATE TABLE t (k INT, a INT, s INT) UNIQUE KEY(k) " + TABLE_CLAUSES + " PROPERTIES "
            "('sequence_mapping.s' = 'a')",
            "sequence mapping do not support merge on write",
            id="sequence-mapping-merge-on-write",
        ),
    ],
)
def test_create_table_refuses(text: str, message: str) -> None:
    assert error_of(parse_create_table, text, "d") == message


# -- ALTER TABLE -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "ALTER TABLE d.t DROP COLUMN w, RENAME COLUMN a b",
            AlterTable(
                db="d", table="t", clauses=(Clause(kind="DROP", name="w"), Clause("RENAME", name="a", new_name="b"))
            ),
            id="drop-and-rename",
        ),
        pytest.param(
            'ALTER TABLE t ENABLE FEATURE "SEQUENCE_LOAD" WITH PROPERTIES ("function_column.sequence_type" = "int")',
            AlterTable(
                db=None,
                table="t",
                clauses=(
                    Clause(kind="ENABLE", name="SEQUENCE_LOAD", properties={"function_column.sequence_type": "int"}),
                ),
            ),
            id="enable-feature",
        ),
        pytest.param(
            'ALTER TABLE t ADD TEMPORARY PARTITION tp VALUES LESS THAN ("10"), DROP TEMPORARY PARTITION IF EXISTS x',
            AlterTable(
                db=None,
                table="t",
                clauses=(
                    Clause(kind="ADD TEMPORARY PARTITION", partition=PartitionDesc(name="tp", less_than=("10",))),
                    Clause(kind="DROP TEMPORARY PARTITION", name="x", if_exists=True),
                ),
            ),
            id="temporary-partitions",
        ),
        pytest.param(
            "ALTER TABLE t REPLACE PARTITION (p1, p2) WITH TEMPORARY PARTITION (tp1) "
            'PROPERTIES ("strict_range" = "false", "use_temp_partition_name" = "TRUE")',
            AlterTable(
                db=None,
                table="t",
                clauses=(
                    Clause(
                        kind="REPLACE PARTITION",
                        names=("p1", "p2"),
                        temp_names=("tp1",),
                        strict_range=False,
                        use_temp_name=True,
                    ),
                ),
            ),
            id="replace",
        ),
        pytest.param(
            "ALTER TABLE t REPLACE PARTITION p1 WITH TEMPORARY PARTITION tp1",
            AlterTable(
                db=None, table="t", clauses=(Clause(kind="REPLACE PARTITION", names=("p1",), temp_names=("tp1",)),)
            ),
            id="replace-one-without-parentheses",
        ),
    ],
)
def test_alter_parses(text: str, expected: AlterTable) -> None:
    assert parse_alter(text) == expected


@pytest.mark.parametrize(
    ("text", "kind", "column", "placement"),
    [
        pytest.param(
            "ALTER TABLE t ADD COLUMN c INT DEFAULT '0' AFTER v", "ADD", ("c", "INT", "0"), ("v", False), id="add"
        ),
        pytest.param("ALTER TABLE t ADD c BIGINT SUM", "ADD", ("c", "BIGINT", None), (None, False), id="add-short"),
        pytest.param(
            "ALTER TABLE t MODIFY COLUMN v BIGINT NULL", "MODIFY", ("v", "BIGINT", None), (None, False), id="mod"
        ),
    ],
)
def test_alter_column_clauses(
    text: str, kind: str, column: tuple[str, str, str | None], placement: tuple[str | None, bool]
) -> None:
    (clause,) = parse_alter(text).clauses
    (col,) = clause.columns
    assert (clause.kind, (col.name, col.type.name, col.default), (clause.after, clause.first)) == (
        kind,
        column,
        placement,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "ALTER TABLE t ADD ROLLUP r (k)", "ALTER TABLE ADD ROLLUP is not supported by this server", id="rollup"
        ),
        pytest.param(
            "ALTER TABLE t ORDER BY (k)", "This ALTER TABLE form is not supported by this server: ORDER BY", id="order"
        ),
        pytest.param(
            "ALTER TABLE t ADD COLUMN c INT TO r",
            "ALTER ... TO <rollup> is not supported: this server has no rollups",
            id="to-rollup",
        ),
        pytest.param(
            "ALTER TABLE t DROP COLUMN c extra",
            "Syntax error at line 1, column 33: expected end of statement, found 'extra'",
            id="trailing-words",
        ),
    ],
)
def test_alter_refuses(text: str, message: str) -> None:
    assert error_of(parse_alter, text) == message


UNIQUE = "CREATE TABLE t (k INT, v INT, w VARCHAR(8)) UNIQUE KEY(k) " + TABLE_CLAUSES
AGGREGATE = "CREATE TABLE t (k INT, v INT SUM) AGGREGATE KEY(k) " + TABLE_CLAUSES


@pytest.mark.parametrize(
    ("create", "alter", "message"),
    [
        pytest.param(
            UNIQUE, "ALTER TABLE t DROP COLUMN k", "Can not drop key column in Unique data model table", id="k"
        ),
        pytest.param(UNIQUE, "ALTER TABLE t DROP COLUMN x", "Column does not exists: x", id="unknown"),
        pytest.param(
            UNIQUE,
            "ALTER TABLE t ADD COLUMN v INT",
            "Can not add column which already exists in base table: v",
            id="exists",
        ),
        pytest.param(
            UNIQUE,
            "ALTER TABLE t ADD COLUMN c INT NOT NULL",
            "Can not add column c: it is NOT NULL and has no default value",
            id="not-null",
        ),
        pytest.param(
            AGGREGATE,
            "ALTER TABLE t ADD COLUMN c INT",
            "Aggregate method must be specified for value column: c",
            id="aggregate-method",
        ),
        pytest.param(UNIQUE, "ALTER TABLE t MODIFY COLUMN v TINYINT", "Can not change int to tinyint", id="narrowing"),
        pytest.param(UNIQUE, "ALTER TABLE t RENAME COLUMN v w", "Column name[w] is already used", id="rename-taken"),
        pytest.param(
            AGGREGATE,
            'ALTER TABLE t ENABLE FEATURE "BATCH_DELETE"',
            "Batch delete only supported in unique tables.",
            id="bd",
        ),
    ],
)
def test_alter_plan_refuses(create: str, alter: str, message: str) -> None:
    change = plan_alter(parse_alter(alter))
    assert error_of(change, table_of(create), 2) == message


def test_alter_plan_adds_a_column_at_its_version() -> None:
    table, ops = plan_alter(parse_alter("ALTER TABLE t ADD COLUMN c BIGINT DEFAULT '1' AFTER v"))(table_of(UNIQUE), 7)
    assert [c.name for c in table.columns] == ["k", "v", "c", "w"]
    added = table.column("c")
    assert added is not None and (added.since_version, added.aggregation) == (7, "REPLACE")
    assert len(ops) == 1 and len(table.alter_jobs) == 1


# -- broker load ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "LOAD LABEL d.l1 (DATA INFILE('/a.csv', '/b.csv') INTO TABLE t COLUMNS TERMINATED BY ',' (a, b))",
            ("d", "l1", "t", ["/a.csv", "/b.csv"]),
            id="two-files",
        ),
        pytest.param(
            "LOAD LABEL l2 (DATA INFILE('/a.csv') INTO TABLE t) WITH BROKER 'b' ('k'='v') PROPERTIES ('timeout'='10')",
            ("cur", "l2", "t", ["/a.csv"]),
            id="broker-clause-ignored",
        ),
    ],
)
def test_broker_load_parses(text: str, expected: tuple[str, str, str, list[str]]) -> None:
    load = parse_load(text, "cur")
    assert (load.db, load.label, load.table, load.paths) == expected


def test_broker_load_into_temporary_partitions() -> None:
    load = parse_load("LOAD LABEL d.l1 (DATA INFILE('/a.csv') INTO TABLE t TEMPORARY PARTITION (tp1, tp2))", "cur")
    assert load.options["temporary_partitions"] == "tp1, tp2" and "partitions" not in load.options


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("LOAD LABEL l1 (DATA INFILE('/a.csv') INTO TABLE t)", "No database selected", id="no-database"),
        pytest.param(
            "LOAD LABEL d.l1 (DATA INFILE('/a.csv') INTO TABLE t TEMPORARY (p1))",
            "Syntax error at line 1, column 63: expected PARTITION, found '('",
            id="temporary-without-partition",
        ),
        pytest.param(
            "LOAD LABEL d.l1 (DATA INFILE('/a.csv') INTO TABLE t PRECEDING FILTER k > 1)",
            "PRECEDING FILTER in LOAD is not supported by this server yet",
            id="preceding-filter",
        ),
        pytest.param(
            "LOAD LABEL d.l1 (DATA INFILE('/a.csv') INTO TABLE t) extra",
            "Syntax error at line 1, column 58: expected end of statement, found 'extra'",
            id="trailing-words",
        ),
    ],
)
def test_broker_load_refuses(text: str, message: str) -> None:
    assert error_of(parse_load, text, None) == message


# -- routine load --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("PAUSE ROUTINE LOAD FOR d.j", JobCommand(verb="PAUSE", db="d", name="j"), id="pause"),
        pytest.param("resume all routine load", JobCommand(verb="RESUME", db=None, name=None), id="resume-all"),
        pytest.param("STOP ROUTINE LOAD FOR j", JobCommand(verb="STOP", db=None, name="j"), id="stop"),
        pytest.param(
            "SHOW ALL ROUTINE LOAD LIKE 'j%'",
            ShowRoutineLoad(db=None, name=None, include_history=True, pattern="j%"),
            id="show-like",
        ),
        pytest.param(
            "SHOW ROUTINE LOAD FOR d.j",
            ShowRoutineLoad(db="d", name="j", include_history=False, pattern=None),
            id="show-for",
        ),
        pytest.param(
            "SHOW ROUTINE LOAD TASK FROM d WHERE JobName = 'j'", ShowRoutineLoadTask(db="d", name="j"), id="tasks"
        ),
    ],
)
def test_routine_load_commands_parse(text: str, expected: object) -> None:
    assert parse_routine_load(text) == expected


def test_routine_load_create_parses() -> None:
    stmt = parse_routine_load(
        "CREATE ROUTINE LOAD d.j ON t WITH MERGE COLUMNS TERMINATED BY ',', COLUMNS(k, v), WHERE k > 1, "
        "DELETE ON v = 0, ORDER BY v PROPERTIES ('max_batch_rows' = '300000') "
        "FROM KAFKA ('kafka_broker_list' = 'h:9092', 'kafka_topic' = 'topic') COMMENT 'c'"
    )
    fields = asdict(stmt)  # type: ignore[call-overload]
    fields.pop("properties")  # the option table's business (tested with the load options)
    assert fields == {
        "db": "d",
        "name": "j",
        "table": "t",
        "merge_type": "MERGE",
        "column_separator": ",",
        "columns": "k, v",
        "where": "k > 1",
        "delete_on": "v = 0",
        "sequence_col": "v",
        "source_type": "KAFKA",
        "source": {"kafka_broker_list": "h:9092", "kafka_topic": "topic"},
        "comment": "c",
        "partitions": None,
        "temporary_partitions": False,
    }
    temporary = parse_routine_load("CREATE ROUTINE LOAD j ON t TEMPORARY PARTITION (tp1, tp2) FROM KAFKA ('a' = 'b')")
    assert (temporary.partitions, temporary.temporary_partitions) == ("tp1, tp2", True)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("STOP ROUTINE LOAD", "Syntax error: expected FOR at end of statement", id="stop-without-job"),
        pytest.param(
            "SHOW ROUTINE LOAD TASK WHERE Name = 'j'",
            'show routine load job only support one equal expr which is sames like JobName="ILoveDoris"',
            id="task-filter",
        ),
        pytest.param(
            "CREATE ROUTINE LOAD j ON t WITH UPSERT FROM KAFKA ()",
            "Syntax error: unknown merge type UPSERT, expected APPEND, DELETE or MERGE",
            id="merge-type",
        ),
        pytest.param(
            "CREATE ROUTINE LOAD j ON t TEMPORARY (p) FROM KAFKA ()",
            "TEMPORARY clause of routine load is not supported by this server yet",
            id="temporary-without-partition",
        ),
        pytest.param(
            "RESUME ROUTINE LOAD FOR j extra",
            "Syntax error at line 1, column 31: expected end of statement, found 'extra'",
            id="trailing-words",
        ),
    ],
)
def test_routine_load_refuses(text: str, message: str) -> None:
    assert error_of(parse_routine_load, text) == message


# -- the statement table -----------------------------------------------------------------------------------------
def parsed(text: str) -> tuple[str, Any]:
    cur = Cursor(text)
    kind = statement_kind(cur)
    return kind.name, kind.parse(cur, "cur")


@pytest.mark.parametrize(
    ("text", "kind", "statement"),
    [
        pytest.param("CREATE DATABASE IF NOT EXISTS d", "CREATE DATABASE", Target(db="d", if_exists=True), id="cdb"),
        pytest.param("drop schema d force", "DROP DATABASE", Target(db="d", force=True), id="drop-db"),
        pytest.param(
            "DROP TABLE IF EXISTS d.t FORCE",
            "DROP TABLE",
            Target(db="d", table="t", if_exists=True, force=True),
            id="dt",
        ),
        pytest.param("TRUNCATE TABLE t", "TRUNCATE", Truncate(Target(db="cur", table="t")), id="truncate"),
        pytest.param("TRUNCATE d.t", "TRUNCATE", Truncate(Target(db="d", table="t")), id="truncate-short"),
        pytest.param(
            "TRUNCATE TABLE t PARTITION (p1, `p2`)",
            "TRUNCATE",
            Truncate(Target(db="cur", table="t"), ("p1", "p2")),
            id="truncate-partitions",
        ),
        pytest.param("USE `d`", "USE", Target(db="d"), id="use"),
        pytest.param("DESC d.t", "DESCRIBE", Target(db="d", table="t"), id="desc"),
        pytest.param("SHOW DATABASES", "SHOW DATABASES", None, id="show-databases"),
        pytest.param("SHOW FULL TABLES FROM d", "SHOW TABLES", Target(db="d"), id="show-full-tables"),
        pytest.param("SHOW TABLES", "SHOW TABLES", Target(db="cur"), id="show-tables"),
        pytest.param("SHOW DELETE IN d", "SHOW DELETE", Target(db="d"), id="show-delete"),
        pytest.param("SHOW CREATE TABLE t", "SHOW CREATE TABLE", Target(db="cur", table="t"), id="show-create"),
        pytest.param("SHOW TABLETS FROM d.t", "SHOW TABLETS", Target(db="d", table="t"), id="show-tablets"),
        pytest.param(
            "SET a = 1, @@session.b = 'x', c = true", "SET", [("a", "1"), ("@@session.b", "x"), ("c", "true")], id="set"
        ),
    ],
)
def test_statement_table_parses(text: str, kind: str, statement: object) -> None:
    assert parsed(text) == (kind, statement)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        pytest.param("CREATE ROUTINE LOAD d.j ON t FROM KAFKA ()", "ROUTINE LOAD", id="routine-before-create"),
        pytest.param("SHOW ALL ROUTINE LOAD", "ROUTINE LOAD", id="routine-before-show"),
        pytest.param("CREATE TABLE t (k INT)", "CREATE TABLE", id="create-table"),
        pytest.param("(SELECT 1) UNION (SELECT 2)", "SELECT", id="parenthesised-query"),
        pytest.param("WITH c AS (SELECT 1) SELECT * FROM c", "SELECT", id="with"),
        pytest.param("INSERT INTO t VALUES (1)", "INSERT", id="insert"),
        pytest.param("UPDATE t SET v = 1", "UPDATE", id="update"),
        pytest.param("DELETE FROM t PARTITION t WHERE k = 1", "DELETE", id="delete-partition"),
        pytest.param("ALTER TABLE t DROP COLUMN v", "ALTER TABLE", id="alter"),
        pytest.param("LOAD LABEL d.l (DATA INFILE('/a') INTO TABLE t)", "LOAD", id="load"),
        pytest.param("CANCEL LOAD WHERE LABEL = 'l'", "CANCEL LOAD", id="cancel-load"),
        pytest.param("SHOW FULL LOAD", "SHOW LOAD", id="show-load"),
        pytest.param("SHOW TRANSACTION WHERE ID = 1", "SHOW TRANSACTION", id="show-transaction"),
        pytest.param("ADMIN COMPACT TABLE t WHERE TYPE = 'BASE'", "ADMIN COMPACT", id="admin-compact"),
        pytest.param("GRANT LOAD_PRIV ON d.t TO u", "ACCOUNT", id="grant"),
        pytest.param("REVOKE 'r' FROM u", "ACCOUNT", id="revoke-role"),
        pytest.param("CREATE USER 'u'@'%' IDENTIFIED BY 'p'", "ACCOUNT", id="create-user-before-create"),
        pytest.param("DROP ROLE r", "ACCOUNT", id="drop-role"),
        pytest.param("ALTER USER u IDENTIFIED BY 'p'", "ACCOUNT", id="alter-user"),
        pytest.param("SET PASSWORD = PASSWORD('p')", "ACCOUNT", id="set-password-before-set"),
        pytest.param("SHOW ALL GRANTS", "ACCOUNT", id="show-all-grants"),
        pytest.param("SHOW ROLES", "ACCOUNT", id="show-roles"),
        pytest.param("SHOW ROUTINE LOAD", "ROUTINE LOAD", id="show-routine-load"),
    ],
)
def test_statement_table_kinds(text: str, kind: str) -> None:
    assert parsed(text)[0] == kind


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("SHOW VIEWS", "This SHOW statement is not supported by this server yet", id="show"),
        pytest.param("ALTER VIEW v AS SELECT 1", "ALTER statements are not supported by this server yet", id="alter"),
        pytest.param(
            "ADMIN SET FRONTEND CONFIG ('a' = 'b')", "ADMIN statements are not supported by this server yet", id="a"
        ),
        pytest.param(
            "CANCEL ALTER TABLE COLUMN FROM t", "CANCEL statements are not supported by this server yet", id="c"
        ),
        pytest.param("EXPLAIN SELECT 1", "Unsupported statement: EXPLAIN", id="explain"),
        pytest.param("DROP VIEW v", "Unsupported statement: DROP", id="drop-view"),
        pytest.param("SET a", "Syntax error in SET", id="set-without-value"),
        pytest.param(
            "INSERT INTO t VALUES (1",
            "Syntax error: Expecting )",
            id="insert-syntax",
        ),
        pytest.param("UPDATE (SELECT 1) s SET v = 1", "Syntax error in UPDATE", id="update-without-set"),
        pytest.param(
            "DELETE FROM d.t TEMPORARY PARTITION (tp) WHERE k = 1",
            "DELETE FROM a TEMPORARY PARTITION is not supported by this server yet",
            id="delete-temporary-partition",
        ),
        pytest.param(
            "ADMIN COMPACT TABLE t WHERE TYPE = 'FULL'",
            "Compaction type must be BASE or CUMULATIVE, got 'FULL'",
            id="compaction-type",
        ),
        pytest.param(
            "SHOW ALTER TABLE COLUMN WHERE State = 'x'",
            "SHOW ALTER TABLE COLUMN supports WHERE TableName = '<table>' only",
            id="show-alter-filter",
        ),
    ],
)
def test_statement_table_refuses(text: str, message: str) -> None:
    assert error_of(parsed, text) == message
