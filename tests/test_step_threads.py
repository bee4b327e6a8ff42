"""The step threads of stream loads (loads/steps.py): every step's value or error reaches its caller, and
concurrent loads' steps share a few threads, off the event loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from loads.steps import STEP_THREADS, StepThreads


def test_concurrent_steps_return_their_own_values_on_a_few_threads_off_the_loop() -> None:
    steps = StepThreads("test-step")
    ran_on: set[int] = set()

    def step(i: int) -> int:
        ran_on.add(threading.get_ident())
        time.sleep(0.001)  # a claim's or a sync's wait on the disk
        return i * i

    async def many() -> list[int]:
        return await asyncio.gather(*(steps.run(lambda i=i: step(i)) for i in range(200)))

    async def on_loop() -> tuple[list[int], int]:
        return await many(), threading.get_ident()

    values, loop_thread = asyncio.run(on_loop())
    assert values == [i * i for i in range(200)]
    assert 1 <= len(ran_on) <= STEP_THREADS
    assert loop_thread not in ran_on


def test_a_step_error_is_raised_to_its_caller_alone() -> None:
    steps = StepThreads("test-step")

    def step(i: int) -> int:
        if i == 3:
            raise ValueError("label in use")
        return i

    async def many() -> list[int | BaseException]:
        return await asyncio.gather(*(steps.run(lambda i=i: step(i)) for i in range(6)), return_exceptions=True)

    outcomes = asyncio.run(many())
    assert [o for i, o in enumerate(outcomes) if i != 3] == [0, 1, 2, 4, 5]
    assert isinstance(outcomes[3], ValueError) and str(outcomes[3]) == "label in use"


def test_a_cancelled_callers_step_ends_and_its_value_is_undone() -> None:
    steps = StepThreads("test-step")
    started, go_on = threading.Event(), threading.Event()
    undone: list[str] = []

    def claim() -> str:
        started.set()
        go_on.wait(10)
        return "txn 7"

    async def cancel_midway() -> None:
        task = asyncio.create_task(steps.run(claim, undo=undone.append))
        assert await asyncio.to_thread(started.wait, 10)
        task.cancel()
        go_on.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        deadline = time.monotonic() + 10
        while not undone:
            assert time.monotonic() < deadline, "the cancelled caller's value was never undone"
            await asyncio.sleep(0.01)

    asyncio.run(cancel_midway())
    assert undone == ["txn 7"]
