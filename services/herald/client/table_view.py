"""TableView (Pulsar's): a live dict of key -> latest value of a topic, built from its compacted
view and kept up to date from the tail. Made by `AsyncClient.create_table_view`.

One non-durable read_compacted reader per partition reads from the earliest position: the
compacted view (the latest message per key) up to the compaction horizon, then the live log. A
message with an empty value removes its key; a message without a key is not a table row and is
skipped (as Pulsar's TableView does). Creation returns once every partition has been read up to
its last message as of creation ("caught up"): a reader only gets the messages the view kept, so
whether anything is left to read up to that message is asked of the broker by a one-entry
read_compacted pull, never guessed from a timeout.

Listeners (`listen`, `for_each_and_listen`) get (key, value) for every update after they were
added, value None for a removal; one that raises is logged and the view goes on. Partitions added
after creation are not followed (create the view again).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable, ItemsView, Iterator, KeysView, ValuesView
from typing import Any, Generic, Protocol, TypeVar

from herald.client.message import Message
from herald.client.reader import AsyncReader
from herald.client.reader_pull import PullResult
from herald.client.schema import Schema
from herald.common.codec.message_id import MessageId
from herald.common.errors import AlreadyClosedError, ConsumerClosedError

log = logging.getLogger(__name__)

T = TypeVar("T")
# What a listener or for_each action is called with: (key, value); value None when the key was
# removed. It may be a coroutine function (awaited before the next update is applied).
Action = Callable[[str, Any], Any]
_Entry = tuple[int, int]  # (ledger id, entry id): where a message is stored


class TableViewClient(Protocol):
    """What a table view needs of its client (herald.client.client.AsyncClient)."""

    async def get_partitions_for_topic(self, topic: str) -> list[str]: ...
    async def get_last_message_id(self, topic: str) -> MessageId: ...
    async def create_reader(
        self, topic: str, start_message_id: MessageId, *, schema: Schema[Any], read_compacted: bool,
    ) -> AsyncReader[Any]: ...
    async def pull(
        self, topic: str, start: MessageId | None = None, *, max_entries: int, read_compacted: bool,
    ) -> PullResult: ...


class AsyncTableView(Generic[T]):
    """A topic as a dict of key -> latest value, kept up to date (see the module's docstring)."""

    def __init__(self, client: TableViewClient, topic: str, schema: Schema[T]) -> None:
        self._client = client
        self._topic = topic
        self._schema = schema
        self._data: dict[str, T] = {}
        self._listeners: list[Action] = []
        self._readers: list[AsyncReader[T]] = []
        self._tails: list[asyncio.Task[None]] = []
        self._closed = False

    # ---- what it holds ----

    @property
    def topic(self) -> str:
        return self._topic

    def get(self, key: str, default: T | None = None) -> T | None:
        """The key's latest value (`default` when it has none)."""
        return self._data.get(key, default)

    def __getitem__(self, key: str) -> T:
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def keys(self) -> KeysView[str]:
        return self._data.keys()

    def values(self) -> ValuesView[T]:
        return self._data.values()

    def items(self) -> ItemsView[str, T]:
        return self._data.items()

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"AsyncTableView(topic={self._topic!r}, keys={len(self._data)}, closed={self._closed})"

    # ---- actions ----

    async def for_each(self, action: Action) -> None:
        """Call action(key, value) for each key held now (a snapshot: updates meanwhile are not
        mixed in); an action that raises is logged and the others still run."""
        for key, value in list(self._data.items()):
            await _call(action, key, value)

    def listen(self, action: Action) -> None:
        """Call action(key, value) for every update from now on (value None: the key was removed)."""
        self._check_open()
        self._listeners.append(action)

    async def for_each_and_listen(self, action: Action) -> None:
        """for_each, then listen, with no update missed or seen twice between the two: updates
        wait while for_each runs (they are applied on this loop, between awaits)."""
        self._check_open()
        snapshot = list(self._data.items())
        self._listeners.append(action)  # an update applied while the snapshot is told comes after it
        for key, value in snapshot:
            await _call(action, key, value)

    # ---- lifecycle ----

    async def _start(self) -> None:
        """Read every partition up to its last message as of now, then follow each tail."""
        partitions = await self._client.get_partitions_for_topic(self._topic)
        await asyncio.gather(*(self._catch_up(partition) for partition in partitions))
        for reader in self._readers:
            self._tails.append(asyncio.get_running_loop().create_task(
                self._follow(reader), name=f"table view {reader.topic}"))

    async def _catch_up(self, partition: str) -> None:
        last = await self._client.get_last_message_id(partition)
        reader: AsyncReader[T] = await self._client.create_reader(
            partition, MessageId.earliest, schema=self._schema, read_compacted=True)
        self._readers.append(reader)
        if last.entry_id < 0:
            return  # nothing stored yet: everything comes from the tail
        target: _Entry = (last.ledger_id, last.entry_id)
        read: _Entry | None = None
        while True:
            message = await reader.read_next(timeout=0)  # what is already here, without waiting
            if message is None:
                if await self._caught_up(partition, read, target):
                    return
                message = await reader.read_next()
            assert message is not None  # no timeout: a message, or ConsumerClosedError
            read = (message.message_id.ledger_id, message.message_id.entry_id)
            await self._apply(message)

    async def _caught_up(self, partition: str, read: _Entry | None, target: _Entry) -> bool:
        """Whether nothing is left to read up to `target`: the reader has read it, or the first
        entry a compacted read finds after what was read is past it (the view dropped the rest)."""
        if read is not None and read >= target:
            return True
        start = None if read is None else MessageId(read[0], read[1] + 1)
        probe = await self._client.pull(partition, start, max_entries=1, read_compacted=True)
        return not probe.entries or (probe.entries[0].ledger_id, probe.entries[0].entry_id) > target

    async def _follow(self, reader: AsyncReader[T]) -> None:
        while True:
            try:
                message = await reader.read_next()
            except ConsumerClosedError:
                return  # closed: the view's close() or the client's
            assert message is not None
            await self._apply(message)

    async def _apply(self, message: Message[T]) -> None:
        key = message.key
        if key is None:
            return  # not a row (Pulsar's TableView skips messages without a key)
        value: T | None
        if not message.data():
            value = None
            self._data.pop(key, None)
        else:
            try:
                value = message.value
            except Exception:  # one undecodable message must not stop the view
                log.exception("table view %s: message %s (key %r) does not decode: skipped", self._topic,
                              message.message_id, key)
                return
            self._data[key] = value
        for listener in list(self._listeners):
            await _call(listener, key, value)

    async def close(self) -> None:
        """Stop following the topic (the readers close); the dict stays as it was. Closing twice
        does nothing."""
        if self._closed:
            return
        self._closed = True
        self._listeners.clear()
        for task in self._tails:
            task.cancel()
        for task in self._tails:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for reader in self._readers:
            with contextlib.suppress(AlreadyClosedError, ConsumerClosedError):
                await reader.close()

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosedError(f"table view of {self._topic} is closed")

    async def __aenter__(self) -> AsyncTableView[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def _call(action: Action, key: str, value: Any) -> None:
    """Run one action; what it raises is logged, never passed on (the view must go on)."""
    try:
        result = action(key, value)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("table view action %r failed on key %r", action, key)

