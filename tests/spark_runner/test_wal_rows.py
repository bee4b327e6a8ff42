"""An async load's row count (its reply's `NumberTotalRows`, given before its group runs) from a large payload's
file: the same count as from the payload's bytes, without reading the file whole (a body can be gigabytes)."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import pytest

from spark_runner.group_commit import _count_file, _nonblank

PIECES = ["a", "1,2", " ", "\t", "\u3000", "\xa0", "é", "☃", "\n", "\r\n", "\x02", "||", "|", "\x00", "\x1f"]


def by_bytes(data: bytes, delimiter: str) -> int:
    return _nonblank(data.decode(errors="replace").split(delimiter))


@pytest.mark.parametrize("delimiter", ["\n", "\r\n", "\x02", "||", "é"])
def test_a_files_count_is_its_bytes_count(tmp_path: Path, delimiter: str) -> None:
    rng = random.Random(delimiter)
    path = tmp_path / "payload"
    for case in range(300):
        parts = rng.choices([*PIECES, delimiter, delimiter, "x" * rng.randint(1, 40)], k=rng.randint(0, 60))
        data = "".join(parts).encode()
        if case % 5 == 0 and data:  # bytes that are not UTF-8, anywhere
            at = rng.randrange(len(data))
            data = data[:at] + bytes([rng.choice([0x80, 0xC3, 0xE2, 0xFF])]) + data[at:]
        path.write_bytes(data)
        for block in (1, 2, 3, 7, 64):
            assert _count_file(path, delimiter, block) == by_bytes(data, delimiter), (data, block)


def test_a_line_longer_than_a_block_is_one_line_whatever_its_whitespace(tmp_path: Path) -> None:
    path = tmp_path / "payload"
    lines = [("\u3000" * 50, 0), ("\u3000" * 50 + "x", 1), ("x" + " " * 80, 1), (" " * 80, 0), ("é" * 30, 1)]
    for line, rows in [*lines, ("\udc80" * 30, 1)]:  # bytes 0x80 alone: not UTF-8, each a replacement character
        for delimiter in ("\n", "é", "||", "☃"):
            path.write_bytes(delimiter.join(["a", line, "b"]).encode(errors="surrogateescape"))
            for block in range(1, 12):
                expected = by_bytes(path.read_bytes(), delimiter)
                assert _count_file(path, delimiter, block) == expected, (line, delimiter, block)
            if delimiter == "\n":
                assert expected == rows + 2, line


def test_a_large_payload_is_counted_in_little_memory(tmp_path: Path) -> None:
    path = tmp_path / "payload"
    line = b"12345,some name,678.90\n"
    with path.open("wb") as f:
        for _ in range(64):
            f.write(line * 40_000)  # ~59 MB, 2,560,000 lines
    tracemalloc.start()
    try:
        assert _count_file(path, "\n", 1 << 20) == 64 * 40_000
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MB"
