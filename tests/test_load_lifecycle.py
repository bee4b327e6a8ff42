"""The life of a stream load below the app (loads/lifecycle.py) and the one `LoadResult` renderer.

No Spark and no server: the lifecycle runs against a stand-in load service whose label claims and aborts are
the real transaction store's, written through the real writer. A failure injected at each step must leave
the label free and no staged file behind.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.requests import Request

from app.responses import doris_error
from loaders.headers import parse_load_request
from loaders.staging import BodyLimits
from loads.lifecycle import StreamLoads
from spark_runner.service import LoadService, PreparedLoad
from tables.commit import TableWriter
from tables.errors import (
    AnalysisError,
    BadRequest,
    DataQualityError,
    DorisError,
    LabelAlreadyExists,
    LoadError,
    LoadTimeout,
    NotAuthorized,
    SqlError,
    TableNotFound,
    TxnOperationError,
)
from tables.load_spec import LoadRequest, LoadResult, render_load
from tables.pause import PausePoints
from tables.transactions import ABORTED, PREPARE, VISIBLE, TransactionStore

LIMITS = BodyLimits(
    max_body_bytes=1000,
    max_json_body_bytes=100,
    max_line_bytes=50,
    max_decompressed_bytes=10_000,
    max_decompression_ratio=100.0,
    body_idle_timeout_seconds=5.0,
    body_total_timeout_seconds=30.0,
)


@dataclass
class Planned:
    """A prepared load as a step's `Deferred` (a class of its own: steps recognise a `Deferred` by its class)."""

    prepared: PreparedLoad

    def flush(self) -> None:
        pass

    def finish(self) -> PreparedLoad:
        return self.prepared

    def fail(self, error: BaseException) -> None:
        pass


class StandInService:
    """`LoadService`'s surface the lifecycle uses: real label claims and aborts, a run that can be made to fail."""

    def __init__(self, data_dir: Path) -> None:
        self.txns = TransactionStore(data_dir / "txns.db")
        self.writer = TableWriter(None, self.txns, pauses=PausePoints())  # type: ignore[arg-type]  # no catalog
        self.fail: BaseException | None = None  # raised by `prepare` or `run_staged` (`fail_at`)
        self.fail_at = ""
        self.ran: list[Path] = []
        self.hold: tuple[threading.Event, threading.Event] | None = None  # (planning, go on): holds `prepare`

    def prepare(self, load: LoadRequest) -> PreparedLoad:
        if self.fail_at == "prepare":
            assert self.fail is not None
            raise self.fail
        txn_id = self.writer.begin(load.db, load.table, load.label)
        if self.hold is not None:  # the label is claimed; the planning goes on once the test says so
            self.hold[0].set()
            self.hold[1].wait(10)
        table = SimpleNamespace(name=load.table, properties={})
        plan = SimpleNamespace(request=load, table=table, reads_stored=False)
        return PreparedLoad(plan=plan, txn_id=txn_id, started=time.monotonic(), begin_txn_ms=0, plan_ms=0)  # type: ignore[arg-type]

    def prepare_later(self, load: LoadRequest) -> Planned:
        """`prepare` as a step's `Deferred` (`LoadService.prepare_later`)."""
        return Planned(self.prepare(load))

    abort = LoadService.abort
    cleanup_staged = LoadService.cleanup_staged
    prestage = LoadService.prestage

    def run_staged(self, prepared: PreparedLoad, path: Path, *, load_bytes: int, receive_ms: int = 0) -> LoadResult:
        self.ran.append(path)
        assert path.read_bytes() == b"1,a\n2,b\n", "the run reads the plain staged body"
        if self.fail_at == "run":
            assert self.fail is not None
            raise self.fail
        self.txns.transition(prepared.txn_id, (PREPARE,), VISIBLE)
        return render_load(txn_id=prepared.txn_id, label=prepared.request.label, load_bytes=load_bytes)


@pytest.fixture
def service(tmp_path: Path) -> StandInService:
    return StandInService(tmp_path)


def loads(service: StandInService, tmp_path: Path) -> StreamLoads:
    return StreamLoads(service, None, tmp_path / "staging", LIMITS)  # type: ignore[arg-type]


async def chunks(*parts: bytes, fail: BaseException | None = None) -> AsyncIterator[bytes]:
    for part in parts:
        yield part
    if fail is not None:
        raise fail


def request(label: str = "l1", **headers: str) -> LoadRequest:
    return parse_load_request("db", "t", {"label": label, "column_separator": ",", **headers})


def run(
    service: StandInService, tmp_path: Path, body: AsyncIterator[bytes], *, expected: int | None = None, **headers: str
) -> LoadResult:
    return asyncio.run(loads(service, tmp_path).run(request(**headers), body, expected=expected))


def assert_label_free(service: StandInService, tmp_path: Path) -> None:
    """Nothing holds the label (a new load may take it) and nothing is left in the staging directory."""
    txn = service.txns.find_label("db", "l1")
    assert txn is None or txn.state == ABORTED, txn
    assert not list((tmp_path / "staging").glob("*")) if (tmp_path / "staging").exists() else True


BODY = b"1,a\n2,b\n"


def test_a_load_runs_the_staged_body_and_keeps_its_label(service: StandInService, tmp_path: Path) -> None:
    result = run(service, tmp_path, chunks(BODY[:3], BODY[3:]), expected=len(BODY))
    assert (result.status, result.load_bytes) == ("Success", len(BODY))
    assert service.txns.label_state("db", "l1") == VISIBLE
    assert service.ran and not service.ran[0].exists(), "the staged body is removed after the run"


@pytest.mark.parametrize(
    "fail_at, error, body, expected, headers, status, message",
    [
        pytest.param(
            "prepare", TableNotFound("db", "t"), BODY, None, {}, "Fail", "detailMessage = Unknown table 't'", id="plan"
        ),
        pytest.param(
            "prepare",
            LabelAlreadyExists("l1", 7, "VISIBLE"),
            BODY,
            None,
            {},
            "Label Already Exists",
            "[LABEL_ALREADY_EXISTS]",
            id="label-held",
        ),
        pytest.param("", None, BODY, 2000, {}, "Fail", "streaming_load_max_mb", id="announced-too-large"),
        pytest.param("", None, BODY * 200, None, {}, "Fail", "exceeds the limit of 1000 bytes", id="too-large"),
        pytest.param("", None, BODY, 99, {}, "Fail", "receive body don't equal with body bytes", id="short-body"),
        pytest.param("", None, b"x" * 60 + b"\n", None, {}, "Fail", "longer than 50 bytes", id="long-line"),
        pytest.param(
            "", None, b"not gzip", None, {"compress_type": "gz"}, "Fail", "failed to decompress", id="decompress"
        ),
        pytest.param(
            "", ConnectionResetError("gone"), BODY, None, {}, "Fail", "failed to receive body: gone", id="client-gone"
        ),
        pytest.param("", LoadTimeout("too slow"), BODY, None, {}, "Fail", "[TIMEOUT]too slow", id="body-timeout"),
    ],
)
def test_a_failure_at_each_step_frees_the_label_and_the_staging(
    service: StandInService,
    tmp_path: Path,
    fail_at: str,
    error: BaseException | None,
    body: bytes,
    expected: int | None,
    headers: dict[str, str],
    status: str,
    message: str,
) -> None:
    service.fail_at, service.fail = fail_at, error
    stream = chunks(body, fail=error if not fail_at else None)
    result = run(service, tmp_path, stream, expected=expected, **headers)
    assert result.status == status
    assert message in result.message
    assert result.label == "l1"
    assert not service.ran
    assert_label_free(service, tmp_path)
    if fail_at != "prepare":  # the same label loads once the failed load is gone
        service.fail_at, service.fail = "", None
        assert run(service, tmp_path, chunks(BODY)).status == "Success"


def test_a_bug_while_running_aborts_removes_staging_and_propagates(service: StandInService, tmp_path: Path) -> None:
    service.fail_at, service.fail = "run", RuntimeError("a bug")
    with pytest.raises(RuntimeError, match="a bug"):
        run(service, tmp_path, chunks(BODY))
    assert service.txns.label_state("db", "l1") == ABORTED
    assert service.ran and not service.ran[0].exists()
    assert_label_free(service, tmp_path)


def test_a_load_cancelled_while_it_is_planned_leaves_its_label_free(service: StandInService, tmp_path: Path) -> None:
    # the planning (label claim) runs on a step thread and is not stopped midway: the load's task, cancelled
    # meanwhile (the server stopping), gets the cancellation, and the claim it would have got is undone
    planning, go_on = threading.Event(), threading.Event()
    service.hold = (planning, go_on)

    async def cancelled_while_planned() -> None:
        task = asyncio.create_task(loads(service, tmp_path).run(request(), chunks(BODY), expected=None))
        assert await asyncio.to_thread(planning.wait, 10), "the load never started planning"
        assert service.txns.label_state("db", "l1") == PREPARE
        task.cancel()
        go_on.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        deadline = time.monotonic() + 10
        while service.txns.label_state("db", "l1") != ABORTED:
            assert time.monotonic() < deadline, service.txns.label_state("db", "l1")
            await asyncio.sleep(0.01)

    asyncio.run(cancelled_while_planned())
    assert not service.ran
    assert_label_free(service, tmp_path)
    service.hold = None
    assert run(service, tmp_path, chunks(BODY)).status == "Success"


# -- the one renderer ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error, fields, expected",
    [
        pytest.param(None, {"label": "a"}, {"Status": "Success", "Message": "OK", "Label": "a"}, id="success"),
        pytest.param(
            LabelAlreadyExists("a", 3, "PREPARE"),
            {"label": "a", "txn_id": 9, "comment": "c"},
            {
                "Status": "Label Already Exists",
                "TxnId": -1,
                "ExistingJobStatus": "RUNNING",
                "Comment": "c",
                "Message": "[LABEL_ALREADY_EXISTS]TStatus: errCode = 2, detailMessage = Label [a] has already been "
                "used, relate to txn [3], status [PREPARE].",
            },
            id="label-clash",
        ),
        pytest.param(
            BadRequest("bad"),
            {"txn_id": 4},
            {"Status": "Fail", "Message": "[INVALID_ARGUMENT]bad", "TxnId": 4},
            id="load",
        ),
        pytest.param(
            AnalysisError("no column x"),
            {},
            {"Message": "[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = no column x"},
            id="analysis",
        ),
        pytest.param(
            DorisError("Unknown database 'd'"),
            {},
            {"Status": "Fail", "Message": "[ANALYSIS_ERROR]TStatus: errCode = 2, detailMessage = Unknown database 'd'"},
            id="doris",
        ),
        pytest.param(RuntimeError("boom"), {}, {"Status": "Fail", "Message": "[INTERNAL_ERROR]boom"}, id="bug"),
        pytest.param(
            DataQualityError("too many filtered rows", error_url="/api/_load_error_log?file=x"),
            {"number_total_rows": 5, "number_loaded_rows": 4},
            {
                "Message": "[DATA_QUALITY_ERROR]too many filtered rows",
                "ErrorURL": "/api/_load_error_log?file=x",
                "NumberTotalRows": 5,
                "NumberLoadedRows": 0,
            },
            id="data-quality",
        ),
        pytest.param(
            LoadError("x"), {"message": "worded by the caller"}, {"Message": "worded by the caller"}, id="message"
        ),
    ],
)
def test_render_load(error: BaseException | None, fields: dict[str, Any], expected: dict[str, object]) -> None:
    reply = render_load(error, **fields).to_doris()
    assert {key: reply.get(key) for key in expected} == expected


def test_load_result_is_built_in_one_place() -> None:
    """Every `LoadResult` comes from `render_load`: no other module constructs one."""
    root = Path(__file__).resolve().parent.parent
    builders = [
        f"{path.relative_to(root)}:{n}"
        for package in ("app", "loaders", "loads", "spark_runner", "sql", "tables")
        for path in sorted((root / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "LoadResult(" in line and not line.lstrip().startswith("class ")
    ]
    assert [b.split(":")[0] for b in builders] == ["tables/load_spec.py"], builders


# -- the one exception handler: each route family's shape ----------------------------------------------------


def _request(path: str) -> Request:
    return Request({"type": "http", "method": "PUT", "path": path, "headers": [(b"label", b"l9")], "query_string": b""})


@pytest.mark.parametrize(
    "path, error, body",
    [
        pytest.param(
            "/api/db/_stream_load_2pc",
            TxnOperationError("ANALYSIS_ERROR", "no such txn"),
            '{\n    "status": "ANALYSIS_ERROR",\n    "msg": "no such txn"\n}',
            id="2pc",
        ),
        pytest.param(
            "/api/db/_stream_load_2pc",
            NotAuthorized("no valid Basic authorization"),
            {"msg": "Unauthorized", "code": 401, "data": "no valid Basic authorization", "count": 0},
            id="2pc-auth",
        ),
        pytest.param(
            "/api/db/t/_schema",
            TableNotFound("db", "t"),
            {"msg": "Error", "code": 1, "data": "Unknown table 't' in database 'db'", "count": 0},
            id="fe",
        ),
        pytest.param(
            "/api/query/default_cluster/db",
            SqlError("bad sql"),
            {
                "msg": "Error",
                "code": 1,
                "data": "Failed to execute sql: errCode = 2, detailMessage = bad sql",
                "count": 0,
            },
            id="query-sql",
        ),
        pytest.param(
            "/api/query/default_cluster/db",
            BadRequest("too big"),
            {"msg": "Bad Request", "code": 403, "data": "too big", "count": 0},
            id="query-body",
        ),
        pytest.param(
            "/api/db/t/_stream_load",
            BadRequest("escaped the route"),
            {"Status": "Fail", "Label": "l9"},
            id="load-last-resort",
        ),
    ],
)
def test_doris_errors_render_in_their_route_family(path: str, error: Exception, body: object) -> None:
    response = doris_error(_request(path), error)
    assert response.status_code == 200
    text = bytes(response.body).decode()
    if isinstance(body, str):
        assert text == body
    else:
        assert isinstance(body, dict)
        reply = json.loads(text)
        assert {key: reply.get(key) for key in body} == body


def test_the_error_log_refuses_with_a_basic_challenge() -> None:
    response = doris_error(_request("/api/_load_error_log"), NotAuthorized("no valid Basic authorization"))
    assert (response.status_code, response.headers["WWW-Authenticate"]) == (401, 'Basic realm="doris"')
    assert bytes(response.body) == b"no valid Basic authorization\n"
