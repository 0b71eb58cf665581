"""A consumer's session, protocol-neutral: what a front end (gRPC's Consume stream, a Pulsar binary
connection's consumer) drives with plain calls and awaitables, translating only.

    session = ConsumerSession(service, admission, role)
    name = await session.subscribe(SubscribeRequest(topic, subscription, ...))   # HeraldError: refused
    session.flow(permits); session.ack(positions); session.redeliver(...); session.negative_ack(...)
    error = await session.seek(target)          # None: done; the subscription's consumers reconnect
    error = await session.unsubscribe()         # None: done; the front end ends the stream
    ...a sender: batch = await session.deliveries(); ...write it...; session.delivered(batch)
    ...an event teller: event = await session.next_event()   # ActiveConsumerChanged, EndOfTopic
    await session.wait_closed()                 # closed by the broker (unload): tell the client
    await session.close()

Deliveries and events raise ConsumerClosedError once the consumer is closed. The subscribe checks
(grants, the dead-letter policy's topics, properties limits) are broker.admission's; on a stored
topic the dead-letter policy in force is the admin's, else this subscriber's (BrokerService.subscribe).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from herald.broker.core import tracing as broker_tracing
from herald.broker.core.admission import Admission
from herald.broker.core.consumer import Consumer, ConsumerEvent, Delivery
from herald.broker.core.cursor import InitialPosition, ResetTarget
from herald.broker.core.hash_ranges import KeySharedMeta
from herald.broker.core.ledger_list import Position
from herald.broker.core.outcome import as_herald_error
from herald.broker.core.service import BrokerService
from herald.broker.core.subscription_type import SubscriptionType
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import HeraldError, ServiceNotReadyError


@dataclass(slots=True)
class SubscribeRequest:
    """A consumer's opening request. The type and initial position are their numbers (Herald's and
    Pulsar's wire contracts number them alike), checked by the session."""

    topic: str
    subscription: str
    sub_type: int = SubscriptionType.EXCLUSIVE
    initial_position: int = InitialPosition.LATEST
    consumer_name: str = ""  # "": the broker names it
    priority_level: int = 0
    non_durable: bool = False  # a reader's subscription, starting at start_position
    start_position: Position | None = None
    start_inclusive: bool = False
    properties: Mapping[str, str] = field(default_factory=dict)
    max_redeliver_count: int = 0  # the subscriber's dead-letter policy (0: none)
    dead_letter_topic: str = ""
    retry_letter_topic: str = ""
    # Key_Shared only (ignored for the other types, as Pulsar does): AUTO_SPLIT (0, the default) or
    # STICKY (1) with the consumer's own inclusive hash ranges within 0..65535, and whether the
    # subscription may deliver a key out of order when consumers change.
    key_shared_mode: int = 0
    hash_ranges: Sequence[tuple[int, int]] = ()
    allow_out_of_order_delivery: bool = False
    schema: SchemaInfo | None = None  # the consumer's (broker.core.schemas): must be the topic's
    read_compacted: bool = False  # read the compacted view up to its horizon (Exclusive, Failover)


class ConsumerSession:
    def __init__(self, service: BrokerService, admission: Admission, role: str | None = None) -> None:
        self._service = service
        self._admission = admission
        self._role = admission.role(role)
        self.consumer: Consumer | None = None

    async def subscribe(self, request: SubscribeRequest) -> str:
        """Admit the consumer and attach it; returns its name. HeraldError when refused (a
        malformed dead-letter policy first, then authorization, limits, the subscription...)."""
        try:
            # The subscriber's letters move on its authority (the dlq-worker acts as its role).
            dead_letter_policy = self._admission.dead_letter_policy(
                self._role, request.topic, request.subscription, request.max_redeliver_count,
                request.dead_letter_topic, request.retry_letter_topic)
            sub_type = SubscriptionType.parse(request.sub_type)
            key_shared = KeySharedMeta.parse(request.key_shared_mode, request.hash_ranges,
                                             request.allow_out_of_order_delivery) \
                if sub_type is SubscriptionType.KEY_SHARED else None
            await self._admission.admit_consumer(self._role, request.topic, request.properties, dead_letter_policy)
            consumer = await self._service.subscribe(
                request.topic, request.subscription, sub_type,
                InitialPosition.parse(request.initial_position), request.consumer_name or None,
                request.priority_level, non_durable=request.non_durable, start_position=request.start_position,
                start_inclusive=request.start_inclusive, properties=dict(request.properties),
                dead_letter_policy=dead_letter_policy, key_shared=key_shared, schema=request.schema,
                read_compacted=request.read_compacted)
        except Exception as exc:
            raise as_herald_error(exc, "subscribing") from exc
        self.consumer = consumer
        return consumer.name

    def _subscribed(self) -> Consumer:
        if self.consumer is None:
            raise ServiceNotReadyError("the consumer has not subscribed yet: subscribe first")
        return self.consumer

    # ---- what the client sends ----

    def flow(self, permits: int) -> None:
        """The client can take `permits` more messages."""
        self._subscribed().flow(permits)

    def ack(self, positions: Iterable[tuple[int, int]], cumulative: bool = False,
            ack_sets: dict[tuple[int, int], int] | None = None) -> None:
        """Acknowledge entries (cumulative: everything up to the one position given). `ack_sets`:
        of a position, the bitmask of its batch's messages still unacknowledged, so only the others
        are (Pulsar's batch-index acks; the entry is acknowledged once all its messages are)."""
        self._subscribed().ack(positions, cumulative, ack_sets)

    def redeliver(self, positions: Iterable[tuple[int, int]] | None = None) -> None:
        """Deliver again entries this consumer did not acknowledge (None: all of them)."""
        self._subscribed().redeliver(positions)

    def negative_ack(self, positions: Iterable[tuple[int, int]], delay_ms: int) -> None:
        """The client gave up on these entries: delivered again after delay_ms."""
        self._subscribed().negative_ack(positions, delay_ms)

    async def seek(self, target: ResetTarget) -> HeraldError | None:
        """Move the subscription (the result goes to the client before its consumers, this one
        included, are disconnected to reconnect): None when done, else the error."""
        consumer = self._subscribed()
        try:
            await self._service.reset_cursor(consumer.topic, consumer.subscription.name, target)
        except Exception as exc:
            return as_herald_error(exc, "seeking")
        return None

    async def unsubscribe(self) -> HeraldError | None:
        """Delete the subscription (refused while other consumers are connected): None when done
        (the front end ends the stream), else the error."""
        consumer = self._subscribed()
        try:
            await self._service.unsubscribe(consumer.topic, consumer.subscription.name, requester=consumer)
        except Exception as exc:
            return as_herald_error(exc, "unsubscribing")
        return None

    # ---- what the client is sent ----

    async def deliveries(self) -> list[Delivery]:
        """The next batch of deliveries (waiting for one); ConsumerClosedError once closed. A
        delivery's data is the stored entry's bytes object: write it once, into the reply."""
        return await self._subscribed().next_deliveries()

    @staticmethod
    def delivered(batch: list[Delivery]) -> None:
        """The batch was written: its deliver spans end (broker.core.tracing)."""
        for delivery in batch:
            if delivery.span is not None:
                broker_tracing.end_deliver(delivery.span)

    async def next_output(self) -> list[Delivery] | ConsumerEvent:
        """The next event or else deliveries for the client (Consumer.next_output)."""
        return await self._subscribed().next_output()

    async def next_event(self) -> ConsumerEvent:
        """The next event for the client (ActiveConsumerChanged, EndOfTopic); ConsumerClosedError
        once closed."""
        return await self._subscribed().next_event()

    async def wait_closed(self) -> None:
        """Returns once the consumer is closed, by the broker (unload, seek, deletion) or close()."""
        await self._subscribed().wait_closed()

    def closed_error(self) -> HeraldError:
        """What a front end tells a client whose consumer the broker closed."""
        return ServiceNotReadyError(f"consumer {self._subscribed().name} was closed by the broker: reconnect")

    async def close(self) -> None:
        """The consumer leaves; what it did not acknowledge goes to others. Idempotent."""
        if self.consumer is not None:
            await self.consumer.close()
