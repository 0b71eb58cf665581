"""Reading by offset (RocketMQ's pull path, SEEDS §6): the entries of one queue (a topic partition)
from a position on, plus where to continue. A pull that finds nothing waits for the topic's next
add, up to its timeout (long polling): the topic wakes its waiters from the add completion, so a
waiting pull costs nothing until an entry arrives.

Pull is stateless on the broker: a named subscription is only checked to exist (RocketMQ checks the
consumer group's subscription); the reader keeps its own offset.

A read_compacted pull whose start is at or before the compaction horizon reads the compacted view
(broker.core.compacted_reads): `next` is then just after the last entry returned (original
positions, not normalized: the view outlives the ledgers retention deletes), or the log after the
horizon once the view has nothing more.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from herald.broker.core.compacted_reads import CompactedSource, after, read_compacted
from herald.broker.core.ledger_list import Position
from herald.broker.core.managed_ledger import ManagedLedger
from herald.broker.core.seek import first_at_or_after
from herald.common.codec.message_id import check_position
from herald.common.codec.names import TopicName
from herald.common.errors import InvalidArgumentError, ServiceNotReadyError
from herald.common.tasks import wait_event
from herald.metadata.resources import get_partitions
from herald.metadata.store import MetadataStore

DEFAULT_MAX_ENTRIES = 100
MAX_ENTRIES = 10_000  # a larger request is served this many at a time
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
EARLIEST = Position(-1, -1)  # before any entry: a compacted read from the start


@dataclass(frozen=True, slots=True)
class PullResult:
    entries: list[tuple[Position, bytes]]
    next: Position  # where the next pull starts
    end_of_topic: bool  # the topic is terminated and nothing follows `next`


class AddWaiters:
    """Pulls waiting for the topic's next entry. wake() runs on every add, so it costs one
    attribute check while nobody waits."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    def wake(self) -> None:
        event, self._event = self._event, None
        if event is not None:
            event.set()

    async def wait(self, seconds: float) -> bool:
        """Wait for the next wake(); False when `seconds` passed first."""
        if self._event is None:
            self._event = asyncio.Event()
        return await wait_event(self._event, seconds)


class PullSource(Protocol):
    """What a pull reads: a stored topic (Topic.persistent_ops)."""

    name: str
    ledger: ManagedLedger
    add_waiters: AddWaiters
    closed: bool

    @property
    def terminated(self) -> bool: ...


async def resolve_queue(store: MetadataStore, topic: TopicName, queue: int) -> TopicName:
    """The topic a pull reads: `topic` itself for queue -1, else its partition `queue` (a
    non-partitioned topic has the one queue 0). INVALID_ARGUMENT "queue id out of range" beyond."""
    if queue == -1:
        return topic
    partitions = await get_partitions(store, str(topic))
    queues = partitions if partitions > 0 else 1
    if not 0 <= queue < queues:
        raise InvalidArgumentError(
            f"queue id out of range: topic {topic} has {queues} queue{'s' if queues > 1 else ''} "
            f"(0..{queues - 1}), asked for queue {queue}")
    return topic.partition(queue) if partitions > 0 else topic


def check_limits(max_entries: int, max_bytes: int, max_wait: float) -> None:
    if max_entries < 0 or max_bytes < 0 or max_wait < 0:
        raise InvalidArgumentError(
            f"pull limits must not be negative (max_entries={max_entries}, max_bytes={max_bytes}, "
            f"timeout={max_wait}s): use 0 for the defaults")


async def pull(
    topic: PullSource, start: Position | None, max_entries: int = 0, max_bytes: int = 0,
    max_wait: float = 0.0, *, compacted: CompactedSource | None = None,
) -> PullResult:
    """Up to max_entries (0: 100) entries and, past the first, max_bytes (0: 4 MiB) from the first
    entry at or after `start` (None: the earliest; one retention deleted: the first kept), waiting
    up to `max_wait` seconds for one to arrive when there is none yet. `compacted`: read its view
    first while `start` is at or before its horizon."""
    check_limits(max_entries, max_bytes, max_wait)
    if start is not None:
        check_position(start.ledger_id, start.entry_id, "pull start")  # what a seek takes, no more
    max_entries = min(max_entries or DEFAULT_MAX_ENTRIES, MAX_ENTRIES)
    max_bytes = max_bytes or DEFAULT_MAX_BYTES
    ledger = topic.ledger
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait
    if compacted is not None:
        view_start = start if start is not None else EARLIEST
        read = await read_compacted(compacted, view_start, max_entries)
        if read is not None and read.entries:
            entries = _within(read.entries, max_bytes)
            return PullResult(entries, after(entries[-1][0]), False)
        if read is not None:
            start = read.next  # the view holds nothing more: the log after its horizon
    while True:
        if topic.closed:
            raise ServiceNotReadyError(f"topic {topic.name} is being unloaded: look it up again")
        begin = ledger.first_position if start is None else first_at_or_after(ledger, start)
        if ledger.has_entries_from(begin):
            entries = await ledger.read_entries(begin, max_entries)
            if entries:
                entries = _within(entries, max_bytes)
                last = entries[-1][0]
                following = ledger.normalize(after(last))
                return PullResult(entries, following, topic.terminated and following > ledger.last_confirmed_position)
        if topic.terminated:
            return PullResult([], begin, True)
        left = deadline - loop.time()
        if left <= 0:
            return PullResult([], begin, False)
        # No await between the check above and this wait: an add cannot slip in between.
        await topic.add_waiters.wait(left)


def _within(entries: list[tuple[Position, bytes]], max_bytes: int) -> list[tuple[Position, bytes]]:
    """The first entry, and those after it while they fit in max_bytes."""
    size = len(entries[0][1])
    kept = 1
    while kept < len(entries) and size + len(entries[kept][1]) <= max_bytes:
        size += len(entries[kept][1])
        kept += 1
    return entries[:kept]
