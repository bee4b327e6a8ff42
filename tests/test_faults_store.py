"""Injected faults under the load's later steps (issue 23), against a server in a process of its own: the disk
fills up while Spark writes the rowset (the warehouse on a small tmpfs) or while the catalog commits (the
catalog's SQLite file on a small ext4 image), another process holds the catalog or the transaction store locked
(`BEGIN EXCLUSIVE`) for a while, and the catalog's files cannot be written for a while (`chattr +i` on ext4:
writes through the server's open files fail, as root too). Each load waits and succeeds or fails with a clear
error, leaves no rowset file and no label behind, every load acknowledged before still answers, and the server
loads again, without a restart, once space is back, the lock is gone or the files are writable again."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server_process import ServerProcess

DB = "store_faults"
DDL = "CREATE TABLE {name} (k INT NOT NULL, v VARCHAR(64)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2"
# a server of its own, four faults of several seconds each: `make test-full`
pytestmark = pytest.mark.full


def mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")


def mount_ext4(path: Path, image: Path, size: str) -> None:
    """A file system of `size` in `image`, loop-mounted on `path` (ext4: `chattr +i` holds for open files too)."""
    path.mkdir()
    subprocess.run(["truncate", "-s", size, str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-m", "0", str(image)], check=True)  # -m 0: no blocks kept for root
    done = subprocess.run(["mount", "-o", "loop", str(image), str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot loop-mount an ext4 image: {done.stderr.decode().strip()}")


@pytest.fixture(scope="module")
def disks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The warehouse on a 24 MB tmpfs, the catalog's SQLite file on a 4 MB ext4 image (we run as root)."""
    tmp = tmp_path_factory.mktemp("store-faults")
    out = {"tmp": tmp, "warehouse": tmp / "warehouse", "catalog": tmp / "catalog"}
    mount_tmpfs(out["warehouse"], "24m")
    try:
        mount_ext4(out["catalog"], tmp / "catalog.img", "4m")
        try:
            yield out
        finally:
            subprocess.run(["umount", "-l", str(out["catalog"])], check=False)
    finally:
        subprocess.run(["umount", "-l", str(out["warehouse"])], check=False)


@pytest.fixture(scope="module")
def server(disks: dict[str, Path]) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        disks["tmp"] / "data",
        disks["tmp"] / "server.log",
        SL_WAREHOUSE=str(disks["warehouse"]),
        SL_CATALOG_URI=f"sqlite:///{disks['catalog'] / 'catalog.db'}",
    )
    proc.start()
    proc.sql(DB, f"CREATE DATABASE {DB}")
    yield proc
    proc.kill()


def fill(disk: Path, leave: int) -> Path:
    """A file taking all the disk's free space but `leave` bytes."""
    filler = disk / "filler"
    with filler.open("wb") as out:
        free = shutil.disk_usage(disk).free - leave
        while free > 0:
            try:
                out.write(b"\0" * min(free, 1 << 20))
                out.flush()
            except OSError:
                break
            free = shutil.disk_usage(disk).free - leave
    return filler


def table_files(server: ServerProcess, disks: dict[str, Path], table: str) -> set[str]:
    """The table's rowset files (data and delete files), relative to the warehouse."""
    return {
        str(p.relative_to(disks["warehouse"]))
        for p in disks["warehouse"].rglob("*.parquet")
        if f"/{table}" in str(p) and "/data/" in str(p)
    }


def incompressible(rows: int, start: int = 0) -> bytes:
    """CSV rows whose values Parquet cannot shrink (about 70 bytes each)."""
    return b"".join(b"%d,%s\n" % (start + i, secrets.token_hex(30).encode()) for i in range(rows))


def assert_left_nothing(
    server: ServerProcess, label: str, table: str, before: set[str], disks: dict[str, Path]
) -> None:
    assert server.label_state(DB, label) in ("UNKNOWN", "ABORTED")
    assert table_files(server, disks, table) == before, "the failed load left rowset files"
    staging = server.data_dir / "staging"
    assert not staging.is_dir() or sorted(staging.iterdir()) == []


def test_a_full_disk_while_spark_writes_the_rowset_fails_the_load_and_leaves_nothing(
    server: ServerProcess, disks: dict[str, Path]
) -> None:
    server.sql(DB, DDL.format(name="rowset"))
    assert server.load(DB, "rowset", b"1,before\n", label="rowset_before")["Status"] == "Success"
    before = table_files(server, disks, "rowset")
    body = incompressible(60000, start=10)  # about 4 MB of Parquet: past the 256 KB left
    filler = fill(disks["warehouse"], leave=256 * 1024)
    try:
        reply = server.load(DB, "rowset", body, label="rowset_full")
        assert reply["Status"] == "Fail", reply
        assert reply["Message"].startswith("[INTERNAL_ERROR]"), reply
        assert "No space left on device" in reply["Message"] or "disk is full" in reply["Message"], reply
        assert_left_nothing(server, "rowset_full", "rowset", before, disks)
        assert server.sql(DB, "SELECT k, v FROM rowset ORDER BY k")["data"] == [[1, "before"]]
    finally:
        filler.unlink()
    again = server.load(DB, "rowset", body, label="rowset_full")
    assert again["Status"] == "Success" and again["NumberLoadedRows"] == 60000, again
    assert server.sql(DB, "SELECT count(*) FROM rowset")["data"] == [[60001]]
    assert server.label_state(DB, "rowset_before") == "VISIBLE"


def test_a_full_disk_while_the_catalog_commits_fails_the_load_and_leaves_nothing(
    server: ServerProcess, disks: dict[str, Path]
) -> None:
    server.sql(DB, DDL.format(name="commit"))
    assert server.load(DB, "commit", b"1,before\n", label="commit_before")["Status"] == "Success"
    before = table_files(server, disks, "commit")
    filler = fill(disks["catalog"], leave=0)
    try:
        reply = server.load(DB, "commit", b"2,full\n", label="commit_full")
        assert reply["Status"] == "Fail", reply
        assert reply["Message"] == "[INTERNAL_ERROR]catalog store write failed: database or disk is full", reply
        assert_left_nothing(server, "commit_full", "commit", before, disks)
        assert server.sql(DB, "SELECT k, v FROM commit ORDER BY k")["data"] == [[1, "before"]]
    finally:
        filler.unlink()
    again = server.load(DB, "commit", b"2,again\n", label="commit_full")
    assert again["Status"] == "Success", again
    assert server.sql(DB, "SELECT k, v FROM commit ORDER BY k")["data"] == [[1, "before"], [2, "again"]]
    assert server.label_state(DB, "commit_before") == "VISIBLE"


def hold_locked(path: Path, seconds: float) -> subprocess.Popen[bytes]:
    """Another process holding `BEGIN EXCLUSIVE` on a SQLite file for `seconds` (returns once it holds it)."""
    code = (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
        "c.execute('ROLLBACK')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(path), str(seconds)], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"locked\n"
    return proc


@pytest.mark.parametrize("store", ["catalog", "transactions"])
@pytest.mark.parametrize("seconds", [2, 12])
def test_a_locked_store_makes_loads_wait_or_fail_cleanly_and_they_succeed_once_it_is_free(
    server: ServerProcess, disks: dict[str, Path], store: str, seconds: float
) -> None:
    """2 s: within SQLite's busy wait, the load waits and succeeds; 12 s: past it, the load may fail, clearly."""
    table = f"locked_{store}_{seconds}"
    server.sql(DB, DDL.format(name=table))
    assert server.load(DB, table, b"1,before\n", label=f"{table}_before")["Status"] == "Success"
    before = table_files(server, disks, table)
    path = disks["catalog"] / "catalog.db" if store == "catalog" else server.data_dir / "transactions.db"
    holder = hold_locked(path, seconds)
    try:
        started = time.monotonic()
        reply = server.load(DB, table, b"2,locked\n", label=f"{table}_locked")
        waited = time.monotonic() - started
        if seconds < 5:
            assert reply["Status"] == "Success", reply
        if reply["Status"] != "Success":
            assert reply["Status"] == "Fail", reply
            assert reply["Message"].startswith("[INTERNAL_ERROR]catalog store busy: database is locked"), reply
        holder.wait(timeout=60)
    finally:
        holder.kill()
    print(f"{store} locked {seconds} s: the load answered {reply['Status']} after {waited:.1f} s")
    rows = server.sql(DB, f"SELECT k, v FROM {table} ORDER BY k")["data"]
    if reply["Status"] == "Success":
        assert rows == [[1, "before"], [2, "locked"]]
        assert server.label_state(DB, f"{table}_locked") == "VISIBLE"
    else:
        assert rows == [[1, "before"]]
        assert_left_nothing(server, f"{table}_locked", table, before, disks)
    again = server.load(DB, table, b"3,after\n", label=f"{table}_after")
    assert again["Status"] == "Success", again
    assert server.label_state(DB, f"{table}_before") == "VISIBLE"
    assert os.path.exists(path)


def test_a_catalog_that_cannot_be_written_fails_loads_cleanly_and_they_succeed_once_it_can(
    server: ServerProcess, disks: dict[str, Path]
) -> None:
    """The catalog's database file and its write-ahead log immutable (`chattr +i`; not the shared-memory index,
    which SQLite maps): a load's commit fails with the store's error in Doris's words, reads still answer, and
    once the files are writable again loads succeed without a restart."""
    server.sql(DB, DDL.format(name="readonly"))
    assert server.load(DB, "readonly", b"1,before\n", label="readonly_before")["Status"] == "Success"
    before = table_files(server, disks, "readonly")
    files = [disks["catalog"] / "catalog.db", disks["catalog"] / "catalog.db-wal"]
    assert all(f.exists() for f in files), sorted(disks["catalog"].iterdir())
    subprocess.run(["chattr", "+i", *map(str, files)], check=True)
    try:
        reply = server.load(DB, "readonly", b"2,during\n", label="readonly_during")
        assert reply["Status"] == "Fail", reply
        assert reply["Message"].startswith("[INTERNAL_ERROR]catalog store write failed: "), reply
        assert "sqlite3" not in reply["Message"] and "sqlalche" not in reply["Message"], reply
        assert_left_nothing(server, "readonly_during", "readonly", before, disks)
        assert server.sql(DB, "SELECT k, v FROM readonly ORDER BY k")["data"] == [[1, "before"]]
        assert server.label_state(DB, "readonly_before") == "VISIBLE"
    finally:
        subprocess.run(["chattr", "-i", *map(str, files)], check=True)
    again = server.load(DB, "readonly", b"2,again\n", label="readonly_during")
    assert again["Status"] == "Success", again
    assert server.sql(DB, "SELECT k, v FROM readonly ORDER BY k")["data"] == [[1, "before"], [2, "again"]]
