"""Front-end mode: the FE port answers stream loads with Doris's 307 to the BE listener (contract §1.2)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import DorisClient, assert_doris_result, curl_stream_load, loopback_socket, serving


@pytest.fixture(scope="module")
def fe_be(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """A server in front-end mode: one app on two loopback sockets (FE, BE)."""
    from app.main import create_app
    from app.settings import Settings

    fe, be = loopback_socket(), loopback_socket()
    be_port = be.getsockname()[1]
    settings = Settings(data_dir=tmp_path_factory.mktemp("fe-data"), fe_redirect=True, be_port=be_port, mysql_port=0)
    with serving(create_app(settings, spark=spark), fe, be, settings=settings) as (fe_url, be_url):
        yield fe_url, be_url


@pytest.fixture
def table(fe_be: tuple[str, str]) -> str:
    db = f"fe_{uuid.uuid4().hex[:8]}"
    client = DorisClient(fe_be[0])
    client.sql(db, f"CREATE DATABASE {db}")
    client.sql(db, "CREATE TABLE t (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1")
    return db


def test_fe_port_answers_307_to_the_be_port_with_credentials(fe_be: tuple[str, str], table: str) -> None:
    fe, be = fe_be
    resp = httpx.put(
        f"{fe}/api/{table}/t/_stream_load?x=1",
        content=b"1,a\n",
        auth=("root", ""),
        headers={"Expect": "100-continue", "column_separator": ","},
    )
    assert resp.status_code == 307
    port = be.rsplit(":", 1)[1]
    assert resp.headers["location"] == f"http://root:@127.0.0.1:{port}/api/{table}/t/_stream_load?x=1"
    assert DorisClient(fe).rows(table, "SELECT count(*) FROM t") == [[0]]


def test_fe_requires_expect_and_valid_credentials(fe_be: tuple[str, str], table: str) -> None:
    fe, _ = fe_be
    no_expect = httpx.put(f"{fe}/api/{table}/t/_stream_load", content=b"1,a\n", auth=("root", ""))
    assert no_expect.json() == {"status": "FAILED", "msg": "There is no 100-continue header"}
    bad = httpx.put(
        f"{fe}/api/{table}/t/_stream_load", content=b"1,a\n", auth=("root", "nope"), headers={"Expect": "100-continue"}
    )
    assert_doris_result(bad, status="Fail", message_contains="[NOT_AUTHORIZED]")


def test_curl_location_trusted_follows_the_redirect(fe_be: tuple[str, str], table: str, tmp_path: Path) -> None:
    fe, _ = fe_be
    data = tmp_path / "data.csv"
    data.write_text("1,a\n2,b\n")
    headers = {"column_separator": ",", "label": "curl_fe"}
    reply = curl_stream_load(f"{fe}/api/{table}/t/_stream_load", headers, path=str(data))
    assert_doris_result(reply, loaded=2)
    assert DorisClient(fe).rows(table, "SELECT * FROM t ORDER BY k") == [[1, "a"], [2, "b"]]


@pytest.mark.parametrize("through", ["fe", "be"])
@pytest.mark.parametrize(
    "headers, data",
    [
        pytest.param({"format": "csv", "column_separator": ","}, "3,c\n4,d\n", id="csv"),
        pytest.param(
            {"format": "json", "read_json_by_line": "true"}, '{"k": 3, "v": "c"}\n{"k": 4, "v": "d"}\n', id="json"
        ),
    ],
)
def test_pydoris_client_loads_directly_and_through_redirect(
    fe_be: tuple[str, str], table: str, through: str, headers: dict[str, str], data: str
) -> None:
    """pydoris's `DorisClient.write` (the package itself), to the FE port (307 to the BE) or the BE port."""
    from pydoris.doris_client import DorisClient as PyDorisClient

    base = fe_be[0] if through == "fe" else fe_be[1]
    client = PyDorisClient("127.0.0.1", base.rsplit(":", 1)[1], "root", "")
    client.options.set_label(f"py_{uuid.uuid4().hex[:8]}")
    if headers.get("format") == "json":
        client.options.set_json_format()
    for key, value in headers.items():
        client.options.set_option(key, value)
    assert client.write(table, "t", data) is True
    assert DorisClient(fe_be[0]).rows(table, "SELECT * FROM t ORDER BY k") == [[3, "c"], [4, "d"]]


def test_a_redirect_logs_one_line_without_the_password(fe_be: tuple[str, str], table: str) -> None:
    """The FE's 307 is logged by `app.load` (the access line is off for stream loads); the Location, which holds
    the client's password, is not in it."""
    import json
    import logging

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger, keep = logging.getLogger("app.load"), Keep()
    level = logger.level
    logger.addHandler(keep)
    logger.setLevel(logging.INFO)
    try:
        resp = httpx.put(
            f"{fe_be[0]}/api/{table}/t/_stream_load",
            content=b"1,a\n",
            auth=("root", ""),
            headers={"Expect": "100-continue", "label": "redirected_once"},
        )
    finally:
        logger.removeHandler(keep)
        logger.setLevel(level)
    assert resp.status_code == 307
    records = [json.loads(line) for line in lines if "redirected_once" in line]
    assert [(r["event"], r["db"], r["table"], r["http_status"]) for r in records] == [
        ("stream_load_redirect", table, "t", 307)
    ]
    assert not [line for line in lines if "127.0.0.1" in line or "root:" in line], lines
