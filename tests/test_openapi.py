"""`openapi/openapi.json` is the app's own description, kept in step with the code, and an SDK generated from it
with openapi-python-client works against the real server."""

from __future__ import annotations

import base64
import importlib
import json
import subprocess
import sys
import uuid
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from app.openapi import SPEC_PATH, render
from app.settings import Settings
from loaders.options import LOAD_OPTIONS
from tests.helpers import DORIS_LOAD_KEYS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return json.loads(SPEC_PATH.read_text())  # type: ignore[no-any-return]


def test_committed_spec_matches_the_app(tmp_path: Path) -> None:
    generated = render(create_app(Settings(data_dir=tmp_path)))
    assert generated == SPEC_PATH.read_text(), "openapi/openapi.json is stale: run `make openapi` and commit it"


def test_every_load_option_is_a_parameter_with_its_default_and_values(spec: dict[str, Any]) -> None:
    """Walks the option table (`loaders/options.py`): each option and alias is a header parameter, typed, with
    the table's documented default and values; the spec has no header the table does not know."""
    operation = spec["paths"]["/api/{db}/{table}/_stream_load"]["put"]
    params = {p["name"]: p for p in operation["parameters"] if p["in"] == "header"}
    for option in LOAD_OPTIONS:
        param = params.pop(option.name)
        assert param["description"] == option.description
        assert param["schema"]["type"] == option.kind
        assert param["schema"].get("default") == option.documented_default, option.name
        documented = option.documented_values if option.kind != "boolean" else ()
        assert tuple(param["schema"].get("enum", ())) == documented, option.name
        assert (param["schema"].get("minimum"), param["schema"].get("maximum")) == (option.minimum, option.maximum)
        for alias in option.aliases:
            assert params.pop(alias)["schema"]["type"] == option.kind
    assert params == {}
    assert operation["requestBody"]["content"]["application/octet-stream"]["schema"] == {
        "type": "string",
        "format": "binary",
    }
    assert operation["security"] == [{"basicAuth": []}]


def test_reply_schema_has_dorises_field_names(spec: dict[str, Any]) -> None:
    reply = spec["components"]["schemas"]["LoadResult"]
    assert set(DORIS_LOAD_KEYS) <= set(reply["properties"])
    assert set(reply["properties"]) - set(DORIS_LOAD_KEYS) == {
        "ExistingJobStatus",
        "ErrorURL",
        "FirstErrorMsg",
        "GroupCommit",  # group-commit replies, as Doris's
        "GroupCommitMode",
        "LoadId",
    }
    # a group-commit reply omits these, as Doris's does: an SDK must not require them
    omitted = {"TwoPhaseCommit", "BeginTxnTimeMs", "CommitAndPublishTimeMs"}
    assert set(reply["required"]) == set(DORIS_LOAD_KEYS) - omitted
    assert spec["components"]["securitySchemes"]["basicAuth"] == {
        "type": "http",
        "scheme": "basic",
        "description": "Users root and admin, password SL_ROOT_PASSWORD.",
    }
    for path, operation_id in [
        ("/api/query/{ns}/{db}", "query"),
        ("/api/{db}/get_load_state", "get_load_state"),
        ("/api/_load_error_log", "load_error_log"),
        ("/api/{db}/{table}/_schema", "table_schema"),
        ("/api/health", "health"),
    ]:
        assert operation_id in {op["operationId"] for op in spec["paths"][path].values()}


@pytest.fixture(scope="module")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The SDK a user generates: `openapi-python-client generate --path openapi/openapi.json`."""
    out = tmp_path_factory.mktemp("sdk")
    config = out / "config.json"
    config.write_text(json.dumps({"post_hooks": []}))
    package = f"doris_sdk_{uuid.uuid4().hex[:8]}"
    subprocess.run(
        [
            str(Path(sys.executable).with_name("openapi-python-client")),
            "generate",
            "--path",
            str(SPEC_PATH),
            "--meta",
            "none",
            "--output-path",
            str(out / package),
            "--config",
            str(config),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module(package)
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[name]


def test_generated_sdk_creates_loads_with_label_and_sequence_and_reads_back(sdk: Any, base_url: str, db: str) -> None:
    api = importlib.import_module(f"{sdk.__name__}.api.default")
    types = importlib.import_module(f"{sdk.__name__}.types")
    query = importlib.import_module(f"{api.__name__}.query")
    stream_load = importlib.import_module(f"{api.__name__}.stream_load")
    load_state = importlib.import_module(f"{api.__name__}.get_load_state")
    request_model = importlib.import_module(f"{sdk.__name__}.models").QueryRequest
    client = sdk.AuthenticatedClient(base_url=base_url, token=base64.b64encode(b"root:").decode(), prefix="Basic")

    def sql(stmt: str) -> Any:
        reply = query.sync("default_cluster", db, client=client, body=request_model(stmt=stmt))
        assert reply.code == 0, reply
        return reply.data

    sql(
        "CREATE TABLE t (k BIGINT, v VARCHAR(16), s INT) UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 1 "
        "PROPERTIES ('function_column.sequence_type' = 'int')"
    )
    label = f"sdk_{uuid.uuid4().hex[:8]}"
    result = stream_load.sync(
        db,
        "t",
        client=client,
        body=types.File(payload=BytesIO(b"1,new,5\n1,old,3\n2,x,1\n"), file_name="data.csv"),
        label=label,
        column_separator=",",
        columns="k, v, s",
        function_column_sequence_col="s",
    )
    assert (result.status, result.label, result.number_loaded_rows) == ("Success", label, 3), result
    assert load_state.sync(db, client=client, label=label).data == "VISIBLE"
    again = stream_load.sync(
        db,
        "t",
        client=client,
        body=types.File(payload=BytesIO(b"1,z,9\n")),
        label=label,
        column_separator=",",
        function_column_sequence_col="s",
    )
    assert again.status == "Label Already Exists", again.message
    grouped = stream_load.sync(
        db,
        "t",
        client=client,
        body=types.File(payload=BytesIO(b"3,g,1\n")),
        column_separator=",",
        function_column_sequence_col="s",
        group_commit="sync_mode",
    )
    assert (grouped.status, grouped.group_commit, grouped.number_loaded_rows) == ("Success", True, 1), grouped
    rows = sql("SELECT k, v, s FROM t ORDER BY k")
    assert [m.name for m in rows.meta] == ["k", "v", "s"]
    assert rows.data == [[1, "new", 5], [2, "x", 1], [3, "g", 1]]


def test_generated_sdk_sends_the_credentials_of_a_user_holding_only_load_priv(
    sdk: Any, served_app: Any, base_url: str, db: str
) -> None:
    from tables.accounts import Identity, Priv, Scope, native_password_hash
    from tests.helpers import DorisClient

    stream_load = importlib.import_module(f"{sdk.__name__}.api.default.stream_load")
    types = importlib.import_module(f"{sdk.__name__}.types")
    for table in ("t", "other"):
        DorisClient(base_url).sql(
            db, f"CREATE TABLE {table} (k INT, v VARCHAR(8)) UNIQUE KEY(k) DISTRIBUTED BY HASH(k)"
        )
    user = f"sdk_{uuid.uuid4().hex[:6]}"
    accounts = served_app.state.services.accounts
    accounts.create_user(Identity(user), native_password_hash("pw"))
    accounts.grant(Priv.LOAD, Scope(db, "t"), user=Identity(user))
    token = base64.b64encode(f"{user}:pw".encode()).decode()
    client = sdk.AuthenticatedClient(base_url=base_url, token=token, prefix="Basic")

    def load(table: str) -> Any:
        body = types.File(payload=BytesIO(b"1,a\n"), file_name="data.csv")
        return stream_load.sync(db, table, client=client, body=body, column_separator=",")

    assert load("t").status == "Success"
    refused = load("other")
    assert refused.status == "Fail"
    assert refused.message == f"[NOT_AUTHORIZED]LOAD command denied to user '{user}'@'%' for table '{db}.other'"
