"""Randomized kill-and-restart runs of the server, checked against a model (issue 23).

    python tools/torture.py --cycles 10 --seconds 1800 [--cycle-seconds 30] [--workdir /tmp/sl-torture]
    python tools/torture.py --replay /tmp/sl-torture/histories/cycle-0007.jsonl
    python tools/torture.py --cycles 5 --fault disconnect    (slow, reply, jvm, commit: see FAULTS)
    python tools/torture.py --soak 1800 --cycle-seconds 60   (no kills: rounds checked, resources sampled)
    python tools/torture.py --servers 2 --cycles 5           (two servers on one PostgreSQL database)

One cycle, on the embedded default store, loopback only:

    start the server (`python -m app`, own process group)        the time to answer is the recovery time
    a fresh database with four tables                            useq   unique, sequence column (merge-on-read)
                                                                 umap   unique, two sequence-mapping groups
                                                                 upart  unique merge-on-write, partial updates
                                                                 agg    aggregate (SUM MAX MIN REPLACE ...)
    8 clients for up to --cycle-seconds                          7 writers: stream load CSV and JSON, merge_type
                                                                 DELETE, delete sign, group commit (sync, async),
                                                                 two-phase commit (committed, aborted or left
                                                                 PRECOMMITTED), INSERT, DELETE; 1 reader that
                                                                 also forces compactions
    SIGKILL of the whole group (JVM included) at an instant drawn uniformly over the window
    restart, then check                                          `check_cycle` below

Every row names the operation that wrote it (`op` columns) and every labelled load's label is that name, so
each load can be found in the snapshots that committed it (`doris.label`, `doris.txn_ids` of a group, or the
rows of an INSERT's or DELETE's rowset): the model replays exactly the loads found, in version order.

The run writes one JSON-lines history per cycle (`histories/cycle-N.jsonl`: the cycle's seed and kill offset,
then one line per operation: client, label, start, end, reply) and adds its cycles to `state.json`, so runs with
the same --workdir add up. `--replay FILE` reruns that cycle's operations (same seed) with the kill at the
recorded offset, in a data dir of its own. At the end of a run the server is stopped, maintenance runs with no
grace period and no file may be left that no snapshot references. Exit status 1 when any check failed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import signal
import socket
import statistics
import struct
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.aggregate_model import aggregate  # noqa: E402
from tests.server_process import ServerProcess, default_command  # noqa: E402
from tests.unique_model import DELETE_SIGN, UniqueModel  # noqa: E402

AUTH = ("root", "")
WRITERS = 7  # plus one reader
SHARED_KEYS = 16  # keys every writer loads: merges, sequence ties and overwrites happen there
OWNED_BASE = 100000  # INSERT / DELETE keys: writer w's are OWNED_BASE + w * 10000 + n, each inserted once
TABLES = {
    "useq": "CREATE TABLE useq (k INT NOT NULL, v INT, s INT, op VARCHAR(48)) UNIQUE KEY(k) "
    "DISTRIBUTED BY HASH(k) BUCKETS 2 PROPERTIES ('function_column.sequence_col' = 's', "
    "'enable_unique_key_merge_on_write' = 'false')",
    "umap": "CREATE TABLE umap (k INT NOT NULL, a INT, sa INT, opa VARCHAR(48), b INT, sb INT, opb VARCHAR(48)) "
    "UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2 PROPERTIES ('enable_unique_key_merge_on_write' = 'false', "
    "'sequence_mapping.sa' = 'a,opa', 'sequence_mapping.sb' = 'b,opb')",
    "upart": "CREATE TABLE upart (k INT NOT NULL, a INT, b INT, op VARCHAR(48)) UNIQUE KEY(k) "
    "DISTRIBUTED BY HASH(k) BUCKETS 2 PROPERTIES ('enable_unique_key_merge_on_write' = 'true')",
    "agg": "CREATE TABLE agg (k INT NOT NULL, n BIGINT SUM, mx INT MAX, mn INT MIN, r INT REPLACE, "
    "rn INT REPLACE_IF_NOT_NULL) AGGREGATE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS 2",
}
COLUMNS = {
    "useq": ("k", "v", "s", "op"),
    "umap": ("k", "a", "sa", "opa", "b", "sb", "opb"),
    "upart": ("k", "a", "b", "op"),
    "agg": ("k", "n", "mx", "mn", "r", "rn"),
}
AGG = {"n": "SUM", "mx": "MAX", "mn": "MIN", "r": "REPLACE", "rn": "REPLACE_IF_NOT_NULL"}
# (table, kind, weight): what a writer does next
OPERATIONS = [
    ("useq", "csv", 3),
    ("useq", "json", 2),
    ("useq", "merge_delete", 1),
    ("useq", "gc_sync", 2),
    ("useq", "gc_async", 2),
    ("useq", "2pc", 2),
    ("useq", "insert", 2),
    ("useq", "delete", 1),
    ("umap", "csv_a", 2),
    ("umap", "csv_b", 2),
    ("upart", "csv", 2),
    ("upart", "json", 1),
    ("upart", "partial", 2),
    ("agg", "csv", 2),
    ("agg", "json", 1),
]
GROUP_KINDS = ("gc_sync", "gc_async")
# --fault NAME: one more client, whose loads never finish their body, so none may ever be visible
#   disconnect  sends part of a chunked body and closes the connection, again and again
#   slow        sends one byte per second for the whole cycle (the others must not wait for it)
# or one more client whose loads are whole but whose replies are never read
#   reply       sends a whole body, closes before the reply, then retries the same label: the retry answers
#               Success (the first left nothing) or Label Already Exists with the first's state
# or another kill
#   jvm         SIGKILL of the JVM alone (the Python server lives on and must start a new one); no restart
#   commit      the kill lands right after an Iceberg commit, before the reply (the test-only pause point
#               after_commit holds the first load of each table that reaches it)
BODY_FAULTS = ("disconnect", "slow")
FAULTS = (*BODY_FAULTS, "reply", "jvm", "commit")
CLIENT_FAULTS = (*BODY_FAULTS, "reply")
SQL_KINDS = ("insert", "delete")
POSTGRES_LEASE_SECONDS = 6  # --servers 2: a survivor takes a dead server's loads over within this
SERVER_ENV = {
    # keep every snapshot of a cycle (the version order is read from them) and run background compaction
    "SL_SNAPSHOT_KEEP_COUNT": "100000",
    "SL_SNAPSHOT_KEEP_SECONDS": "864000",
    "SL_COMPACTION_INTERVAL_SECONDS": "5",
    "SL_GROUP_COMMIT_INTERVAL_MS": "50",
}


def server_env(fault: str | None) -> dict[str, str]:
    if fault == "commit":  # the first load of each table to commit a rowset pauses right after its commit
        return SERVER_ENV | {"SL_PAUSE_AT": ",".join(f"after_commit:{t}:once" for t in TABLES)}
    return SERVER_ENV


# -- the operations ----------------------------------------------------------------------------------------------
def _num(rng: random.Random, null: float = 0.0) -> int | None:
    return None if rng.random() < null else rng.randint(-99, 99)


def plan_op(rng: random.Random, op_id: str, writer: int, owned: list[int], next_owned: Iterator[int]) -> dict[str, Any]:
    """The next operation of a writer: its table, kind and rows (each row carrying `op_id`)."""
    table, kind, _ = rng.choices(OPERATIONS, weights=[w for _, _, w in OPERATIONS])[0]
    if kind == "delete" and not owned:
        kind = "insert"
    keys = rng.sample(range(SHARED_KEYS), rng.randint(1, 4))
    rows: list[dict[str, Any]]
    op: dict[str, Any] = {"client": writer, "id": op_id, "table": table, "kind": kind}
    if table == "useq":
        seqs = [None, 0, 1, 2, 3, 4]
        if kind == "insert":
            rows = [{"k": next(next_owned), "v": _num(rng), "s": rng.randint(0, 4), "op": op_id} for _ in range(2)]
            owned.extend(r["k"] for r in rows)
        elif kind == "delete":
            key = owned.pop(rng.randrange(len(owned)))
            rows = [{"k": key}]
        else:
            rows = [{"k": k, "v": _num(rng, 0.1), "s": rng.choice(seqs), "op": op_id} for k in keys]
            if kind == "csv":
                for r in rows:
                    r[DELETE_SIGN] = int(rng.random() < 0.2)
        if kind == "2pc":
            op["finish"] = rng.choices(["commit", "abort", "leave"], weights=[6, 1, 3])[0]
    elif table == "umap":
        a, sa, opa = ("a", "sa", "opa") if kind == "csv_a" else ("b", "sb", "opb")
        rows = [{"k": k, a: _num(rng), sa: rng.randint(0, 4), opa: op_id} for k in keys]
    elif table == "upart":
        if kind == "partial":
            rows = [{"k": k, "a": _num(rng), "op": op_id} for k in keys]
        else:
            rows = [{"k": k, "a": _num(rng), "b": _num(rng, 0.2), "op": op_id} for k in keys]
    else:
        rows = [
            {"k": k, "n": 1, "mx": _num(rng), "mn": _num(rng), "r": _num(rng), "rn": _num(rng, 0.3)}
            for k in rng.choices(range(SHARED_KEYS), k=rng.randint(1, 4))
        ]
    op["rows"] = rows
    if kind not in GROUP_KINDS and kind not in SQL_KINDS:
        op["label"] = op_id
    return op


def _csv(rows: list[dict[str, Any]], columns: Sequence[str]) -> bytes:
    return "".join(",".join("\\N" if r.get(c) is None else str(r[c]) for c in columns) + "\n" for r in rows).encode()


def _sql_value(v: Any) -> str:
    return "NULL" if v is None else f"'{v}'" if isinstance(v, str) else str(v)


def request_of(op: dict[str, Any]) -> tuple[str, dict[str, str], bytes]:
    """("load", headers, body) of a stream load, or ("sql", {}, statement)."""
    table, kind, rows = op["table"], op["kind"], op["rows"]
    if kind == "insert":
        values = ", ".join("(" + ", ".join(_sql_value(r[c]) for c in COLUMNS["useq"]) + ")" for r in rows)
        return "sql", {}, f"INSERT INTO useq (k, v, s, op) VALUES {values}".encode()
    if kind == "delete":
        return "sql", {}, f"DELETE FROM useq WHERE k = {rows[0]['k']}".encode()
    columns = [c for c in (*COLUMNS[table], DELETE_SIGN) if c in rows[0]]
    headers = {"columns": ",".join(columns), "column_separator": ","}
    if "label" in op:
        headers["label"] = op["label"]
    if kind == "json":
        headers.update(format="json", strip_outer_array="true")
        del headers["column_separator"]
        return "load", headers, json.dumps(rows).encode()
    if kind == "merge_delete":
        headers["merge_type"] = "DELETE"
    elif kind == "gc_sync":
        headers["group_commit"] = "sync_mode"
    elif kind == "gc_async":
        headers["group_commit"] = "async_mode"
    elif kind == "2pc":
        headers["two_phase_commit"] = "true"
    elif kind == "partial":
        headers["partial_columns"] = "true"
    return "load", headers, _csv(rows, columns)


def perform(http: httpx.Client, db: str, op: dict[str, Any], clock: Any) -> None:
    """Send the operation; the reply (None: the connection broke, no reply) and times go into `op`."""
    how, headers, body = request_of(op)
    op["start"] = clock()
    try:
        if how == "sql":
            op["reply"] = http.post(f"/api/query/default_cluster/{db}", json={"stmt": body.decode()}).json()
        else:
            op["reply"] = http.put(f"/api/{db}/{op['table']}/_stream_load", content=body, headers=headers).json()
    except (httpx.HTTPError, ValueError) as exc:
        op["reply"], op["error"] = None, repr(exc)
    op["end"] = clock()
    if op["kind"] == "2pc" and succeeded(op) and op["finish"] != "leave":
        op["finish_start"] = clock()
        try:
            op["finish_reply"] = http.put(
                f"/api/{db}/_stream_load_2pc",
                headers={"txn_id": str(op["reply"]["TxnId"]), "txn_operation": op["finish"]},
            ).json()
        except (httpx.HTTPError, ValueError) as exc:
            op["finish_reply"], op["finish_error"] = None, repr(exc)
        op["finish_end"] = clock()


def succeeded(op: dict[str, Any]) -> bool:
    reply = op.get("reply")
    if reply is None:
        return False
    if op["kind"] in SQL_KINDS:
        return bool(reply.get("code") == 0)
    return bool(reply.get("Status") == "Success")


def refused(op: dict[str, Any]) -> bool:
    """A reply that is a failure: the operation must have changed nothing."""
    return op.get("reply") is not None and not succeeded(op)


# -- one cycle -----------------------------------------------------------------------------------------------------
@dataclass
class Cycle:
    number: int
    seed: int
    seconds: float
    kill_offset: float
    fault: str | None = None
    db: str = ""
    ops: list[dict[str, Any]] = field(default_factory=list)
    reads: int = 0
    compactions: int = 0
    recovery_seconds: float = 0.0
    paused: bool = False  # --fault commit: a load paused after its commit before the kill
    peers: list[ServerProcess] = field(default_factory=list)  # --servers 2: the other server(s), same store
    killed: list[int] = field(default_factory=list)  # which servers the kill took (0: `server`, 1..: peers)
    problems: list[str] = field(default_factory=list)

    def header(self) -> dict[str, Any]:
        return {
            "cycle": self.number,
            "seed": self.seed,
            "seconds": self.seconds,
            "kill_offset": round(self.kill_offset, 3),
            "fault": self.fault,
            "db": self.db,
            "servers": 1 + len(self.peers),
            "killed": self.killed,
        }


def writer_loop(base_url: str, cycle: Cycle, writer: int, stop: threading.Event, clock: Any) -> None:
    rng = random.Random(f"{cycle.seed}:{writer}")
    owned: list[int] = []
    next_owned = itertools.count(OWNED_BASE + writer * 10000)
    with httpx.Client(base_url=base_url, auth=AUTH, timeout=120) as http:
        for i in itertools.count():
            if stop.is_set():
                return
            op = plan_op(rng, f"c{cycle.number}w{writer}i{i}", writer, owned, next_owned)
            cycle.ops.append(op)
            perform(http, cycle.db, op, clock)
            if "SERVICE_UNAVAILABLE" in str(op.get("reply")) or "No backend" in str(op.get("reply")):
                stop.wait(0.5)  # the JVM is being replaced (--fault jvm): no thousand refusals a second
            if op["kind"] == "insert" and not succeeded(op):
                for r in op["rows"]:  # never delete what may not be there
                    if r["k"] in owned:
                        owned.remove(r["k"])


def reader_loop(base_url: str, cycle: Cycle, stop: threading.Event) -> None:
    """Reads every table and forces a compaction now and then; errors (the kill) are expected."""
    rng = random.Random(f"{cycle.seed}:reader")
    with httpx.Client(base_url=base_url, auth=AUTH, timeout=120) as http:
        while not stop.is_set():
            table = rng.choice(list(TABLES))
            if rng.random() < 0.25:
                stmt = f"ADMIN COMPACT TABLE {table} WHERE TYPE = '{rng.choice(['CUMULATIVE', 'BASE'])}'"
                cycle.compactions += 1
            else:
                stmt = f"SELECT count(*), sum(k) FROM {table}"
                cycle.reads += 1
            try:
                http.post(f"/api/query/default_cluster/{cycle.db}", json={"stmt": stmt})
            except httpx.HTTPError:
                return
            stop.wait(0.3)


def warm_up(server: ServerProcess) -> None:
    """One load of each table kind in a scratch database: the first Spark jobs of a new JVM are slow, and a
    kill early in the first cycle would otherwise meet only the first loads. Its tables have names of their
    own (`warm_useq`, ...): the pause points of --fault commit are armed by table name."""
    db = "torture_warm_up"
    server.sql(db, f"CREATE DATABASE IF NOT EXISTS {db}")
    for table, ddl in TABLES.items():
        server.sql(db, ddl.replace(f"CREATE TABLE {table}", f"CREATE TABLE IF NOT EXISTS warm_{table}"))
        server.load(db, f"warm_{table}", _csv([{"k": 1}], ["k"]), columns="k")


def fault_loop(server: ServerProcess, cycle: Cycle, stop: threading.Event, clock: Any) -> None:
    """The --fault client: stream loads into useq whose chunked body never ends."""
    rng = random.Random(f"{cycle.seed}:fault")
    for i in itertools.count():
        if stop.is_set():
            return
        op_id = f"c{cycle.number}f{i}"
        row = {"k": rng.randrange(SHARED_KEYS), "v": 0, "s": 9, "op": op_id}
        op = {"client": WRITERS + 1, "id": op_id, "table": "useq", "kind": cycle.fault, "label": op_id, "rows": [row]}
        cycle.ops.append(op)
        op["start"], op["reply"] = clock(), None
        head = [
            f"PUT /api/{cycle.db}/useq/_stream_load HTTP/1.1",
            f"Host: 127.0.0.1:{server.port}",
            "Authorization: Basic cm9vdDo=",
            "column_separator: ,",
            "columns: k,v,s,op",
            f"label: {op_id}",
            "Transfer-Encoding: chunked",
            "",
            "",
        ]
        first = _csv([row], ["k", "v", "s", "op"])
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
                sock.sendall("\r\n".join(head).encode() + b"%x\r\n%s\r\n" % (len(first), first))
                if cycle.fault == "disconnect":
                    stop.wait(rng.uniform(0.1, 2.0))
                else:
                    while not stop.wait(1.0):
                        sock.sendall(b"1\r\n#\r\n")  # a comment-free byte: the body stays one unfinished row
                sock.shutdown(socket.SHUT_RDWR)
        except OSError as exc:
            op["error"] = repr(exc)
        op["end"] = clock()
        if cycle.fault == "disconnect":
            op["label_after"] = label_freed(server, cycle.db, op_id, stop)


def label_freed(server: ServerProcess, db: str, label: str, stop: threading.Event, timeout: float = 10) -> str | None:
    """The label's state once the server noticed the client left (PREPARE: still taken after `timeout`); None
    when the kill came first."""
    deadline = time.monotonic() + timeout
    state = "PREPARE"
    while state == "PREPARE" and time.monotonic() < deadline and not stop.is_set():
        try:
            state = server.label_state(db, label)
        except (httpx.HTTPError, ValueError, KeyError):
            return None
        stop.wait(0.2)
    return None if stop.is_set() and state == "PREPARE" else state


def run_workload(server: ServerProcess, cycle: Cycle, *, kill: bool = True) -> None:
    """8 clients until the kill at `cycle.kill_offset` (SIGKILL of the whole group); without `kill` the clients
    stop there and the server keeps running (a soak round)."""
    cycle.db = f"torture_{cycle.number}_{cycle.seed % 100000}"
    server.sql(cycle.db, f"CREATE DATABASE {cycle.db}")
    for ddl in TABLES.values():
        server.sql(cycle.db, ddl)
    started = time.monotonic()
    log_from = len(server.log_text())

    def clock() -> float:
        return round(time.monotonic() - started, 3)

    stop = threading.Event()
    everyone = [server, *cycle.peers]  # writers spread over the servers
    threads = [
        threading.Thread(
            target=writer_loop, args=(everyone[w % len(everyone)].base_url, cycle, w, stop, clock), daemon=True
        )
        for w in range(WRITERS)
    ]
    threads.append(threading.Thread(target=reader_loop, args=(server.base_url, cycle, stop), daemon=True))
    if cycle.fault in CLIENT_FAULTS:
        loop = reply_fault_loop if cycle.fault == "reply" else fault_loop
        threads.append(threading.Thread(target=loop, args=(server, cycle, stop, clock), daemon=True))
    for t in threads:
        t.start()
    if cycle.fault == "commit":
        wait_for_pause(server, cycle, started, log_from)
    time.sleep(max(0.0, cycle.kill_offset - (time.monotonic() - started)))
    if cycle.fault == "jvm":
        cycle.recovery_seconds = kill_jvm(server, cycle)
        stop.wait(3.0)  # the clients load on the new JVM for a while
        kill = False
    stop.set()  # no new operation starts; those in flight meet the kill (or, in a soak, finish)
    if kill:
        if cycle.peers:  # one server or all of them
            which = random.Random(f"{cycle.seed}:kill").choice([*range(len(everyone)), -1])
            cycle.killed = list(range(len(everyone))) if which == -1 else [which]
        else:
            cycle.killed = [0]
        for i in cycle.killed:
            everyone[i].kill()
    for t in threads:
        t.join(timeout=150)


def wait_for_pause(server: ServerProcess, cycle: Cycle, started: float, log_from: int) -> None:
    """--fault commit: the kill comes 0-0.3 s after a load paused right after its commit (after the window and
    a minute more when none did); the kill offset is the instant chosen."""
    rng = random.Random(f"{cycle.seed}:commit")
    deadline = started + cycle.seconds + 60
    while time.monotonic() < deadline:
        if "paused at after_commit" in server.log_text()[log_from:]:
            cycle.paused = True
            cycle.kill_offset = time.monotonic() - started + rng.uniform(0.0, 0.3)
            return
        time.sleep(0.05)
    cycle.kill_offset = time.monotonic() - started


def jvm_pids(server: ServerProcess) -> list[int]:
    out = []
    for pid in server.children():
        try:
            if b"java" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            continue
    return out


def kill_jvm(server: ServerProcess, cycle: Cycle, timeout: float = 300) -> float:
    """--fault jvm: SIGKILL the JVM alone; the seconds until the server runs a new one and reports its backend
    alive (a problem when the server died with it or never replaced it)."""
    old = jvm_pids(server)
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    if not old:
        cycle.problems.append("jvm: the server had no JVM to kill")
    while time.monotonic() - killed < timeout:
        assert server.proc is not None
        if server.proc.poll() is not None:
            cycle.problems.append(f"jvm: the server exited ({server.proc.returncode}) when its JVM was killed")
            return round(time.monotonic() - killed, 2)
        new = [pid for pid in jvm_pids(server) if pid not in old]
        try:
            alive = httpx.get(f"{server.base_url}/api/health", timeout=5).json()["data"]["online_backend_num"]
        except (httpx.HTTPError, ValueError, KeyError):
            alive = 0
        if new and alive:
            return round(time.monotonic() - killed, 2)
        time.sleep(0.2)
    cycle.problems.append(f"jvm: no new JVM {timeout} s after the kill")
    return round(time.monotonic() - killed, 2)


def reply_fault_loop(server: ServerProcess, cycle: Cycle, stop: threading.Event, clock: Any) -> None:
    """--fault reply: stream loads into useq sent whole, the connection closed before the reply is read; then the
    same load again with the same label, whose reply is kept (`retry_reply`)."""
    rng = random.Random(f"{cycle.seed}:reply")
    with httpx.Client(base_url=server.base_url, auth=AUTH, timeout=120) as http:
        for i in itertools.count():
            if stop.is_set():
                return
            op_id = f"c{cycle.number}r{i}"
            rows = [{"k": k, "v": _num(rng), "s": rng.randint(0, 4), "op": op_id} for k in rng.sample(range(16), 2)]
            op = {"client": WRITERS + 1, "id": op_id, "table": "useq", "kind": "reply", "label": op_id, "rows": rows}
            cycle.ops.append(op)
            body = _csv(rows, COLUMNS["useq"])
            head = [
                f"PUT /api/{cycle.db}/useq/_stream_load HTTP/1.1",
                f"Host: 127.0.0.1:{server.port}",
                "Authorization: Basic cm9vdDo=",
                "column_separator: ,",
                "columns: k,v,s,op",
                f"label: {op_id}",
                f"Content-Length: {len(body)}",
                "",
                "",
            ]
            op["start"], op["reply"] = clock(), None
            try:
                with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
                    sock.sendall("\r\n".join(head).encode() + body)
                    stop.wait(rng.uniform(0.0, 0.5))  # gone while the load runs, before its reply
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
            except OSError as exc:
                op["error"] = repr(exc)
            op["end"] = clock()
            if stop.wait(rng.uniform(0.2, 2.0)):
                return
            _, headers, _ = request_of(op)
            op["retry_start"] = clock()
            try:
                op["retry_reply"] = http.put(f"/api/{cycle.db}/useq/_stream_load", content=body, headers=headers).json()
            except (httpx.HTTPError, ValueError) as exc:
                op["retry_reply"], op["retry_error"] = None, repr(exc)
            op["retry_end"] = clock()


# -- what the server holds after the restart -------------------------------------------------------------------
@dataclass
class Unit:
    """One committed load or group as its snapshot records it."""

    version: int
    label: str
    txn_id: int
    members: tuple[int, ...] = ()  # group commit: the member transactions, in the group's order
    rows: list[dict[str, Any]] = field(default_factory=list)  # the rowset's rows, read when needed


def snapshot_units(catalog: Any, db: str, table: str, *, with_rows: bool) -> list[Unit]:
    """The loads a table's snapshots committed, in version order (compaction snapshots left out)."""
    from tables.catalog import VERSION_PROPERTY

    handle = catalog.load(db, table)
    out = []
    for snap in handle.iceberg.snapshots():
        props = snap.summary.additional_properties if snap.summary else {}
        if "doris.label" not in props or VERSION_PROPERTY not in props:
            continue
        members = tuple(int(t) for t in props.get("doris.txn_ids", "").split(",")[1:] if t)
        unit = Unit(int(props[VERSION_PROPERTY]), props["doris.label"], int(props["doris.txn_id"]), members)
        if with_rows and (members or unit.label.startswith("insert_")):
            unit.rows = added_rows(handle.iceberg, snap)
        out.append(unit)
    return sorted(out, key=lambda u: u.version)


def added_rows(table: Any, snap: Any) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

    rows: list[dict[str, Any]] = []
    for manifest in snap.manifests(table.io):
        if manifest.added_snapshot_id != snap.snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.status == ManifestEntryStatus.ADDED and entry.data_file.content == DataFileContent.DATA:
                path = entry.data_file.file_path.removeprefix("file://")
                rows.extend(pq.read_table(path).to_pylist())
    return rows


@dataclass
class Observed:
    """What a check reads back from the restarted server."""

    units: dict[str, list[Unit]]  # per table, in version order
    rows: dict[str, list[list[Any]]]  # SELECT * ORDER BY k, per table
    label_states: dict[str, str]  # per label, after the two-phase loads were resolved
    resolved: dict[str, str] = field(default_factory=dict)  # label -> commit / abort done by the check


def identify(ops: list[dict[str, Any]], units: list[Unit], problems: list[str], table: str) -> list[list[Any]]:
    """Each unit's operations, in order: [[op, ...], ...] per unit (a group may hold several), with every
    way of ordering members that only the rows could name."""
    by_label = {op["label"]: op for op in ops if "label" in op}
    by_txn = {op["reply"]["TxnId"]: op for op in ops if op["kind"] in GROUP_KINDS and succeeded(op)}
    by_insert_label = {
        op["reply"]["data"]["status"].get("label"): op for op in ops if op["kind"] == "insert" and succeeded(op)
    }
    deletes = {op["rows"][0]["k"]: op for op in ops if op["kind"] == "delete" and op["table"] == table}
    inserts = {op["id"]: op for op in ops if op["kind"] == "insert"}
    group_ops = {op["id"]: op for op in ops if op["kind"] in GROUP_KINDS and op["table"] == table}
    out: list[list[Any]] = []
    for unit in units:
        if unit.members:
            known = [by_txn.get(t) for t in unit.members]
            named = {op["id"] for op in known if op is not None}
            in_rows = {r.get("op") for r in unit.rows if not r.get(DELETE_SIGN)}
            unknown = sorted((group_ops[i] for i in in_rows - named if i in group_ops), key=lambda op: op["start"])
            for i in in_rows - named - set(group_ops):
                problems.append(f"{table}: group v{unit.version} holds rows of {i}, not a group-commit load")
            for op in unknown:
                if succeeded(op) or refused(op):
                    problems.append(f"{table}: {op['id']} (answered) is in group v{unit.version} under another txn")
            slots = [i for i, op in enumerate(known) if op is None]
            if len(unknown) > len(slots):
                problems.append(f"{table}: group v{unit.version} holds rows of more loads than it has members")
                unknown = unknown[: len(slots)]
            choices = []
            for perm in itertools.permutations(unknown):
                filled = list(known)
                for slot, op in zip(slots, perm, strict=False):
                    filled[slot] = op
                choices.append([op for op in filled if op is not None])
            out.append(choices)
        elif unit.label in by_label:
            out.append([[by_label[unit.label]]])
        elif unit.label in by_insert_label:
            out.append([[by_insert_label[unit.label]]])
        elif unit.label.startswith("insert_") and unit.rows:
            live = {r.get("op") for r in unit.rows if not r.get(DELETE_SIGN)}
            marked = {r["k"] for r in unit.rows if r.get(DELETE_SIGN)}
            if live and len(live) == 1 and next(iter(live)) in inserts and not marked:
                out.append([[inserts[next(iter(live))]]])
            elif not live and len(marked) == 1 and next(iter(marked)) in deletes:
                out.append([[deletes[next(iter(marked))]]])
            else:
                problems.append(f"{table}: v{unit.version} ({unit.label}) is no INSERT or DELETE of this cycle")
        else:
            problems.append(f"{table}: v{unit.version} ({unit.label}) is no load of this cycle")
    return out


def model_rows(table: str, applied: list[dict[str, Any]]) -> list[list[Any]]:
    """The table as the model has it after `applied`, in version order."""
    if table == "agg":
        loads = [[{c: r.get(c) for c in COLUMNS["agg"]} for r in op["rows"]] for op in applied]
        return [[r[c] for c in COLUMNS["agg"]] for r in aggregate(loads, ["k"], AGG)]
    if table == "umap":
        model = UniqueModel(("k",), COLUMNS["umap"], sequence_mapping={"sa": ("a", "opa"), "sb": ("b", "opb")})
    else:
        model = UniqueModel(("k",), COLUMNS[table], sequence="s" if table == "useq" else None)
    for version, op in enumerate(applied, start=1):
        if op["kind"] == "delete":  # the markers carry the row's current values, sequence included
            current = model.state.get((op["rows"][0]["k"],))
            if current is not None and not current.deleted:
                model.apply([current.values], version, delete=True)
        elif op["kind"] == "partial":
            model.apply(op["rows"], version, partial=("k", "a", "op"))
        else:
            model.apply(op["rows"], version, delete=op["kind"] == "merge_delete")
    return model.visible()


def committed_by_client(op: dict[str, Any], resolved: dict[str, str]) -> bool | None:
    """Whether the operation must be visible (True), must not be (False), or may be either (None)."""
    if op["kind"] in BODY_FAULTS:
        return False  # its body never ended
    if op["kind"] == "reply":  # no reply read; the retry with its label tells
        retry = op.get("retry_reply") or {}
        if retry.get("Status") == "Success":
            return True
        if retry.get("Status") == "Label Already Exists" and retry.get("ExistingJobStatus") == "FINISHED":
            return True
        return None
    if op["kind"] == "2pc":
        if op["label"] in resolved:  # PRECOMMITTED after the restart: the check committed or aborted it
            return resolved[op["label"]] == "commit"
        if not succeeded(op):
            return False if refused(op) else None
        finish = op.get("finish_reply")
        if op.get("finish") == "leave" or finish is None:
            return False if op.get("finish") == "leave" else None
        return (op["finish"] == "commit") if finish.get("status") == "Success" else None
    if succeeded(op):
        return True
    if refused(op):
        return False
    return None


def check_cycle(ops: list[dict[str, Any]], observed: Observed, stats: dict[str, int] | None = None) -> list[str]:
    """Every rule of issue 23 for one cycle; returns what is wrong (empty: all good). `stats` gets the number
    of loads found visible and of rows compared."""
    problems: list[str] = []
    stats = {} if stats is None else stats
    for table in TABLES:
        table_ops = [op for op in ops if op["table"] == table]
        units = observed.units.get(table, [])
        choices = identify(table_ops, units, problems, table)
        counts: dict[str, int] = {}
        for unit_choices in choices:
            for op in unit_choices[0]:
                counts[op["id"]] = counts.get(op["id"], 0) + 1
        for op in table_ops:
            seen = counts.get(op["id"], 0)
            must = committed_by_client(op, observed.resolved)
            if must is None and seen:
                stats["unanswered_visible"] = stats.get("unanswered_visible", 0) + 1
            if seen > 1:
                problems.append(f"{table}: {op['id']} ({op['kind']}) is visible {seen} times")
            elif must is True and seen == 0:
                problems.append(f"{table}: {op['id']} ({op['kind']}) was acknowledged and is not visible")
            elif must is False and seen:
                problems.append(f"{table}: {op['id']} ({op['kind']}) was refused or aborted and is visible")
            if op.get("label_after") == "PREPARE":
                problems.append(f"{table}: {op['id']} kept its label PREPARE 10 s after its client left")
            if "label" in op:
                state = observed.label_states.get(op["label"])
                if seen and state != "VISIBLE":
                    problems.append(f"{table}: {op['id']} is visible, its label {state}")
                if not seen and state not in ("UNKNOWN", "ABORTED"):
                    problems.append(f"{table}: {op['id']} is not visible, its label {state}")
        stats["visible"] = stats.get("visible", 0) + sum(counts.values())
        stats["rows"] = stats.get("rows", 0) + len(observed.rows.get(table) or [])
        expected_any = False
        tried = 0
        first: list[list[Any]] | None = None
        for combo in itertools.product(*choices):
            tried += 1
            if tried > 5000:
                break
            applied = [op for unit_ops in combo for op in unit_ops]
            expected = model_rows(table, applied)
            first = expected if first is None else first
            if expected == observed.rows.get(table):
                expected_any = True
                break
        if not expected_any:
            got = observed.rows.get(table)
            problems.append(f"{table}: SELECT differs from the model: got {got}, model {first}")
    return problems


def server_settings(server: ServerProcess) -> Any:
    """The settings the server process runs with (its data dir, and a PostgreSQL catalog and shared dir)."""
    from app.settings import Settings

    return Settings(
        data_dir=server.data_dir,
        catalog_uri=server.env.get("SL_CATALOG_URI"),
        shared_dir=server.env.get("SL_SHARED_DIR"),
    )


def observe(server: ServerProcess, cycle: Cycle, timeout: float = 120) -> Observed:
    """Resolve what the kill left PRECOMMITTED, wait for acknowledged async loads, read tables and snapshots."""
    from tables.catalog import Catalog

    resolved: dict[str, str] = {}
    for op in cycle.ops:
        if op["kind"] != "2pc":
            continue
        state = server.label_state(cycle.db, op["label"])
        if state == "PRECOMMITTED":
            how = random.Random(op["id"]).choice(["commit", "abort"])
            reply = httpx.put(
                f"{server.base_url}/api/{cycle.db}/_stream_load_2pc",
                headers={"label": op["label"], "txn_operation": how},
                auth=AUTH,
                timeout=120,
            ).json()
            if reply.get("status") != "Success":
                cycle.problems.append(f"{op['id']}: PRECOMMITTED after the restart and its {how} failed: {reply}")
            else:
                resolved[op["label"]] = how
        elif op.get("finish") == "leave" and succeeded(op):
            cycle.problems.append(f"{op['id']}: left PRECOMMITTED, after the restart its label is {state}")
    settings = server_settings(server)
    catalog = Catalog(uri=settings.resolved_catalog_uri, warehouse=settings.resolved_warehouse)
    acked_async = {op["reply"]["TxnId"] for op in cycle.ops if op["kind"] == "gc_async" and succeeded(op)}
    deadline = time.monotonic() + timeout
    while True:
        units = {t: snapshot_units(catalog, cycle.db, t, with_rows=False) for t in TABLES}
        seen = {m for us in units.values() for u in us for m in u.members}
        if acked_async <= seen or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    units = {t: snapshot_units(catalog, cycle.db, t, with_rows=True) for t in TABLES}
    rows = {t: server.sql(cycle.db, f"SELECT * FROM {t} ORDER BY k LIMIT 100000")["data"] for t in TABLES}
    labels = {op["label"]: server.label_state(cycle.db, op["label"]) for op in cycle.ops if "label" in op}
    return Observed(units=units, rows=rows, label_states=labels, resolved=resolved)


# -- the run ---------------------------------------------------------------------------------------------------
def write_history(path: Path, cycle: Cycle, summary: dict[str, Any]) -> None:
    with path.open("w") as out:
        out.write(json.dumps(cycle.header()) + "\n")
        for op in sorted(cycle.ops, key=lambda o: o.get("start", 0)):
            out.write(json.dumps(op, default=str) + "\n")
        out.write(json.dumps({"summary": summary}) + "\n")


def run_cycle(server: ServerProcess, cycle: Cycle, histories: Path) -> dict[str, Any]:
    """Workload, kill, restart, check; the server is left running for the next cycle."""
    run_workload(server, cycle)
    stats: dict[str, int] = {}
    started = time.monotonic()
    if cycle.fault != "jvm":  # the JVM's replacement time is its recovery time
        everyone = [server, *cycle.peers]
        if len(cycle.killed) < len(everyone):  # a survivor: it takes the dead server's loads over first
            time.sleep(2 * float(cycle.peers[0].env.get("SL_LEASE_SECONDS", 30)))
            started = time.monotonic()
        for i in cycle.killed:  # no pause point armed: the check commits what the kill left PRECOMMITTED
            everyone[i].start(timeout=300, **server_env(None if cycle.fault == "commit" else cycle.fault))
        cycle.recovery_seconds = round(time.monotonic() - started, 2)
    note(
        f"cycle {cycle.number}: {len(cycle.ops)} operations, killed at {cycle.kill_offset:.1f} s, "
        f"{'new JVM' if cycle.fault == 'jvm' else 'restarted'} in {cycle.recovery_seconds} s"
    )
    try:
        observed = observe(server, cycle)
        cycle.problems += check_cycle(cycle.ops, observed, stats)
    except Exception as exc:  # a check that cannot even run is a failure of the cycle, with its history
        cycle.problems.append(f"check failed: {exc!r}")
    acked = sum(1 for op in cycle.ops if succeeded(op))
    note(f"cycle {cycle.number}: checked in {time.monotonic() - started - cycle.recovery_seconds:.1f} s")
    if cycle.fault == "reply":
        for op in cycle.ops:
            retry = op.get("retry_reply") or {}
            if retry.get("Status") == "Label Already Exists" and retry.get("ExistingJobStatus") not in (
                "RUNNING",
                "FINISHED",
            ):
                cycle.problems.append(f"{op['id']}: its retry answered {retry}")
    if cycle.fault == "commit":  # armed again for the next cycle
        for each in [server, *cycle.peers]:
            each.kill()
            each.start(timeout=300, **server_env(cycle.fault))
    summary = {
        "cycle": cycle.number,
        "ok": not cycle.problems,
        "operations": len(cycle.ops),
        "acknowledged": acked,
        "no_reply": sum(1 for op in cycle.ops if op.get("reply") is None),
        "visible": stats.get("visible", 0),
        "rows_compared": stats.get("rows", 0),
        "unanswered_visible": stats.get("unanswered_visible", 0),
        "paused_after_commit": cycle.paused,
        "reads": cycle.reads,
        "compactions": cycle.compactions,
        "kill_offset": round(cycle.kill_offset, 2),
        "recovery_seconds": cycle.recovery_seconds,
        "problems": cycle.problems,
    }
    history = histories / f"cycle-{cycle.number:04d}.jsonl"
    write_history(history, cycle, summary)
    summary["history"] = str(history)
    return summary


def note(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def stop(server: ServerProcess) -> None:
    """Stop a server as an operator would (SIGTERM: loads in flight finish, new ones are refused), killed if
    it takes more than a minute. A kill here could leave a load in PREPARE, whose files the orphan check
    would list: they are kept for the transaction until the next start aborts it."""
    try:
        server.terminate(timeout=60)
    except Exception as exc:  # noqa: BLE001 - a server that does not stop in time is killed
        note(f"the server did not stop on SIGTERM ({exc!r}): killed")
        server.kill()


def orphan_files(servers: list[ServerProcess]) -> list[str]:
    """Maintenance with no grace period (the servers stopped), then every rowset file no snapshot references
    and every staged file, but those of transactions still unresolved (kept for them by design)."""
    from tables.catalog import Catalog
    from tables.maintenance import referenced_files, run_maintenance
    from tables.store import Store
    from tables.transactions import COMMITTED, PRECOMMITTED, PREPARE, TransactionStore

    settings = server_settings(servers[0])
    catalog = Catalog(uri=settings.resolved_catalog_uri, warehouse=settings.resolved_warehouse)
    store = Store(settings.resolved_store_uri)
    txns = TransactionStore(store)
    try:
        run_maintenance(catalog, txns, staging=settings.staging_dir, grace_seconds=0, snapshot_keep_seconds=864000)
        unresolved = {f"txn_{t.txn_id}" for state in (PREPARE, PRECOMMITTED, COMMITTED) for t in txns.in_state(state)}
        left = []
        for db, name in catalog.table_locations():
            handle = catalog.load(db, name)
            referenced = referenced_files(handle)
            referenced = {str(Path(p).resolve()) for p in referenced}
            for path in (handle.location / "data").glob("txn_*/*"):
                if path.parent.name in unresolved:
                    continue
                if not path.name.startswith(".") and str(path.resolve()) not in referenced:
                    left.append(str(path))
        for server in servers:
            staging = server_settings(server).staging_dir
            left += [str(p) for p in staging.glob("*")] if staging.is_dir() else []
        return left
    finally:
        txns.close()
        store.close()


def left_precommitted(server: ServerProcess) -> list[tuple[str, str]]:
    """(db, label) of the loads left PRECOMMITTED in the server's store (read while it is stopped).

    A run stopped in the middle of a cycle (the harness itself killed) leaves that cycle unchecked: its two-phase
    loads stay PRECOMMITTED, their rowset files kept for a commit that no check will send, and the final orphan
    check would list them. The next run aborts them through the server before its first cycle."""
    from tables.store import Store
    from tables.transactions import PRECOMMITTED, TransactionStore

    settings = server_settings(server)
    if not (settings.resolved_data_dir / "transactions.db").exists():  # a new data dir (one server: SQLite)
        return []
    store = Store(settings.resolved_store_uri)
    txns = TransactionStore(store)
    try:
        return [(t.db, t.label) for t in txns.in_state(PRECOMMITTED)]
    finally:
        txns.close()
        store.close()


def abort_left(server: ServerProcess, left: list[tuple[str, str]]) -> None:
    for db, label in left:
        reply = httpx.put(
            f"{server.base_url}/api/{db}/_stream_load_2pc",
            headers={"label": label, "txn_operation": "abort"},
            auth=AUTH,
            timeout=120,
        ).json()
        note(f"aborted {db}.{label} left PRECOMMITTED by an unchecked cycle: {reply.get('status')}")


def load_state(path: Path) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    return {"cycles": 0, "failed_cycles": 0, "runs": []}


def run(
    workdir: Path,
    *,
    cycles: int,
    seconds: float,
    cycle_seconds: float,
    seed: int | None = None,
    replay: Path | None = None,
    fault: str | None = None,
    servers: int = 1,
) -> dict[str, Any]:
    """Cycles until `cycles` or `seconds` are reached; returns the run's summary (and adds it to state.json).
    `servers` > 1: that many servers on one PostgreSQL database and one shared dir (a new database each run)."""
    workdir.mkdir(parents=True, exist_ok=True)
    histories = workdir / "histories"
    histories.mkdir(exist_ok=True)
    state_path = workdir / "state.json"
    state = load_state(state_path)
    data_dir = workdir / ("replay-data" if replay else "data")
    if replay:
        shutil.rmtree(data_dir, ignore_errors=True)
        header = json.loads(replay.read_text().splitlines()[0])
        plans = [(int(header["cycle"]), int(header["seed"]), float(header["seconds"]), float(header["kill_offset"]))]
        fault = header.get("fault")
        servers = int(header.get("servers", 1))
        histories = workdir / "replays"
        histories.mkdir(exist_ok=True)
    else:
        rng = random.Random(seed)
        first = int(state["cycles"]) + 1
        plans = []
        for n in range(first, first + cycles):
            cycle_seed = rng.randrange(2**31)
            plans.append((n, cycle_seed, cycle_seconds, random.Random(cycle_seed).uniform(0, cycle_seconds)))
    postgres = None
    if servers > 1:
        from tests.postgres import start_postgres

        postgres = start_postgres()  # in a dir of its own under /tmp (the postgres user must enter it)
        uri = postgres.create_database()
        shared = data_dir / "shared"
        shutil.rmtree(shared, ignore_errors=True)
        env = {
            "SL_CATALOG_URI": uri,
            "SL_SHARED_DIR": str(shared),
            "SL_SPARK_MASTER": "local[1]",
            "SL_LEASE_SECONDS": str(POSTGRES_LEASE_SECONDS),
        }
        everyone = [
            ServerProcess(data_dir / f"server-{i}", workdir / f"server-{i}.log", default_command, **env)
            for i in range(servers)
        ]
    else:
        everyone = [ServerProcess(data_dir, workdir / "server.log")]
    server, peers = everyone[0], everyone[1:]
    run_started = time.monotonic()
    left = left_precommitted(server) if not replay and servers == 1 else []
    started = time.monotonic()
    for each in everyone:
        each.start(timeout=300, **server_env(fault))
    abort_left(server, left)
    note(f"{len(everyone)} server(s) started in {time.monotonic() - started:.1f} s")
    for each in everyone:
        warm_up(each)
    note("warmed up")
    results: list[dict[str, Any]] = []
    try:
        for number, cycle_seed, window, kill_offset in plans:
            if results and time.monotonic() - run_started > seconds:
                break
            cycle = Cycle(number, cycle_seed, window, kill_offset, fault, peers=peers)
            summary = run_cycle(server, cycle, histories)
            results.append(summary)
            print(json.dumps(summary), flush=True)
            if not replay:
                state["cycles"] = int(state["cycles"]) + 1
                state["failed_cycles"] = int(state["failed_cycles"]) + (0 if summary["ok"] else 1)
                state_path.write_text(json.dumps(state, indent=1))
    finally:
        for each in everyone:
            stop(each)
    try:
        orphans = orphan_files(everyone)
    finally:
        if postgres is not None:
            postgres.close()
    note(f"maintenance done, {len(orphans)} orphan files")
    recovery = [r["recovery_seconds"] for r in results]
    total = {
        "cycles": len(results),
        "failed": [r["cycle"] for r in results if not r["ok"]],
        "acknowledged": sum(r["acknowledged"] for r in results),
        "no_reply": sum(r["no_reply"] for r in results),
        "recovery_seconds_max": max(recovery, default=0),
        "recovery_seconds_mean": round(sum(recovery) / len(recovery), 2) if recovery else 0,
        "orphan_files": orphans[:20],
        "seconds": round(time.monotonic() - run_started, 1),
        "cycles_all_runs": state["cycles"],
        "failed_cycles_all_runs": state["failed_cycles"],
    }
    if not replay:
        state["runs"].append({k: v for k, v in total.items() if k != "orphan_files"} | {"orphans": len(orphans)})
        state_path.write_text(json.dumps(state, indent=1))
    total["results"] = results
    return total


# -- the soak: the workload without kills ----------------------------------------------------------------------
# the soak checks the snapshot bound at this count: a round of more than 100 loads into one table (the default
# count) could expire snapshots mid-round, and the checker reads the round's load order from them
SOAK_KEEP_COUNT = 1000
SOAK_ENV = {k: v for k, v in SERVER_ENV.items() if not k.startswith("SL_SNAPSHOT_")} | {
    "SL_SNAPSHOT_KEEP_COUNT": str(SOAK_KEEP_COUNT)
}
SOAK_RSS_GROWTH_MB = 50
SOAK_DRIFT = 0.10  # open files and threads: within ±10% of the first checked sample


def _proc_status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            fields[key] = int(value.split()[0])
    return {
        "rss_mb": round(fields.get("VmRSS", 0) / 1024),
        "threads": fields.get("Threads", 0),
        "fds": len(list(Path(f"/proc/{pid}/fd").iterdir())),
    }


def sample(server: ServerProcess, started: float) -> dict[str, Any]:
    """The server's Python process and its JVM (RSS, threads, open files), its staged files, every table's
    snapshots and the rowsets its current snapshot holds (largest per table), and the warehouse's data files."""
    from tables.catalog import Catalog

    assert server.proc is not None
    out: dict[str, Any] = {"minute": round((time.monotonic() - started) / 60, 2)}
    out["python"] = _proc_status(server.proc.pid)
    jvms = [pid for pid in server.children() if "java" in Path(f"/proc/{pid}/cmdline").read_bytes().decode()]
    out["jvm"] = _proc_status(jvms[0]) if jvms else {}
    settings = server_settings(server)
    staging = settings.staging_dir
    out["staged_files"] = len(list(staging.iterdir())) if staging.is_dir() else 0
    catalog = Catalog(uri=settings.resolved_catalog_uri, warehouse=settings.resolved_warehouse)
    snapshots, rowsets = 0, 0
    for db, name in catalog.table_locations():
        try:
            iceberg = catalog.load(db, name).iceberg
        except Exception:  # dropped under us
            continue
        snapshots = max(snapshots, len(iceberg.snapshots()))
        current = iceberg.current_snapshot()
        if current is not None:
            rowsets = max(
                rowsets,
                int((current.summary.additional_properties if current.summary else {}).get("total-data-files", 0)),
            )
    out["snapshots_max"], out["rowsets_max"] = snapshots, rowsets
    out["warehouse_files"] = sum(1 for p in settings.resolved_warehouse.rglob("*.parquet"))
    return out


def soak_problems(samples: list[dict[str, Any]], seconds: float, keep_count: int) -> list[str]:
    """Issue 23's soak rules from a third of the run (minute 10 of 30) to its end. A sample is taken while 8
    clients load, so one sample's threads and open files depend on what runs at that instant: each rule
    compares medians, of the first three checked samples and of the last three, each taken while clients load
    (idle, the server's pools shrink: a sample between rounds or after the last one would read as a drop)."""
    problems: list[str] = []
    loading = [s for s in samples if s.get("loading", True)]  # the last sample is taken after the clients stopped
    checked = [s for s in loading if s["minute"] * 60 >= seconds / 3] or loading[-1:]
    first, last = checked[:3], checked[-3:]
    for proc in ("python", "jvm"):
        if not all(s.get(proc) for s in first + last):
            problems.append(f"{proc}: a sample is missing")
            continue
        for what in ("rss_mb", "fds", "threads"):
            before = statistics.median(s[proc][what] for s in first)
            after = statistics.median(s[proc][what] for s in last)
            if what == "rss_mb" and after - before > SOAK_RSS_GROWTH_MB:
                problems.append(f"{proc}: RSS grew from {before} MB to {after} MB")
            elif what != "rss_mb" and abs(after - before) > SOAK_DRIFT * before:
                problems.append(f"{proc}: {what} went from {before} to {after}")
    for s in samples:
        if s["staged_files"] > 2 * (WRITERS + 1):
            problems.append(f"{s['staged_files']} staged files at minute {s['minute']}")
        if s["snapshots_max"] > 2 * keep_count + 1:
            problems.append(f"a table held {s['snapshots_max']} snapshots at minute {s['minute']}")
    return problems


def soak(workdir: Path, *, seconds: float, round_seconds: float, seed: int | None = None) -> dict[str, Any]:
    """The workload without kills on one server for `seconds`: rounds of `round_seconds`, each in a fresh
    database checked against the model while the server runs (the previous round's database is dropped);
    the server's resources are sampled every minute (every tenth of the run when shorter)."""
    workdir.mkdir(parents=True, exist_ok=True)
    histories = workdir / "soak-histories"
    histories.mkdir(exist_ok=True)
    data_dir = workdir / "soak-data"
    shutil.rmtree(data_dir, ignore_errors=True)
    server = ServerProcess(data_dir, workdir / "soak-server.log")
    server.start(timeout=300, **SOAK_ENV)
    warm_up(server)
    rng = random.Random(seed)
    started = time.monotonic()
    samples = [sample(server, started) | {"loading": False}]
    interval = min(60.0, seconds / 10)
    stop = threading.Event()
    loading = threading.Event()  # set while a round's clients run (not while it is checked)

    def sampler() -> None:
        while not stop.wait(interval):
            while not loading.wait(1) and not stop.is_set():
                pass
            try:
                samples.append(sample(server, started) | {"loading": loading.is_set()})
            except Exception as exc:  # noqa: BLE001 - a sample that failed is a gap in the curve, not the end
                note(f"sample failed: {exc!r}")

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    rounds: list[dict[str, Any]] = []
    previous = None
    try:
        for number in itertools.count(1):
            if time.monotonic() - started + round_seconds > seconds:
                break
            cycle = Cycle(number, rng.randrange(2**31), round_seconds, round_seconds)
            loading.set()
            try:
                run_workload(server, cycle, kill=False)
            finally:
                loading.clear()
            stats: dict[str, int] = {}
            try:
                cycle.problems += check_cycle(cycle.ops, observe(server, cycle), stats)
            except Exception as exc:
                cycle.problems.append(f"check failed: {exc!r}")
            summary = {
                "round": number,
                "ok": not cycle.problems,
                "operations": len(cycle.ops),
                "acknowledged": sum(1 for op in cycle.ops if succeeded(op)),
                "visible": stats.get("visible", 0),
                "problems": cycle.problems,
            }
            write_history(histories / f"round-{number:04d}.jsonl", cycle, summary)
            print(json.dumps(summary), flush=True)
            rounds.append(summary)
            if previous:
                server.sql(previous, f"DROP DATABASE {previous} FORCE")
            previous = cycle.db
    finally:
        stop.set()
        thread.join(timeout=interval + 60)
        try:
            samples.append(sample(server, started) | {"loading": False})
        finally:
            server.kill()
    problems = soak_problems(samples, seconds, keep_count=SOAK_KEEP_COUNT)
    middle = samples[len(samples) // 2]
    return {
        "seconds": round(time.monotonic() - started, 1),
        "rounds": len(rounds),
        "failed_rounds": [r["round"] for r in rounds if not r["ok"]],
        "acknowledged": sum(r["acknowledged"] for r in rounds),
        "curve": {"start": samples[0], "middle": middle, "end": samples[-1]},
        "problems": problems,
        "samples": samples,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=10, help="most kill cycles in this run")
    parser.add_argument("--seconds", type=float, default=1800, help="no new cycle starts after this many seconds")
    parser.add_argument("--cycle-seconds", type=float, default=30, help="the load window the kill falls in")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sl-torture"), help="data dir, histories, state")
    parser.add_argument("--seed", type=int, default=None, help="the run's seed (default: random)")
    parser.add_argument("--replay", type=Path, default=None, help="rerun the cycle of this history file")
    parser.add_argument("--fault", choices=FAULTS, default=None, help="add a client injecting this fault")
    parser.add_argument("--servers", type=int, default=1, help="2: two servers on one PostgreSQL database")
    parser.add_argument("--soak", type=float, default=None, help="no kills: rounds of --cycle-seconds for SOAK s")
    args = parser.parse_args(argv)
    if args.soak:
        result = soak(args.workdir, seconds=args.soak, round_seconds=args.cycle_seconds, seed=args.seed)
        (args.workdir / "soak.json").write_text(json.dumps(result, indent=1))
        print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
        return 1 if result["failed_rounds"] or result["problems"] else 0
    total = run(
        args.workdir,
        cycles=args.cycles,
        seconds=args.seconds,
        cycle_seconds=args.cycle_seconds,
        seed=args.seed,
        replay=args.replay,
        fault=args.fault,
        servers=args.servers,
    )
    print(json.dumps({k: v for k, v in total.items() if k != "results"}, indent=1))
    return 1 if total["failed"] or total["orphan_files"] else 0


if __name__ == "__main__":
    sys.exit(main())
