"""The catalog parses a table's metadata file once per metadata location (issue 19: no catalog reload on a load's
hot path), and never answers with a stale one: another catalog on the same database (another server) commits,
and the next load sees it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sql.ddl import parse_create_table
from tables.catalog import Catalog
from tables.errors import TableNotFound


def test_a_table_is_parsed_once_per_metadata_location_and_never_stale(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    mine, theirs = (Catalog(uri=uri, warehouse=tmp_path / "warehouse") for _ in range(2))
    mine.create_database("d")
    definition = parse_create_table("CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k)", "d")
    mine.create_table(definition.definition)

    first, again = mine.load("d", "t"), mine.load("d", "t")
    assert first.iceberg.metadata is again.iceberg.metadata  # one parse, shared (frozen models)
    assert first.iceberg is not again.iceberg  # each load its own table object: a refresh of one leaves the other

    other = theirs.load("d", "t").iceberg
    other.transaction().set_properties({"k": "v"}).commit_transaction()  # another server commits
    after = mine.load("d", "t").iceberg
    assert after.metadata_location == other.metadata_location != first.iceberg.metadata_location
    assert after.properties["k"] == "v"
    first.iceberg.refresh()
    assert first.iceberg.properties["k"] == "v"

    own = mine.load("d", "t").iceberg
    own.transaction().set_properties({"k": "w"}).commit_transaction()
    reread = mine.load("d", "t").iceberg
    assert reread.metadata is own.metadata  # what this catalog committed is kept parsed: not read back
    assert reread.properties["k"] == "w"


def test_a_batch_of_loads_reads_a_table_row_once_and_forgets_it_after(tmp_path: Path) -> None:
    """`shared_reads` (a step batch of concurrent loads): the catalog row read once in the block, what another
    server commits meanwhile seen by the next block, and a change of this thread's own forgets the row at once."""
    uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    mine, theirs = (Catalog(uri=uri, warehouse=tmp_path / "warehouse") for _ in range(2))
    mine.create_database("d")
    definition = parse_create_table("CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k)", "d")
    mine.create_table(definition.definition)

    with mine.shared_reads():
        first = mine.load("d", "t").iceberg.metadata_location
        theirs.load("d", "t").iceberg.transaction().set_properties({"k": "v"}).commit_transaction()
        assert mine.load("d", "t").iceberg.metadata_location == first  # the block's one read
        with mine.shared_reads():  # nested: the outer block
            assert mine.load("d", "t").iceberg.metadata_location == first
    outside = mine.load("d", "t").iceberg
    assert outside.metadata_location != first and outside.properties["k"] == "v"

    with mine.shared_reads():
        own = mine.load("d", "t").iceberg
        own.transaction().set_properties({"k": "w"}).commit_transaction()  # this thread's own commit
        assert mine.load("d", "t").iceberg.properties["k"] == "w"
        mine.drop_table("d", "t")
        with pytest.raises(TableNotFound):
            mine.load("d", "t")
