"""A snapshot's manifest list is parsed once per process (issue 19): pyiceberg 0.12 reads the file again on every
`Snapshot.manifests` call, and a small load asked three times for the one snapshot it found (its lookup, its
commit's re-check, the append naming its parent's manifests), ~4 ms each on 2 cores. A list this process writes
is kept as written: the next load and the queries after it do not open it at all."""

from __future__ import annotations

from typing import Any

import pytest

from tables import rowsets
from tables.sized_cache import SizedCache
from tests.helpers import DorisClient, assert_doris_result

CSV = {"column_separator": ","}


def test_a_load_and_the_queries_after_it_read_each_manifest_list_once(
    doris: DorisClient, db: str, served_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    doris.sql(db, "CREATE TABLE t (k INT NOT NULL, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    for i in range(3):
        assert_doris_result(doris.stream_load(db, "t", f"{i},{i}\n", headers=CSV), loaded=1)
    table = served_app.state.services.catalog.load(db, "t").iceberg
    location = table.location()
    reads: list[str] = []
    real = rowsets._read_manifest_list

    def counting(io: Any, path: str) -> Any:
        if path.startswith(location.rstrip("/") + "/"):  # this table's (the server's other duties read others')
            reads.append(path)
        return real(io, path)

    monkeypatch.setattr(rowsets, "_read_manifest_list", counting)
    assert_doris_result(doris.stream_load(db, "t", "1,10\n", headers=CSV), loaded=1)
    for _ in range(2):
        assert doris.rows(db, "SELECT k, v FROM t ORDER BY k") == [[0, 0], [1, 10], [2, 2]]
    assert reads == []  # every list this server wrote is kept as written
    table.refresh()
    for snapshot in table.snapshots():  # and what is kept is what the files say
        assert rowsets.cached_manifest_list(table.io, snapshot.manifest_list) == real(table.io, snapshot.manifest_list)

    # lists this process did not write (another server's, or from before a restart) are read once each
    monkeypatch.setattr(rowsets, "_LISTS", SizedCache(rowsets._no_list, max_bytes=1 << 20, cost=rowsets._list_bytes))
    assert_doris_result(doris.stream_load(db, "t", "2,20\n", headers=CSV), loaded=1)
    assert len(reads) == 1, reads  # the snapshot the load found, once for its lookup, re-check and append
    for _ in range(2):
        assert doris.rows(db, "SELECT k, v FROM t ORDER BY k") == [[0, 0], [1, 10], [2, 20]]
    assert len(reads) == 1, reads  # the load's own snapshot: kept as written


def test_a_commit_encodes_only_its_new_manifests_into_the_list(
    doris: DorisClient, db: str, served_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest list names every manifest of the table; a commit encodes only the manifests it adds, and copies
    the others' bytes as it encoded them before (`rowsets._write_block`). Each list reads back, from its file,
    as the entries the commit kept: the same manifests, sequence numbers included."""
    from pyiceberg.avro.writer import StructWriter

    doris.sql(db, "CREATE TABLE t (k INT NOT NULL, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    for i in range(6):
        assert_doris_result(doris.stream_load(db, "t", f"{i},{i}\n", headers=CSV), loaded=1)
    table = served_app.state.services.catalog.load(db, "t").iceberg
    before = len(table.current_snapshot().manifests(table.io))  # type: ignore[union-attr]
    assert before >= 6
    entries: list[Any] = []  # the manifest list entries encoded (a manifest entry's record is another schema's)
    real = StructWriter.write

    def counting(self: StructWriter, encoder: Any, value: Any) -> None:
        if type(value).__name__ == "ManifestFile":
            entries.append(value)
        real(self, encoder, value)

    monkeypatch.setattr(StructWriter, "write", counting)
    assert_doris_result(doris.stream_load(db, "t", "1,10\n", headers=CSV), loaded=1)
    monkeypatch.undo()
    table.refresh()
    manifests = table.current_snapshot().manifests(table.io)  # type: ignore[union-attr]
    assert len(manifests) > before
    assert 1 <= len(entries) <= len(manifests) - before + 1, (len(entries), before, len(manifests))
    for snapshot in table.snapshots():
        kept = rowsets.cached_manifest_list(table.io, snapshot.manifest_list)
        assert rowsets._read_manifest_list(table.io, snapshot.manifest_list) == kept
    assert doris.rows(db, "SELECT k, v FROM t ORDER BY k") == [[0, 0], [1, 10], [2, 2], [3, 3], [4, 4], [5, 5]]
