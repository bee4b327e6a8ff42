"""The short blocking steps of stream loads (planning and the label claim, a grouped load's hand-over), run for
the event loop on a few threads of their own."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast, runtime_checkable

log = logging.getLogger(__name__)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

STEP_THREADS = 2  # one thread's disk waits (a batch's claim commit, its WAL sync) overlap the other's steps
MAX_BATCH = 64  # steps a thread takes at once: their outcomes go back together, so a batch delays its first
IDLE_EXIT_S = 60.0  # an idle thread ends (another starts with the next step)


@runtime_checkable
class Deferred(Protocol[T_co]):
    """A step's value that is not final until it is made durable (an async load's WAL record, written but not
    synced). A batch's deferred values are flushed last first, since a later flush covers the earlier ones
    (each then returns at once), and then finished in order: one sync for the batch, not one per load."""

    def flush(self) -> None: ...

    def finish(self) -> T_co: ...

    def fail(self, error: BaseException) -> None: ...


@functools.cache
def _deferred(cls: type[Any]) -> bool:
    """`isinstance(value, Deferred)` by the value's class, once per class: a runtime protocol's check walks the
    protocol's members on every call (~4-9 µs, twice per stream load)."""
    return issubclass(cls, Deferred)


@dataclass
class _Step(Generic[T]):
    fn: Callable[[], T]
    loop: asyncio.AbstractEventLoop | None  # None: nobody awaits it (an undo)
    future: asyncio.Future[T] | None
    undo: Callable[[T], object] | None = None
    value: Any = None
    error: BaseException | None = None


class StepThreads:
    """A few threads that run the short blocking steps of stream loads for the event loop.

    A thread takes every step queued when it looks (up to `MAX_BATCH`), runs them in order, makes their
    `Deferred` values durable at once, and hands their outcomes back to the loop in one callback. Under
    concurrent small loads, anyio's worker threads cost more than the steps themselves: a capacity limiter, a
    cancel scope, a thread wake-up and a loop wake-up per call, and up to 40 threads taking the GIL in turn
    (~45 voluntary context switches per async load in them, from /proc, and 0.96 ms of the server's CPU per
    load). Two threads keep the steps of concurrent loads overlapping where it pays: one thread's batch waits
    on the disk (its label claims' commit, its WAL sync) while the other runs (one thread, or four, measured
    slower).

    Only short steps belong here: a step that waits for a Spark job would hold up every load behind it.
    """

    def __init__(
        self,
        name: str,
        threads: int = STEP_THREADS,
        *,
        batch_scope: Callable[[], AbstractContextManager[object]] = nullcontext,
    ) -> None:
        """`batch_scope`: the block each batch's steps run in (the catalog's `shared_reads`: a batch of loads
        reads each table's catalog row once)."""
        self._name = name
        self._batch_scope = batch_scope
        self._max = threads
        self._queue: deque[_Step[Any]] = deque()
        self._ready = threading.Condition()
        self._alive = 0
        self._idle = 0

    async def run(self, fn: Callable[[], T], *, undo: Callable[[T], object] | None = None) -> T:
        """`fn()` on a step thread; its value (a `Deferred` one once finished) or its exception.

        Like a worker thread's run, a step that started is not stopped: when the awaiting task is cancelled, the
        step runs to its end and its value is handed to `undo` (on a step thread), not to the caller.
        """
        return cast(T, await self._run(fn, undo))

    async def run_deferred(self, fn: Callable[[], Deferred[T]], *, undo: Callable[[T], object] | None = None) -> T:
        """`run` of a step whose value is `Deferred`: what comes back is its `finish`."""
        return cast(T, await self._run(fn, undo))

    async def _run(self, fn: Callable[[], object], undo: Callable[[Any], object] | None) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._put(_Step(fn, loop, future, undo))
        return await future

    def _put(self, step: _Step[Any]) -> None:
        with self._ready:
            self._queue.append(step)
            if self._idle:
                self._ready.notify()
            elif self._alive < self._max:
                self._alive += 1
                threading.Thread(target=self._work, name=self._name, daemon=True).start()

    def _work(self) -> None:
        try:
            self._serve()
        except BaseException:  # a bug here: the next step starts another thread
            log.exception("stream-load step thread failed")
            with self._ready:
                self._alive -= 1
            raise

    def _serve(self) -> None:
        """Take batches until idle for `IDLE_EXIT_S` (the thread then ends)."""
        while True:
            with self._ready:
                while not self._queue:
                    self._idle += 1
                    woken = self._ready.wait(IDLE_EXIT_S)
                    self._idle -= 1
                    if not woken and not self._queue:
                        self._alive -= 1
                        return
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), MAX_BATCH))]
            with self._batch_scope():
                for step in batch:
                    try:
                        step.value = step.fn()
                    except BaseException as exc:  # handed to the awaiting task, which raises it
                        step.error = exc
            self._make_durable([step for step in batch if _deferred(step.value.__class__)])
            self._hand_back(batch)

    @staticmethod
    def _make_durable(deferred: list[_Step[Any]]) -> None:
        """Flush the batch's deferred values, the last first (it covers the ones before it), then finish each,
        or fail it with its flush's error."""
        for step in reversed(deferred):
            try:
                step.value.flush()
            except BaseException as exc:
                step.error = exc
        for step in deferred:
            value, step.value = step.value, None
            try:
                if step.error is not None:
                    value.fail(step.error)
                else:
                    step.value = value.finish()
            except BaseException as exc:
                step.error = exc

    def _hand_back(self, batch: list[_Step[Any]]) -> None:
        """One callback per event loop for the batch's outcomes."""
        loops: dict[asyncio.AbstractEventLoop, list[_Step[Any]]] = {}
        for step in batch:
            if step.loop is not None:
                loops.setdefault(step.loop, []).append(step)
        for loop, steps in loops.items():
            try:
                loop.call_soon_threadsafe(self._settle, steps)
            except RuntimeError:  # the loop has closed (the server stopped): nobody is left to answer
                log.debug("%d step outcome(s) dropped: their event loop is closed", len(steps))

    def _settle(self, steps: list[_Step[Any]]) -> None:
        """On the loop: each step's outcome to its task; a cancelled task's value to its undo."""
        for step in steps:
            assert step.future is not None
            if not step.future.cancelled():
                if step.error is not None:
                    step.future.set_exception(step.error)
                else:
                    step.future.set_result(step.value)
            elif step.error is None and step.undo is not None:
                self._put(_Step(functools.partial(step.undo, step.value), None, None))
