"""Every case of `tests/data/conformance/cases` (the repo's copy of `shared/conformance`) against the real
server, one test per case.

Cases that need a later issue are strict expected failures naming the issue, so one that starts
passing must be un-marked.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conformance import run_case
from tests.conftest import DATA
from tests.foreign_readers import as_reply, duckdb_rows, pyiceberg_rows
from tests.helpers import DorisClient, table_handle

CASES = sorted((DATA / "conformance" / "cases").glob("*.json"))

LATER: dict[str, str] = {}


def _param(path: Path) -> object:
    reason = LATER.get(path.stem)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(path, id=path.stem, marks=marks)


def test_cases_are_present() -> None:
    assert len(CASES) >= 17


UPSTREAM = Path(__file__).resolve().parents[2] / "shared"


@pytest.mark.skipif(not UPSTREAM.is_dir(), reason="no shared/ checkout beside the repo")
@pytest.mark.parametrize("folder", ["conformance", "seeds"])
def test_the_repo_copy_is_current_with_shared(folder: str) -> None:
    """The suite runs the repo's copy; when the upstream documents sit beside the clone, the copy equals them."""

    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    assert files(DATA / folder) == files(UPSTREAM / folder), f"copy ../shared/{folder} into tests/data/{folder}"


@pytest.mark.parametrize("case", [_param(p) for p in CASES])
def test_conformance_case(case: Path, doris: DorisClient, server_settings: Any) -> None:
    db = f"conf_{uuid.uuid4().hex[:10]}"
    outcome = run_case(case, doris, db=db)
    assert outcome == "passed" or outcome.startswith("stopped at version-sensitive step")
    # merge-on-write tables hold their answer in Iceberg's own terms: foreign readers see `SELECT *`'s rows
    for (name,) in doris.rows(db, "SHOW TABLES"):
        if not table_handle(server_settings, db, name).definition.positional:
            continue
        answer = as_reply(doris.rows(db, f"SELECT * FROM {name}"))
        assert pyiceberg_rows(server_settings.data_dir, db, name) == answer, name
        assert duckdb_rows(server_settings.data_dir, db, name) == answer, name
