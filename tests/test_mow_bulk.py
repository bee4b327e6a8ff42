"""A 2M-row CSV loaded twice into a merge-on-write table, on a server with a 512 MB heap: the second load
supersedes every stored row (1.6M position deletes) and the JVM lives through it and the queries after it.

Before eed0ee9 the second load compared its rows with the stored ones inside its Spark job; with Spark
choosing to broadcast the delete files (a few MB on disk for 1.6M positions), both that load and a
`SELECT count(*)` after it filled the heap and the JVM died (`OutOfMemoryError`; the lead saw it with 5M
rows and the default 2 GB heap). The server runs in a process of its own, with its own settings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from tests.helpers import table_handle
from tests.server_process import ServerProcess

pytestmark = pytest.mark.full  # two 2M-row loads: minutes

DB = "mowbulk"
ROWS = 2_000_000
DDL = (
    "CREATE TABLE t (k BIGINT NOT NULL, seq INT, name VARCHAR(32), amount DECIMAL(12,2)) "
    'UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 8 PROPERTIES ("function_column.sequence_col" = "seq")'
)


def write_csv(path: Path, rows: int, seed: int) -> dict[int, tuple[int, str, str]]:
    """`k,seq,name,amount` rows, a fifth of them repeating an earlier key with a larger seq (bench/bulk.py's
    shape). Returns each key's winning row (seq, name, amount): its last."""
    rng = np.random.default_rng(seed)
    distinct = rows - rows // 5
    fresh = rng.permutation(distinct).astype(np.int64) * 7919 + 1_000_000_007
    keys = np.concatenate([fresh, fresh[rng.integers(0, distinct, rows - distinct)]])
    cents = rng.integers(0, 10_000_000, rows)
    names = np.array(["alice", "bob", "carol", "dave"])[rng.integers(0, 4, rows)]
    amounts = [f"{c // 100}.{c % 100:02d}" for c in cents.tolist()]
    table = pa.table(
        {"k": keys, "seq": np.arange(rows, dtype=np.int32), "name": names, "amount": pa.array(amounts, pa.string())}
    )
    pacsv.write_csv(table, str(path), write_options=pacsv.WriteOptions(include_header=False, quoting_style="none"))
    winners: dict[int, tuple[int, str, str]] = {}
    for k, seq, name, amount in zip(keys.tolist(), range(rows), names.tolist(), amounts, strict=True):
        winners[k] = (seq, name, amount)  # a later row has a larger seq
    return winners


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("mowbulk")
    conf = {"spark.driver.memory": "512m", "spark.sql.shuffle.partitions": "2"}
    proc = ServerProcess(root / "data", root / "server.log", SL_SPARK_CONF=json.dumps(conf)).start()
    try:
        yield proc
    finally:
        proc.kill()


def load(server: ServerProcess, path: Path, label: str) -> dict[str, Any]:
    with open(path, "rb") as body:
        resp = httpx.put(
            f"{server.base_url}/api/{DB}/t/_stream_load",
            content=body,
            headers={"column_separator": ",", "label": label, "Content-Length": str(path.stat().st_size)},
            auth=("root", ""),
            timeout=900,
        )
    return resp.json()  # type: ignore[no-any-return]


def query(server: ServerProcess, stmt: str) -> list[list[Any]]:
    resp = httpx.post(
        f"{server.base_url}/api/query/default_cluster/{DB}", json={"stmt": stmt}, auth=("root", ""), timeout=900
    )
    body = resp.json()
    assert body["code"] == 0, body
    return body["data"]["data"]  # type: ignore[no-any-return]


def test_a_reload_superseding_every_row_fits_a_small_heap(server: ServerProcess, tmp_path: Path) -> None:
    path = tmp_path / "bulk.csv"
    winners = write_csv(path, ROWS, seed=42)
    server.sql(DB, f"CREATE DATABASE {DB}")
    server.sql(DB, DDL)
    first = load(server, path, "first")
    assert first["Status"] == "Success", first
    started = time.monotonic()
    again = load(server, path, "again")
    reload_s = time.monotonic() - started
    assert again["Status"] == "Success", again
    assert again["NumberLoadedRows"] == ROWS
    assert again["NumberFilteredRows"] == 0
    started = time.monotonic()
    assert query(server, "SELECT count(*) FROM t") == [[len(winners)]]
    print(f"second load {reload_s:.1f} s, SELECT count(*) after it {time.monotonic() - started:.1f} s")
    some = list(winners)[:: len(winners) // 4][:4]
    for k in some:
        seq, name, amount = winners[k]
        assert query(server, f"SELECT k, seq, name, CAST(amount AS STRING) FROM t WHERE k = {k}") == [
            [k, seq, name, amount]
        ]
    assert query(server, "SELECT count(*) FROM t WHERE k = 5") == [[0]]
    assert "Spark JVM stopped" not in server.log_text()
    assert "OutOfMemoryError" not in server.log_text()
    data = server.data_dir
    settings = SimpleNamespace(
        resolved_catalog_uri=f"sqlite:///{data / 'catalog.db'}", resolved_warehouse=data / "warehouse"
    )
    keys = table_handle(settings, DB, "t").iceberg.scan(selected_fields=("k",)).to_arrow().column("k")
    assert len(keys) == len(winners)  # an Iceberg reader applies the position deletes too: one row per key
    assert set(keys.to_pylist()) == set(winners)
