"""The shared dir and warehouse settings as paths or URIs (`tables/storage.py`): what each form maps to, for the
server's own file calls, for Spark and for pyarrow, and which are refused at start with the reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import Settings
from tables.storage import StorageError, local_root, parse_root

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "folder"),
    [
        ("/srv/shared", "/srv/shared"),
        ("file:///srv/shared", "/srv/shared"),
        ("file:/srv/shared", "/srv/shared"),  # Hadoop's way of writing it
        ("file://localhost/srv/shared", "/srv/shared"),
        ("FILE:///srv/my%20shared", "/srv/my shared"),
    ],
)
def test_a_path_or_a_file_uri_is_a_local_folder(text: str, folder: str) -> None:
    root = parse_root(text, setting="SL_SHARED_DIR")
    assert root.local == Path(folder)
    assert root.spark_uri == root.arrow_uri == folder
    assert local_root(text, setting="SL_SHARED_DIR") == Path(folder)


@pytest.mark.parametrize(
    ("text", "spark", "arrow"),
    [
        ("s3a://bucket/shared", "s3a://bucket/shared", "s3://bucket/shared"),  # pyarrow names S3 `s3`
        ("s3://bucket/wh", "s3://bucket/wh", "s3://bucket/wh"),
        ("hdfs://namenode:8020/doris", "hdfs://namenode:8020/doris", "hdfs://namenode:8020/doris"),
    ],
)
def test_remote_uris_go_to_spark_as_written_and_to_pyarrow_by_its_scheme_names(
    text: str, spark: str, arrow: str
) -> None:
    root = parse_root(text, setting="SL_WAREHOUSE")
    assert (root.local, root.spark_uri, root.arrow_uri) == (None, spark, arrow)


def test_the_arrow_uri_of_an_s3a_root_opens_pyarrows_s3_filesystem() -> None:
    from pyarrow.fs import S3FileSystem

    fs, path = parse_root("s3a://bucket/shared?region=us-east-1", setting="SL_SHARED_DIR").filesystem()
    assert isinstance(fs, S3FileSystem) and path == "bucket/shared"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("ftp://host/shared", "unsupported scheme 'ftp'; give a path, a file: URI"),
        ("gs://bucket/shared", "unsupported scheme 'gs'"),
        ("file://otherhost/srv", "a file: URI names a folder of this machine (file:///abs/path), not of host"),
        ("file:relative/dir", "a file: URI names an absolute path"),
        ("s3a:///no-bucket", "a s3a: URI names its host or bucket"),
    ],
)
def test_bad_uris_are_refused_naming_the_setting_and_the_reason(text: str, reason: str) -> None:
    with pytest.raises(StorageError) as refused:
        parse_root(text, setting="SL_SHARED_DIR")
    assert refused.value.message.startswith(f"SL_SHARED_DIR {text!r}: ") and reason in refused.value.message


@pytest.mark.parametrize("text", ["hdfs://namenode:8020/doris", "s3a://bucket/wh", "s3://bucket/wh"])
def test_a_warehouse_uri_is_passed_through_as_written(text: str) -> None:
    settings = Settings(warehouse=text)
    assert settings.warehouse == settings.warehouse_uri == text
    with pytest.raises(ValueError, match="not a local folder"):
        _ = settings.resolved_warehouse


def test_the_shared_dir_is_a_posix_mount_for_its_write_ahead_log() -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(shared_dir="s3a://bucket/shared")
    message = refused.value.errors()[0]["msg"]
    assert "SL_SHARED_DIR 's3a://bucket/shared': s3a: storage cannot hold it" in message
    assert "mount the storage on every node" in message
    assert "write-ahead log there, which appends, syncs, hard-links and renames files" in message


def test_settings_map_file_uris_and_keep_paths_as_given(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", shared_dir=f"file://{tmp_path}/shared")
    assert settings.resolved_shared_dir == tmp_path / "shared"
    assert settings.resolved_warehouse == tmp_path / "shared" / "warehouse"
    settings = Settings(shared_dir="rel:dir", warehouse=f"file:{tmp_path}/wh")  # a colon alone is a path
    assert settings.shared_dir == Path("rel:dir") and settings.resolved_warehouse == tmp_path / "wh"
    assert Settings(shared_dir=tmp_path).shared_dir == tmp_path


def test_the_server_exits_at_start_naming_a_storage_setting_it_refuses(tmp_path: Path) -> None:
    env = {**os.environ, "SL_SHARED_DIR": "ftp://host/shared", "SL_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "-m", "app"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: SL_SHARED_DIR 'ftp://host/shared': unsupported scheme 'ftp'; give a path, a file: URI "
        "(or, for the warehouse, hdfs:, s3a:, s3:)"
    )
    assert not (tmp_path / "data").exists()


def test_the_server_exits_at_start_on_a_warehouse_pyarrow_cannot_reach(tmp_path: Path) -> None:
    """No libhdfs here: an hdfs: warehouse is passed through, and the server says at start why it cannot use it."""
    env = {**os.environ, "SL_WAREHOUSE": "hdfs://namenode:8020/wh", "SL_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "-m", "app"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: SL_WAREHOUSE 'hdfs://namenode:8020/wh': pyarrow cannot reach it ("), (
        done.stderr
    )
    assert "libhdfs" in done.stderr and len(done.stderr.strip().splitlines()) == 1
