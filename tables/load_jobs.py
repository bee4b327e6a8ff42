"""Broker load jobs (`LOAD LABEL ...`), kept in a small SQLite table so SHOW LOAD outlives a restart and
start-up can resume or cancel a job that was running when the server stopped."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PENDING = "PENDING"
LOADING = "LOADING"
FINISHED = "FINISHED"
CANCELLED = "CANCELLED"
UNFINISHED = (PENDING, LOADING)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS load_jobs (
    job_id INTEGER PRIMARY KEY AUTOINCREMENT,
    db TEXT NOT NULL,
    label TEXT NOT NULL,
    tbl TEXT NOT NULL,
    statement TEXT NOT NULL,
    state TEXT NOT NULL,
    txn_id INTEGER,
    error_msg TEXT,
    url TEXT,
    details TEXT NOT NULL DEFAULT '{}',
    task_info TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    load_started REAL,
    finished REAL
);
CREATE INDEX IF NOT EXISTS load_jobs_label ON load_jobs (db, label);
"""


@dataclass(frozen=True)
class LoadJob:
    job_id: int
    db: str
    label: str
    table: str
    statement: str
    state: str
    txn_id: int | None
    error_msg: str | None
    url: str | None
    details: dict[str, Any] = field(default_factory=dict)
    task_info: str = ""
    created: float = 0.0
    load_started: float | None = None
    finished: float | None = None


def _job(row: tuple[Any, ...]) -> LoadJob:
    values = list(row)
    values[9] = json.loads(values[9] or "{}")
    return LoadJob(*values)


class LoadJobStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def create(self, *, db: str, label: str, table: str, statement: str, task_info: str) -> int:
        with self._lock:
            cur = self._conn.execute(
                "INSERT INTO load_jobs (db, label, tbl, statement, state, task_info, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (db, label, table, statement, PENDING, task_info, time.time()),
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def update(self, job_id: int, **values: Any) -> None:
        if "details" in values:
            values["details"] = json.dumps(values["details"])
        sets = ", ".join(f"{k} = ?" for k in values)
        with self._lock:
            self._conn.execute(f"UPDATE load_jobs SET {sets} WHERE job_id = ?", (*values.values(), job_id))

    def get(self, job_id: int) -> LoadJob | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM load_jobs WHERE job_id = ?", (job_id,)).fetchone()
        return _job(row) if row else None

    def in_database(self, db: str, *, label: str | None = None) -> list[LoadJob]:
        sql, args = "SELECT * FROM load_jobs WHERE db = ?", [db]
        if label is not None:
            sql += " AND label = ?"
            args.append(label)
        with self._lock:
            rows = self._conn.execute(sql + " ORDER BY job_id", args).fetchall()
        return [_job(r) for r in rows]

    def unfinished(self) -> list[LoadJob]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM load_jobs WHERE state IN (?, ?) ORDER BY job_id", UNFINISHED
            ).fetchall()
        return [_job(r) for r in rows]

    def unfinished_count(self) -> int:
        """Jobs PENDING or LOADING in every database (Doris bounds them all together)."""
        with self._lock:
            (count,) = self._conn.execute("SELECT count(*) FROM load_jobs WHERE state IN (?, ?)", UNFINISHED).fetchone()
        return int(count)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
