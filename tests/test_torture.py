"""tools/torture.py: its checker finds a lost, a doubled, a partial and a misordered load in a tampered history
(pure Python, in `make test`), and kill-and-restart runs of the real server pass every check (one cycle and
five, behind the `full` marker)."""

from __future__ import annotations

import copy
import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest

from tools.torture import Observed, Unit, check_cycle, model_rows, plan_op, run, soak, soak_problems


def _load(op_id: str, table: str, kind: str, rows: list[dict[str, Any]], *, reply: bool = True) -> dict[str, Any]:
    op: dict[str, Any] = {"client": 0, "id": op_id, "table": table, "kind": kind, "label": op_id, "rows": rows}
    op["start"], op["end"] = 0.0, 1.0
    op["reply"] = {"Status": "Success", "TxnId": 0} if reply else None
    return op


def _history() -> tuple[list[dict[str, Any]], Observed]:
    """Three acknowledged loads of the sequence table and one of the aggregate table, as the server holds them."""
    ops = [
        _load("a", "useq", "csv", [{"k": 1, "v": 10, "s": 2, "op": "a", "__DORIS_DELETE_SIGN__": 0}]),
        _load("b", "useq", "json", [{"k": 1, "v": 20, "s": 1, "op": "b"}, {"k": 2, "v": 5, "s": 0, "op": "b"}]),
        _load("c", "useq", "csv", [{"k": 2, "v": 6, "s": 0, "op": "c", "__DORIS_DELETE_SIGN__": 0}]),
        _load("g", "agg", "csv", [{"k": 3, "n": 1, "mx": 4, "mn": 4, "r": 4, "rn": None}]),
        _load("lost", "agg", "csv", [{"k": 4, "n": 1, "mx": 1, "mn": 1, "r": 1, "rn": 1}], reply=False),
    ]
    units = {
        "useq": [Unit(2, "a", 10), Unit(3, "b", 11), Unit(4, "c", 12)],
        "agg": [Unit(2, "g", 13)],
    }
    useq = [op for op in ops if op["table"] == "useq"]
    rows = {
        "useq": model_rows("useq", useq),
        "agg": model_rows("agg", [ops[3]]),
        "umap": [],
        "upart": [],
    }
    labels = {op["label"]: "VISIBLE" for op in ops} | {"lost": "UNKNOWN"}
    return ops, Observed(units=units, rows=rows, label_states=labels)


def test_the_checker_passes_a_consistent_history() -> None:
    ops, observed = _history()
    # the sequence column won key 1 for `a`, the later tie won key 2 for `c`
    assert observed.rows["useq"] == [[1, 10, 2, "a"], [2, 6, 0, "c"]]
    assert check_cycle(ops, observed) == []


def test_the_checker_finds_a_lost_acknowledged_load() -> None:
    ops, observed = _history()
    observed.units["useq"] = [u for u in observed.units["useq"] if u.label != "c"]
    problems = check_cycle(ops, observed)
    assert any("c (csv) was acknowledged and is not visible" in p for p in problems), problems


def test_the_checker_finds_a_load_applied_twice() -> None:
    ops, observed = _history()
    observed.units["agg"].append(Unit(3, "g", 14))
    observed.rows["agg"] = [[3, 2, 4, 4, 4, None]]
    problems = check_cycle(ops, observed)
    assert any("g (csv) is visible 2 times" in p for p in problems), problems


def test_the_checker_finds_a_partial_load_and_a_wrong_order() -> None:
    ops, observed = _history()
    partial = copy.deepcopy(observed)
    partial.rows["useq"] = [[1, 10, 2, "a"], [2, 6, 0, "c"]][:1]  # b's and c's key 2 missing
    assert any("SELECT differs from the model" in p for p in check_cycle(ops, partial))
    swapped = copy.deepcopy(observed)  # c committed before b: b would win the tie of key 2
    swapped.units["useq"] = [Unit(2, "a", 10), Unit(3, "c", 12), Unit(4, "b", 11)]
    assert any("useq: SELECT differs" in p for p in check_cycle(ops, swapped))


def test_the_checker_finds_a_no_reply_load_whose_label_disagrees() -> None:
    ops, observed = _history()
    observed.label_states["lost"] = "VISIBLE"  # the label says committed, no snapshot has it
    problems = check_cycle(ops, observed)
    assert any("lost is not visible, its label VISIBLE" in p for p in problems), problems


def _run_and_check(tmp_path: Path, cycles: int, cycle_seconds: float, seed: int) -> dict[str, Any]:
    total = run(tmp_path / "torture", cycles=cycles, seconds=3600, cycle_seconds=cycle_seconds, seed=seed)
    assert total["cycles"] == cycles
    for result in total["results"]:
        assert result["ok"], json.dumps(result, indent=1)
        assert result["operations"] > 0
    assert total["orphan_files"] == []
    state = json.loads((tmp_path / "torture" / "state.json").read_text())
    assert state["cycles"] == cycles and state["failed_cycles"] == 0
    history = Path(total["results"][0]["history"]).read_text().splitlines()
    assert json.loads(history[0])["seed"] and "kill_offset" in json.loads(history[0])
    return total


# the harness's short mode in `make test` (issue 23): one cycle, two server starts, 50-70 s on the 2 cores;
# `make test-full` runs five and the fault modes
@pytest.mark.process
def test_one_kill_cycle_passes_every_check(tmp_path: Path) -> None:
    total = _run_and_check(tmp_path, cycles=1, cycle_seconds=10, seed=17)  # the kill at 9.7 s
    print("torture:", {k: v for k, v in total.items() if k != "results"})


@pytest.mark.process
@pytest.mark.full
def test_five_kill_cycles_pass_every_check(tmp_path: Path) -> None:
    total = _run_and_check(tmp_path, cycles=5, cycle_seconds=25, seed=23)
    print("torture:", {k: v for k, v in total.items() if k != "results"})


def test_a_replayed_cycle_plans_the_same_operations() -> None:
    """`--replay` reruns a cycle from its seed: every writer plans the same operations, rows and labels."""

    def plan(seed: int, writer: int) -> list[dict[str, Any]]:
        rng = random.Random(f"{seed}:{writer}")
        owned: list[int] = []
        counter = itertools.count(100000 + writer * 10000)
        return [plan_op(rng, f"c1w{writer}i{i}", writer, owned, counter) for i in range(40)]

    for writer in range(7):
        assert plan(77, writer) == plan(77, writer)
    kinds = {op["kind"] for w in range(7) for op in plan(77, w)}
    assert {"csv", "json", "merge_delete", "gc_sync", "gc_async", "2pc", "insert", "delete", "partial"} <= kinds
    ops = [op for w in range(7) for op in plan(77, w)]
    assert len({op["id"] for op in ops}) == len(ops)
    assert all(row.get("op", op["id"]) == op["id"] for op in ops if op["kind"] != "delete" for row in op["rows"])


def test_the_checker_finds_a_fault_load_that_became_visible_or_kept_its_label() -> None:
    ops, observed = _history()
    gone = _load("gone", "useq", "disconnect", [{"k": 9, "v": 0, "s": 9, "op": "gone"}], reply=False)
    gone["label_after"] = "PREPARE"
    observed.units["useq"].append(Unit(5, "gone", 15))
    observed.rows["useq"] = model_rows("useq", [*ops[:3], gone])
    observed.label_states["gone"] = "VISIBLE"
    problems = check_cycle([*ops, gone], observed)
    assert any("gone (disconnect) was refused or aborted and is visible" in p for p in problems), problems
    assert any("gone kept its label PREPARE" in p for p in problems), problems


def test_the_checker_judges_a_load_whose_reply_was_never_read_by_its_retry() -> None:
    """--fault reply: a retry answering Success or Label Already Exists FINISHED means the load must be there
    once; a retry that found it RUNNING leaves either outcome open."""
    ops, observed = _history()
    gone = _load("gone", "useq", "reply", [{"k": 7, "v": 1, "s": 0, "op": "gone"}], reply=False)
    gone["retry_reply"] = {"Status": "Label Already Exists", "ExistingJobStatus": "FINISHED"}
    observed.label_states["gone"] = "UNKNOWN"
    problems = check_cycle([*ops, gone], observed)
    assert any("gone (reply) was acknowledged and is not visible" in p for p in problems), problems
    gone["retry_reply"] = {"Status": "Label Already Exists", "ExistingJobStatus": "RUNNING"}
    assert check_cycle([*ops, gone], observed) == []
    observed.units["useq"].append(Unit(5, "gone", 15))
    observed.rows["useq"] = model_rows("useq", [*ops[:3], gone])
    observed.label_states["gone"] = "VISIBLE"
    assert check_cycle([*ops, gone], observed) == []


@pytest.mark.process
@pytest.mark.full
@pytest.mark.parametrize("fault", ["jvm", "reply", "commit"])
def test_a_fault_cycle_passes_every_check(tmp_path: Path, fault: str) -> None:
    """One cycle with the JVM killed alone, with a client that never reads its replies, and with the kill right
    after a commit (the paused load is committed and unanswered: it must be VISIBLE after the restart)."""
    total = run(tmp_path / "torture", cycles=1, seconds=3600, cycle_seconds=20, seed=20, fault=fault)  # kill: 17 s
    result = total["results"][0]
    assert result["ok"], json.dumps(result, indent=1)
    assert total["orphan_files"] == []
    if fault == "commit":
        assert result["paused_after_commit"] and result["unanswered_visible"] >= 1, result
    if fault == "reply":
        history = [json.loads(line) for line in Path(result["history"]).read_text().splitlines()[1:-1]]
        retried = [op for op in history if op["kind"] == "reply" and op.get("retry_reply")]
        assert retried, "no load of the reply client was retried"
    print(f"torture --fault {fault}:", {k: v for k, v in result.items() if k != "history"})


@pytest.mark.process
@pytest.mark.full
def test_a_kill_cycle_of_two_servers_on_postgresql_passes_every_check(tmp_path: Path) -> None:
    """--servers 2: two servers on one PostgreSQL database and one shared dir; the kill takes one or both."""
    from tests.postgres import unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    total = run(tmp_path / "torture", cycles=2, seconds=3600, cycle_seconds=25, seed=20, servers=2)
    for result in total["results"]:
        assert result["ok"], json.dumps(result, indent=1)
    assert total["orphan_files"] == []
    header = json.loads(Path(total["results"][0]["history"]).read_text().splitlines()[0])
    assert header["servers"] == 2 and header["killed"], header


@pytest.mark.process
@pytest.mark.full
def test_a_short_soak_checks_every_round_and_samples_the_server(tmp_path: Path) -> None:
    """--soak: rounds without kills, each checked against the model; the resource rules need minutes (the
    long run is in the issue's closing note), a two-minute soak shows they are measured."""
    result = soak(tmp_path / "soak", seconds=120, round_seconds=30, seed=5)
    assert result["rounds"] >= 2 and result["failed_rounds"] == [], result
    assert result["acknowledged"] > 0
    end = result["curve"]["end"]
    assert end["python"]["rss_mb"] > 0 and end["jvm"]["threads"] > 0 and end["jvm"]["fds"] > 0, end
    assert len(result["samples"]) >= 5


def _soak_sample(minute: float, threads: int, *, loading: bool = True, rss: int = 300) -> dict[str, Any]:
    proc = {"rss_mb": rss, "fds": 50, "threads": threads}
    return {"minute": minute, "python": proc, "jvm": proc, "loading": loading, "staged_files": 0, "snapshots_max": 1}


def test_the_soak_rules_judge_samples_taken_under_load_and_find_a_leak() -> None:
    """Threads and open files are compared between samples taken while clients load: the sample after the last
    round (the server idle, its pools shrunk) is not a drop; a growth past the bounds is found."""
    steady = [_soak_sample(m, 40) for m in range(10, 31)]
    assert soak_problems([*steady, _soak_sample(31, 25, loading=False)], 1800, keep_count=1000) == []
    leaking = [_soak_sample(m, 40 + 2 * (m - 10), rss=300 + 4 * (m - 10)) for m in range(10, 31)]
    problems = soak_problems(leaking, 1800, keep_count=1000)
    assert any("threads went from" in p for p in problems) and any("RSS grew" in p for p in problems), problems
