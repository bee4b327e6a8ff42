"""Every case of `shared/conformance/cases` against the real server, one test per case.

Cases that need a later issue are strict expected failures naming the issue, so one that starts
passing must be un-marked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance import run_case
from tests.conftest import SHARED
from tests.helpers import DorisClient

CASES = sorted((SHARED / "conformance" / "cases").glob("*.json"))

LATER: dict[str, str] = {}


def _param(path: Path) -> object:
    reason = LATER.get(path.stem)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(path, id=path.stem, marks=marks)


def test_cases_are_present() -> None:
    assert len(CASES) >= 17


@pytest.mark.parametrize("case", [_param(p) for p in CASES])
def test_conformance_case(case: Path, doris: DorisClient) -> None:
    outcome = run_case(case, doris)
    assert outcome == "passed" or outcome.startswith("stopped at version-sensitive step")
