"""Names and storage locations (issue 15): names follow Doris's rules, locations are the server's, no delete
leaves the server's roots, and one broken table never stops the server.

Tables "made the old way" are created as the code before this change created them: pyiceberg's default
location `<warehouse>/<db>/<table>`, names unchecked. That is how a data dir written earlier looks.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pymysql
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField

from sql.ddl import parse_create_table
from tables.model import DEFINITION_PROPERTY
from tables.transactions import COMMITTED, TransactionStore
from tests.helpers import AUTH, DorisClient, assert_doris_result
from tests.server_process import ServerProcess

TABLE_RULE = "Table name regex is '^[a-zA-Z][a-zA-Z0-9-_]*$'"
COLUMN_RULE = "Column regex is '^[_a-zA-Z@0-9\\s/][.a-zA-Z0-9_+-/?@#$%^&*\"\\s,:]{0,255}$'"
KV_DDL = "(k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1"


def _old_catalog(data_dir: Path) -> SqlCatalog:
    """The catalog as the previous code opened it (same name, same SQLite file, same warehouse)."""
    return SqlCatalog(
        "default", uri=f"sqlite:///{data_dir / 'catalog.db'}", warehouse=f"file://{data_dir / 'warehouse'}"
    )


def create_old_layout_table(catalog: SqlCatalog, db: str, name: str, properties: dict[str, str] | None = None) -> Path:
    """A table made the old way: no name check, pyiceberg's default location; returns that location."""
    definition = parse_create_table(f"CREATE TABLE x {KV_DDL}", db).definition.model_copy(update={"name": name})
    fields = [
        NestedField(field_id=i, name=c.name, field_type=c.type.iceberg_type(), required=False)
        for i, c in enumerate(definition.all_columns(), start=1)
    ]
    if properties is None:
        properties = {DEFINITION_PROPERTY: definition.to_json(), "format-version": "2"}
    table = catalog.create_table((db, name), schema=Schema(*fields), properties=properties)
    return Path(urlparse(table.location()).path)


def _dirs(data_dir: Path) -> set[Path]:
    """Every directory under the data dir, and every entry beside it (where a `../x` name would land)."""
    return {p for p in data_dir.rglob("*") if p.is_dir()} | set(data_dir.parent.iterdir())


# -- names are checked where they are created -------------------------------------------------------------
LONG_TABLE = "t" * 65
REFUSED = [
    pytest.param(
        "CREATE TABLE `../x` " + KV_DDL, f"Incorrect table name '../x'. {TABLE_RULE}", id="table-named-dot-dot-slash"
    ),
    pytest.param("CREATE TABLE `.` " + KV_DDL, f"Incorrect table name '.'. {TABLE_RULE}", id="table-named-dot"),
    pytest.param("CREATE TABLE `a/b` " + KV_DDL, f"Incorrect table name 'a/b'. {TABLE_RULE}", id="table-with-a-slash"),
    pytest.param(
        "CREATE TABLE `tablé` " + KV_DDL, f"Incorrect table name 'tablé'. {TABLE_RULE}", id="table-with-unicode"
    ),
    pytest.param(
        f"CREATE TABLE {LONG_TABLE} " + KV_DDL,
        f"Table name length exceeds limit, the length of table name '{LONG_TABLE}' is 65 which is greater than "
        "the configuration 'table_name_length_limit' (64).",
        id="table-name-of-65-chars",
    ),
    pytest.param("CREATE DATABASE `../evil`", "Incorrect database name '../evil'", id="database-named-dot-dot-slash"),
    pytest.param("CREATE DATABASE `a.b`", "Incorrect database name 'a.b'", id="database-with-a-dot"),
    pytest.param(f"CREATE DATABASE d{'b' * 64}", f"Incorrect database name 'd{'b' * 64}'", id="database-of-65-chars"),
    pytest.param("CREATE DATABASE `bäse`", "Incorrect database name 'bäse'", id="database-with-unicode"),
    pytest.param(
        "CREATE TABLE c (`../k` INT, v INT) DISTRIBUTED BY HASH(`../k`) BUCKETS 1",
        f"Incorrect column name '../k'. {COLUMN_RULE}",
        id="column-named-dot-dot-slash",
    ),
    pytest.param(
        "CREATE TABLE c (k INT, `välue` INT) DISTRIBUTED BY HASH(k) BUCKETS 1",
        f"Incorrect column name 'välue'. {COLUMN_RULE}",
        id="column-with-unicode",
    ),
    pytest.param(
        "CREATE TABLE c (k INT, mv_v INT) DISTRIBUTED BY HASH(k) BUCKETS 1",
        "Incorrect column name mv_v, column name can't start with 'mv_'/'mva_'",
        id="column-with-the-materialized-view-prefix",
    ),
    pytest.param(
        "ALTER TABLE base ADD COLUMN `../y` INT",
        f"Incorrect column name '../y'. {COLUMN_RULE}",
        id="added-column-named-dot-dot-slash",
    ),
    pytest.param(
        "ALTER TABLE base RENAME COLUMN v `é`",
        f"Incorrect column name 'é'. {COLUMN_RULE}",
        id="renamed-column-to-unicode",
    ),
    pytest.param(
        "CREATE TABLE c (k INT, v INT) DISTRIBUTED BY HASH(k) BUCKETS 769",
        "Number of buckets (769) exceeds the maximum allowed value (768).",
        id="buckets-above-dorises-cap",
    ),
]


@pytest.fixture(scope="module")
def names_db(doris: DorisClient) -> str:
    """One database for the refusal cases, holding the table `base` their ALTERs aim at."""
    name = f"names_{uuid.uuid4().hex[:8]}"
    doris.sql(name, f"CREATE DATABASE {name}")
    doris.sql(name, "CREATE TABLE base " + KV_DDL)
    return name


@pytest.mark.parametrize("stmt, message", REFUSED)
def test_a_name_breaking_dorises_rule_is_refused_with_dorises_text_and_nothing_is_created(
    doris: DorisClient, names_db: str, server_settings: Any, mysql_port: int, stmt: str, message: str
) -> None:
    data_dir = server_settings.resolved_data_dir
    before_dirs, before_dbs = _dirs(data_dir), doris.rows(names_db, "SHOW DATABASES")
    assert message in doris.sql_error(names_db, stmt)
    conn = pymysql.connect(host="127.0.0.1", port=mysql_port, user="root", password="", database=names_db)
    with conn, pytest.raises(pymysql.MySQLError) as refused:
        conn.cursor().execute(stmt)
    assert message in refused.value.args[1]
    assert _dirs(data_dir) == before_dirs
    assert doris.rows(names_db, "SHOW DATABASES") == before_dbs
    assert doris.rows(names_db, "SHOW TABLES") == [["base"]]
    assert [r[0] for r in doris.rows(names_db, "DESC base")] == ["k", "v"]


@pytest.mark.parametrize(
    "label",
    [
        pytest.param("../../x", id="label-with-slashes"),
        pytest.param("l" * 129, id="label-of-129-chars"),
        pytest.param("étiquette", id="label-with-unicode"),
    ],
)
def test_a_label_breaking_dorises_rule_is_refused_and_loads_nothing(
    doris: DorisClient, names_db: str, label: str
) -> None:
    headers: Any = {"column_separator": ",", "label": label.encode()}  # raw UTF-8 bytes, as curl sends them
    rule = "Label format error. regex: ^[-_A-Za-z0-9:]{1,128}$, label: "
    assert_doris_result(doris.stream_load(names_db, "base", "9,9\n", headers), status="Fail", message_contains=rule)
    assert doris.rows(names_db, "SELECT k FROM base WHERE k = 9") == []


def test_a_column_named_with_dorises_punctuation_is_only_a_name(
    doris: DorisClient, names_db: str, server_settings: Any
) -> None:
    before = _dirs(server_settings.resolved_data_dir)
    doris.sql(names_db, "CREATE TABLE punct (k INT, `a/../b` INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    doris.sql(names_db, "ALTER TABLE punct ADD COLUMN `x.y` INT")
    assert_doris_result(doris.stream_load(names_db, "punct", "1,2,3\n", {"column_separator": ","}), loaded=1)
    assert doris.rows(names_db, "SELECT `a/../b`, `x.y` FROM punct") == [[2, 3]]
    made = _dirs(server_settings.resolved_data_dir) - before
    assert made and not {p.name for p in made} & {"a", "b", "x.y", "punct", names_db}


# -- locations are chosen by the server --------------------------------------------------------------------
def test_a_new_table_lives_in_a_directory_the_server_named(doris: DorisClient, db: str, server_settings: Any) -> None:
    warehouse = server_settings.resolved_warehouse
    before = set(warehouse.iterdir())
    doris.sql(db, "CREATE TABLE located " + KV_DDL)
    assert_doris_result(doris.stream_load(db, "located", "1,1\n", {"column_separator": ","}), loaded=1)
    (new,) = set(warehouse.iterdir()) - before
    assert re.fullmatch("[0-9a-f]{32}", new.name), new
    assert not any(part in (db, "located") for path in new.rglob("*") for part in path.relative_to(warehouse).parts)
    doris.sql(db, "DROP TABLE located")
    assert not new.exists()


# -- tables made the old way keep working; no drop leaves the server's roots --------------------------------
@pytest.fixture
def marker(server_settings: Any) -> Iterator[Path]:
    """A directory outside the data dir, holding a file that must outlive every drop."""
    path = server_settings.resolved_data_dir.parent / f"marker_{uuid.uuid4().hex[:8]}"
    path.mkdir()
    (path / "keep.txt").write_text("precious")
    yield path
    assert (path / "keep.txt").read_text() == "precious"


def test_an_old_layout_table_loads_answers_and_drops_its_own_files(
    doris: DorisClient, db: str, server_settings: Any
) -> None:
    location = create_old_layout_table(_old_catalog(server_settings.resolved_data_dir), db, "legacy")
    assert location == server_settings.resolved_warehouse / db / "legacy"
    doris.sql(db, "ALTER TABLE legacy ADD COLUMN w INT")
    assert_doris_result(doris.stream_load(db, "legacy", "1,10,7\n2,20,\\N\n", {"column_separator": ","}), loaded=2)
    assert doris.rows(db, "SELECT k, v, w FROM legacy ORDER BY k") == [[1, 10, 7], [2, 20, None]]
    doris.sql(db, "DROP TABLE legacy")
    assert not location.exists()
    assert doris.rows(db, "SHOW TABLES") == []


@pytest.mark.parametrize("drop", ["DROP TABLE `{name}`", "DROP DATABASE {db}"])
def test_dropping_an_old_table_named_to_escape_leaves_the_files_outside_the_warehouse(
    doris: DorisClient, db: str, server_settings: Any, marker: Path, drop: str
) -> None:
    # `<warehouse>/<db>/../../../<marker>`: the old code would have removed the marker directory
    name = f"../../../{marker.name}"
    location = create_old_layout_table(_old_catalog(server_settings.resolved_data_dir), db, name)
    assert location.resolve() == marker
    doris.sql(db, drop.format(name=name, db=db))
    assert (marker / "keep.txt").read_text() == "precious"
    assert (marker / "metadata").is_dir()  # its files stay where they are (logged)
    if drop.startswith("DROP TABLE"):
        assert doris.rows(db, "SHOW TABLES") == []
    else:
        assert db not in [r[0] for r in doris.rows("information_schema", "SHOW DATABASES")]


@pytest.mark.parametrize("drop", ["DROP TABLE `.`", "DROP DATABASE {db}"])
def test_dropping_an_old_table_named_dot_keeps_the_other_tables_of_its_database(
    doris: DorisClient, db: str, server_settings: Any, drop: str
) -> None:
    catalog = _old_catalog(server_settings.resolved_data_dir)
    neighbour = create_old_layout_table(catalog, db, "neighbour")
    assert create_old_layout_table(catalog, db, ".") == neighbour.parent  # `.` sits on the whole database
    assert_doris_result(doris.stream_load(db, "neighbour", "1,1\n", {"column_separator": ","}), loaded=1)
    doris.sql(db, drop.format(db=db))
    assert (neighbour.parent / "metadata").is_dir()  # the `.` table's files stay where they are (logged)
    if drop.startswith("DROP TABLE"):
        assert doris.rows(db, "SHOW TABLES") == [["neighbour"]]
        assert_doris_result(doris.stream_load(db, "neighbour", "2,2\n", {"column_separator": ","}), loaded=1)
        assert doris.rows(db, "SELECT k FROM neighbour ORDER BY k") == [[1], [2]]
    else:  # the neighbour's own directory went with it
        assert not neighbour.exists()


# -- one broken table never stops the server -----------------------------------------------------------------
BROKEN = ["no_metadata", "bad_metadata", "bad_definition", "no_definition"]


@pytest.fixture(scope="module")
def broken_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server started on a data dir whose catalog holds a good table and four broken ones."""
    tmp = tmp_path_factory.mktemp("broken")
    data_dir = tmp / "data"
    (data_dir / "warehouse").mkdir(parents=True)
    catalog = _old_catalog(data_dir)
    catalog.create_namespace("d")
    create_old_layout_table(catalog, "d", "good")
    for gone in (create_old_layout_table(catalog, "d", "no_metadata") / "metadata").iterdir():
        gone.unlink()
    for damaged in (create_old_layout_table(catalog, "d", "bad_metadata") / "metadata").iterdir():
        damaged.write_text("{ this is not a table")
    create_old_layout_table(catalog, "d", "bad_definition", {DEFINITION_PROPERTY: '{"db": "d"}'})
    create_old_layout_table(catalog, "d", "no_definition", {})
    # loads a crash left unfinished on each broken table: the start-up passes resolve them
    txns = TransactionStore(data_dir / "transactions.db")
    for table in BROKEN:
        txns.begin("d", table, f"crashed_{table}")
    txns.set_state(txns.begin("d", "bad_metadata", "precommitted"), COMMITTED)
    txns.close()
    server = ServerProcess(data_dir, tmp / "server.log", SL_MAINTENANCE_INTERVAL_SECONDS="1")
    server.start()
    yield server
    server.kill()


def test_a_server_with_broken_tables_starts_and_answers_metrics_and_the_good_table(
    broken_server: ServerProcess,
) -> None:
    metrics = httpx.get(f"{broken_server.base_url}/metrics", auth=AUTH, timeout=30)  # per-table: with a login
    assert metrics.status_code == 200
    assert 'doris_table_rowsets{db="d",table="good"} 0.0' in metrics.text
    assert [r[0] for r in broken_server.sql("d", "DESC good")["data"]] == ["k", "v"]
    assert [r[0] for r in broken_server.sql("d", "SHOW TABLES")["data"]] == sorted(["good", *BROKEN])
    broken_server.wait_for_log(["maintenance: MaintenanceReport"])  # a housekeeping pass walked them all
    metrics = httpx.get(f"{broken_server.base_url}/metrics", auth=AUTH, timeout=30)
    assert 'doris_table_rowsets{db="d",table="good"} 0.0' in metrics.text


@pytest.mark.parametrize("table", BROKEN)
def test_a_broken_table_is_an_error_for_itself_only_and_can_be_dropped(
    broken_server: ServerProcess, table: str
) -> None:
    message = f"Table '{table}' in database 'd' cannot be read: its metadata is missing or damaged"
    reply = httpx.put(
        f"{broken_server.base_url}/api/d/{table}/_stream_load",
        content=b"1,1\n",
        headers={"column_separator": ","},
        auth=AUTH,
        timeout=120,
    )
    assert_doris_result(reply, status="Fail", message_contains=message)
    query = httpx.post(
        f"{broken_server.base_url}/api/query/default_cluster/d", json={"stmt": f"SELECT * FROM {table}"}, auth=AUTH
    ).json()
    assert query["code"] == 1 and message in query["data"], query
    broken_server.sql("d", f"DROP TABLE {table}")
    assert table not in [r[0] for r in broken_server.sql("d", "SHOW TABLES")["data"]]
    assert httpx.get(f"{broken_server.base_url}/metrics", timeout=30).status_code == 200
