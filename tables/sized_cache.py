"""A least-recently-used cache bounded by the bytes its values hold, for the server's per-file caches.

`functools.lru_cache` bounds entries, not memory: a cache of 2,048 tiny files' Arrow tables held 22 KB a
4-row, 8-column file (mostly its schema and C++ structures) and up to 1,000 rows each, and the keyed rows of
4,096 files up to 1,000 rows each; keyed by file path, they filled with every new file, so a server that loads
and drops tables for half an hour grew by their sum (issue 23's soak: the Python process +3-4 MB a minute).
Here each value is weighed (`cost`, an estimate in bytes of what it keeps alive) and the least recently used go
once the total passes `max_bytes` (or the entries `max_entries`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, ParamSpec, TypeVar

P = ParamSpec("P")
V = TypeVar("V")


class SizedCache(Generic[P, V]):
    """`load(*args)` cached by its arguments; at most `max_bytes` of values (by `cost`) and `max_entries`."""

    def __init__(
        self, load: Callable[P, V], *, max_bytes: int, cost: Callable[[V], int], max_entries: int = 1 << 20
    ) -> None:
        self._load = load
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._cost = cost
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.size = 0  # the bytes held, by `cost`
        self.__doc__ = load.__doc__
        self.__wrapped__ = load

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> V:
        key: Hashable = args if not kwargs else (args, tuple(sorted(kwargs.items())))
        found = self.get(key)
        if found is not None:
            return found
        value = self._load(*args, **kwargs)  # outside the lock: two threads may both load a missing entry
        self.put(key, value)
        return value

    def get(self, key: Hashable) -> V | None:
        """The value kept for `key` (now the most recently used), or None."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, value: V) -> None:
        """Keep `value` for `key`, the least recently used going while the bounds are passed."""
        weight = max(1, self._cost(value))
        if weight > self.max_bytes:  # would push everything else out: not kept
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self.size -= previous[1]
            self._entries[key] = (value, weight)
            self.size += weight
            while self.size > self.max_bytes or len(self._entries) > self.max_entries:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.size -= dropped

    def __len__(self) -> int:
        return len(self._entries)

    def cache_clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.size = 0


def sized_cache(
    *, max_bytes: int, cost: Callable[[V], int], max_entries: int = 1 << 20
) -> Callable[[Callable[P, V]], SizedCache[P, V]]:
    """The decorator form of `SizedCache`."""

    def wrap(load: Callable[P, V]) -> SizedCache[P, V]:
        return SizedCache(load, max_bytes=max_bytes, cost=cost, max_entries=max_entries)

    return wrap
