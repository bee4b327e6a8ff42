"""A 200 MB body streams through the server without growing it: curl `-T file` and chunked from stdin.

The server runs as shipped (its default Spark settings) in a process of its own; the resident memory of
its Python process and its JVM is sampled while each body streams in, after one small warm-up load.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pytest

from tests.server_process import ServerProcess

DB = "membound"
BODY_BYTES = 200_000_000
MAX_GROWTH_MB = 300
DDL = (
    "CREATE TABLE {name} (k BIGINT NOT NULL, seq INT, name VARCHAR(32), amount DECIMAL(12,2)) "
    'UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 8 PROPERTIES ("function_column.sequence_col" = "seq")'
)


def write_body(path: Path, min_bytes: int, seed: int) -> tuple[int, int]:
    """Write CSV rows `k,seq,name,amount` until the file holds `min_bytes`; a fifth of the rows repeat a key.
    Returns (rows, distinct keys)."""
    rng = np.random.default_rng(seed)
    rows = distinct = 0
    with pa.OSFile(str(path), "wb") as sink:
        while sink.tell() < min_bytes:
            n = 500_000
            fresh = np.arange(distinct, distinct + n, dtype=np.int64) * 7919 + 1_000_000_007
            keys = np.where(rng.random(n) < 0.2, fresh[rng.integers(0, n, n)], fresh)
            cents = rng.integers(0, 10_000_000, n)
            amount = pc.binary_join_element_wise(
                pc.cast(pa.array(cents // 100), pa.string()),
                pc.utf8_lpad(pc.cast(pa.array(cents % 100), pa.string()), width=2, padding="0"),
                ".",
            )
            table = pa.table(
                {
                    "k": keys,
                    "seq": np.arange(rows, rows + n, dtype=np.int32),
                    "name": pa.array(np.array(["alice", "bob", "carol", "dave"])[rng.integers(0, 4, n)]),
                    "amount": amount,
                }
            )
            pacsv.write_csv(table, sink, write_options=pacsv.WriteOptions(include_header=False, quoting_style="none"))
            rows += n
            distinct += n
    keys_seen = pacsv.read_csv(
        str(path), read_options=pacsv.ReadOptions(column_names=["k", "seq", "name", "amount"])
    ).column("k")
    return rows, len(pc.unique(keys_seen))


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


@pytest.fixture(scope="module")
def body(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    path = tmp_path_factory.mktemp("membody") / "body.csv"
    rows, distinct = write_body(path, BODY_BYTES, seed=7)
    return path, rows, distinct


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("memserver")
    proc = ServerProcess(root / "data", root / "server.log", SL_SPARK_CONF="{}").start()
    try:
        proc.sql(DB, f"CREATE DATABASE {DB}")
        warm = root / "warm.csv"
        write_body(warm, 2_000_000, seed=1)  # large enough for the same path as the big bodies
        proc.sql(DB, DDL.format(name="warm"))
        assert proc.load(DB, "warm", warm.read_bytes())["Status"] == "Success"
        yield proc
    finally:
        proc.kill()


def curl_load(  # type: ignore[type-arg]
    server: ServerProcess, table: str, path: Path, *, chunked: bool, headers: tuple[str, ...] = ()
) -> tuple[dict, float, float]:
    """Load `path` with curl while sampling the server's memory; returns (reply, RSS before, peak RSS)."""
    assert server.proc is not None
    pids = [server.proc.pid, *server.children()]
    before = rss_mb(pids)
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mb(pids))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    url = f"{server.base_url}/api/{DB}/{table}/_stream_load"
    command = ["curl", "-sS", "--fail-with-body", "-u", "root:", "-H", "column_separator: ,"]
    for header in headers:
        command += ["-H", header]
    try:
        if chunked:
            with open(path, "rb") as stdin:
                out = subprocess.run([*command, "-T", "-", url], stdin=stdin, capture_output=True, check=True)
        else:
            out = subprocess.run([*command, "-T", str(path), url], capture_output=True, check=True)
    finally:
        done.set()
        sampler.join()
    return json.loads(out.stdout), before, peak


# a chunked body takes the same staging path: `make test-full` runs it
@pytest.mark.parametrize(
    "chunked", [False, pytest.param(True, marks=pytest.mark.full)], ids=["content-length", "chunked-from-stdin"]
)
def test_large_body_streams_without_growing_the_server(
    server: ServerProcess, body: tuple[Path, int, int], chunked: bool
) -> None:
    path, rows, distinct = body
    assert path.stat().st_size >= BODY_BYTES
    table = "chunked" if chunked else "sized"
    server.sql(DB, DDL.format(name=table))
    reply, before, peak = curl_load(server, table, path, chunked=chunked)
    assert reply["Status"] == "Success", reply
    assert reply["NumberLoadedRows"] == rows
    assert reply["LoadBytes"] == path.stat().st_size
    assert peak - before < MAX_GROWTH_MB, f"server grew from {before:.0f} MB to {peak:.0f} MB"
    assert server.sql(DB, f"SELECT count(*) FROM {table}")["data"] == [[distinct]]


def test_a_large_async_group_commit_body_is_acknowledged_without_growing_the_server(
    server: ServerProcess, body: tuple[Path, int, int]
) -> None:
    """An async group-commit load is answered once its body is durable in the WAL, with the rows it holds: they
    are counted from the file a block at a time, not from the body read whole (that grew the server by 1 GB for
    this 200 MB body: read, decoded and split into lines)."""
    path, rows, distinct = body
    server.sql(DB, DDL.format(name="grouped"))
    reply, before, peak = curl_load(server, "grouped", path, chunked=False, headers=("group_commit: async_mode",))
    assert reply["Status"] == "Success" and reply["GroupCommitMode"] == "async_mode", reply
    assert reply["NumberTotalRows"] == rows and reply["NumberLoadedRows"] == rows
    assert peak - before < MAX_GROWTH_MB, f"server grew from {before:.0f} MB to {peak:.0f} MB"
    deadline = time.monotonic() + 120
    while (count := server.sql(DB, "SELECT count(*) FROM grouped")["data"]) != [[distinct]]:
        assert time.monotonic() < deadline, count
        time.sleep(0.5)
