"""The broker's entry cache: recent entries of every managed ledger, kept in memory so that tailing
consumers are served without a storage read.

All topics share one byte budget (EntryCacheManager); each managed ledger gets a view
(EntryCache). When the budget is exceeded the oldest inserted entries go first, whichever topic
they belong to. Entries are the producers' bytes objects, held by reference: caching copies nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol


class EntryReader(Protocol):
    async def read_entries(self, first: int, last: int) -> list[tuple[int, bytes]]: ...


class ReadAheadBudget:
    """The separate area for backlog reads (broker.core.read_ahead): the bytes held by every
    cursor's read-ahead buffer (and reserved for its read in flight), never more than max_bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self.peak = 0  # the most ever held: what the bound is checked against

    def reserve(self, wanted: int) -> int:
        """Take up to `wanted` bytes; returns how many were taken (0 when none is left)."""
        taken = max(0, min(wanted, self.max_bytes - self.used))
        self.used += taken
        self.peak = max(self.peak, self.used)
        return taken

    def release(self, size: int) -> None:
        self.used -= size


class EntryCacheManager:
    """The shared byte budget and eviction order of all entry caches, and the budget of backlog
    reads, which are kept out of the cache."""

    def __init__(self, max_bytes: int, read_ahead_max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self.read_ahead = ReadAheadBudget(read_ahead_max_bytes)
        self.size_bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._entries = 0
        # Insertion order across all views. A record may outlive its entry (the view was cleared,
        # or the entry evicted and cached again): eviction skips such records, and the deque is
        # compacted when stale records outnumber live ones, so it stays bounded.
        self._order: deque[tuple[EntryCache, int, int]] = deque()

    def cache_for(self, name: str) -> EntryCache:
        return EntryCache(self, name)

    @property
    def entries(self) -> int:
        return self._entries

    def _added(self, cache: EntryCache, ledger_id: int, entry_id: int, size: int) -> None:
        self._order.append((cache, ledger_id, entry_id))
        self.size_bytes += size
        self._entries += 1
        while self.size_bytes > self.max_bytes and self._order:
            victim, ledger, entry = self._order.popleft()
            if victim._evict(ledger, entry):
                self.evictions += 1
        if len(self._order) > 2 * self._entries + 1024:
            self._compact()

    def _compact(self) -> None:
        # Keep one record per live entry: the newest, which is the one its insertion made.
        seen: set[tuple[int, int, int]] = set()
        kept: list[tuple[EntryCache, int, int]] = []
        for rec in reversed(self._order):
            key = (id(rec[0]), rec[1], rec[2])
            if key not in seen and rec[0]._has(rec[1], rec[2]):
                seen.add(key)
                kept.append(rec)
        kept.reverse()
        self._order = deque(kept)

    def _removed(self, size: int, count: int) -> None:
        self.size_bytes -= size
        self._entries -= count


class EntryCache:
    """One managed ledger's view of the shared cache, keyed by (ledger id, entry id)."""

    def __init__(self, manager: EntryCacheManager, name: str) -> None:
        self.name = name
        self._manager = manager
        self._data: dict[tuple[int, int], bytes] = {}
        self.size_bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    @property
    def read_ahead_budget(self) -> ReadAheadBudget:
        return self._manager.read_ahead

    def insert(self, ledger_id: int, entry_id: int, data: bytes) -> None:
        size = len(data)
        key = (ledger_id, entry_id)
        if size > self._manager.max_bytes or key in self._data:
            return
        self._data[key] = data
        self.size_bytes += size
        self._manager._added(self, ledger_id, entry_id, size)

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        data = self._data.get((ledger_id, entry_id))
        if data is None:
            self.misses += 1
            self._manager.misses += 1
        else:
            self.hits += 1
            self._manager.hits += 1
        return data

    def get_range(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """The cached entries first, first+1, ... up to last, stopping at the first one missing."""
        found: list[bytes] = []
        data = self._data
        for entry_id in range(first, last + 1):
            item = data.get((ledger_id, entry_id))
            if item is None:
                break
            found.append(item)
        hits = len(found)
        missed = last - first + 1 - hits  # entries, as hits are: the ratio is of entries read
        self.hits += hits
        self.misses += missed
        self._manager.hits += hits
        self._manager.misses += missed
        return found

    def contains(self, ledger_id: int, entry_id: int) -> bool:
        """Whether the entry is cached (not counted as a hit or a miss)."""
        return (ledger_id, entry_id) in self._data

    async def read(
        self, ledger_id: int, first: int, last: int, reader: Callable[[], Awaitable[EntryReader]],
        *, insert: bool = True,
    ) -> list[tuple[int, bytes]]:
        """Entries first..last of a ledger: the cached prefix, the rest from storage (and cached,
        unless insert is False: a backlog read must not evict what tail readers need), as Pulsar's
        EntryCache reads. `reader` gives the storage handle, opened only on a miss."""
        found = [(first + k, data) for k, data in enumerate(self.get_range(ledger_id, first, last))]
        if len(found) <= last - first:
            handle = await reader()
            for entry_id, data in await handle.read_entries(first + len(found), last):
                found.append((entry_id, data))
                if insert:
                    self.insert(ledger_id, entry_id, data)
        return found

    def invalidate_ledger(self, ledger_id: int) -> None:
        doomed = [key for key in self._data if key[0] == ledger_id]
        size = 0
        for key in doomed:
            size += len(self._data.pop(key))
        self.size_bytes -= size
        self._manager._removed(size, len(doomed))

    def clear(self) -> None:
        self._manager._removed(self.size_bytes, len(self._data))
        self._data.clear()
        self.size_bytes = 0

    def _has(self, ledger_id: int, entry_id: int) -> bool:
        return (ledger_id, entry_id) in self._data

    def _evict(self, ledger_id: int, entry_id: int) -> bool:
        data = self._data.pop((ledger_id, entry_id), None)
        if data is None:
            return False
        self.size_bytes -= len(data)
        self._manager._removed(len(data), 1)
        return True
