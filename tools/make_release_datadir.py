"""Write a data directory with an earlier release and pack it as `tests/data/releases/<release>.tar.gz`, with the
answers that release gave in `tests/data/releases/<release>.json`.

    .venv/bin/python tools/make_release_datadir.py [RELEASE]

RELEASE defaults to 3806a04 (storage format 1: before merge-on-write was rebuilt, issue 18); 9e19b2b is storage
format 2 (position deletes, before the bucket was in the partition spec).

The release is checked out into a temporary git worktree and served from there (`python -m app`, run by this
interpreter with the worktree as its working directory), on a data dir at a fixed absolute path: Iceberg metadata
and the SQLite catalog store absolute paths, so `tests/test_storage_upgrade.py` unpacks the archive at the same
path. Background compaction is off, so every rowset stays as loaded except in the table compacted on purpose.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: the test helpers live beside it in the repository

from tests.server_process import ServerProcess  # noqa: E402

RELEASE = sys.argv[1] if len(sys.argv) > 1 else "3806a04"
DB = "up"
DATA_DIR = Path(f"/tmp/sl-release-{RELEASE}/data")
OUT = ROOT / "tests" / "data" / "releases"

JSON_ARRAY = {"format": "json", "strip_outer_array": "true"}
JSON_LINES = {"format": "json", "read_json_by_line": "true"}


@dataclass(frozen=True)
class TableSpec:
    """One table of the data dir: its DDL, the keys its answers are ordered by, and its data model."""

    ddl: str
    order_by: str
    model: str  # merge_on_write | merge_on_read | aggregate | duplicate

    @property
    def unique(self) -> bool:
        return self.model.startswith("merge_on_")


def _unique(name: str, columns: str, properties: str = "") -> str:
    props = f" PROPERTIES ({properties})" if properties else ""
    return f"CREATE TABLE {name} ({columns}) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2{props}"


SEQ_COLUMNS = "k INT, v VARCHAR(16), n INT, s INT"
PLAIN_COLUMNS = "k INT, v VARCHAR(16), n INT"
SEQUENCE_COL = '"function_column.sequence_col" = "s"'
# merge-on-write is the default of unique tables: those DDLs name no property for it
TABLES: dict[str, TableSpec] = {
    "mow_seq": TableSpec(_unique("mow_seq", SEQ_COLUMNS, SEQUENCE_COL), "k", "merge_on_write"),
    "mow_hidden_seq": TableSpec(
        _unique("mow_hidden_seq", SEQ_COLUMNS, '"function_column.sequence_type" = "int"'), "k", "merge_on_write"
    ),
    "mow_plain": TableSpec(_unique("mow_plain", PLAIN_COLUMNS), "k", "merge_on_write"),
    "mow_compacted": TableSpec(_unique("mow_compacted", SEQ_COLUMNS, SEQUENCE_COL), "k", "merge_on_write"),
    "mow_pending": TableSpec(_unique("mow_pending", PLAIN_COLUMNS), "k", "merge_on_write"),
    "mor_seq": TableSpec(
        _unique(
            "mor_seq", "k INT, v VARCHAR(16), s INT", f'"enable_unique_key_merge_on_write" = "false", {SEQUENCE_COL}'
        ),
        "k",
        "merge_on_read",
    ),
    "agg": TableSpec(
        "CREATE TABLE agg (k INT, total BIGINT SUM, top INT MAX, last VARCHAR(16) REPLACE) AGGREGATE KEY(k) "
        "DISTRIBUTED BY HASH(k) BUCKETS 2",
        "k",
        "aggregate",
    ),
    "dup": TableSpec(
        "CREATE TABLE dup (k INT, v VARCHAR(16)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2", "k, v", "duplicate"
    ),
}

# the two-phase load left PRECOMMITTED on a merge-on-write table, committed by the test after the upgrade
PENDING_TABLE = "mow_pending"
PENDING_LABEL = "up_pending_2pc"
PENDING_BODY = "3,p3,300\n4,p4,400\n"


class Release:
    """The release's server over HTTP: every load and statement must succeed, or the data dir is not made."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server

    def sql(self, stmt: str) -> dict[str, Any]:
        return self.server.sql(DB, stmt)

    def load(self, table: str, body: str, **headers: str) -> dict[str, Any]:
        """A stream load (CSV with `,` unless the headers say otherwise)."""
        reply = self.server.load(DB, table, body.encode(), **headers)
        if reply.get("Status") != "Success":
            raise RuntimeError(f"load into {table} failed: {reply}")
        return reply


def load_sequenced(rel: Release, table: str, seq_headers: dict[str, str]) -> None:
    """Loads with keys overlapping across rowsets, every kind of delete, a partial update, and key 3 deleted with
    sequence 10 then loaded with a lower sequence (which loses). `seq_headers` say how the sequence is given."""
    rel.load(table, "1,a1,10,1\n2,a2,20,1\n3,a3,30,1\n4,a4,40,1\n5,a5,50,1\n6,a6,60,1\n", **seq_headers)
    rows = [
        {"k": 4, "v": "b4", "n": 41, "s": 2},
        {"k": 5, "v": "b5", "n": 51, "s": 0},  # a lower sequence than the stored row: loses
        {"k": 6, "v": "b6", "n": 61, "s": 2},
        {"k": 7, "v": "b7", "n": 71, "s": 1},
        {"k": 8, "v": "b8", "n": 81, "s": 2},
    ]
    rel.load(table, json.dumps(rows), **JSON_ARRAY, **seq_headers)
    rel.load(table, "3,x3,0,10\n2,x2,0,5\n", merge_type="DELETE", **seq_headers)
    rel.load(table, "6,gone,0,3\n9,c9,90,1\n1,c1,11,2\n", merge_type="MERGE", delete="v = 'gone'", **seq_headers)
    rel.sql(f"DELETE FROM {table} WHERE k = 8")
    # a partial update of n (a hidden sequence is still read from the load: its column is listed)
    if "function_column.sequence_col" in seq_headers:
        rel.load(table, "1,12,2\n4,42,2\n", **{**seq_headers, "columns": "k,n,s", "partial_columns": "true"})
    else:
        rel.load(table, "1,12\n4,42\n", partial_columns="true", columns="k,n")
    late = '{"k": 3, "v": "late3", "n": 33, "s": 5}\n{"k": 7, "v": "c7", "n": 72, "s": 3}\n'
    rel.load(table, late, **JSON_LINES, **seq_headers)


def load_unsequenced(rel: Release, table: str) -> None:
    """The same kinds of load into a table without sequence: the later load wins."""
    rel.load(table, "1,a1,10\n2,a2,20\n3,a3,30\n4,a4,40\n5,a5,50\n6,a6,60\n")
    rel.load(table, json.dumps([{"k": 4, "v": "b4", "n": 41}, {"k": 7, "v": "b7", "n": 71}]), **JSON_ARRAY)
    rel.load(table, "3,x3,0\n", merge_type="DELETE")
    rel.load(table, "6,gone,0\n8,c8,80\n1,c1,11\n", merge_type="MERGE", delete="v = 'gone'")
    rel.sql(f"DELETE FROM {table} WHERE k = 5")
    rel.load(table, "1,12\n7,72\n", partial_columns="true", columns="k,n")
    rel.load(table, '{"k": 2, "v": "c2", "n": 22}\n', **JSON_LINES)


def populate(rel: Release) -> dict[str, Any]:
    """Create and load every table; returns the precommitted transaction."""
    rel.sql(f"CREATE DATABASE {DB}")
    for spec in TABLES.values():
        rel.sql(spec.ddl)
    load_sequenced(rel, "mow_seq", {})
    load_sequenced(rel, "mow_hidden_seq", {"columns": "k,v,n,s", "function_column.sequence_col": "s"})
    load_unsequenced(rel, "mow_plain")
    load_sequenced(rel, "mow_compacted", {})
    rel.sql("ADMIN COMPACT TABLE mow_compacted WHERE TYPE = 'CUMULATIVE'")
    rel.load("mow_compacted", "2,d2,21,6\n10,d10,100,1\n")  # a rowset after the compacted one
    rel.load("mor_seq", "1,a1,1\n2,a2,1\n3,a3,1\n")
    rel.load("mor_seq", json.dumps([{"k": 2, "v": "b2", "s": 0}, {"k": 3, "v": "b3", "s": 2}]), **JSON_ARRAY)
    rel.load("mor_seq", "1,x1,10\n", merge_type="DELETE")
    rel.load("agg", "1,10,5,a\n2,20,6,b\n")
    rel.load(
        "agg", json.dumps([{"k": 1, "total": 1, "top": 9, "last": "c"}, {"k": 3, "total": 3, "top": 3}]), **JSON_ARRAY
    )
    rel.load("dup", "1,a\n2,b\n")
    rel.load("dup", "1,a\n2,c\n")
    rel.load(PENDING_TABLE, "1,a1,10\n2,a2,20\n3,a3,30\n")
    pending = rel.load(PENDING_TABLE, PENDING_BODY, label=PENDING_LABEL, two_phase_commit="true")
    return {"table": PENDING_TABLE, "label": PENDING_LABEL, "txn_id": pending["TxnId"], "body": PENDING_BODY}


def compaction_ran(rel: Release, table: str) -> bool:
    """Whether a tablet of the table shows a rowset spanning several versions (the compaction's output)."""
    tablet = rel.sql(f"SHOW TABLETS FROM {table}")["data"][0][0]
    shown = httpx.get(
        f"{rel.server.base_url}/api/compaction/show", params={"tablet_id": tablet}, auth=("root", ""), timeout=30
    ).json()
    ranges = [r.split()[0].strip("[]").split("-") for r in shown["rowsets"]]
    return any(start != end for start, end in ranges)


def answer(rel: Release, table: str, keys: str, *, hidden: bool) -> dict[str, Any]:
    """`SELECT * FROM t ORDER BY keys` (under `show_hidden_columns` when asked): column names and rows."""
    prefix = "SET show_hidden_columns = true; " if hidden else ""
    data = rel.sql(f"{prefix}SELECT * FROM {table} ORDER BY {keys}")
    return {"columns": [c["name"] for c in data["meta"]], "rows": data["data"]}


def record(rel: Release) -> dict[str, Any]:
    """The answers of every table, and of the unique ones with their hidden columns."""
    tables: dict[str, Any] = {}
    for name, spec in TABLES.items():
        tables[name] = {
            "model": spec.model,
            "order_by": spec.order_by,
            "select": answer(rel, name, spec.order_by, hidden=False),
        }
        if spec.unique:
            tables[name]["select_hidden"] = answer(rel, name, spec.order_by, hidden=True)
    return tables


@contextmanager
def release_tree() -> Iterator[Path]:
    """The release checked out into a temporary git worktree, removed at the end."""
    parent = Path(tempfile.mkdtemp(prefix=f"sl-release-{RELEASE}-src-"))
    tree = parent / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), RELEASE], check=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
        shutil.rmtree(parent, ignore_errors=True)


def release_command(tree: Path) -> Callable[[int, int, Path], list[str]]:
    """`python -m app` of the release: its worktree is the working directory, so `app` imports from there
    (`env -C`, because ServerProcess starts every server in this repository)."""

    def command(port: int, mysql_port: int, data_dir: Path) -> list[str]:
        app = ["-m", "app", "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data_dir)]
        return ["env", "-C", str(tree), f"PYTHONPATH={tree}", sys.executable, *app]

    return command


def pack(data_dir: Path, archive: Path) -> None:
    """The data dir as a gzipped tar whose members are relative to its parent (`data/...`)."""
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(data_dir, arcname=data_dir.name)


def main() -> int:
    if DATA_DIR.parent.exists():
        shutil.rmtree(DATA_DIR.parent)
    DATA_DIR.mkdir(parents=True)
    OUT.mkdir(parents=True, exist_ok=True)
    with release_tree() as tree:
        server = ServerProcess(DATA_DIR, DATA_DIR.parent / "server.log", release_command(tree))
        server.start(SL_COMPACTION_INTERVAL_SECONDS="0")
        try:
            rel = Release(server)
            pending = populate(rel)
            if not compaction_ran(rel, "mow_compacted"):
                raise RuntimeError("ADMIN COMPACT TABLE left mow_compacted without a compaction rowset")
            tables = record(rel)
        finally:
            code = server.terminate()
    if code not in (0, -signal.SIGTERM):  # uvicorn re-raises the SIGTERM it handled once it has shut down
        raise RuntimeError(f"the release's server exited with {code}")
    pack(DATA_DIR, OUT / f"{RELEASE}.tar.gz")
    expected = {"release": RELEASE, "data_dir": str(DATA_DIR), "db": DB, "precommitted": pending, "tables": tables}
    (OUT / f"{RELEASE}.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"wrote {OUT / RELEASE}.tar.gz ({(OUT / f'{RELEASE}.tar.gz').stat().st_size} bytes) and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
