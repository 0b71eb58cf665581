"""Producer access modes and topic epochs, protocol-neutral (Pulsar's semantics):

- SHARED (the default): any number of producers, refused (ProducerBusyError) while an exclusive
  producer holds the topic or one waits for it.
- EXCLUSIVE: the only producer; refused at once (ProducerFencedError, as Pulsar's broker answers)
  when any other producer is connected or waiting.
- WAIT_FOR_EXCLUSIVE: like EXCLUSIVE, but while others are connected its registration waits
  (queued, in order) until the topic has no producer left, then it gets the topic.
- EXCLUSIVE_WITH_FENCING: takes the topic: every connected producer is closed (their clients
  reconnect and are fenced) and every waiting one refused.

Each exclusive taker moves the topic epoch on by one (kept in the metadata store, so it survives
unloads and failovers: /topic-epochs/<topic>) and is told it; a producer that reconnects bringing
an epoch older than the topic's was fenced meanwhile and is refused with ProducerFencedError, one
bringing the current epoch (a reconnect after an unload) keeps it.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections import deque
from collections.abc import Callable, Collection

from herald.common.errors import BadVersionError, InvalidArgumentError, ProducerBusyError, ProducerFencedError
from herald.metadata.store import MetadataStore

EPOCHS_PREFIX = "/topic-epochs/"


class ProducerAccessMode(enum.Enum):
    SHARED = 0
    EXCLUSIVE = 1
    WAIT_FOR_EXCLUSIVE = 2
    EXCLUSIVE_WITH_FENCING = 3

    @classmethod
    def parse(cls, value: ProducerAccessMode | int | str) -> ProducerAccessMode:
        """A mode from its number (Pulsar's ProducerAccessMode numbering) or name (any case)."""
        if isinstance(value, ProducerAccessMode):
            return value
        try:
            if isinstance(value, int):
                return cls(value)
            return cls[value.upper().replace("-", "_")]
        except (KeyError, ValueError):
            raise InvalidArgumentError(
                f"unknown producer access mode {value!r}: use one of "
                f"{', '.join(mode.name for mode in cls)}") from None

    @property
    def exclusive(self) -> bool:
        return self is not ProducerAccessMode.SHARED


class ProducerAccess:
    """One topic's producer access: the exclusive holder, the producers waiting for it, the epoch.
    The topic calls claim() before it adds an exclusive producer, released() whenever a producer
    leaves, and refuse_waiting() when it closes."""

    def __init__(self, topic: str, store: MetadataStore) -> None:
        self.topic = topic
        self._store = store
        self._key = EPOCHS_PREFIX + topic
        self.epoch: int | None = None  # None: no exclusive producer ever took the topic
        self._loaded = False
        self.holder: str | None = None  # the exclusive producer's name
        self._waiting: deque[tuple[str, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def check_shared(self, name: str) -> None:
        if self.holder is not None or self._waiting:
            raise ProducerBusyError(
                f"topic {self.topic} has an exclusive producer ({self.holder or 'waiting for access'}): producer "
                f"{name!r} may join only once it has gone")

    async def load(self) -> None:
        if self._loaded:
            return
        stored = await self._store.get(self._key)
        if not self._loaded:
            self.epoch = int(json.loads(stored.value)["epoch"]) if stored is not None else None
            self._loaded = True

    def _check_epoch(self, name: str, topic_epoch: int | None) -> None:
        if topic_epoch is not None and self.epoch is not None and topic_epoch < self.epoch:
            raise ProducerFencedError(
                f"producer {name!r} was fenced on {self.topic}: the topic's epoch moved on to {self.epoch} (the "
                f"producer had {topic_epoch}) when another exclusive producer took it")

    async def claim(
        self, name: str, mode: ProducerAccessMode, topic_epoch: int | None, producers: Collection[str],
        fence: Callable[[], None], on_queued: Callable[[], None] | None,
    ) -> None:
        """Make `name` the exclusive holder (waiting for it under WAIT_FOR_EXCLUSIVE, calling
        on_queued first); `fence` closes the connected producers (EXCLUSIVE_WITH_FENCING).
        ProducerFencedError when refused. Call epoch_for() next, and released() if that fails."""
        await self.load()
        if mode is ProducerAccessMode.EXCLUSIVE:
            self._check_epoch(name, topic_epoch)  # first: a fenced producer is told why
            if self.holder is not None or self._waiting:
                raise ProducerFencedError(
                    f"topic {self.topic} has an exclusive producer ({self.holder or 'waiting for access'}): "
                    f"producer {name!r} cannot have exclusive access; use WaitForExclusive to wait for it")
            if producers:
                raise ProducerFencedError(
                    f"topic {self.topic} has {len(producers)} shared producer(s) connected: producer {name!r} "
                    "cannot have exclusive access; use WaitForExclusive to wait for it")
        elif mode is ProducerAccessMode.EXCLUSIVE_WITH_FENCING:
            self._check_epoch(name, topic_epoch)
            self.refuse_waiting(ProducerFencedError(
                f"producer {name!r} took {self.topic} with fencing: the producers waiting for it were fenced"))
            fence()
        elif mode is ProducerAccessMode.WAIT_FOR_EXCLUSIVE:
            self._check_epoch(name, topic_epoch)
            if self.holder is not None or producers or self._waiting:
                granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                entry = (name, granted)
                self._waiting.append(entry)
                if on_queued is not None:
                    on_queued()
                try:
                    await granted  # released() made it the holder
                except BaseException:
                    if entry in self._waiting:
                        self._waiting.remove(entry)
                    elif granted.done() and not granted.cancelled() and granted.exception() is None:
                        self.released(name, producers)  # granted, but its registration was abandoned
                    raise
                try:
                    self._check_epoch(name, topic_epoch)  # a fencing taker may have come first
                except ProducerFencedError:
                    self.released(name, producers)
                    raise
                return
        else:
            raise InvalidArgumentError(f"{mode.name} is not an exclusive access mode")
        self.holder = name

    async def epoch_for(self, topic_epoch: int | None) -> int:
        """The epoch of the new holder: the one it brings back (a reconnect), else the next one;
        stored before it is given."""
        epoch = topic_epoch if topic_epoch is not None else (self.epoch + 1 if self.epoch is not None else 0)
        if epoch != self.epoch:
            await self._put(epoch)
        return epoch

    def check_holder(self, name: str) -> None:
        """After the awaits of a claim: still the holder, unless a fencing taker came meanwhile."""
        if self.holder != name:
            raise ProducerFencedError(
                f"producer {name!r} was fenced on {self.topic} while it registered: producer {self.holder!r} "
                "took the topic with fencing")

    async def _put(self, epoch: int) -> None:
        value = json.dumps({"epoch": epoch}).encode()
        while True:
            stored = await self._store.get(self._key)
            if stored is not None and int(json.loads(stored.value)["epoch"]) > epoch:
                self.epoch = int(json.loads(stored.value)["epoch"])
                raise ProducerFencedError(
                    f"the epoch of {self.topic} moved on to {self.epoch} meanwhile: this producer was fenced")
            try:
                await self._store.put(self._key, value, expected_version=stored.version if stored else 0)
            except BadVersionError:
                continue
            self.epoch = epoch
            return

    def released(self, name: str, producers: Collection[str]) -> None:
        """A producer left (or an exclusive claim was abandoned): when the topic has no producer
        left, the first waiting one gets it."""
        if self.holder == name:
            self.holder = None
        if self.holder is not None or producers:
            return
        while self._waiting:
            waiter, granted = self._waiting.popleft()
            if granted.done():
                continue
            self.holder = waiter
            granted.set_result(None)
            return

    def refuse_waiting(self, error: Exception) -> None:
        """The waiting producers are refused (fenced, or the topic closes)."""
        waiting, self._waiting = self._waiting, deque()
        for _, granted in waiting:
            if not granted.done():
                granted.set_exception(error)
