"""The README is the user's manual: every setting is documented and the first lines say how to run and test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.settings import Settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
CODE_BLOCK = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("field", [pytest.param(name, id=f"SL_{name.upper()}") for name in Settings.model_fields])
def test_every_setting_is_documented_in_readme(field: str) -> None:
    assert re.search(rf"`SL_{field.upper()}`", README), f"README.md does not document SL_{field.upper()}"


def test_readme_starts_with_make_run_and_make_test() -> None:
    assert README.startswith("```"), "README.md must open with its code block"
    block = CODE_BLOCK.search(README)
    assert block is not None
    commands = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    assert [c for c in commands if c] == ["make run", "make test"]
