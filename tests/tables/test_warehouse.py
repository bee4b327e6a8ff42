"""The warehouse storage layer (`tables/warehouse.py`): the same operations on a local folder (today's calls) and
through `pyarrow.fs` with URIs, which is what an `s3a://` or `hdfs://` warehouse uses; here on `file:`."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow.fs import LocalFileSystem, SubTreeFileSystem

from tables.storage import StorageRoot, parse_root
from tables.warehouse import WarehouseStorage


def _storages(tmp_path: Path) -> list[WarehouseStorage]:
    (tmp_path / "wh").mkdir()
    return [
        WarehouseStorage.of(str(tmp_path / "wh")),
        WarehouseStorage.of(f"file://{tmp_path / 'wh'}", via_arrow=True),
    ]


def test_a_plain_path_and_a_file_uri_stay_on_the_local_code_path(tmp_path: Path) -> None:
    for text in (str(tmp_path), f"file://{tmp_path}", f"file:{tmp_path}"):
        storage = WarehouseStorage.of(text)
        assert storage.is_local and storage.top == tmp_path
        assert storage.uri(storage.child(storage.top, "t", "data")) == f"file://{tmp_path}/t/data"


def test_through_pyarrow_locations_are_uris_given_to_spark_and_iceberg_as_they_are(tmp_path: Path) -> None:
    storage = WarehouseStorage.of(f"file://{tmp_path}", via_arrow=True)
    assert not storage.is_local
    table = storage.child(storage.top, "abc", "data", "txn_7")
    # Hadoop's form, as Spark reports a file it read (`input_file_name()`): recorded and reported paths match
    assert table == f"file:{tmp_path}/abc/data/txn_7" == storage.uri(table)
    assert storage.location(f"file://{tmp_path}/abc/x.parquet") == f"file:{tmp_path}/abc/x.parquet"
    assert storage.location(f"file:{tmp_path}/abc/x.parquet") == f"file:{tmp_path}/abc/x.parquet"


def test_a_remote_root_maps_s3a_to_pyarrows_s3_and_keeps_the_uri_for_spark() -> None:
    root = parse_root("s3a://bucket/wh", setting="SL_WAREHOUSE")
    assert (root.spark_uri, root.arrow_uri) == ("s3a://bucket/wh", "s3://bucket/wh")
    # no S3 here: the layer is built on a local tree standing in for the bucket
    storage = WarehouseStorage(root, LocalFileSystem(), "/nowhere")
    assert storage.uri(storage.child(storage.top, "t")) == "s3a://bucket/wh/t"
    assert storage._path("s3a://bucket/wh/t/a.parquet") == "/nowhere/t/a.parquet"  # noqa: SLF001


@pytest.mark.parametrize("kind", ["local", "arrow"])
def test_write_list_read_sync_and_delete(tmp_path: Path, kind: str) -> None:
    storage = _storages(tmp_path)[kind == "arrow"]
    directory = storage.child(storage.top, "t1", "data", "txn_1")
    assert not storage.exists(directory) and storage.files(directory) == []
    first = storage.child(directory, "a.parquet")
    with storage.open_output(first) as out:
        pq.write_table(pa.table({"k": [1, 2, 3]}), out)
    with storage.open_output(storage.child(directory, "b.txt")) as out:
        out.write(b"x")
    storage.sync([first], directory)  # fsyncs locally, nothing through pyarrow
    assert storage.is_dir(directory) and storage.exists(first)
    assert storage.files(directory, suffix=".parquet") == [first]
    assert len(storage.files(storage.child(storage.top, "t1"), recursive=True)) == 2
    with storage.open_input(first) as src:
        assert pq.ParquetFile(src).read().column("k").to_pylist() == [1, 2, 3]
    # the files are where a local reader finds them: the same folder either way
    assert (tmp_path / "wh/t1/data/txn_1/a.parquet").is_file()
    assert storage.remove_file(first) and not storage.exists(first)
    assert storage.remove_file(first)  # already gone: fine
    assert storage.remove_tree(storage.child(storage.top, "t1"))
    assert not (tmp_path / "wh/t1").exists()
    assert storage.remove_tree(storage.child(storage.top, "t1"))  # already gone: fine


@pytest.mark.parametrize("kind", ["local", "arrow"])
def test_deletes_are_guarded_the_same_way(tmp_path: Path, kind: str) -> None:
    storage = _storages(tmp_path)[kind == "arrow"]
    mine, theirs = storage.child(storage.top, "mine"), storage.child(storage.top, "mine", "theirs")
    storage.makedirs(theirs)
    outside = tmp_path / "outside"
    outside.mkdir()
    assert not storage.remove_tree(storage.top)  # the root itself
    assert not storage.remove_tree(mine, others=[theirs])  # holds another table
    assert not storage.remove_tree(theirs, others=[mine])  # lies inside another table
    escape = storage.child(storage.top, "..", "outside")
    assert not storage.remove_tree(escape) and outside.is_dir()
    out = outside if kind == "local" else f"file:{outside}"
    assert not storage.remove_tree(out) and outside.is_dir()
    assert (tmp_path / "wh/mine/theirs").is_dir()
    assert storage.remove_tree(mine) and not (tmp_path / "wh/mine").exists()


def test_through_pyarrow_nothing_touches_the_local_path_the_uri_names(tmp_path: Path) -> None:
    """A `file:` root whose folder is not on this machine, its files in a tree standing in for the store: every
    operation reaches the store through pyarrow, none the local disk at /nowhere."""
    root = StorageRoot("file:///nowhere/wh", "file", None)
    storage = WarehouseStorage(root, SubTreeFileSystem(str(tmp_path), LocalFileSystem()), "")
    directory = storage.child(storage.top, "t", "data")
    storage.makedirs(directory)
    target = storage.child(directory, "a.parquet")
    with storage.open_output(target) as out:
        pq.write_table(pa.table({"k": [1]}), out)
    storage.sync([target], directory)
    assert storage.files(directory) == ["file:///nowhere/wh/t/data/a.parquet"]
    assert (tmp_path / "t/data/a.parquet").is_file() and not Path("/nowhere").exists()
    with storage.open_input(target) as src:
        assert pq.read_table(src).num_rows == 1
    assert storage.remove_tree(storage.child(storage.top, "t")) and not (tmp_path / "t").exists()


def test_a_catalog_on_a_warehouse_through_pyarrow(tmp_path: Path) -> None:
    """The catalog and housekeeping on a `file:` warehouse routed through pyarrow, as on a remote one: Iceberg
    records `file://` URIs, the server's deletes (orphans, DROP) reach the files through the layer."""
    import time

    from sql.ddl import parse_create_table
    from tables.catalog import Catalog
    from tables.maintenance import remove_orphans

    storage = WarehouseStorage.of(f"file://{tmp_path / 'wh'}", via_arrow=True)
    catalog = Catalog(uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=storage)
    catalog.create_database("d")
    definition = parse_create_table("CREATE TABLE t (k INT, v INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k)", "d")
    catalog.create_table(definition.definition)
    handle = catalog.load("d", "t")
    place = handle.place
    assert isinstance(place, str) and place.startswith(f"file:{tmp_path}/wh/")
    assert handle.iceberg.location() == place and catalog.table_locations() == {("d", "t"): place}
    rows = pa.Table.from_pylist([{"k": 1, "v": 2}], schema=handle.iceberg.schema().as_arrow())
    handle.iceberg.append(rows)
    assert handle.iceberg.scan().to_arrow().select(["k", "v"]).to_pylist() == [{"k": 1, "v": 2}]

    live = storage.files(storage.child(place, "data"), suffix=".parquet", recursive=True)
    orphan = storage.child(place, "data", "txn_999", "part-0.parquet")
    with storage.open_output(orphan) as out:
        out.write(b"left by a crash")
    removed = remove_orphans(handle, set(), grace_seconds=0, now=time.time() + 10)
    assert removed == 1 and not storage.exists(orphan)
    assert not storage.exists(storage.child(place, "data", "txn_999"))
    assert storage.files(storage.child(place, "data"), suffix=".parquet", recursive=True) == live != []

    catalog.drop_table("d", "t")
    assert not storage.exists(place) and list((tmp_path / "wh").iterdir()) == []


@pytest.mark.parametrize("kind", ["local", "arrow"])
def test_a_location_alone_names_its_filesystem(tmp_path: Path, kind: str) -> None:
    """What the rowset code calls with a load's directory: the same on a local path and a `file:/abs` URI."""
    from tables.warehouse import (
        arrow_path,
        as_location,
        child_of,
        delete_dir,
        delete_file,
        file_size,
        file_stamp,
        list_dirs,
        list_files,
        make_dirs,
        move,
        name_of,
        parent_of,
    )

    top = as_location(str(tmp_path) if kind == "local" else f"file:{tmp_path}")
    assert isinstance(top, Path) == (kind == "local")
    directory = child_of(top, "data", "txn_3")
    make_dirs(child_of(directory, "__sl_bucket=1"))
    first = child_of(directory, "__sl_bucket=1", "part-0.parquet")
    pq.write_table(pa.table({"k": [1, 2]}), arrow_path(first))
    assert list_dirs(directory, "__sl_bucket=*") == [parent_of(first)]
    assert (
        name_of(first) == "part-0.parquet"
        and file_size(first) == (tmp_path / "data/txn_3/__sl_bucket=1/part-0.parquet").stat().st_size
    )
    moved = child_of(directory, "b1-part-0.parquet")
    move(first, moved)
    delete_dir(parent_of(first))
    assert list_files(directory, "*.parquet") == [moved] and list_dirs(directory) == []
    assert pq.read_table(arrow_path(moved)).num_rows == 2 and file_stamp(moved)[2] == file_size(moved)
    delete_file(moved)
    delete_file(moved)  # already gone: fine
    assert list_files(directory) == [] and list_files(child_of(top, "missing")) == []
    if kind == "arrow":
        assert str(moved) == f"file:{tmp_path}/data/txn_3/b1-part-0.parquet"
        assert arrow_path("s3a://bucket/wh/x.parquet") == "s3://bucket/wh/x.parquet"


def test_a_remote_warehouse_pyarrow_cannot_reach_is_refused_naming_what_it_needs() -> None:
    """No libhdfs here: an `hdfs:` warehouse is refused at start with the reason, not a traceback."""
    from tables.storage import StorageError

    with pytest.raises(StorageError) as refused:
        WarehouseStorage.of("hdfs://namenode:8020/wh")
    assert refused.value.message.startswith("SL_WAREHOUSE 'hdfs://namenode:8020/wh': pyarrow cannot reach it (")
    assert "libhdfs" in refused.value.message
