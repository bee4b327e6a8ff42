"""Shared benchmark helpers: start a server the way users do, talk to it over HTTP, generate CSV data.

Nothing here imports the server's packages or `tests/`: the benchmarks see the service from outside,
through `python -m app`, HTTP and curl, exactly as a user does.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"  # git-ignored: cached CSV files
AUTH = ("root", "")
DB = "bench"
START_TIMEOUT = 120.0
WARM_UP_TIMEOUT = 180.0  # the warm-up: two bulk loads, then `SL_WARM_UP_SECONDS` (20 s by default)
STOP_GRACE = 20.0


class BenchError(Exception):
    """A benchmark step failed (a load not Success, a wrong count, the server did not start)."""


# -- printing --------------------------------------------------------------------------------
def command_line() -> str:
    """The exact command this benchmark was started with."""
    return shlex.join([sys.executable, *sys.argv])


def banner(title: str, what: str) -> None:
    print(f"== {title}")
    for line in what.strip().splitlines():
        print(f"   {line}")
    print(f"   command: {command_line()}")
    print(
        f"   machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
        "(read results on an otherwise idle machine)"
    )
    sys.stdout.flush()


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.3f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolated percentile (p in 0..100) of a non-empty list."""
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * p / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(values: list[float]) -> float:
    return statistics.median(values)


# -- the server ------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`python -m app --host 127.0.0.1 --port P --data-dir D` in its own process group."""

    def __init__(self, data_dir: Path, *, spark_master: str = "local[2]", extra_env: dict[str, str] | None = None):
        self.data_dir = data_dir
        self.log_path = data_dir.parent / "server.log"
        self.spark_master = spark_master
        self.extra_env = extra_env or {}
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self.log_offset = 0  # log size once the server answered: later lines belong to the run

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "app",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]

    def start(self) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SL_")}
        env["SL_SPARK_MASTER"] = self.spark_master
        env["SL_MYSQL_PORT"] = "0"  # a free port: the benchmarks speak HTTP only
        env.update(self.extra_env)
        self._log = open(self.log_path, "ab")
        print(f"   server:  SL_SPARK_MASTER={self.spark_master} {shlex.join(self.argv)}  (log {self.log_path})")
        sys.stdout.flush()
        started = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = started + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.base_url + "/", timeout=2).status_code == 200:
                    self.startup_seconds = time.monotonic() - started
                    self.log_offset = self.log_path.stat().st_size
                    print(f"   server up in {self.startup_seconds:.1f} s (pid {self.proc.pid})")
                    sys.stdout.flush()
                    if env.get("SL_WARM_UP_SECONDS", "").strip() not in ("0", "0.0"):
                        self.wait_warm_up()
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise BenchError(f"server did not answer GET / within {START_TIMEOUT:.0f} s:\n{self.log_tail()}")

    def wait_warm_up(self) -> None:
        """Wait for the server's JVM warm-up (`SL_WARM_UP_SECONDS`, on by default) to end: a user's load would
        stop it, and the figures are those of a server as it is once started."""
        deadline = time.monotonic() + WARM_UP_TIMEOUT
        while time.monotonic() < deadline:
            if lines := self.log_lines("JVM warm-up"):
                print(f"   {lines[0].split(': ', 1)[-1]}")
                sys.stdout.flush()
                return
            time.sleep(0.25)
        raise BenchError(f"the server's warm-up did not end within {WARM_UP_TIMEOUT:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM the whole process group, SIGKILL it after STOP_GRACE seconds; never leaves a process."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            print(f"   server did not stop within {STOP_GRACE:.0f} s of SIGTERM: SIGKILL", file=sys.stderr)
        # the leader may be gone while the JVM (same group) lingers: wait a little, then kill what is left
        deadline = time.monotonic() + (STOP_GRACE if self.proc.poll() is None else 5)
        while time.monotonic() < deadline and _group_alive(pgid):
            time.sleep(0.2)
        if _group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None
        if self._log:
            self._log.close()
            self._log = None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def log_lines(self, *needles: str) -> list[str]:
        """Lines logged after start-up that contain one of `needles`."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                text = f.read().decode(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if any(n in line for n in needles)]

    # -- HTTP ------------------------------------------------------------------------------
    def sql(self, stmt: str, db: str = DB, *, client: httpx.Client | None = None) -> dict[str, Any]:
        """`POST /api/query/default_cluster/{db}`; returns `data`, raises BenchError unless code 0."""
        url = f"{self.base_url}/api/query/default_cluster/{db}"
        resp = (client or httpx).post(url, json={"stmt": stmt}, auth=AUTH, timeout=300)
        try:
            body = resp.json()
        except ValueError:
            raise BenchError(f"SQL {stmt!r}: HTTP {resp.status_code} {resp.text[:500]}") from None
        if body.get("code") != 0:
            raise BenchError(f"SQL {stmt!r} failed: {body}")
        return body["data"]  # type: ignore[no-any-return]

    def load(self, client: httpx.Client, table_name: str, data: bytes, label: str, db: str = DB) -> dict[str, Any]:
        """One stream load over httpx (PUT with Content-Length), `column_separator: ,`."""
        resp = client.put(
            f"{self.base_url}/api/{db}/{table_name}/_stream_load",
            content=data,
            headers={"label": label, "column_separator": ","},
            auth=AUTH,
            timeout=300,
        )
        try:
            return resp.json()  # type: ignore[no-any-return]
        except ValueError:
            return {"Status": "Fail", "Message": f"HTTP {resp.status_code}: {resp.text[:500]}"}


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


@contextmanager
def running_server(
    *, spark_master: str = "local[2]", keep: bool = False, extra_env: dict[str, str] | None = None
) -> Iterator[Server]:
    """A fresh data directory and a server on it; the server is always stopped, the directory removed."""
    tmp = Path(tempfile.mkdtemp(prefix="sl-bench-"))
    server = Server(tmp / "data", spark_master=spark_master, extra_env=extra_env)
    old_term = signal.signal(signal.SIGTERM, _exit_on_signal)  # `kill <bench pid>` still stops the server
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C too, even if started ignored
    try:
        server.start()
        yield server
    except BaseException:
        tail = server.log_tail(2000)
        if tail:
            print(f"--- server log tail ({server.log_path}):\n{tail}\n---", file=sys.stderr)
        raise
    finally:
        server.stop()
        report_log(server)
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)
        if keep:
            print(f"   kept data and log under {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def report_log(server: Server) -> None:
    """Point at errors and warnings the server logged during the run (the log is removed unless --keep)."""
    bad = server.log_lines("Traceback", "ERROR", "Exception", "WARN")
    if bad:
        print(f"   server log: {len(bad)} line(s) with Traceback/ERROR/Exception/WARN after start-up, first ones:")
        for line in bad[:5]:
            print(f"     | {line[:200]}")
    else:
        print("   server log: no Traceback/ERROR/Exception/WARN lines after start-up")


def create_database(server: Server) -> None:
    server.sql(f"CREATE DATABASE IF NOT EXISTS {DB}")


def unique_table_ddl(name: str, buckets: int) -> str:
    """The benchmark table: unique key with a sequence column (Doris DDL)."""
    return (
        f"CREATE TABLE {name} (k BIGINT NOT NULL, seq INT, name VARCHAR(32), amount DECIMAL(12,2)) "
        f"UNIQUE KEY(k) DISTRIBUTED BY HASH(k) BUCKETS {buckets} "
        f'PROPERTIES ("function_column.sequence_col" = "seq")'
    )


def check_success(reply: dict[str, Any], what: str) -> None:
    if reply.get("Status") != "Success":
        raise BenchError(f"{what}: load not Success: {json.dumps(reply)}")


# -- CSV data --------------------------------------------------------------------------------
CSV_COLUMNS = ["k", "seq", "name", "amount"]
_NAMES = np.array(
    [f"{a}{b}" for a in ("ann", "bob", "cyd", "dee", "eve", "fay", "gus", "hal", "ivy", "jon") for b in range(100)],
    dtype=object,
)  # 1,000 short names


def keys_with_duplicates(rows: int, dup_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """`rows` BIGINT keys where ~dup_fraction of the rows repeat a key seen earlier; returns (keys, distinct)."""
    n_dup = int(round(rows * dup_fraction))
    n_distinct = rows - n_dup
    distinct = rng.permutation(n_distinct).astype(np.int64) * 7919 + 1_000_000_007
    is_dup = np.zeros(rows, dtype=bool)
    if n_dup:
        is_dup[1 + rng.choice(rows - 1, size=n_dup, replace=False)] = True  # the first row is never a repeat
    keys = np.empty(rows, dtype=np.int64)
    keys[~is_dup] = distinct
    seen_before = np.cumsum(~is_dup)[is_dup]  # how many distinct keys exist before each repeat (>= 1)
    keys[is_dup] = distinct[(rng.random(n_dup) * seen_before).astype(np.int64)]
    return keys, n_distinct


def increasing_seq(rows: int, base: int, rng: np.random.Generator) -> np.ndarray:
    """INT sequence values that grow with the row position, with random jitter (so later is mostly larger)."""
    return (base + np.arange(rows, dtype=np.int64) + rng.integers(0, 1000, rows)).astype(np.int32)


def rows_table(keys: np.ndarray, seqs: np.ndarray, rng: np.random.Generator) -> pa.Table:
    """k, seq, name (short string), amount (text like 123.45) as an Arrow table ready to write as CSV."""
    n = len(keys)
    cents = rng.integers(0, 10_000_000, n)
    whole = pc.cast(pa.array(cents // 100), pa.string())
    frac = pc.utf8_lpad(pc.cast(pa.array(cents % 100), pa.string()), width=2, padding="0")
    amount = pc.binary_join_element_wise(whole, frac, ".")
    names = pa.array(_NAMES[rng.integers(0, len(_NAMES), n)], type=pa.string())
    return pa.table({"k": pa.array(keys), "seq": pa.array(seqs), "name": names, "amount": amount})


def write_csv(tbl: pa.Table, sink: Any) -> None:
    """Doris-style CSV: no header, no quoting, `,` separated."""
    pacsv.write_csv(
        tbl, sink, write_options=pacsv.WriteOptions(include_header=False, quoting_style="none", batch_size=65536)
    )


def csv_bytes(keys: np.ndarray, seqs: np.ndarray, rng: np.random.Generator) -> bytes:
    buf = io.BytesIO()
    write_csv(rows_table(keys, seqs, rng), buf)
    return buf.getvalue()


def bulk_csv(rows: int, *, dup_fraction: float = 0.2, seed: int = 42) -> tuple[Path, dict[str, Any]]:
    """The cached bulk file `bench/out/bulk_<rows>_<dup%>_<seed>.csv` and its metadata (made if missing)."""
    OUT.mkdir(parents=True, exist_ok=True)
    stem = f"bulk_{rows}_{int(dup_fraction * 100)}pct_s{seed}"
    path, meta_path = OUT / f"{stem}.csv", OUT / f"{stem}.json"
    if path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("bytes") == path.stat().st_size and meta.get("rows") == rows:
            meta["cached"] = True
            return path, meta
    started = time.monotonic()
    rng = np.random.default_rng(seed)
    keys, n_distinct = keys_with_duplicates(rows, dup_fraction, rng)
    seqs = increasing_seq(rows, 0, rng)
    tmp = path.with_suffix(".csv.tmp")
    chunk = 1_000_000
    with pa.OSFile(str(tmp), "wb") as sink:
        for start in range(0, rows, chunk):
            write_csv(rows_table(keys[start : start + chunk], seqs[start : start + chunk], rng), sink)
    tmp.rename(path)
    meta = {
        "rows": rows,
        "distinct_keys": n_distinct,
        "dup_fraction": dup_fraction,
        "seed": seed,
        "bytes": path.stat().st_size,
        "generate_seconds": round(time.monotonic() - started, 2),
    }
    meta_path.write_text(json.dumps(meta))
    meta["cached"] = False
    return path, meta


# -- table layout (read-only look at the data directory) ---------------------------------------
def rowset_stats(data_dir: Path, table_name: str, db: str = DB) -> tuple[int, int]:
    """(rowsets, data files) of the table's current snapshot, read from the catalog without changing it.

    A load writes one rowset: its files under `data/txn_<id>/`, so rowsets are the distinct parent folders.
    """
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "default", uri=f"sqlite:///{data_dir / 'catalog.db'}", warehouse=f"file://{data_dir / 'warehouse'}"
    )
    tbl = catalog.load_table((db, table_name))
    if tbl.current_snapshot() is None:
        return 0, 0
    files = [task.file.file_path for task in tbl.scan().plan_files()]
    return len({f.rsplit("/", 2)[-2] for f in files}), len(files)


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """The options every benchmark takes: `--spark-master`, `--keep`, `--json`."""
    parser.add_argument("--spark-master", default="local[2]", help="SL_SPARK_MASTER (default local[2])")
    parser.add_argument("--keep", action="store_true", help="keep the server's data directory and log")
    parser.add_argument("--json", action="store_true", help="print one machine-readable JSON line at the end")


def run_main(main: Callable[[], int]) -> None:
    """Run a benchmark's main: its exit code, or 1 with the reason when a check failed."""
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
