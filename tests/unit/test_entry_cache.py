"""The broker's entry cache: one byte budget shared by all managed ledgers, oldest evicted first."""

from __future__ import annotations

from herald.broker.core.entry_cache import EntryCacheManager


def test_cached_entries_are_returned_and_counted() -> None:
    manager = EntryCacheManager(1000)
    cache = manager.cache_for("t")
    cache.insert(1, 0, b"a" * 10)
    assert cache.get(1, 0) == b"a" * 10
    assert cache.get(1, 1) is None
    assert (cache.hits, cache.misses) == (1, 1)
    assert (manager.hits, manager.misses) == (1, 1)
    assert manager.size_bytes == 10 and manager.entries == 1


def test_range_stops_at_first_missing_entry() -> None:
    cache = EntryCacheManager(1000).cache_for("t")
    for entry_id in (0, 1, 2, 4):
        cache.insert(7, entry_id, bytes([entry_id]))
    assert cache.get_range(7, 0, 4) == [b"\x00", b"\x01", b"\x02"]
    assert cache.get_range(7, 4, 4) == [b"\x04"]
    assert cache.get_range(7, 5, 9) == []
    # Counted in entries, hits and misses alike (3:4 then 5:9 were not there: 2 + 5 misses).
    assert cache.hits == 4 and cache.misses == 7


def test_oldest_entries_are_evicted_across_topics_when_the_budget_is_exceeded() -> None:
    manager = EntryCacheManager(100)
    first, second = manager.cache_for("a"), manager.cache_for("b")
    first.insert(1, 0, b"x" * 40)
    second.insert(2, 0, b"y" * 40)
    first.insert(1, 1, b"z" * 40)  # 120 bytes: the oldest (a's 1:0) goes
    assert first.get(1, 0) is None
    assert second.get(2, 0) == b"y" * 40
    assert first.get(1, 1) == b"z" * 40
    assert manager.size_bytes == 80 and manager.evictions == 1
    assert first.size_bytes + second.size_bytes == manager.size_bytes


def test_entry_larger_than_the_budget_is_not_cached() -> None:
    manager = EntryCacheManager(10)
    cache = manager.cache_for("t")
    cache.insert(1, 0, b"x" * 11)
    assert cache.get(1, 0) is None and manager.size_bytes == 0


def test_clear_and_invalidate_release_their_bytes() -> None:
    manager = EntryCacheManager(1000)
    first, second = manager.cache_for("a"), manager.cache_for("b")
    for entry_id in range(5):
        first.insert(1, entry_id, b"x" * 10)
        first.insert(2, entry_id, b"x" * 10)
        second.insert(3, entry_id, b"x" * 10)
    first.invalidate_ledger(1)
    assert first.get(1, 0) is None and first.get(2, 0) is not None
    assert manager.size_bytes == 100
    first.clear()
    assert len(first) == 0 and manager.size_bytes == 50 and manager.entries == 5


def test_stale_eviction_records_stay_bounded() -> None:
    # Views cleared over and over (topics unloaded) leave records behind; they are compacted.
    manager = EntryCacheManager(10**9)
    for round_ in range(50):
        cache = manager.cache_for(f"t{round_}")
        for entry_id in range(100):
            cache.insert(1, entry_id, b"x")
        cache.clear()
    assert manager.size_bytes == 0
    assert len(manager._order) <= 1024 + 100
