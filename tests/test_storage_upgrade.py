"""A data dir written by the previous release (3806a04, before merge-on-write storage was rebuilt) opens under the
current server: every table answers what that release answered, loads after the upgrade follow Doris's rules, the
transaction it left PRECOMMITTED commits, and a restart keeps every answer.

The archive and its recorded answers come from `tools/make_release_datadir.py`. Iceberg metadata and the SQLite
catalog hold absolute paths, so the archive is unpacked at the path it was written at (recorded in the JSON). One
server serves the whole module: the tests run in file order, the recorded answers first and the restart last.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import DATA
from tests.helpers import assert_doris_result
from tests.server_process import ServerProcess

RELEASE = "3806a04"
RECORDED: dict[str, Any] = json.loads((DATA / "releases" / f"{RELEASE}.json").read_text())
DB: str = RECORDED["db"]
TABLES: dict[str, Any] = RECORDED["tables"]
MERGE_ON_WRITE = sorted(name for name, table in TABLES.items() if table["model"] == "merge_on_write")
# a table whose key 3 was deleted with sequence 10 (and a hidden sequence given by this header)
SEQUENCED = {"mow_seq": {}, "mow_compacted": {}, "mow_hidden_seq": {"function_column.sequence_col": "s"}}
# the server must keep the PRECOMMITTED transaction past Doris's one-hour precommit timeout: it was written long ago
NEVER = str(100 * 365 * 24 * 3600)


def unpack_release(archive: Path, data_dir: Path) -> None:
    """The archive's `data/` at `data_dir`, replacing whatever is there.

    Raises:
        pytest.fail.Exception: the path cannot be written (it must be this one: the metadata names it).
    """
    try:
        if data_dir.parent.exists():
            shutil.rmtree(data_dir.parent)
        data_dir.parent.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(data_dir.parent, filter="data")
    except OSError as exc:
        pytest.fail(f"the release's data dir must be unpacked at {data_dir} (its metadata names that path): {exc}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir = Path(RECORDED["data_dir"])
    unpack_release(DATA / "releases" / f"{RELEASE}.tar.gz", data_dir)
    log = tmp_path_factory.mktemp("upgrade") / "server.log"
    # background compaction off: it would change the hidden columns the release recorded (markers, version ranges)
    proc = ServerProcess(data_dir, log, SL_COMPACTION_INTERVAL_SECONDS="0", SL_PRECOMMIT_TIMEOUT_SECONDS=NEVER).start()
    yield proc
    proc.kill()


def select(server: ServerProcess, table: str, *, hidden: bool = False) -> dict[str, Any]:
    """`SELECT * FROM t ORDER BY <keys>` as the recording holds it: column names and rows."""
    prefix = "SET show_hidden_columns = true; " if hidden else ""
    data = server.sql(DB, f"{prefix}SELECT * FROM {table} ORDER BY {TABLES[table]['order_by']}")
    return {"columns": [c["name"] for c in data["meta"]], "rows": data["data"]}


def answers(server: ServerProcess) -> dict[str, dict[str, Any]]:
    """Every table's answer, and each unique table's answer with its hidden columns."""
    out = {}
    for name, table in TABLES.items():
        out[name] = {"select": select(server, name)}
        if "select_hidden" in table:
            out[name]["select_hidden"] = select(server, name, hidden=True)
    return out


def upserted(rows: list[list[Any]], new: list[list[Any]]) -> list[list[Any]]:
    """The rows of a unique table keyed by its first column, after `new` rows replaced or joined them."""
    by_key = {row[0]: row for row in rows}
    by_key.update({row[0]: row for row in new})
    return [by_key[k] for k in sorted(by_key)]


def test_every_table_answers_what_the_release_recorded(server: ServerProcess) -> None:
    recorded = {name: {k: v for k, v in t.items() if k.startswith("select")} for name, t in TABLES.items()}
    assert answers(server) == recorded


# EXPECTED TO FAIL until the lead's conversion of merge-on-write tables lands (issue 18): the release's storage
# keeps superseded rows, duplicate keys and delete-marked rows in the Iceberg table, so a foreign reader sees
# them. Once the tables are converted (position deletes), pyiceberg's scan equals `SELECT * FROM t`. Not skipped
# nor xfailed on purpose: it turns green with the conversion, whatever the table-format property is called.
def test_pyiceberg_reads_exactly_the_rows_select_answers_on_every_merge_on_write_table(
    server: ServerProcess,
) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "default",  # the catalog name the server gives its SqlCatalog (tables/catalog.py)
        uri=f"sqlite:///{server.data_dir / 'catalog.db'}",
        warehouse=f"file://{server.data_dir / 'warehouse'}",
    )
    differences = {}
    for name in MERGE_ON_WRITE:
        answer = select(server, name)
        scanned = catalog.load_table((DB, name)).scan(selected_fields=tuple(answer["columns"])).to_arrow()
        iceberg_rows = sorted(([row[c] for c in answer["columns"]] for row in scanned.to_pylist()), key=repr)
        if iceberg_rows != sorted(answer["rows"], key=repr):
            differences[name] = {"select": answer["rows"], "pyiceberg": iceberg_rows}
    assert differences == {}, "pyiceberg reads rows SELECT does not answer (duplicate keys or deleted rows)"


@pytest.mark.parametrize("table", sorted(SEQUENCED))
def test_lower_sequence_load_leaves_the_key_deleted_with_sequence_10(server: ServerProcess, table: str) -> None:
    headers = {"columns": "k,v,n,s", **SEQUENCED[table]}
    assert_doris_result(server.load(DB, table, b"3,late3,33,7\n", **headers), loaded=1)
    assert select(server, table) == TABLES[table]["select"]
    marker = [row for row in select(server, table, hidden=True)["rows"] if row[0] == 3]
    assert marker == [[3, "x3", 0, 10, 1, 4, 10]], "the delete of key 3 keeps its sequence 10 and its version"


@pytest.mark.parametrize(
    "table, body, headers, rows_after",
    [
        pytest.param(
            "mow_seq",
            "1,e1,13,3\n4,e4,43,1\n2,e2,23,4\n11,e11,110,1\n",
            {},
            [[1, "e1", 13, 3], [11, "e11", 110, 1]],
            id="higher-sequence-wins-lower-loses-deleted-key-stays-deleted-new-key-joins",
        ),
        pytest.param(
            "mow_hidden_seq",
            "1,e1,13,3\n4,e4,43,1\n2,e2,23,6\n",
            {"columns": "k,v,n,s", "function_column.sequence_col": "s"},
            [[1, "e1", 13, 3], [2, "e2", 23, 6]],
            id="hidden-sequence-higher-wins-and-revives-a-key-deleted-with-a-lower-one",
        ),
        pytest.param(
            "mow_plain",
            "4,e4,44\n3,e3,33\n",
            {},
            [[3, "e3", 33], [4, "e4", 44]],
            id="without-sequence-the-later-load-wins-and-revives-a-deleted-key",
        ),
        pytest.param(
            "mow_compacted",
            "10,e10,101,2\n9,e9,91,0\n",
            {},
            [[10, "e10", 101, 2]],
            id="compacted-and-later-rowsets-both-superseded-by-sequence",
        ),
    ],
)
def test_load_of_overlapping_keys_answers_as_doris(
    server: ServerProcess, table: str, body: str, headers: dict[str, str], rows_after: list[list[Any]]
) -> None:
    before = select(server, table)["rows"]
    assert_doris_result(server.load(DB, table, body.encode(), **headers))
    assert select(server, table)["rows"] == upserted(before, rows_after)


def test_precommitted_transaction_commits_after_the_upgrade(server: ServerProcess) -> None:
    pending = RECORDED["precommitted"]
    assert server.label_state(DB, pending["label"]) == "PRECOMMITTED"
    resp = httpx.put(
        f"{server.base_url}/api/{DB}/_stream_load_2pc",
        headers={"txn_id": str(pending["txn_id"]), "txn_operation": "commit"},
        auth=("root", ""),
        timeout=120,
    )
    assert resp.json()["status"] == "Success", resp.text
    assert server.label_state(DB, pending["label"]) == "VISIBLE"
    committed = [[int(k), v, int(n)] for k, v, n in (line.split(",") for line in pending["body"].splitlines())]
    assert select(server, pending["table"])["rows"] == upserted(TABLES[pending["table"]]["select"]["rows"], committed)


# last: it checks that every answer the tests above left survives a restart
def test_restart_keeps_every_answer(server: ServerProcess) -> None:
    before = answers(server)
    server.terminate()
    server.start()
    assert answers(server) == before
