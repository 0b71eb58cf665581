"""A Pulsar consumer on a connection: SUBSCRIBE attaches it through the core's ConsumerSession;
FLOW gives permits; each delivery goes out as MESSAGE with the stored entry as its payload (a
Herald-format entry made Pulsar's on the way: herald.common.codec.pulsar_entry; a batch some of whose
messages were acknowledged by index with MESSAGE.ack_set, so the client skips those); ACK
(individual, cumulative, either with an ack_set for batch-index acks; ACK_RESPONSE when asked),
REDELIVER_UNACKNOWLEDGED_MESSAGES (all, or the ids given), SEEK (answered, then the broker closes
the subscription's consumers so they reconnect from there, as Pulsar does), GET_LAST_MESSAGE_ID,
UNSUBSCRIBE and CONSUMER_STATS are the session's calls.
ACTIVE_CONSUMER_CHANGE tells Failover consumers who is active; when the broker closes the consumer
(unload, seek) the client is told with CLOSE_CONSUMER and resubscribes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.broker.core.consumer import ActiveConsumerChanged, Delivery, EndOfTopic
from herald.broker.core.consumer_session import ConsumerSession, SubscribeRequest
from herald.broker.core.cursor import InitialPosition, PublishTime, ResetTarget
from herald.broker.core.ledger_list import Position
from herald.broker.pulsar import schemas
from herald.broker.pulsar.frontend import Connection
from herald.common.codec import pulsar_entry
from herald.common.codec.entry import ENTRY_FRAMING_ALLOWANCE
from herald.common.codec.names import TopicName
from herald.common.errors import ConsumerClosedError, HeraldError, InvalidArgumentError, NotAllowedError
from herald.common.pulsar.errors import server_error
from herald.common.pulsar.ids import message_id, position

log = logging.getLogger(__name__)
Command = pulsar.BaseCommand
_LATEST = (1 << 63) - 1  # Pulsar's MessageId.latest: Long.MAX_VALUE ledger and entry


class ConsumerEndpoint:
    def __init__(self, connection: Connection, consumer_id: int) -> None:
        self.connection = connection
        self.consumer_id = consumer_id
        frontend = connection.frontend
        self.session = ConsumerSession(frontend.service, frontend.admission, connection.identity.role)
        self._subscribed_request: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._connected_since = time.time()
        self._sub_type = 0
        self._partition = -1
        self._max_translated = frontend.max_message_size + ENTRY_FRAMING_ALLOWANCE
        # Reached-end-of-topic: Pulsar's Java client knows the command; the C++ 4.x client (and the
        # clients built on it) closes the connection on it, so only Java clients are told.
        self._tell_end_of_topic = connection.client_version.startswith("Pulsar-Java")

    async def subscribe(self, request: pulsar.CommandSubscribe) -> bool:
        connection = self.connection
        try:
            subscribe = self._subscribe_request(request)
            await self.session.subscribe(subscribe)
        except HeraldError as error:
            connection.error(request.request_id, error)
            return False
        if self._closed:
            await self.session.close()
            return False
        self._subscribed_request = request.request_id
        self._sub_type = request.subType
        # Message ids name their partition, as Pulsar's broker sends them (a partitioned-topic
        # consumer's ids then say which partition each message came from).
        self._partition = TopicName.parse(request.topic).partition_index
        connection.success(request.request_id)
        self._tasks = [
            connection.spawn(self._deliver(), f"deliveries of consumer {self.consumer_id}"),
            connection.spawn(self._tell_events(), f"events of consumer {self.consumer_id}"),
            connection.spawn(self._watch_closed(), f"consumer {self.consumer_id} closed"),
        ]
        return True

    @staticmethod
    def _subscribe_request(request: pulsar.CommandSubscribe) -> SubscribeRequest:
        if request.replicate_subscription_state:
            raise NotAllowedError("replicated subscriptions are not supported by this broker (Herald has no "
                                  "geo-replication): subscribe without replicateSubscriptionState")
        if request.subscription_properties:
            raise NotAllowedError("subscription properties are not kept by this broker yet: subscribe without "
                                  "subscriptionProperties (a consumer's own properties are kept)")
        start: Position | None = None
        inclusive = False
        if request.HasField("start_message_id"):
            ledger_id, entry_id = position(request.start_message_id)
            start = Position(ledger_id, entry_id)
            # A reader's start message id: Pulsar delivers from the message after it unless the reader
            # asked for it inclusively, which its client does by starting one batch index earlier.
            inclusive = request.start_message_id.batch_index >= 0 or (ledger_id, entry_id) == (-1, -1)
        return SubscribeRequest(
            topic=request.topic, subscription=request.subscription, sub_type=request.subType,
            initial_position=(InitialPosition.EARLIEST if request.initialPosition == pulsar.CommandSubscribe.Earliest
                              else InitialPosition.LATEST),
            consumer_name=request.consumer_name, priority_level=max(request.priority_level, 0),
            non_durable=request.HasField("durable") and not request.durable,
            start_position=start, start_inclusive=inclusive,
            properties={kv.key: kv.value for kv in request.metadata},
            **_key_shared(request),
            schema=schemas.from_wire(request.schema) if request.HasField("schema") else None,
            read_compacted=request.read_compacted,
        )

    def answer_again(self, request_id: int) -> None:
        if self._subscribed_request is None:
            self.connection.write(Command(type=Command.ERROR, error=pulsar.CommandError(
                request_id=request_id, error=pulsar.ServiceNotReady,
                message=f"consumer {self.consumer_id} is still subscribing")))
            return
        self.connection.success(request_id)

    # ---- what the client sends ----

    async def handle(self, command: Command) -> None:
        session = self.session
        kind = command.type
        if kind == Command.FLOW:
            session.flow(command.flow.messagePermits)
        elif kind == Command.ACK:
            self._ack(command.ack)
        elif kind == Command.REDELIVER_UNACKNOWLEDGED_MESSAGES:
            ids = command.redeliverUnacknowledgedMessages.message_ids
            session.redeliver(sorted({position(i) for i in ids}) if ids else None)
        elif kind == Command.SEEK:
            await self._seek(command.seek)
        elif kind == Command.UNSUBSCRIBE:
            await self._unsubscribe(command.unsubscribe)
        elif kind == Command.GET_LAST_MESSAGE_ID:
            await self._last_message_id(command.getLastMessageId)
        elif kind == Command.CONSUMER_STATS:
            self._stats(command.consumerStats)

    def _ack(self, ack: pulsar.CommandAck) -> None:
        try:
            positions = [position(i) for i in ack.message_id]
            # A message id with an ack_set acknowledges only the messages of its batch the set
            # leaves out (Pulsar's batch-index acks; the set lists those still unacknowledged).
            ack_sets = {position(i): bitmask(i.ack_set) for i in ack.message_id if i.ack_set}
            cumulative = ack.ack_type == pulsar.CommandAck.Cumulative
            if cumulative and positions:
                positions = [max(positions)]
            self.session.ack(positions, cumulative, ack_sets)
            error: HeraldError | None = None
        except HeraldError as exc:
            error = exc
        if ack.HasField("request_id"):
            response = pulsar.CommandAckResponse(consumer_id=self.consumer_id, request_id=ack.request_id)
            if error is not None:
                response.error = server_error(error)  # type: ignore[assignment]
                response.message = str(error)
            self.connection.write(Command(type=Command.ACK_RESPONSE, ackResponse=response))

    async def _seek(self, seek: pulsar.CommandSeek) -> None:
        target: ResetTarget
        if seek.HasField("message_publish_time"):
            target = PublishTime(seek.message_publish_time)
        elif seek.HasField("message_id"):
            ledger_id, entry_id = position(seek.message_id)
            if (ledger_id, entry_id) == (-1, -1):
                target = InitialPosition.EARLIEST
            elif ledger_id >= _LATEST:
                target = InitialPosition.LATEST
            else:
                target = Position(ledger_id, entry_id)
        else:
            self.connection.error(seek.request_id, InvalidArgumentError(
                "SEEK needs a message id or a publish time"))
            return
        error = await self.session.seek(target)
        if error is not None:
            self.connection.error(seek.request_id, error)
        else:
            self.connection.success(seek.request_id)

    async def _unsubscribe(self, unsubscribe: pulsar.CommandUnsubscribe) -> None:
        error = await self.session.unsubscribe()
        if error is not None:
            self.connection.error(unsubscribe.request_id, error)
            return
        self.connection.success(unsubscribe.request_id)
        self.connection.consumer_finished(self)
        await self.close()

    async def _last_message_id(self, request: pulsar.CommandGetLastMessageId) -> None:
        consumer = self.session.consumer
        assert consumer is not None
        service = self.connection.frontend.service
        try:
            last, mark_delete = await service.get_last_message_id(consumer.topic, consumer.subscription.name)
        except HeraldError as error:
            self.connection.error(request.request_id, error)
            return
        answer = pulsar.CommandGetLastMessageIdResponse(
            request_id=request.request_id,
            last_message_id=message_id(last.ledger_id, last.entry_id, last.partition, last.batch_index))
        if mark_delete is not None:
            answer.consumer_mark_delete_position.CopyFrom(message_id(mark_delete.ledger_id, mark_delete.entry_id))
        self.connection.write(Command(type=Command.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=answer))

    def _stats(self, request: pulsar.CommandConsumerStats) -> None:
        consumer = self.session.consumer
        assert consumer is not None
        answer = pulsar.CommandConsumerStatsResponse(
            request_id=request.request_id, consumerName=consumer.name,
            availablePermits=max(consumer.permits, 0), unackedMessages=consumer.unacked_messages,
            address=self.connection.peer, connectedSince=time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._connected_since)),
            type=pulsar.CommandSubscribe.SubType.Name(self._sub_type),  # type: ignore[arg-type]
        )
        self.connection.write(Command(type=Command.CONSUMER_STATS_RESPONSE, consumerStatsResponse=answer))

    # ---- what the client is sent ----

    async def _deliver(self) -> None:
        connection = self.connection
        session = self.session
        try:
            while True:
                batch = await session.deliveries()
                for delivery in batch:
                    payload = self._payload(delivery)
                    if payload is None:
                        continue
                    command = pulsar.CommandMessage(consumer_id=self.consumer_id, message_id=message_id(
                        delivery.ledger_id, delivery.entry_id, self._partition))
                    if delivery.redelivery_count:
                        command.redelivery_count = delivery.redelivery_count
                    if delivery.ack_set is not None:
                        command.ack_set.extend(ack_set_words(delivery.ack_set))
                    connection.write_with_payload(Command(type=Command.MESSAGE, message=command), payload)
                await connection.drain()
                session.delivered(batch)
        except ConsumerClosedError:
            return

    def _payload(self, delivery: Delivery) -> bytes | None:
        """The entry as a Pulsar consumer reads it: stored by a Pulsar producer, as it is; else made
        Pulsar's. An entry that cannot be read is acknowledged with a logged error rather than
        stalling the subscription (Pulsar's consumer discards such entries the same way)."""
        data = delivery.data
        if pulsar_entry.is_pulsar_entry(data):
            return data
        try:
            return pulsar_entry.from_herald_entry(data, self._max_translated)
        except HeraldError as error:
            log.error("consumer %s: entry %d:%d cannot be delivered to a Pulsar client (%s): acknowledged",
                      self.consumer_id, delivery.ledger_id, delivery.entry_id, error)
            self.session.ack([(delivery.ledger_id, delivery.entry_id)])
            return None

    async def _tell_events(self) -> None:
        try:
            while True:
                event = await self.session.next_event()
                if isinstance(event, ActiveConsumerChanged):
                    self.connection.write(Command(type=Command.ACTIVE_CONSUMER_CHANGE,
                                                  active_consumer_change=pulsar.CommandActiveConsumerChange(
                                                      consumer_id=self.consumer_id, is_active=event.is_active)))
                elif isinstance(event, EndOfTopic) and self._tell_end_of_topic:
                    self.connection.write(Command(type=Command.REACHED_END_OF_TOPIC,
                                                  reachedEndOfTopic=pulsar.CommandReachedEndOfTopic(
                                                      consumer_id=self.consumer_id)))
        except ConsumerClosedError:
            return

    async def _watch_closed(self) -> None:
        await self.session.wait_closed()
        if not self._closed:
            log.info("pulsar consumer %s on %s closed by the broker: telling the client to resubscribe",
                     self.consumer_id, self.connection.peer)
            self._closed = True
            self.connection.consumer_closed_by_broker(self)
            await self.session.close()

    async def close(self) -> None:
        """The consumer leaves; what it did not acknowledge goes to others. Idempotent."""
        self._closed = True
        await self.session.close()
        for task in self._tasks:
            if not task.done() and task is not asyncio.current_task():
                task.cancel()



def _key_shared(request: pulsar.CommandSubscribe) -> dict[str, Any]:
    """A Key_Shared consumer's KeySharedMeta as SubscribeRequest's fields (checked by the session)."""
    if not request.HasField("keySharedMeta"):
        return {}
    meta = request.keySharedMeta
    return {"key_shared_mode": meta.keySharedMode,
            "hash_ranges": [(r.start, r.end) for r in meta.hashRanges],
            "allow_out_of_order_delivery": meta.allowOutOfOrderDelivery}


_WORD = (1 << 64) - 1


def bitmask(words: Iterable[int]) -> int:
    """Pulsar's ack_set (a Java BitSet's int64 words, bit i of the set is bit i % 64 of word i // 64)
    as one int."""
    mask = 0
    for shift, word in enumerate(words):
        mask |= (word & _WORD) << (64 * shift)
    return mask


def ack_set_words(mask: int) -> list[int]:
    """A bitmask as Pulsar's ack_set: signed int64 words, lowest first."""
    words = []
    while mask:
        word = mask & _WORD
        words.append(word - (1 << 64) if word >> 63 else word)
        mask >>= 64
    return words
