"""Many clients loading one table end up exactly as if the loads had been applied one by one in commit
order (read back from the snapshots' version and label), and two tables take loads at the same time."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.helpers import DorisClient, assert_doris_result

CLIENTS = 4
LOADS_PER_CLIENT = 3
KEYS = 12
DDL = "CREATE TABLE {name} (k INT NOT NULL, v VARCHAR(32)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 3"


def commit_order(server_settings: Any, db: str, table: str) -> list[str]:
    """Labels of the table's loads in commit (version) order."""
    from tables.catalog import VERSION_PROPERTY, Catalog

    catalog = Catalog(uri=server_settings.resolved_catalog_uri, warehouse=server_settings.resolved_warehouse)
    snaps = [s.summary.additional_properties for s in catalog.load(db, table).iceberg.snapshots() if s.summary]
    return [p["doris.label"] for p in sorted(snaps, key=lambda p: int(p[VERSION_PROPERTY]))]


def test_concurrent_loads_equal_loads_applied_in_commit_order(
    doris: DorisClient, db: str, server_settings: Any
) -> None:
    tables = ("ta", "tb")
    for name in tables:
        doris.sql(db, DDL.format(name=name))
    payloads: dict[tuple[str, str], tuple[str, list[int]]] = {}
    for name in tables:
        for c in range(CLIENTS):
            for i in range(LOADS_PER_CLIENT):
                rng = random.Random(f"{name}{c}{i}")
                label = f"{name}_{c}_{i}"
                delete = i == LOADS_PER_CLIENT - 1 and c % 2 == 0  # some loads delete keys
                payloads[(name, label)] = ("DELETE" if delete else "APPEND", rng.sample(range(KEYS), 5))

    def client(job: tuple[str, int]) -> None:
        name, c = job
        for i in range(LOADS_PER_CLIENT):
            label = f"{name}_{c}_{i}"
            merge_type, keys = payloads[(name, label)]
            body = "".join(f"{k},{label}\n" for k in keys)
            headers = {"column_separator": ",", "label": label, "merge_type": merge_type}
            assert_doris_result(doris.stream_load(db, name, body, headers), loaded=len(keys))

    # both tables' clients at once: loads of different tables run side by side on the one SparkSession
    with ThreadPoolExecutor(CLIENTS * len(tables)) as pool:
        list(pool.map(client, [(name, c) for name in tables for c in range(CLIENTS)]))

    for name in tables:
        order = commit_order(server_settings, db, name)
        assert sorted(order) == sorted(label for (t, label) in payloads if t == name)
        expected: dict[int, str] = {}
        for label in order:
            merge_type, keys = payloads[(name, label)]
            for k in keys:
                if merge_type == "DELETE":
                    expected.pop(k, None)
                else:
                    expected[k] = label
        assert doris.rows(db, f"SELECT k, v FROM {name} ORDER BY k") == [[k, v] for k, v in sorted(expected.items())]
