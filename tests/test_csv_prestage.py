"""A large CSV body is split into its fields while it is received (`arrow_csv.prestage`): the load's job finds
them written, and a body that does not come whole leaves nothing behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spark_runner import arrow_csv
from tests.helpers import AUTH, DorisClient, serving

TABLE = """CREATE TABLE t (k INT NOT NULL, v VARCHAR(8), s INT)
UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2 PROPERTIES ("function_column.sequence_col" = "s")"""
LINES = 4000
HALF = LINES // 2


@pytest.fixture
def server(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[DorisClient, Path]]:
    from app.main import create_app
    from app.settings import Settings

    monkeypatch.setattr(arrow_csv, "SEGMENT_BYTES", 4096)  # the split reads the body 4 KiB at a time
    settings = Settings(
        data_dir=tmp_path / "data",
        mysql_port=0,
        compaction_interval_seconds=0,
        csv_parquet_min_bytes=10_000,
        max_line_bytes=100_000,
    )
    with serving(create_app(settings, spark=spark), settings=settings) as (url,):
        doris = DorisClient(url)
        doris.sql("d", "CREATE DATABASE d")
        doris.sql("d", TABLE)
        yield doris, tmp_path / "data"


def body(lines: range, tail: str = "") -> bytes:
    # every key twice: the second row (larger sequence) wins
    return ("".join(f"{i % (LINES // 2)},v{i},{i}\n" for i in lines) + tail).encode()


def slow_load(doris: DorisClient, first: bytes, rest: bytes, go: threading.Event, label: str) -> dict[str, Any]:
    """A stream load with a Content-Length whose body stops after `first` until `go` is set."""

    def chunks() -> Iterator[bytes]:
        yield first
        assert go.wait(60)
        yield rest

    reply = httpx.put(
        f"{doris.base_url}/api/d/t/_stream_load",
        content=chunks(),
        headers={"label": label, "column_separator": ",", "Content-Length": str(len(first) + len(rest))},
        auth=AUTH,
        timeout=120,
    )
    return reply.json()  # type: ignore[no-any-return]


def fields_files(data_dir: Path) -> list[Path]:
    return list(data_dir.rglob("*.fields.parquet"))


def wait_for_fields(data_dir: Path) -> int:
    """The size of the fields file of the body being received, once the split has written a row group."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        for path in fields_files(data_dir):
            size = path.stat().st_size if path.exists() else 0
            if size > 1000:
                return size
        time.sleep(0.05)
    staged = {p.name: p.stat().st_size for p in data_dir.rglob("*") if p.is_file() and "staging" in str(p)}
    raise AssertionError(f"no fields were written while the body was received: {staged}")


def test_a_large_body_is_split_while_it_is_received(server: tuple[DorisClient, Path]) -> None:
    doris, data_dir = server
    go = threading.Event()
    replies: list[dict[str, Any]] = []
    sender = threading.Thread(
        target=lambda: replies.append(slow_load(doris, body(range(HALF)), body(range(HALF, LINES)), go, "slow"))
    )
    sender.start()
    try:
        assert wait_for_fields(data_dir) > 1000  # half the body is in, and its fields are being written
    finally:
        go.set()
        sender.join(120)
    reply = replies[0]
    assert reply["Status"] == "Success", reply
    assert (reply["NumberTotalRows"], reply["NumberLoadedRows"]) == (LINES, LINES)
    assert doris.rows("d", "SELECT count(*) FROM t") == [[LINES // 2]]
    rows = doris.rows("d", "SELECT k, v, s FROM t WHERE k < 2 ORDER BY k")
    assert rows == [[0, f"v{HALF}", HALF], [1, f"v{HALF + 1}", HALF + 1]]
    assert not fields_files(data_dir)  # removed with the staged body


def test_a_body_that_breaks_off_leaves_no_fields_and_frees_its_label(server: tuple[DorisClient, Path]) -> None:
    doris, data_dir = server
    go = threading.Event()
    replies: list[dict[str, Any]] = []
    long_line = "1," + "x" * 200_000 + ",1\n"  # past max_line_bytes: the receipt refuses the body
    sender = threading.Thread(
        target=lambda: replies.append(slow_load(doris, body(range(HALF)), long_line.encode(), go, "broken"))
    )
    sender.start()
    try:
        wait_for_fields(data_dir)
    finally:
        go.set()
        sender.join(120)
    reply = replies[0]
    assert reply["Status"] == "Fail" and "longer than" in reply["Message"], reply
    deadline = time.monotonic() + 30
    while fields_files(data_dir) and time.monotonic() < deadline:  # the split stops at its next read
        time.sleep(0.05)
    assert not fields_files(data_dir)
    assert doris.rows("d", "SELECT count(*) FROM t") == [[0]]
    # the label is free: the same label loads
    again = doris.stream_load("d", "t", body(range(10)), headers={"label": "broken", "column_separator": ","}).json()
    assert again["Status"] == "Success", again


def test_splits_during_receipt_are_bounded(tmp_path: Path) -> None:
    """A client that trickles its body holds its split's threads: past `PRESTAGE_MAX` at once, a body is split
    once it is in (no split during receipt), and a split that gave up frees its place."""
    from tables.csv_dialect import CsvDialect

    dialect = CsvDialect(",", "\n", None, None, False, False, 0, 3, 0, 0, 0)
    paths = [tmp_path / f"b{i}.dat" for i in range(arrow_csv.PRESTAGE_MAX + 1)]
    started = [arrow_csv.prestage(path, dialect) for path in paths]
    assert all(body is not None for body in started[:-1])
    assert started[-1] is None
    for path in paths[:-1]:
        arrow_csv.drop_prestaged(path)  # the receipt failed: each split stops and frees its place
    deadline = time.monotonic() + 30
    while (again := arrow_csv.prestage(paths[-1], dialect)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert again is not None
    arrow_csv.drop_prestaged(paths[-1])
    deadline = time.monotonic() + 30  # (a wait of its own: on a busy machine the first may have taken most of its)
    while list(tmp_path.glob("*.fields.parquet")) and time.monotonic() < deadline:  # each goes when its split ends
        time.sleep(0.01)
    assert not list(tmp_path.glob("*.fields.parquet"))
