"""A snapshot's manifest list is parsed once per process (issue 19): pyiceberg 0.12 reads the file again on every
`Snapshot.manifests` call, and a small load asked three times for the one snapshot it found (its lookup, its
commit's re-check, the append naming its parent's manifests), ~4 ms each on 2 cores."""

from __future__ import annotations

from typing import Any

import pytest

from tables import rowsets
from tests.helpers import DorisClient, assert_doris_result

CSV = {"column_separator": ","}


def test_a_load_and_the_queries_after_it_read_each_manifest_list_once(
    doris: DorisClient, db: str, served_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    doris.sql(db, "CREATE TABLE t (k INT NOT NULL, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    for i in range(3):
        assert_doris_result(doris.stream_load(db, "t", f"{i},{i}\n", headers=CSV), loaded=1)
    location = served_app.state.services.catalog.load(db, "t").iceberg.location()
    reads: list[str] = []
    real = rowsets._read_manifest_list

    def counting(io: Any, path: str) -> Any:
        if path.startswith(location.rstrip("/") + "/"):  # this table's (the server's other duties read others')
            reads.append(path)
        return real(io, path)

    monkeypatch.setattr(rowsets, "_read_manifest_list", counting)
    assert_doris_result(doris.stream_load(db, "t", "1,10\n", headers=CSV), loaded=1)
    assert len(reads) == 1, reads  # the snapshot the load found, once for its lookup, re-check and append

    for _ in range(2):
        assert doris.rows(db, "SELECT k, v FROM t ORDER BY k") == [[0, 0], [1, 10], [2, 2]]
    assert len(reads) == 2, reads  # the load's own snapshot, read by the first query only
    assert len(set(reads)) == 2, reads
