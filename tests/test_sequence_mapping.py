"""Two concurrent stream-load streams update different column groups of one sequence-mapping table
(000_0c520fff6485a702.txt): the table ends as a pure-Python model of the rules predicts, whatever the
interleaving."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.helpers import DorisClient, assert_doris_result

TABLE = """CREATE TABLE u (a BIGINT, b INT, c INT, d INT, e INT, s1 INT, s2 BIGINT)
UNIQUE KEY(a, b) DISTRIBUTED BY HASH(a, b) BUCKETS 3
PROPERTIES ("enable_unique_key_merge_on_write" = "false", "sequence_mapping.s1" = "c,d", "sequence_mapping.s2" = "e")"""
GROUPS = {"s1": ("c", "d"), "s2": ("e",)}


def group_model(
    loads: list[list[dict[str, Any]]], seq: str, values: tuple[str, ...]
) -> dict[tuple[int, int], list[Any]]:
    """One stream's group per key: the write with the largest sequence wins; equal goes to the later write."""
    best: dict[tuple[int, int], tuple[int, int, list[Any]]] = {}
    order = 0
    for load in loads:
        for row in load:
            order += 1
            key = (row["a"], row["b"])
            rank = (row[seq], order)
            if key not in best or rank >= best[key][:2]:
                best[key] = (*rank, [row[v] for v in (*values, seq)])
    return {k: v[2] for k, v in best.items()}


def stream(rng: random.Random, seq: str, values: tuple[str, ...]) -> list[list[dict[str, Any]]]:
    loads = []
    for _ in range(6):
        rows = []
        for _ in range(40):
            row: dict[str, Any] = {"a": rng.randint(0, 9), "b": rng.randint(0, 2), seq: rng.randint(0, 20)}
            row.update({v: rng.randint(-100, 100) for v in values})
            rows.append(row)
        loads.append(rows)
    return loads


def test_two_streams_update_their_own_groups_concurrently(doris: DorisClient, db: str) -> None:
    doris.sql(db, TABLE)
    rng = random.Random(11)
    streams = {seq: stream(rng, seq, values) for seq, values in GROUPS.items()}

    def send(seq: str) -> None:
        cols = ["a", "b", *GROUPS[seq], seq]
        for i, load in enumerate(streams[seq]):
            body = "".join(",".join(str(r[c]) for c in cols) + "\n" for r in load)
            headers = {"column_separator": ",", "columns": ",".join(cols), "label": f"{seq}_{i}"}
            assert_doris_result(doris.stream_load(db, "u", body, headers=headers), loaded=len(load))

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(send, GROUPS))

    models = {seq: group_model(streams[seq], seq, values) for seq, values in GROUPS.items()}
    keys = sorted(set(models["s1"]) | set(models["s2"]))
    expected = []
    for key in keys:
        g1 = models["s1"].get(key, [None, None, None])
        g2 = models["s2"].get(key, [None, None])
        expected.append([*key, g1[0], g1[1], g2[0], g1[2], g2[1]])
    assert doris.rows(db, "SELECT a, b, c, d, e, s1, s2 FROM u ORDER BY a, b") == expected
