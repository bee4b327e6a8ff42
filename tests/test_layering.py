"""The architecture, read from the source with `ast` (nothing is imported but by the one test that confirms the
app's imports in a fresh interpreter):

    app            HTTP (FastAPI / starlette)      → every layer; pyspark / pyiceberg / py4j never at import time
    sql            SQL statements over HTTP        → sql, spark_runner, loaders, tables
    loads          the life of a load              → loads, spark_runner, loaders, tables
    spark_runner   the Spark data pipeline         → spark_runner, tables
    loaders        headers, expressions, staging   → loaders, tables
    tables         the Iceberg catalog and specs   → tables

Only `app` speaks HTTP: no other layer imports fastapi or starlette. `loaders` and `tables` never touch
pyspark, not even inside a function. `loaders` builds the `LoadRequest` and `spark_runner` consumes it without
either importing the other (docs/design.md); LAYER_DEBT names the modules that still do, each with its reason.
"App imports no engine at import time" holds transitively: no chain of top-level imports from an app module
through the project's modules reaches pyspark, pyiceberg or py4j (the app starts, answers a bad command line and
renders its OpenAPI without loading Spark).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ALLOWED_LAYERS: dict[str, frozenset[str]] = {
    "app": frozenset({"app", "sql", "loads", "spark_runner", "loaders", "tables"}),
    "sql": frozenset({"sql", "spark_runner", "loaders", "tables"}),
    "loads": frozenset({"loads", "spark_runner", "loaders", "tables"}),
    "spark_runner": frozenset({"spark_runner", "tables"}),
    "loaders": frozenset({"loaders", "tables"}),
    "tables": frozenset({"tables"}),
}
LAYERS = frozenset(ALLOWED_LAYERS)
HTTP = frozenset({"fastapi", "starlette"})
NO_HTTP = frozenset({"sql", "loads", "spark_runner", "loaders", "tables"})
NO_SPARK = frozenset({"loaders", "tables"})
# Heavy engines `app` may only import inside a function or under `if TYPE_CHECKING:`, directly or through
# another module.
APP_LAZY = frozenset({"pyspark", "pyiceberg", "py4j"})
# Imports against the picture that are still there, by module and the layer it imports, with why; each is
# removed by the change that ends it (test_layer_debt_is_still_owed fails once it is paid).
LAYER_DEBT: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    module: str  # the dotted module, e.g. "pyspark.sql" for `from pyspark.sql import functions`
    line: int
    lazy: bool  # inside a function/lambda or under `if TYPE_CHECKING:`: not run when the module is imported
    names: tuple[str, ...] = ()  # what `from module import ...` names: a submodule among them is imported too

    @property
    def top(self) -> str:
        """The top-level package: the layer, or the third-party distribution."""
        return self.module.split(".")[0]


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
            found.extend(Import(alias.name, node.lineno, lazy) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = (package[: len(package) - (node.level - 1)] or package[:1]) if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append(Import(module, node.lineno, lazy, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append(Import(node.args[0].value.lstrip("."), node.lineno, lazy))
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
    relative = path.relative_to(ROOT)
    layer = relative.parts[0]
    out: list[str] = []
    for imp in collect_imports(path.read_text(encoding="utf-8"), path):
        where = f"line {imp.line}: {layer} imports {imp.top}"
        if imp.top in HTTP and layer in NO_HTTP:
            out.append(f"{where} (only app speaks HTTP)")
        if imp.top == "pyspark" and layer in NO_SPARK:
            out.append(f"{where} ({layer} never touches Spark, not even inside a function)")
        owed = (relative.as_posix(), imp.top) in LAYER_DEBT
        if imp.top in LAYERS and imp.top not in ALLOWED_LAYERS[layer] and not owed:
            out.append(
                f"{where} (imports point down the layers: {layer} may import "
                f"{', '.join(sorted(ALLOWED_LAYERS[layer]))})"
            )
        if layer == "app" and imp.top in APP_LAZY and not imp.lazy:
            out.append(f"{where} at module top level (import it inside a function or under TYPE_CHECKING)")
    return out


def module_name(path: Path, root: Path) -> str:
    """`app/main.py` → `app.main`; a package's `__init__.py` is the package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules(root: Path) -> dict[str, Path]:
    """Every module of the layers under `root`, by dotted name."""
    return {module_name(p, root): p for layer in sorted(LAYERS) for p in (root / layer).rglob("*.py")}


@cache
def _eager_imports(path: Path) -> tuple[Import, ...]:
    return tuple(i for i in collect_imports(path.read_text(encoding="utf-8"), path) if not i.lazy)


def imported_at_import_time(path: Path) -> Iterator[str]:
    """The modules importing `path` runs: for `import a.b.c` and `from a.b.c import d`, a.b.c itself, the packages
    a and a.b, and a.b.c.d (in case d is a submodule; a name that is not one is not looked up)."""
    for imp in _eager_imports(path):
        parts = imp.module.split(".")
        yield imp.module
        yield from (".".join(parts[:i]) for i in range(1, len(parts)))
        yield from (f"{imp.module}.{name}" for name in imp.names if name != "*")


def engine_chain(start: str, modules: Mapping[str, Path]) -> list[str] | None:
    """The shortest chain of top-level imports from the project module `start` to an engine (pyspark, pyiceberg,
    py4j), e.g. `["app.deps", "spark_runner.service", "pyspark.sql"]`; None when importing `start` loads none.
    Only the project's own modules are followed: third-party packages are taken not to import an engine."""
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        current = queue.popleft()
        for target in imported_at_import_time(modules[current]):
            if target in came_from:
                continue
            if target.split(".")[0] in APP_LAZY:
                chain = [target, current]
                while (parent := came_from[chain[-1]]) is not None:
                    chain.append(parent)
                return chain[::-1]
            if target in modules:
                came_from[target] = current
                queue.append(target)
    return None


MODULES = sorted(project_modules(ROOT).values())
APP_MODULES = sorted(name for name in project_modules(ROOT) if name.split(".")[0] == "app")


def test_every_layer_has_modules() -> None:
    assert {p.relative_to(ROOT).parts[0] for p in MODULES} == LAYERS


@pytest.mark.parametrize("module", [pytest.param(p, id=p.relative_to(ROOT).as_posix()) for p in MODULES])
def test_module_respects_the_layering(module: Path) -> None:
    assert violations(module) == []


@pytest.mark.parametrize(("path", "layer"), sorted(LAYER_DEBT))
def test_layer_debt_is_still_owed(path: str, layer: str) -> None:
    """A paid debt leaves the list, so the exceptions never outlive the code that needed them."""
    module = ROOT / path
    assert module.is_file(), f"{path} is gone: remove its LAYER_DEBT entry"
    imports = collect_imports(module.read_text(encoding="utf-8"), module)
    assert any(imp.top == layer for imp in imports), f"{path} no longer imports {layer}: remove its LAYER_DEBT entry"


@pytest.mark.parametrize("module", APP_MODULES)
def test_app_module_loads_no_engine_at_import_time(module: str) -> None:
    chain = engine_chain(module, project_modules(ROOT))
    assert chain is None, "importing it loads an engine: " + " → ".join(chain or [])


def test_importing_every_app_module_loads_no_engine() -> None:
    """What the import graph above says, checked by the interpreter itself (third-party packages included)."""
    script = (
        "import importlib, sys\n"
        f"for name in {APP_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(APP_LAZY)!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --- the collector itself ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "source", "expected"),
    [
        pytest.param("app/x.py", "import pyspark.sql", [Import("pyspark.sql", 1, False)], id="dotted-import"),
        pytest.param(
            "app/x.py",
            "from pyiceberg.catalog import load_catalog",
            [Import("pyiceberg.catalog", 1, False, ("load_catalog",))],
            id="from-import",
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
            [Import("pyspark.sql", 2, True, ("SparkSession",))],
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
            [Import("typing", 1, False, ("TYPE_CHECKING",)), Import("pyspark", 3, True)],
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
            [Import("loaders.formats", 1, False, ("x",))],
            id="relative-import-resolves-to-own-layer",
        ),
        pytest.param(
            "loaders/formats/csv.py",
            "from ..errors import BadHeader",
            [Import("loaders.errors", 1, False, ("BadHeader",))],
            id="parent-relative-import-resolves-to-own-layer",
        ),
        pytest.param(
            "tables/x.py",
            "import importlib\nimportlib.import_module('pyspark.sql')",
            [Import("importlib", 1, False), Import("pyspark.sql", 2, False)],
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
            "from loaders.headers import parse_load_request",
            "spark_runner imports loaders (imports point down",
            id="spark-runner-importing-loaders",
        ),
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
        pytest.param("spark_runner/x.py", "import pyspark\nimport tables", id="spark-runner-importing-lower-layers"),
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


# --- the import chains ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"app/a.py": "import sql.b", "sql/b.py": "from pyspark.sql import functions"},
            ["app.a", "sql.b", "pyspark.sql"],
            id="through-another-layer",
        ),
        pytest.param(
            {"app/a.py": "from app import b", "app/b.py": "import tables.c", "tables/c.py": "import py4j.protocol"},
            ["app.a", "app.b", "tables.c", "py4j.protocol"],
            id="submodule-named-by-a-from-import",
        ),
        pytest.param(
            {"app/a.py": "from tables.m import x", "tables/__init__.py": "import pyiceberg", "tables/m.py": ""},
            ["app.a", "tables", "pyiceberg"],
            id="package-init-runs-first",
        ),
        pytest.param(
            {"app/a.py": "import sql.b\nimport sql.c", "sql/b.py": "import sql.c", "sql/c.py": "import pyspark"},
            ["app.a", "sql.c", "pyspark"],
            id="shortest-chain",
        ),
        pytest.param(
            {"app/a.py": "def f():\n    import sql.b", "sql/b.py": "import pyspark"},
            None,
            id="lazy-import-is-not-followed",
        ),
        pytest.param(
            {"app/a.py": "if TYPE_CHECKING:\n    from sql.b import B", "sql/b.py": "import pyspark"},
            None,
            id="type-checking-import-is-not-followed",
        ),
        pytest.param({"app/a.py": "import app.b", "app/b.py": "import app.a\nimport fastapi"}, None, id="cycle"),
    ],
)
def test_engine_chain(
    files: dict[str, str], expected: list[str] | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, source in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source, encoding="utf-8")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert engine_chain("app.a", project_modules(tmp_path)) == expected
