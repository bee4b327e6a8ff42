"""A JVM wedged by a cancelled call that never returns is replaced (spark_runner/supervisor.py): a task in code
that never looks at its interrupt (Java's backtracking regex) otherwise keeps its core, and its slot, for good."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# its own process and JVM: the JVM this test stops must not be the test run's
SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    sys.path.insert(0, sys.argv[1])
    from pyspark.sql import SparkSession
    from spark_runner.supervisor import SparkHandle, overdue

    def build():
        return (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false").getOrCreate())

    handle = SparkHandle(build(), build, wedged_after=float(sys.argv[2]))
    handle.watch(0.2)
    first = handle._proc.pid
    context = handle.sparkContext

    def wedge():
        context.setJobGroup("wedge", "a regex that backtracks for years", interruptOnCancel=True)
        try:
            handle.range(1).selectExpr(
                "concat(repeat('a', 300), CAST(id AS STRING)) RLIKE '^(.*a){12}$' AS r").collect()
        except Exception as exc:
            print("the wedged call ended:", type(exc).__name__, flush=True)

    threading.Thread(target=wedge, daemon=True).start()
    time.sleep(4)  # its task is in the regex
    overdue.cancelled("wedge", "the test's call")
    context.cancelJobGroup("wedge")  # the task is interrupted, and goes on
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and (handle._proc.pid == first or not handle.alive):
        time.sleep(0.5)
    replaced = handle._proc.pid != first and handle.alive
    print("replaced" if replaced else "still wedged", flush=True)
    if replaced:
        print("rows", handle.current().range(3).count(), flush=True)
    """
)


@pytest.mark.process
def test_a_cancelled_call_that_never_returns_gets_its_jvm_replaced(tmp_path: Path) -> None:
    """With the watch off (`wedged_after` 0) the same script prints "still wedged" after 90 s: the cancel alone
    does not stop the task."""
    script = tmp_path / "wedge.py"
    script.write_text(SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), str(REPO), "3"], capture_output=True, text=True, timeout=200, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "replaced" in out.stdout and "rows 3" in out.stdout, out.stdout + out.stderr[-3000:]
