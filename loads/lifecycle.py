"""The life of a stream load below the app, owned in one place.

    StreamLoads.run(load, body chunks)
        │ planned and its label claimed (PREPARE)                      LoadService.prepare
        ▼
    holding(prepared) ── any exception: the transaction aborts (its label is free again);
        │                whatever happens: the staged body is removed
        │ body staged and decompressed under its bounds                  loaders.staging.receive_body
        │ (a small grouped body is kept in memory: no file)
        ▼
    group commit or a plain run, decided here once                      group_mode
        │ GroupCommitter.run  /  LoadService.run_staged (the writer commits or aborts)
        ▼
    LoadResult, rendered by `tables.load_spec.render_load` for every outcome

The app parses the request (credentials, framing, headers) and renders the reply; every step between is here.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from loaders.staging import BodyLimits, StagedPayload, check_body_limit, receive_body
from loads.steps import StepThreads
from tables.errors import DorisError, LoadError
from tables.load_spec import LoadRequest, LoadResult, render_load

if TYPE_CHECKING:  # they load pyspark: the app imports this module, and Spark starts with the services
    from spark_runner.group_commit import Acknowledging, GroupCommitter
    from spark_runner.service import LoadService, PreparedLoad

log = logging.getLogger(__name__)


def refused(error: Exception, *, label: str, comment: str = "", txn_id: int = -1) -> LoadResult:
    """The reply of a load refused before or while its body came in; a bug is logged and still a `Fail`."""
    if not isinstance(error, DorisError):
        log.error("stream load planning failed", exc_info=error)
    return render_load(error, label=label, comment=comment, txn_id=txn_id)


@dataclass(frozen=True)
class HeldLoad:
    """A prepared load inside `StreamLoads.holding`: where its body is staged, and since when it arrives."""

    prepared: PreparedLoad
    path: Path
    received: float  # `time.monotonic()` when the body began to be received


@dataclass(frozen=True)
class StreamLoads:
    """Runs stream loads from their parsed request and their body's chunks to their `LoadResult`."""

    service: LoadService
    group_commit: GroupCommitter | None
    staging_dir: Path
    limits: BodyLimits
    steps: StepThreads = field(default_factory=lambda: StepThreads("stream-load-step"))

    async def run(self, load: LoadRequest, chunks: AsyncIterator[bytes], *, expected: int | None) -> LoadResult:
        """Plan and claim, receive the body, run; every failure of the load or its body is a `LoadResult`.

        Raises:
            Exception: a bug while the load ran (the transaction is aborted unless it committed).
        """
        try:
            check_body_limit(load, expected, self.limits)
            # planned on a step thread, its label claim written with those of the other loads of its step batch
            prepared = await self.steps.run_deferred(
                functools.partial(self.service.prepare_later, load), undo=self.service.abort
            )
        except Exception as exc:
            return refused(exc, label=load.label, comment=load.comment)
        try:
            with self.holding(prepared) as held:
                staged = await self.receive(held, chunks, expected=expected)
                receive_ms = int((time.monotonic() - held.received) * 1000)
                mode = self._mode(prepared, staged.size)
                outcome: LoadResult | Future[LoadResult] | Acknowledging
                if mode is not None and staged.data is not None:  # a small body handed to its group: a short step
                    # (an async load's WAL record synced with those of the other loads of its step batch: its step
                    # thread finishes its `Acknowledging`, and what comes back is its reply)
                    step = functools.partial(self.run_staged, prepared, staged, receive_ms, mode, defer_sync=True)
                    outcome = await self.steps.run(step)
                else:  # a Spark job, or a large body's WAL copy: a worker thread of its own
                    outcome = await anyio.to_thread.run_sync(
                        functools.partial(self.run_staged, prepared, staged, receive_ms, mode)
                    )
                if isinstance(outcome, LoadResult):
                    return outcome
                assert isinstance(outcome, Future), "an `Acknowledging` is finished by its step thread"
                # a load answered once its group has committed: awaited here, not in a thread; like a thread's
                # run, the wait is not cancelled (the group sets the future whatever happens)
                with anyio.CancelScope(shield=True):
                    result = await asyncio.shield(asyncio.wrap_future(outcome))
                return result
        except LoadError as exc:
            return refused(exc, label=load.label, comment=load.comment, txn_id=prepared.txn_id)

    @contextmanager
    def holding(self, prepared: PreparedLoad) -> Iterator[HeldLoad]:
        """The block in which a prepared load holds its label.

        Any exception aborts the transaction (a committed one stays committed), and the staged files go
        whatever happens: a failed load leaves neither a label claim nor a file behind.
        """
        held = HeldLoad(prepared, self.staging_dir / f"txn_{prepared.txn_id}.dat", time.monotonic())
        try:
            yield held
        except BaseException:
            self.service.abort(prepared)
            raise
        finally:
            self.service.cleanup_staged(held.path)

    async def receive(self, held: HeldLoad, chunks: AsyncIterator[bytes], *, expected: int | None) -> StagedPayload:
        """Stage the body (a pause point once its first chunk is in: tests hold a load there).

        Raises:
            LoadError.
        """
        prepared = held.prepared
        pauses, table = self.service.writer.pauses, prepared.plan.table.name
        # a large CSV body is split while it comes in, unless it goes to a group (`LoadService.prestage`)
        grouped = expected is not None and self._mode(prepared, expected) is not None
        growing = None if grouped else self.service.prestage(prepared, held.path, expected)
        whole = False
        try:
            staged = await receive_body(
                chunks,
                held.path,
                prepared.request,
                started=prepared.started,
                expected=expected,
                limits=self.limits,
                first_chunk=lambda: pauses.ahit("staging", table),
                written=growing.grew if growing is not None else None,
                in_memory=grouped,  # a small grouped body never becomes a file of its own
            )
            whole = True
            return staged
        finally:
            if growing is not None:
                growing.end(whole)  # a body that did not come whole: the split stops (its fields go with it)

    def _mode(self, prepared: PreparedLoad, size: int) -> str | None:
        """The group-commit mode of a load of `size` bytes; None: a plain run."""
        from spark_runner.group_commit import group_mode  # loaded with the services already: no import cost

        return group_mode(prepared, size) if self.group_commit is not None else None

    def run_staged(
        self,
        prepared: PreparedLoad,
        staged: StagedPayload,
        receive_ms: int,
        mode: str | None = None,
        *,
        defer_sync: bool = False,
    ) -> LoadResult | Future[LoadResult] | Acknowledging:
        """Group commit in `mode` (the load's `_mode`, decided once by the caller), else a plain run. A load
        answered once its group has committed returns its future, an async one whose WAL sync is left to its
        step thread (`defer_sync`) its `Acknowledging` (`GroupCommitter.run`)."""
        if mode is not None and self.group_commit is not None:
            return self.group_commit.run(
                prepared,
                staged.path,
                mode,
                load_bytes=staged.size,
                receive_ms=receive_ms,
                data=staged.data,
                defer_sync=defer_sync,
            )
        staged = staged.materialize()
        return self.service.run_staged(prepared, staged.path, load_bytes=staged.size, receive_ms=receive_ms)
