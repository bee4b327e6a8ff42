"""Broker load jobs (`LOAD LABEL ...`), kept in the store (tables/store.py) so SHOW LOAD outlives a restart and
start-up can resume or cancel a job that was running when the server stopped."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tables.store import LOAD_JOBS, Store, one_of

PENDING = "PENDING"
LOADING = "LOADING"
FINISHED = "FINISHED"
CANCELLED = "CANCELLED"
UNFINISHED = (PENDING, LOADING)


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
    owner: str | None = None  # several servers: the one that runs it


def _job(row: tuple[Any, ...]) -> LoadJob:
    values = list(row)
    values[9] = json.loads(values[9] or "{}")
    return LoadJob(*values)


class LoadJobStore:
    """Broker load jobs in a `Store`, or a SQLite file at the path given (`data_dir/load_jobs.db`)."""

    def __init__(self, store: Store | Path) -> None:
        self.store = Store.of(store)
        self._owns_store = not isinstance(store, Store)
        self.store.ensure(LOAD_JOBS)
        sql, j = self.store.sql, LOAD_JOBS.c
        self._add = sql(
            "load_jobs add",
            lambda: (
                sa.insert(LOAD_JOBS)
                .values(
                    db=sa.bindparam("p_db"),
                    label=sa.bindparam("p_label"),
                    tbl=sa.bindparam("p_tbl"),
                    statement=sa.bindparam("p_statement"),
                    state=PENDING,
                    task_info=sa.bindparam("p_task_info"),
                    created=sa.bindparam("p_now", type_=sa.Float),
                    owner=sa.bindparam("p_owner", type_=sa.Text),
                )
                .returning(j.job_id)
            ),
        )
        self._get = sql("load_jobs get", lambda: sa.select(LOAD_JOBS).where(j.job_id == sa.bindparam("p_id")))
        self._unfinished = sql(
            "load_jobs unfinished", lambda: sa.select(LOAD_JOBS).where(one_of(j.state, UNFINISHED)).order_by(j.job_id)
        )
        self._unfinished_count = sql(
            "load_jobs unfinished count",
            lambda: sa.select(sa.func.count()).select_from(LOAD_JOBS).where(one_of(j.state, UNFINISHED)),
        )

    def create(
        self, *, db: str, label: str, table: str, statement: str, task_info: str, owner: str | None = None
    ) -> int:
        row = self.store.write_one(
            self._add,
            p_db=db,
            p_label=label,
            p_tbl=table,
            p_statement=statement,
            p_task_info=task_info,
            p_now=time.time(),
            p_owner=owner,
        )
        return int(row.scalar())

    def update(self, job_id: int, **values: Any) -> None:
        if "details" in values:
            values["details"] = json.dumps(values["details"])
        names = tuple(sorted(values))
        sql = self.store.sql(
            ("load_jobs update", names),
            lambda: (
                sa.update(LOAD_JOBS)
                .where(LOAD_JOBS.c.job_id == sa.bindparam("p_id"))
                .values({n: sa.bindparam(f"p_{n}", type_=LOAD_JOBS.c[n].type) for n in names})
            ),
        )
        self.store.write_one(sql, p_id=job_id, **{f"p_{n}": values[n] for n in names})

    def get(self, job_id: int) -> LoadJob | None:
        with self.store.read() as tx:
            row = tx.run(self._get, p_id=job_id).first()
        return _job(row) if row else None

    def in_database(self, db: str, *, label: str | None = None) -> list[LoadJob]:
        def build() -> sa.Select[Any]:
            query = sa.select(LOAD_JOBS).where(LOAD_JOBS.c.db == sa.bindparam("p_db"))
            if label is not None:
                query = query.where(LOAD_JOBS.c.label == sa.bindparam("p_label"))
            return query.order_by(LOAD_JOBS.c.job_id)

        sql = self.store.sql(("load_jobs in_database", label is not None), build)
        with self.store.read() as tx:
            rows = tx.run(sql, p_db=db, p_label=label).rows
        return [_job(r) for r in rows]

    def unfinished(self) -> list[LoadJob]:
        with self.store.read() as tx:
            rows = tx.run(self._unfinished).rows
        return [_job(r) for r in rows]

    def unfinished_count(self) -> int:
        """Jobs PENDING or LOADING in every database (Doris bounds them all together)."""
        with self.store.read() as tx:
            return int(tx.run(self._unfinished_count).scalar())

    def close(self) -> None:
        if self._owns_store:
            self.store.close()
