"""The server's per-file caches are bounded by the bytes their values hold (issue 23's soak: caches keyed by
file path grew with every new file), the least recently used going first."""

from __future__ import annotations

from tables.sized_cache import SizedCache, sized_cache


def test_a_sized_cache_keeps_its_values_within_its_bytes_the_least_recently_used_going_first() -> None:
    loads: list[int] = []

    @sized_cache(max_bytes=1000, cost=len)
    def payload(n: int) -> bytes:
        loads.append(n)
        return b"x" * 300

    for n in (1, 2, 3):
        payload(n)
    assert payload.size == 900 and len(payload) == 3
    payload(1)  # a hit: 1 is now the most recently used
    payload(4)  # 1200 > 1000: 2, the least recently used, goes
    assert payload.size == 900 and loads == [1, 2, 3, 4]
    payload(1)
    payload(3)
    assert loads == [1, 2, 3, 4]  # both kept
    payload(2)
    assert loads == [1, 2, 3, 4, 2]  # read again
    assert payload.size <= 1000


def test_a_value_larger_than_the_whole_cache_is_returned_and_not_kept() -> None:
    cache: SizedCache[[int], bytes] = SizedCache(lambda n: b"x" * n, max_bytes=100, cost=len)
    cache(10)
    assert cache(500) == b"x" * 500
    assert len(cache) == 1 and cache.size == 10


def test_a_sized_cache_bounds_its_entries_too() -> None:
    cache: SizedCache[[int], int] = SizedCache(lambda n: n, max_bytes=1 << 20, cost=lambda _: 1, max_entries=3)
    for n in range(10):
        cache(n)
    assert len(cache) == 3 and cache.get((9,)) == 9 and cache.get((0,)) is None
    cache.cache_clear()
    assert len(cache) == 0 and cache.size == 0
