"""`SL_SHARED_DIR` and `SL_WAREHOUSE` as `file:` URIs: a server given `file:///<tmp>/shared` and
`file:///<tmp>/wh` runs every kind of load and statement that writes files, and serves the same answers as a
server given plain paths (the `full` run checks that one too), across a restart; every file it writes lies in
those two folders or its data dir (a URI taken for a path would be a folder named `file:` under the working
directory). The `full` run also routes the warehouse through pyarrow.fs (`SL_WAREHOUSE_VIA_ARROW_FS`), the code path
of an `s3a://` or `hdfs://` warehouse: the same answers, Iceberg recording `file:/abs` URIs, orphans removed."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tables.csv_dialect import CsvPath
from tests.helpers import AUTH, DorisClient, assert_doris_result, serving
from tests.test_group_commit import assert_group_reply

CSV = {"column_separator": ","}
UNIQUE = "CREATE TABLE {name} (k INT NOT NULL, v VARCHAR(16)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2{props}"
DUPLICATE = "CREATE TABLE {name} (k INT NOT NULL, v VARCHAR(16)) DUPLICATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2"
BIG_ROWS = 600  # ~6 KB of 600 lines: past `csv_parquet_min_bytes` below, so pyarrow splits it into Parquet

# what every server answers, whichever way its folders are given: (query, rows); `full` ones only in the full run
ANSWERS = {
    "big": ("SELECT count(*), sum(k) FROM big", [[BIG_ROWS, BIG_ROWS * (BIG_ROWS - 1) // 2]]),
    "one": ("SELECT * FROM one ORDER BY k", [[7, "seven"]]),
    "bad": ("SELECT * FROM bad ORDER BY k", [[1, "ok"]]),
}
FULL_ANSWERS = {
    **ANSWERS,
    "json": ("SELECT * FROM js ORDER BY k", [[1, "j1"], [2, "j2"]]),
    "async": ("SELECT * FROM ga ORDER BY k", [[i, f"a{i}"] for i in range(5)]),
    "twophase": ("SELECT * FROM tp ORDER BY k", [[1, "kept"]]),
    "compacted": ("SELECT * FROM c ORDER BY k", [[2, "b2"], [3, "c"]]),
    "truncated": ("SELECT count(*) FROM emptied", [[0]]),
}


def _settings(root: Path, *, uris: bool, arrow: bool = False) -> Any:
    from app.settings import Settings

    shared, warehouse = root / "shared", root / "wh"
    return Settings(
        data_dir=root / "data",
        shared_dir=f"file://{shared}" if uris else str(shared),
        warehouse=f"file://{warehouse}" if uris else str(warehouse),
        mysql_port=0,
        compaction_interval_seconds=0,
        csv_inline_max_bytes=1024,
        csv_parquet_min_bytes=4096,
        warehouse_via_arrow_fs=arrow,
    )


@pytest.fixture
def in_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory: a URI taken for a relative path would land here."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


@contextmanager
def _run(spark: Any, settings: Any) -> Iterator[DorisClient]:
    from app.main import create_app

    app = create_app(settings, spark=spark)
    with serving(app, settings=settings) as (url,):
        doris = DorisClient(url)
        doris.app = app  # type: ignore[attr-defined]
        yield doris


def _until(check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while (answer := check()) is None:
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return answer


def _answers(doris: DorisClient, answers: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    return {name: doris.rows("d", query) for name, (query, _) in answers.items()}


def _workload(doris: DorisClient, caplog: pytest.LogCaptureFixture, *, full: bool) -> None:
    """Loads and statements that write, read or delete files under the two folders: a CSV body split into
    Parquet, a one-row load, an error log, a DROP; in the full run also JSON, group commit async, two-phase,
    DELETE, compaction and TRUNCATE."""
    doris.sql("x", "CREATE DATABASE d")
    for name in ("big", "one", "bad"):
        doris.sql("d", UNIQUE.format(name=name, props=""))
    doris.sql("d", DUPLICATE.format(name="gone"))

    big = "".join(f"{k},v{k}\n" for k in range(BIG_ROWS))
    with caplog.at_level(logging.DEBUG, logger="spark_runner.load_job"):
        assert_doris_result(doris.stream_load("d", "big", big, CSV), loaded=BIG_ROWS)
    assert f": {CsvPath.PARQUET} path" in caplog.text
    assert_doris_result(doris.stream_load("d", "one", "7,seven\n", CSV), loaded=1)
    reply = doris.stream_load("d", "bad", "1,ok\nnot-a-number,x\n", {**CSV, "max_filter_ratio": "1"}).json()
    assert_doris_result(reply, loaded=1, filtered=1)
    log = httpx.get(reply["ErrorURL"], auth=AUTH)
    assert log.status_code == 200 and "not-a-number" in log.text, log.text
    assert_doris_result(doris.stream_load("d", "gone", "1,x\n2,y\n", CSV), loaded=2)
    doris.sql("d", "DROP TABLE gone")
    assert "Unknown table" in doris.sql_error("d", "SELECT * FROM gone")
    if not full:
        return

    for name in ("js", "c", "tp"):
        doris.sql("d", UNIQUE.format(name=name, props=""))
    doris.sql("d", UNIQUE.format(name="ga", props=' PROPERTIES ("group_commit_mode" = "async_mode")'))
    doris.sql("d", DUPLICATE.format(name="emptied"))
    body = '[{"k": 1, "v": "j1"}, {"k": 2, "v": "j2"}]'
    assert_doris_result(doris.stream_load("d", "js", body, {"format": "json", "strip_outer_array": "true"}), loaded=2)
    for i in range(5):
        assert_group_reply(doris.stream_load("d", "ga", f"{i},a{i}\n", CSV).json(), mode="async_mode", loaded=1)
    _until(lambda: doris.rows("d", "SELECT count(*) FROM ga") == [[5]] or None)

    keep = doris.precommit("d", "tp", b"1,kept\n", {**CSV, "label": "keep"})
    drop = doris.precommit("d", "tp", b"2,dropped\n", {**CSV, "label": "drop"})
    doris.commit_txn("d", keep)
    aborted = doris.http.put("/api/d/_stream_load_2pc", headers={"txn_id": str(drop), "txn_operation": "abort"})
    assert aborted.json()["status"] == "Success", aborted.text

    for data in ("1,a\n2,b\n", "2,b2\n3,c\n", "4,d\n"):
        assert_doris_result(doris.stream_load("d", "c", data, CSV))
    doris.sql("d", "DELETE FROM c WHERE k = 4")
    assert_doris_result(doris.stream_load("d", "c", "1,a\n", {**CSV, "merge_type": "DELETE"}))
    doris.sql("d", "ADMIN COMPACT TABLE c WHERE TYPE = 'BASE'")

    assert_doris_result(doris.stream_load("d", "emptied", "1,x\n2,y\n", CSV), loaded=2)
    doris.sql("d", "TRUNCATE TABLE emptied")


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def _check(
    spark: Any, root: Path, cwd: Path, caplog: pytest.LogCaptureFixture, *, uris: bool, full: bool, arrow: bool = False
) -> None:
    answers = FULL_ANSWERS if full else ANSWERS
    expected = {name: rows for name, (_, rows) in answers.items()}
    with _run(spark, _settings(root, uris=uris, arrow=arrow)) as doris:
        _workload(doris, caplog, full=full)
        assert _answers(doris, answers) == expected
        if arrow:
            _orphans_go(doris, root / "wh")
    with _run(spark, _settings(root, uris=uris, arrow=arrow)) as doris:  # a restart on the same settings
        assert _answers(doris, answers) == expected
        assert_doris_result(doris.stream_load("d", "one", "8,eight\n", CSV), loaded=1)
        assert doris.rows("d", "SELECT * FROM one ORDER BY k") == [[7, "seven"], [8, "eight"]]

    # every file lies in the data dir, the shared dir or the warehouse; the data dir holds no table or body
    assert sorted(p.name for p in root.iterdir()) == ["data", "shared", "wh"]
    assert list(cwd.iterdir()) == []
    data, shared, warehouse = (_files(root / name) for name in ("data", "shared", "wh"))
    assert {p.name for p in data} >= {"catalog.db", "transactions.db"}
    assert not any(p.suffix in (".parquet", ".csv", ".json") for p in data)
    assert any(p.parent.name == "error_log" for p in shared)
    assert not (root / "shared" / "warehouse").exists()
    tables = {p.relative_to(root / "wh").parts[0] for p in warehouse if p.suffix == ".parquet"}
    assert len(tables) >= len(answers) - (1 if full else 0)  # a location per table with rows (`emptied` aside)
    if arrow:  # Iceberg recorded the URIs Spark was given (Hadoop's `file:/abs`), metadata and data files alike
        from tables.catalog import Catalog
        from tables.rowsets import live_data_files

        handle = Catalog(uri=f"sqlite:///{root / 'data' / 'catalog.db'}", warehouse=root / "wh").load("d", "big")
        assert handle.iceberg.metadata_location.startswith(f"file:{root / 'wh'}/")
        assert all(f.file_path.startswith(f"file:{root / 'wh'}/") for f in live_data_files(handle.iceberg))


def _orphans_go(doris: DorisClient, warehouse: Path) -> None:
    """Maintenance through pyarrow.fs removes a crashed load's files and keeps the live ones."""
    import os

    from tables.maintenance import run_maintenance

    orphan = next(p for p in warehouse.rglob("*.parquet") if "/data/txn_" in str(p)).parent.parent / "txn_999999"
    orphan.mkdir()
    (orphan / "part-0.parquet").write_bytes(b"left by a crash")
    old = time.time() - 3600
    os.utime(orphan / "part-0.parquet", (old, old))
    services = doris.app.state.services  # type: ignore[attr-defined]
    report = run_maintenance(
        services.catalog,
        services.txns,
        staging=services.settings.staging_dir,
        grace_seconds=60,
        snapshot_keep_seconds=3600,
    )
    assert report.files_removed >= 1 and not (orphan / "part-0.parquet").exists()


def test_shared_dir_and_warehouse_given_as_file_uris(
    spark: Any, tmp_path: Path, in_cwd: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _check(spark, tmp_path / "server", in_cwd, caplog, uris=True, full=False)


@pytest.mark.full
@pytest.mark.parametrize(
    ("uris", "arrow"), [(True, False), (False, False), (True, True)], ids=["file-uris", "plain-paths", "via-arrow-fs"]
)
def test_every_load_kind_and_statement_on_file_uris_answers_as_on_plain_paths(
    spark: Any, tmp_path: Path, in_cwd: Path, caplog: pytest.LogCaptureFixture, uris: bool, arrow: bool
) -> None:
    """`via-arrow-fs`: the warehouse through pyarrow.fs with `file:` URIs given to Spark and recorded in Iceberg
    (`SL_WAREHOUSE_VIA_ARROW_FS`), the code path of an `s3a://` or `hdfs://` warehouse."""
    _check(spark, tmp_path / "server", in_cwd, caplog, uris=uris, full=True, arrow=arrow)
