"""A producer's session, protocol-neutral: what a front end (gRPC's Produce stream, a Pulsar binary
connection's producer) drives with plain calls and awaitables, translating only.

    session = ProducerSession(service, admission, role)
    registered = await session.register(topic, name, properties)     # HeraldError: refused
    while await session.room():                                     # False: closed by the broker
        ...read a send...
        session.publish(sequence_id, highest_sequence_id, num_messages, entry, traceparent)
    ...meanwhile, elsewhere: for receipt in await session.receipts(): ...write it...
    await session.close(drain=True)                                 # the client finished

Receipts come back in request order from one in-order completion point (Receipts): each send is a
Receipt the topic completes (broker.core.publication), and the head of the line is released as soon as
it is done, whatever order completions arrive in (a duplicate completes at once, a stored entry when
storage acknowledges it). Flow control: at max_pending_sends sends whose receipts were not taken,
room() waits, so the front end stops reading and its transport pushes back on the client.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

from herald.broker.core import tracing as broker_tracing
from herald.broker.core.access_modes import ProducerAccessMode
from herald.broker.core.admission import Admission
from herald.broker.core.outcome import as_herald_error
from herald.broker.core.producer import Producer
from herald.broker.core.service import BrokerService
from herald.common import tracing
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import HeraldError, ServiceNotReadyError


@dataclass(frozen=True, slots=True)
class Registered:
    producer_name: str
    last_sequence_id: int  # the last one persisted under that name (-1: none)
    max_message_size: int  # the topic's
    topic_epoch: int | None = None  # the topic's epoch (broker.core.access_modes; None: never exclusive)
    schema_version: int | None = None  # of the producer's schema (None: it gave none)


class Receipt:
    """One send on its way: completed once by the topic with its position ((-1, -1): a duplicate,
    or a non-persistent topic) or its error; abandoned when its stream went away first."""

    __slots__ = ("_line", "done", "entry_id", "error", "highest_sequence_id", "ledger_id", "sequence_id", "span")

    def __init__(self, line: Receipts, sequence_id: int, highest_sequence_id: int) -> None:
        self._line = line
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.ledger_id = -1
        self.entry_id = -1
        self.error: HeraldError | None = None
        self.done = False
        self.span: Any = None  # the publish span, when traced

    def succeed(self, ledger_id: int, entry_id: int) -> None:
        if self.done:
            return
        self.ledger_id, self.entry_id, self.done = ledger_id, entry_id, True
        if self.span is not None:
            broker_tracing.end_publish(self.span, ledger_id, entry_id, None)
        self._line.completed()

    def fail(self, error: HeraldError) -> None:
        if self.done:
            return
        self.error, self.done = error, True
        if self.span is not None:
            broker_tracing.end_publish(self.span, -1, -1, error)
        self._line.completed()

    def abandon(self) -> None:
        if self.done:
            return
        self.done = True
        if self.span is not None:
            broker_tracing.cancel_publish(self.span)


class Receipts:
    """The one in-order completion point of a producer's sends: receipts are handed out in the
    order the sends were made, each as soon as it and every send before it completed."""

    def __init__(self) -> None:
        self._line: deque[Receipt] = deque()  # sent, in order, until their turn comes
        self._ready: list[Receipt] = []  # done and in order, not taken yet
        self._wakeup = asyncio.Event()
        self.finished = False  # no more sends: next() ends once the line is empty

    def add(self, sequence_id: int, highest_sequence_id: int) -> Receipt:
        receipt = Receipt(self, sequence_id, highest_sequence_id)
        self._line.append(receipt)
        return receipt

    @property
    def outstanding(self) -> int:
        """Sends whose receipts were not taken yet."""
        return len(self._line) + len(self._ready)

    def completed(self) -> None:
        line = self._line
        if not line or not line[0].done:
            return
        ready = self._ready
        while line and line[0].done:
            ready.append(line.popleft())
        self._wakeup.set()

    async def next(self) -> list[Receipt]:
        """The next receipts in order (waiting for one); [] once finished and all were taken."""
        while not self._ready:
            if self.finished and not self._line:
                return []
            self._wakeup.clear()
            await self._wakeup.wait()
        taken, self._ready = self._ready, []
        return taken

    def finish(self, *, abandon: bool) -> None:
        """No more sends; `abandon`: the outstanding ones will never be answered."""
        self.finished = True
        if abandon:
            for receipt in self._line:
                receipt.abandon()
            self._line.clear()
            self._ready.clear()
        self._wakeup.set()

    def wake(self) -> None:
        self._wakeup.set()


class ProducerSession:
    def __init__(self, service: BrokerService, admission: Admission, role: str | None = None) -> None:
        self._service = service
        self._admission = admission
        self._role = admission.role(role)
        self._limit = service.settings.max_pending_sends
        self._receipts = Receipts()
        self._room = asyncio.Event()
        self.producer: Producer | None = None

    async def register(
        self, topic: str, producer_name: str | None, properties: Mapping[str, str], *,
        access_mode: ProducerAccessMode = ProducerAccessMode.SHARED, topic_epoch: int | None = None,
        on_queued: Callable[[], None] | None = None, schema: SchemaInfo | None = None,
    ) -> Registered:
        """Admit and register the producer; HeraldError when refused (by authorization, a limit,
        the topic, its exclusive producer, its schema...). A WAIT_FOR_EXCLUSIVE producer calls
        `on_queued` when it has to wait, then returns once it holds the topic."""
        try:
            await self._admission.admit_producer(self._role, topic, properties)
            producer, last_sequence_id = await self._service.create_producer(
                topic, producer_name, dict(properties), access_mode=access_mode, topic_epoch=topic_epoch,
                on_queued=on_queued, schema=schema)
        except Exception as exc:
            raise as_herald_error(exc, "registering a producer") from exc
        producer.on_closed = self._producer_closed
        self.producer = producer
        return Registered(producer.name, last_sequence_id, producer.topic.max_message_size, producer.topic_epoch,
                          producer.schema_version)

    def _producer_closed(self) -> None:
        self._room.set()
        self._receipts.wake()

    def _registered(self) -> Producer:
        if self.producer is None:
            raise ServiceNotReadyError("the producer is not registered yet: register it first")
        return self.producer

    @property
    def closed(self) -> bool:
        """The producer was closed (by the broker: unload, fencing, a failed write; or close())."""
        return self._registered().closed

    @property
    def has_room(self) -> bool:
        """Whether another send may be read now (room() waits for it)."""
        return self._receipts.outstanding < self._limit

    async def room(self) -> bool:
        """Wait until another send may be read (fewer than max_pending_sends sends await their
        receipts); False when the producer was closed meanwhile (by the broker: the front end tells
        its client to reconnect)."""
        producer = self._registered()
        receipts = self._receipts
        if producer.closed:
            return False
        if receipts.outstanding < self._limit:
            return True
        if self._service.observer is not None:
            self._service.observer.sends_throttled()
        while receipts.outstanding >= self._limit and not producer.closed:
            self._room.clear()
            await self._room.wait()
        return not producer.closed

    def publish(self, sequence_id: int, highest_sequence_id: int, num_messages: int, entry: bytes,
                traceparent: str = "") -> None:
        """Hand a send to the topic (never raises: a refused send gets its error as its receipt).
        `entry` is kept by reference down to storage and the entry cache: give the bytes object
        the transport made, once."""
        producer = self._registered()
        receipt = self._receipts.add(sequence_id, highest_sequence_id)
        topic = producer.topic
        if traceparent and tracing.ENABLED:
            span = broker_tracing.start_publish(topic.name, producer.name, traceparent, sequence_id, num_messages,
                                                len(entry))
            if span is not None:
                receipt.span = span
                with trace.use_span(span):  # current while the add is queued: the storage add is its child
                    topic.submit(producer, sequence_id, highest_sequence_id, num_messages, entry, receipt)
                return
        topic.submit(producer, sequence_id, highest_sequence_id, num_messages, entry, receipt)

    async def receipts(self) -> list[Receipt]:
        """The next receipts, in request order (waiting for at least one); [] once the session is
        closed and every receipt due was taken. Taking them makes room for more sends."""
        taken = await self._receipts.next()
        if taken:
            self._room.set()
        return taken

    def closed_error(self) -> HeraldError:
        """What a front end tells a client whose producer the broker closed."""
        return ServiceNotReadyError(f"producer {self._registered().name} was closed by the broker: reconnect")

    async def wait_closed(self) -> None:
        """Returns once the producer is closed, by the broker or by close()."""
        await self._registered().wait_closed()

    async def close(self, *, drain: bool) -> None:
        """The producer leaves its topic. `drain` (the client finished): the receipts of sends
        already made still come from receipts(); otherwise (the client is gone) they are
        abandoned. Idempotent."""
        producer = self.producer
        if producer is not None:
            await self._service.close_producer(producer)
        self._receipts.finish(abandon=not drain)

