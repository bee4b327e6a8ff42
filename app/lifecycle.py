"""Graceful shutdown: on SIGTERM new loads are refused with a Doris `Fail`, loads in flight finish first."""

from __future__ import annotations

import threading
from types import FrameType

import uvicorn


class LoadGate:
    """Counts loads in flight and refuses new ones once draining."""

    def __init__(self) -> None:
        self.draining = False
        self._count = 0
        self.entered = 0  # loads admitted since start
        self._cond = threading.Condition()

    def enter(self) -> bool:
        """Admit a load; False when the server is draining."""
        with self._cond:
            if self.draining:
                return False
            self._count += 1
            self.entered += 1
            return True

    @property
    def used(self) -> bool:
        """Whether a load has been admitted since start (or the server is draining)."""
        return self.entered > 0 or self.draining

    def exit(self) -> None:
        with self._cond:
            self._count -= 1
            self._cond.notify_all()

    def drain(self, timeout: float) -> bool:
        """Refuse new loads and wait for those in flight; True when all finished in time."""
        with self._cond:
            self.draining = True
            return self._cond.wait_for(lambda: self._count == 0, timeout=timeout)


class DrainingServer(uvicorn.Server):
    """uvicorn that drains the load gate before it stops listening (a second signal stops at once)."""

    def __init__(self, config: uvicorn.Config, gate: LoadGate, timeout: float) -> None:
        super().__init__(config)
        self.gate = gate
        self.timeout = timeout
        self._draining = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._draining:
            super().handle_exit(sig, frame)
            return
        self._draining = True

        def drain_then_exit() -> None:
            self.gate.drain(self.timeout)
            super(DrainingServer, self).handle_exit(sig, frame)

        threading.Thread(target=drain_then_exit, name="drain", daemon=True).start()
