"""A data dir written by an earlier release opens under the current server: every table answers what that release
answered, loads after the upgrade follow Doris's rules, the transaction it left PRECOMMITTED commits, and a restart
keeps every answer. The releases: 3806a04 (storage format 1, before merge-on-write storage was rebuilt) and 9e19b2b
(format 2: position deletes, before the bucket was in the partition spec); both wrote the same tables and answered
the same, so the recorded answers of the first serve both.

The archive and its recorded answers come from `tools/make_release_datadir.py`. Iceberg metadata and the SQLite
catalog hold absolute paths, so the archive is unpacked at the path it was written at (recorded in the JSON). One
server serves the whole module: the tests run in file order, the recorded answers first, then the writes, the
foreign reader (pyiceberg) and the restart.
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

RELEASES = ("3806a04", "9e19b2b")
RECORDED: dict[str, Any] = json.loads((DATA / "releases" / f"{RELEASES[0]}.json").read_text())
DB: str = RECORDED["db"]
TABLES: dict[str, Any] = RECORDED["tables"]
MERGE_ON_WRITE = sorted(name for name, table in TABLES.items() if table["model"] == "merge_on_write")
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


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest) -> dict[str, Any]:
    """What the release recorded (its data dir, its PRECOMMITTED load); its answers equal `RECORDED`'s."""
    recorded: dict[str, Any] = json.loads((DATA / "releases" / f"{request.param}.json").read_text())
    assert recorded["tables"] == TABLES, "the releases wrote the same tables and answered the same"
    return recorded


@pytest.fixture(scope="module")
def server(release: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir = Path(release["data_dir"])
    unpack_release(DATA / "releases" / f"{release['release']}.tar.gz", data_dir)
    SEEN.clear()
    log = tmp_path_factory.mktemp("upgrade") / "server.log"
    # background compaction off: it would change the hidden columns the release recorded (markers, version ranges)
    proc = ServerProcess(data_dir, log, SL_COMPACTION_INTERVAL_SECONDS="0", SL_PRECOMMIT_TIMEOUT_SECONDS=NEVER).start()
    yield proc
    proc.kill()


# the last answer of each (table, hidden) query since the table was last written: the restart test compares the
# answers after the restart with these, and asks only for those no test has seen (each query costs a Spark job)
SEEN: dict[tuple[str, bool], dict[str, Any]] = {}


def select(server: ServerProcess, table: str, *, hidden: bool = False) -> dict[str, Any]:
    """`SELECT * FROM t ORDER BY <keys>` as the recording holds it: column names and rows."""
    prefix = "SET show_hidden_columns = true; " if hidden else ""
    data = server.sql(DB, f"{prefix}SELECT * FROM {table} ORDER BY {TABLES[table]['order_by']}")
    SEEN[table, hidden] = {"columns": [c["name"] for c in data["meta"]], "rows": data["data"]}
    return SEEN[table, hidden]


def forget(table: str) -> None:
    """The table is written: the answers seen of it are outdated."""
    SEEN.pop((table, False), None)
    SEEN.pop((table, True), None)


def load(server: ServerProcess, table: str, body: str, **headers: str) -> dict[str, Any]:
    """A stream load (CSV unless the headers say otherwise)."""
    forget(table)
    return server.load(DB, table, body.encode(), **headers)


def answers(server: ServerProcess, *, seen: bool = False) -> dict[str, dict[str, Any]]:
    """Every table's answer, and each unique table's answer with its hidden columns (those in SEEN when `seen`)."""
    out: dict[str, dict[str, Any]] = {}
    for name, table in TABLES.items():
        kinds = {"select": False, "select_hidden": True} if "select_hidden" in table else {"select": False}
        out[name] = {
            kind: SEEN[name, hidden] if seen and (name, hidden) in SEEN else select(server, name, hidden=hidden)
            for kind, hidden in kinds.items()
        }
    return out


def upserted(rows: list[list[Any]], new: list[list[Any]]) -> list[list[Any]]:
    """The rows of a unique table keyed by its first column, after `new` rows replaced or joined them."""
    by_key = {row[0]: row for row in rows}
    by_key.update({row[0]: row for row in new})
    return [by_key[k] for k in sorted(by_key)]


def test_every_table_answers_what_the_release_recorded(server: ServerProcess) -> None:
    recorded = {name: {k: v for k, v in t.items() if k.startswith("select")} for name, t in TABLES.items()}
    assert answers(server) == recorded


# key 3 of the sequenced tables was deleted with sequence 10: a later load with sequence 7 must leave it deleted
LATE_3 = "3,late3,33,7\n"
DELETED_3 = [3, "x3", 0, 10, 1, 4, 10]  # k, v, n, s, delete sign, version, sequence: the release's delete row


@pytest.mark.parametrize(
    "table, body, headers, rows_after",
    [
        pytest.param(
            "mow_seq",
            "1,e1,13,3\n4,e4,43,1\n2,e2,23,4\n11,e11,110,1\n" + LATE_3,
            {},
            [[1, "e1", 13, 3], [11, "e11", 110, 1]],
            id="higher-sequence-wins-lower-loses-deleted-keys-stay-deleted-new-key-joins",
        ),
        pytest.param(
            "mow_hidden_seq",
            "1,e1,13,3\n4,e4,43,1\n2,e2,23,6\n" + LATE_3,
            {"columns": "k,v,n,s", "function_column.sequence_col": "s"},
            [[1, "e1", 13, 3], [2, "e2", 23, 6]],
            id="hidden-sequence-higher-wins-and-revives-a-key-deleted-with-sequence-5-not-one-deleted-with-10",
        ),
        pytest.param(
            "mow_compacted",
            "10,e10,101,2\n9,e9,91,0\n" + LATE_3,
            {},
            [[10, "e10", 101, 2]],
            id="rows-of-the-compacted-and-of-a-later-rowset-superseded-by-sequence",
        ),
        pytest.param(
            "mow_plain",
            "4,e4,44\n3,e3,33\n",
            {},
            [[3, "e3", 33], [4, "e4", 44]],
            id="without-sequence-the-later-load-wins-and-revives-a-deleted-key",
        ),
    ],
)
def test_load_of_overlapping_keys_answers_as_doris(
    server: ServerProcess, table: str, body: str, headers: dict[str, str], rows_after: list[list[Any]]
) -> None:
    assert_doris_result(load(server, table, body, **headers))
    assert select(server, table)["rows"] == upserted(TABLES[table]["select"]["rows"], rows_after)
    if LATE_3 in body:
        marker = [row for row in select(server, table, hidden=True)["rows"] if row[0] == 3]
        assert marker == [DELETED_3], "key 3 keeps the delete row of sequence 10 a load of sequence 7 lost to"


def test_precommitted_transaction_commits_after_the_upgrade(server: ServerProcess, release: dict[str, Any]) -> None:
    pending = release["precommitted"]
    assert server.label_state(DB, pending["label"]) == "PRECOMMITTED"
    forget(pending["table"])
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


# EXPECTED TO FAIL until the lead's conversion of merge-on-write tables lands (issue 18): the release's storage
# keeps superseded rows, duplicate keys and delete-marked rows in the Iceberg table, so a foreign reader sees
# them. Once the tables are converted (position deletes), pyiceberg's scan equals `SELECT * FROM t`, also after
# the loads and the 2PC commit above. Not skipped nor xfailed on purpose: it turns green with the conversion,
# whatever the table-format property is called.
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
        table = catalog.load_table((DB, name))
        # storage format 3: the bucket is in the partition spec (the release's files keep their older spec)
        assert [f.name for f in table.spec().fields] == ["__DORIS_BUCKET__"], name
        scanned = table.scan(selected_fields=tuple(answer["columns"])).to_arrow()
        iceberg_rows = sorted(([row[c] for c in answer["columns"]] for row in scanned.to_pylist()), key=repr)
        if iceberg_rows != sorted(answer["rows"], key=repr):
            differences[name] = {"select": answer["rows"], "pyiceberg": iceberg_rows}
    assert differences == {}, "pyiceberg reads rows SELECT does not answer (duplicate keys or deleted rows)"


# last: it checks that every answer the tests above left survives a restart
def test_restart_keeps_every_answer(server: ServerProcess) -> None:
    before = answers(server, seen=True)
    server.terminate()
    server.start()
    assert answers(server) == before
