"""Reading a managed ledger: what the broker needs of storage (LedgerStorage, LedgerHandle: the
storage client's API, as Protocols), and LedgerReader, which reads entries across the ledgers of a
list, the entry cache first, then storage through one read handle per closed ledger (the open
ledger's write handle reads its own entries). Entries are the bytes storage returned, passed on by
reference: a read copies nothing."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

from herald.broker.core.entry_cache import EntryCache
from herald.broker.core.ledger_list import LedgerList, Position
from herald.common.errors import EntryNotFoundError, HeraldError

# Storage read handles kept open for closed ledgers.
MAX_READ_HANDLES = 16


class LedgerHandle(Protocol):
    """The storage client's handle on one ledger (herald.storage.client.storage_client.LedgerHandle)."""

    @property
    def ledger_id(self) -> int: ...
    @property
    def last_add_confirmed(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    async def add_entry(self, data: bytes) -> int: ...
    def add_entry_nowait(self, data: bytes, callback: Callable[[int, HeraldError | None], None]) -> None:
        """Queue an add; `callback(entry id, error)` runs once per add, in add order, never from
        within this call. Raises HeraldError, queueing nothing, when the ledger takes no adds."""
    async def read_entries(self, first: int, last: int) -> list[tuple[int, bytes]]: ...
    async def close(self) -> None: ...


class LedgerStorage(Protocol):
    """The part of the storage client (herald.storage.client.storage_client.StorageClient) the broker uses."""

    async def create_ledger(
        self, ensemble_size: int, write_quorum: int, ack_quorum: int,
        properties: dict[str, str] | None = None,
    ) -> LedgerHandle: ...
    async def open_ledger(self, ledger_id: int, recover: bool = True) -> LedgerHandle: ...
    async def delete_ledger(self, ledger_id: int) -> None: ...


class LedgerReader:
    def __init__(
        self, name: str, ledgers: LedgerList, storage: LedgerStorage, cache: EntryCache,
        current: Callable[[], LedgerHandle | None],
    ) -> None:
        self._name = name
        self._list = ledgers
        self._storage = storage
        self._cache = cache
        self._current = current  # the open ledger's handle, if any
        self._handles: dict[int, LedgerHandle] = {}

    async def read_entries(self, start: Position, max_entries: int, *, cache: bool = True,
                           ) -> list[tuple[Position, bytes]]:
        """Up to max_entries durable entries from `start` on, across ledgers; cache=False: what
        comes from storage is not cached (a backlog read, broker.core.read_ahead)."""
        ledgers = self._list
        result: list[tuple[Position, bytes]] = []
        position = ledgers.normalize(start)
        while len(result) < max_entries:
            last = ledgers.last_confirmed_position
            if position > last:
                break
            info = ledgers.find(position.ledger_id)
            assert info is not None  # normalize() names a listed ledger
            end = info.entries - 1
            if position.ledger_id == last.ledger_id:
                end = min(end, last.entry_id)
            end = min(end, position.entry_id + max_entries - len(result) - 1)
            reader = functools.partial(self._handle, position.ledger_id)
            got = await self._cache.read(position.ledger_id, position.entry_id, end, reader, insert=cache)
            for entry_id, data in got:
                result.append((Position(position.ledger_id, entry_id), data))
            if len(got) <= end - position.entry_id:
                # A short read (storage holds fewer entries than the ledger list says): return
                # what there is, never skip past what is missing.
                if not result:
                    raise EntryNotFoundError(
                        f"topic {self._name}: entry {position} could not be read from storage")
                break
            position = ledgers.normalize(Position(position.ledger_id, end + 1))
        return result

    async def _handle(self, ledger_id: int) -> LedgerHandle:
        current = self._current()
        if current is not None and ledger_id == current.ledger_id:
            return current
        handle = self._handles.get(ledger_id)
        if handle is None:
            # Two readers may open the same ledger at once: harmless, one handle is kept.
            handle = await self._storage.open_ledger(ledger_id, recover=False)
            self.keep_handle(ledger_id, handle)
        return handle

    def keep_handle(self, ledger_id: int, handle: LedgerHandle) -> None:
        # Read handles hold nothing open on the storage side: dropping one needs no close.
        self._handles[ledger_id] = handle
        while len(self._handles) > MAX_READ_HANDLES:
            del self._handles[next(iter(self._handles))]

    def forget(self, ledger_id: int) -> None:
        """A ledger deleted from the list: its cached entries and read handle go."""
        self._cache.invalidate_ledger(ledger_id)
        self._handles.pop(ledger_id, None)

    def clear(self) -> None:
        self._handles.clear()
        self._cache.clear()
