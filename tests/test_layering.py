"""The architecture, read from the source with `ast` (nothing is imported):

    app            HTTP (FastAPI / starlette); may import every layer, but pyspark / pyiceberg only lazily
    sql            SQL statements over HTTP        → sql, spark_runner, loaders, tables
    spark_runner   the Spark data pipeline         → spark_runner, loaders, tables
    loaders        headers, expressions, staging   → loaders, tables
    tables         the Iceberg catalog and specs   → tables

Only `app` speaks HTTP: no other layer imports fastapi or starlette. `loaders` and `tables` never touch
pyspark, not even inside a function.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ALLOWED_LAYERS: dict[str, frozenset[str]] = {
    "app": frozenset({"app", "sql", "spark_runner", "loaders", "tables"}),
    "sql": frozenset({"sql", "spark_runner", "loaders", "tables"}),
    "spark_runner": frozenset({"spark_runner", "loaders", "tables"}),
    "loaders": frozenset({"loaders", "tables"}),
    "tables": frozenset({"tables"}),
}
LAYERS = frozenset(ALLOWED_LAYERS)
HTTP = frozenset({"fastapi", "starlette"})
NO_HTTP = frozenset({"sql", "spark_runner", "loaders", "tables"})
NO_SPARK = frozenset({"loaders", "tables"})
# Heavy engines `app` may only import inside a function or under `if TYPE_CHECKING:`.
APP_LAZY = frozenset({"pyspark", "pyiceberg"})


@dataclass(frozen=True)
class Import:
    module: str  # the top-level name, e.g. "pyspark" for `from pyspark.sql import functions`
    line: int
    lazy: bool  # inside a function/lambda or under `if TYPE_CHECKING:`: not run when the module is imported


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _package_parts(path: Path) -> list[str]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return parts if parts[-1] == "__init__" else parts[:-1]


def collect_imports(source: str, path: Path) -> list[Import]:
    """Every import of a module: `import x`, `from x import y`, relative imports resolved against the file's
    package, and `importlib.import_module("x")` / `__import__("x")` with a literal name."""
    package = _package_parts(path)
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name.split(".")[0], node.lineno, lazy) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] or package[:1]
                found.append(Import(base[0], node.lineno, lazy))
            elif node.module != "__future__":
                found.append(Import(node.module.split(".")[0], node.lineno, lazy))  # type: ignore[union-attr]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append(Import(node.args[0].value.lstrip(".").split(".")[0], node.lineno, lazy))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for child in ast.iter_child_nodes(node):
                visit(child, True)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            visit(node.test, lazy)
            for child in node.body:
                visit(child, True)
            for child in node.orelse:  # the `else:` of `if TYPE_CHECKING:` runs at import time
                visit(child, lazy)
        else:
            for child in ast.iter_child_nodes(node):
                visit(child, lazy)

    visit(ast.parse(source, filename=str(path)), False)
    return found


def violations(path: Path) -> list[str]:
    """What a module imports against the rules, one line each; empty when it follows them."""
    layer = path.relative_to(ROOT).parts[0]
    out: list[str] = []
    for imp in collect_imports(path.read_text(encoding="utf-8"), path):
        where = f"line {imp.line}: {layer} imports {imp.module}"
        if imp.module in HTTP and layer in NO_HTTP:
            out.append(f"{where} (only app speaks HTTP)")
        if imp.module == "pyspark" and layer in NO_SPARK:
            out.append(f"{where} ({layer} never touches Spark, not even inside a function)")
        if imp.module in LAYERS and imp.module not in ALLOWED_LAYERS[layer]:
            out.append(
                f"{where} (imports point down the layers: {layer} may import "
                f"{', '.join(sorted(ALLOWED_LAYERS[layer]))})"
            )
        if layer == "app" and imp.module in APP_LAZY and not imp.lazy:
            out.append(f"{where} at module top level (import it inside a function or under TYPE_CHECKING)")
    return out


MODULES = sorted(p for layer in sorted(LAYERS) for p in (ROOT / layer).rglob("*.py"))


def test_every_layer_has_modules() -> None:
    assert {p.relative_to(ROOT).parts[0] for p in MODULES} == LAYERS


@pytest.mark.parametrize("module", [pytest.param(p, id=p.relative_to(ROOT).as_posix()) for p in MODULES])
def test_module_respects_the_layering(module: Path) -> None:
    assert violations(module) == []


# --- the collector itself ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "source", "expected"),
    [
        pytest.param("app/x.py", "import pyspark.sql", [Import("pyspark", 1, False)], id="dotted-import"),
        pytest.param(
            "app/x.py", "from pyiceberg.catalog import load_catalog", [Import("pyiceberg", 1, False)], id="from-import"
        ),
        pytest.param("app/x.py", "from __future__ import annotations", [], id="future-import-is-not-a-dependency"),
        pytest.param(
            "app/x.py",
            "def f():\n    import pyspark",
            [Import("pyspark", 2, True)],
            id="import-inside-a-function-is-lazy",
        ),
        pytest.param(
            "app/x.py",
            "async def f():\n    from pyspark.sql import SparkSession",
            [Import("pyspark", 2, True)],
            id="import-inside-an-async-function-is-lazy",
        ),
        pytest.param(
            "app/x.py",
            "class C:\n    import pyspark",
            [Import("pyspark", 2, False)],
            id="import-in-a-class-body-runs-at-import-time",
        ),
        pytest.param(
            "app/x.py",
            "try:\n    import pyspark\nexcept ImportError:\n    pass",
            [Import("pyspark", 2, False)],
            id="import-inside-try-runs-at-import-time",
        ),
        pytest.param(
            "app/x.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pyspark",
            [Import("typing", 1, False), Import("pyspark", 3, True)],
            id="type-checking-import-is-lazy",
        ),
        pytest.param(
            "app/x.py",
            "import typing\nif typing.TYPE_CHECKING:\n    import pyspark",
            [Import("typing", 1, False), Import("pyspark", 3, True)],
            id="typing-dot-type-checking-import-is-lazy",
        ),
        pytest.param(
            "app/x.py",
            "if TYPE_CHECKING:\n    pass\nelse:\n    import pyspark",
            [Import("pyspark", 4, False)],
            id="else-of-type-checking-runs-at-import-time",
        ),
        pytest.param(
            "app/x.py",
            "if DEBUG:\n    import pyspark",
            [Import("pyspark", 2, False)],
            id="other-if-runs-at-import-time",
        ),
        pytest.param(
            "loaders/formats/csv.py",
            "from . import x",
            [Import("loaders", 1, False)],
            id="relative-import-resolves-to-own-layer",
        ),
        pytest.param(
            "loaders/formats/csv.py",
            "from ..errors import BadHeader",
            [Import("loaders", 1, False)],
            id="parent-relative-import-resolves-to-own-layer",
        ),
        pytest.param(
            "tables/x.py",
            "import importlib\nimportlib.import_module('pyspark.sql')",
            [Import("importlib", 1, False), Import("pyspark", 2, False)],
            id="import-module-call",
        ),
        pytest.param(
            "tables/x.py", "__import__('starlette')", [Import("starlette", 1, False)], id="dunder-import-call"
        ),
    ],
)
def test_collector_finds_imports(path: str, source: str, expected: list[Import]) -> None:
    assert collect_imports(source, ROOT / path) == expected


@pytest.mark.parametrize(
    ("path", "source", "message_part"),
    [
        pytest.param(
            "loaders/x.py",
            "from fastapi import Request",
            "loaders imports fastapi (only app speaks HTTP)",
            id="loaders-importing-fastapi",
        ),
        pytest.param(
            "sql/x.py",
            "def f():\n    from starlette.responses import Response",
            "sql imports starlette (only app speaks HTTP)",
            id="sql-importing-starlette-in-a-function",
        ),
        pytest.param(
            "spark_runner/x.py",
            "import starlette",
            "spark_runner imports starlette",
            id="spark-runner-importing-starlette",
        ),
        pytest.param(
            "tables/x.py",
            "def f():\n    import pyspark",
            "tables imports pyspark (tables never touches Spark",
            id="tables-importing-pyspark-in-a-function",
        ),
        pytest.param(
            "loaders/x.py",
            "if TYPE_CHECKING:\n    from pyspark.sql import DataFrame",
            "loaders imports pyspark",
            id="loaders-importing-pyspark-for-type-checking",
        ),
        pytest.param(
            "tables/x.py",
            "from loaders.headers import LoadRequest",
            "tables imports loaders (imports point down",
            id="tables-importing-loaders",
        ),
        pytest.param(
            "loaders/x.py",
            "from spark_runner.types import x",
            "loaders imports spark_runner",
            id="loaders-importing-spark-runner",
        ),
        pytest.param("loaders/x.py", "import sql.tokens", "loaders imports sql", id="loaders-importing-sql"),
        pytest.param(
            "spark_runner/x.py",
            "from sql.tokens import Cursor",
            "spark_runner imports sql",
            id="spark-runner-importing-sql",
        ),
        pytest.param("sql/x.py", "from app.settings import Settings", "sql imports app", id="sql-importing-app"),
        pytest.param(
            "app/x.py",
            "from pyspark.sql import SparkSession",
            "app imports pyspark at module top level",
            id="app-importing-pyspark-at-top-level",
        ),
        pytest.param(
            "app/x.py",
            "import pyiceberg.catalog",
            "app imports pyiceberg at module top level",
            id="app-importing-pyiceberg-at-top-level",
        ),
    ],
)
def test_violation_is_reported(
    path: str, source: str, message_part: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / path
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text(source, encoding="utf-8")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    found = violations(module)
    assert any(message_part in v for v in found), found


@pytest.mark.parametrize(
    ("path", "source"),
    [
        pytest.param("app/x.py", "def f():\n    from pyspark.sql import SparkSession", id="app-pyspark-in-a-function"),
        pytest.param("app/x.py", "if TYPE_CHECKING:\n    import pyiceberg", id="app-pyiceberg-for-type-checking"),
        pytest.param("app/x.py", "import fastapi\nimport sql\nimport tables", id="app-importing-http-and-layers"),
        pytest.param(
            "sql/x.py", "import pyspark\nimport spark_runner\nimport loaders", id="sql-importing-lower-layers"
        ),
        pytest.param(
            "spark_runner/x.py",
            "import pyspark\nimport loaders\nimport tables",
            id="spark-runner-importing-lower-layers",
        ),
        pytest.param(
            "loaders/x.py", "import sqlglot\nfrom tables.load_spec import Expr", id="loaders-importing-tables"
        ),
        pytest.param("tables/x.py", "import pyiceberg\nfrom . import errors", id="tables-importing-pyiceberg"),
    ],
)
def test_allowed_import_is_not_reported(
    path: str, source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / path
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text(source, encoding="utf-8")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert violations(module) == []
