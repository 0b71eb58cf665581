"""The consumer's protocol (SEEDS §3), apart from any transport: the Subscribe handshake, flow
permits (a FLOW once half the receiver queue was taken, none while paused, the owed ones on
resume), delivered entries checked, decompressed, put back together when chunked
(chunked_messages.py) and unpacked into Messages on the local queue, acks tracked per batch index
(acks.py) and per chunked message, the rewind of an Exclusive or Failover subscription, and what a
reconnect or a seek drops. It builds every request into an outbox and takes every reply, and does
no I/O: a stream (stream.py) writes the outbox and feeds it replies, the consumer in front
(topic_consumer.py) hands messages to the application and sends acks on its timers. Unit-tested by
feeding it replies."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from herald.api.v1 import broker_pb2
from herald.client.acks import AckTracker
from herald.client.chunked_messages import ChunkedMessages
from herald.client.config import ConsumerConfig, ConsumerType
from herald.client.message import DetailedMessage, EntryInfo, Message
from herald.client.schema_decoders import SchemaDecoders
from herald.client.stream_protocol import reply_error
from herald.client.unacked_tracker import UnackedTracker
from herald.common import tracing
from herald.common.codec.entry import (
    ENTRY_FRAMING_ALLOWANCE,
    Record,
    build_messages,
    entry_permits,
    open_entry,
    read_metadata,
    records_claimed,
)
from herald.common.codec.message_id import MessageId
from herald.common.codec.names import TopicName
from herald.common.codec.schema_info import SchemaInfo
from herald.common.codec.schema_proto import schema_to_proto
from herald.common.errors import ConnectionError_

log = logging.getLogger(__name__)

T = TypeVar("T")
Position = tuple[int, int]
_CLOSE = broker_pb2.ConsumeRequest(close=broker_pb2.CloseConsumer())
_REDELIVER = broker_pb2.ConsumeRequest(redeliver=broker_pb2.RedeliverUnacknowledged())
_ConsumeRequest = broker_pb2.ConsumeRequest


def _nothing(*_: object) -> None:
    pass


def _unanswered(_: broker_pb2.CommandResult) -> str | None:
    return None


class ConsumerProtocol(Generic[T]):
    """One consumer's side of a Consume stream.

    What it tells its owner (each optional):
      on_delivered(entries)   messages were queued from these entries (wake whoever waits)
      on_dropped(since)       queued messages were dropped (from `since` on; None: all of them)
      on_answered(result)     a Seek or Unsubscribe was answered: settle its caller, return its
                              kind when it succeeded ("seek": the protocol then drops what it holds)
      on_lost(unsent)         the stream failed: fail the commands written and not answered (the
                              request ids in `unsent` go on the next stream)
      on_active_change(flag)  Failover: this consumer became active or inactive
      on_acks_queued()        acks were recorded here (chunks given up on): send them in a while
      on_chunk_expiry(due)    call `chunks.expire(clock())` at clock time `due`
      on_schema_wanted(v)     entries written with schema version v wait for it: fetch it, tell
                              `decoders` (learned / failed), then call `release_held()`
    `decoders` decode each message by the schema version it was written with (schema_decoders.py;
    None: `decode` for every message); `schema` is what Subscribe carries (the consumer's).
    `adjust_subscribe` may add to each Subscribe (a reader's start); `clock` is the clock chunk
    expiry is measured on (the owner's loop time).
    """

    role = "consumer"
    stream_name = "the consume stream"

    def __init__(
        self, topic: str, config: ConsumerConfig, decode: Callable[[bytes], Any] | None = None, *,
        adjust_subscribe: Callable[[broker_pb2.Subscribe], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_delivered: Callable[[Iterable[broker_pb2.DeliveredEntry]], None] = _nothing,
        on_dropped: Callable[[Position | None], None] = _nothing,
        on_answered: Callable[[broker_pb2.CommandResult], str | None] = _unanswered,
        on_lost: Callable[[set[int]], None] = _nothing,
        on_active_change: Callable[[bool], None] = _nothing,
        on_acks_queued: Callable[[], None] = _nothing,
        on_chunk_expiry: Callable[[float], None] = _nothing,
        decoders: SchemaDecoders | None = None, schema: SchemaInfo | None = None,
        on_schema_wanted: Callable[[int], None] = _nothing,
    ) -> None:
        self.topic = topic
        self.partition = TopicName.parse(topic).partition_index
        self.name = config.consumer_name or ""
        self._config = config
        self._decode = decode if decoders is None else decoders.plain
        self.decoders = decoders if decoders is not None and decoders.versioned else None
        self._schema = schema
        self._on_schema_wanted = on_schema_wanted
        # Entries waiting for the schema version they were written with, in delivery order (the
        # first one needs it; those after it wait too, so that order holds).
        self.held: list[broker_pb2.DeliveredEntry] = []
        self._adjust_subscribe = adjust_subscribe
        self._clock = clock
        self._on_delivered = on_delivered
        self._on_dropped = on_dropped
        self._on_answered = on_answered
        self._on_lost = on_lost
        self._on_active_change = on_active_change
        self.wake: Callable[[], None] = _nothing  # the stream's: something new in the outbox
        self.outbox: deque[broker_pb2.ConsumeRequest] = deque()
        self.queue: deque[Message[T]] = deque()  # delivered, not yet handed to the application
        self.permits = 0  # messages taken (or dropped) since more were last asked for
        self.flow_threshold = max(1, config.receiver_queue_size // 2)
        self.paused = False
        self.connected = False
        self.closed = False  # the owner is closing: deliveries are ignored
        self.tracker = AckTracker()
        self.unacked = UnackedTracker(config.ack_timeout, config.ack_timeout_tick) if config.ack_timeout else None
        self.chunks = ChunkedMessages(topic, self.partition, decode, config, self.tracker, self.unacked,
                                      on_acks_queued, on_chunk_expiry)
        self.whole = self.chunks.whole  # last chunk -> every chunk, of the messages made whole
        self._seeking = False  # a seek succeeded: what the old stream still brings is from before it
        # Exclusive and Failover receive in position order except when the broker rewinds (a
        # redelivery): an entry at or before the last one means the queued ones after it come again.
        self._single_active = config.consumer_type in (ConsumerType.Exclusive, ConsumerType.Failover)
        self._last_ledger = self._last_entry = -1
        self.end_of_topic = False
        self.epoch = 0  # counts reconnects and seeks
        # Counters (the consumer's stats): per delivery, never per message.
        self.received = self.received_bytes = self.nacks = self.reconnects = self.corrupt_entries = 0
        # The most an entry's payload may decompress to: a message of max_message_size and its framing.
        self._max_payload = config.max_message_size + ENTRY_FRAMING_ALLOWANCE
        self._traced = tracing.ENABLED

    # ---- the handshake ----------------------------------------------------------------------

    def handshake_what(self, address: str) -> str:
        return f"subscribing {self._config.subscription_name!r} to {self.topic} at {address}"

    def handshake_request(self) -> broker_pb2.ConsumeRequest:
        config = self._config
        request = _ConsumeRequest()
        subscribe = request.subscribe
        subscribe.topic = self.topic
        subscribe.subscription = config.subscription_name
        subscribe.type = config.consumer_type.value
        subscribe.initial_position = config.initial_position.value
        subscribe.consumer_name = self.name
        subscribe.priority_level = config.priority_level
        subscribe.read_compacted = config.read_compacted
        if config.properties:
            subscribe.properties.update(config.properties)
        if self._schema is not None and not self._schema.raw:
            schema_to_proto(self._schema, subscribe.schema)
        policy = config.dead_letter_policy
        if policy is not None:
            dead_letters = subscribe.dead_letter_policy
            dead_letters.max_redeliver_count = policy.max_redeliver_count
            dead_letters.dead_letter_topic = policy.dead_letter_topic or ""
            dead_letters.retry_letter_topic = policy.retry_letter_topic or ""
        if self._adjust_subscribe is not None:
            self._adjust_subscribe(subscribe)
        return request

    def handshake_reply(self, reply: broker_pb2.ConsumeResponse) -> None:
        kind = reply.WhichOneof("reply")
        if kind == "error":
            raise reply_error(reply.error)
        if kind != "subscribed":
            raise ConnectionError_(f"the broker answered a subscription with {kind!r}")
        self.name = reply.subscribed.consumer_name or self.name

    def on_connected(self, accepted: None, first: bool) -> None:
        """Subscribed: ask for a full queue first thing (owed until resume() while paused)."""
        self.connected = True
        size = self._config.receiver_queue_size
        if self.paused:
            self.permits = size
        else:
            self.outbox.appendleft(_ConsumeRequest(flow=broker_pb2.Flow(permits=size)))

    def on_disconnected(self) -> None:
        """The stream failed: the broker redelivers everything unacked, so what is held would come
        twice. Acks, seeks and unsubscribes not written yet go on the next stream; a command
        written and not answered is lost with this one."""
        self.connected = False
        self.queue.clear()
        self.held.clear()
        if self.decoders is not None:
            self.decoders.forget_failures()
        self.permits = 0
        self.epoch += 1
        self.reconnects += 1
        self._seeking = False
        self._last_ledger = self._last_entry = -1
        self.chunks.forget_incomplete()
        if self.unacked is not None:
            self.unacked.clear()
        kept: deque[broker_pb2.ConsumeRequest] = deque()
        unsent: set[int] = set()
        for request in self.outbox:
            command = request.WhichOneof("command")
            if command == "ack":
                kept.append(request)
            elif command in ("seek", "unsubscribe"):
                kept.append(request)
                unsent.add(getattr(request, command).request_id)
        self.outbox = kept
        self._on_lost(unsent)
        self._on_dropped(None)

    # ---- requests ---------------------------------------------------------------------------

    def send(self, request: broker_pb2.ConsumeRequest) -> None:
        """Queue a request for the stream (while disconnected: for the next stream)."""
        self.outbox.append(request)
        self.wake()

    def next_request(self) -> broker_pb2.ConsumeRequest | None:
        outbox = self.outbox
        return outbox[0] if outbox else None

    def request_written(self) -> None:
        self.outbox.popleft()  # only once written: an ack cut off here goes on the next stream

    def close_request(self) -> broker_pb2.ConsumeRequest:
        return _CLOSE

    def taken(self, count: int) -> None:
        """`count` messages left the queue (or were dropped from it): ask for as many more once
        they reach half the queue."""
        self.permits += count
        if self.permits >= self.flow_threshold:
            self.send_flow()

    def send_flow(self) -> None:
        """Ask for the permits counted (none while paused: owed until resume; none while
        disconnected: the next stream starts with a full queue)."""
        if self.paused:
            return
        permits, self.permits = self.permits, 0
        if self.connected and permits > 0:
            self.send(_ConsumeRequest(flow=broker_pb2.Flow(permits=permits)))

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            if self.connected:  # else the permits owed go once connected
                self.send_flow()

    # ---- replies ----------------------------------------------------------------------------

    def on_reply(self, reply: broker_pb2.ConsumeResponse) -> None:
        kind = reply.WhichOneof("reply")
        if kind == "entries":
            self.on_entries(reply.entries.entries)
        elif kind == "result":
            if self._on_answered(reply.result) == "seek":
                self.seeked()
        elif kind == "active_change":
            self._on_active_change(reply.active_change.is_active)
        elif kind == "end_of_topic":
            self.end_of_topic = True
        elif kind == "error":
            raise reply_error(reply.error)

    def on_entries(self, entries: Iterable[broker_pb2.DeliveredEntry]) -> None:
        """Queue the messages of delivered entries. Each bytes field of an entry is read once:
        every read of one copies it out of the reply."""
        if self.closed or self._seeking:
            return
        pairs: Iterable[tuple[broker_pb2.DeliveredEntry, bytes]]
        if self.decoders is None:
            pairs = ((delivered, delivered.data) for delivered in entries)
        else:
            pairs = self._hold_for_schemas(entries)
            entries = [delivered for delivered, _ in pairs]
        messages: list[Message[T]] = []
        skipped = size = 0
        single_active = self._single_active
        unpack = self._unpack
        for delivered, data in pairs:
            ledger_id, entry_id = delivered.ledger_id, delivered.entry_id
            if single_active:
                if ledger_id < self._last_ledger or (ledger_id == self._last_ledger and entry_id <= self._last_entry):
                    skipped += self.rewound((ledger_id, entry_id), messages)
                self._last_ledger, self._last_entry = ledger_id, entry_id
            size += len(data)
            try:
                batch = unpack(delivered, ledger_id, entry_id, data)
            except Exception as exc:
                # Not delivered: it would only fail again. Its permits go back, so that entries
                # dropped so cannot stall the subscription.
                self.corrupt_entries += 1
                skipped += entry_permits(data)
                log.error("consumer %s on %s: dropped corrupt entry %d:%d: %s", self.name, self.topic, ledger_id,
                          entry_id, exc)
                continue
            messages += batch[0]
            skipped += batch[1]
        self.received += len(messages)
        self.received_bytes += size
        self.queue.extend(messages)
        # Permits the broker counted but nothing queued will give back (acked here already, chunks,
        # what an entry's metadata claims beyond its records; negative: it holds more than claimed).
        self.permits += skipped
        self._on_delivered(entries)
        if self.permits >= self.flow_threshold:
            self.send_flow()

    def _hold_for_schemas(
        self, entries: Iterable[broker_pb2.DeliveredEntry],
    ) -> list[tuple[broker_pb2.DeliveredEntry, bytes]]:
        """The entries to unpack now, with their bytes (read once): those before the first one
        written with a schema version not known yet. It and every entry after it are held (in
        order) until `release_held()`."""
        decoders = self.decoders
        assert decoders is not None
        held = self.held
        ready: list[tuple[broker_pb2.DeliveredEntry, bytes]] = []
        for delivered in entries:
            if held:
                held.append(delivered)
                continue
            data = delivered.data
            version = _schema_version(data)
            if decoders.needs(version):
                assert version is not None
                held.append(delivered)
                self._on_schema_wanted(version)
                continue
            ready.append((delivered, data))
        return ready

    def release_held(self) -> None:
        """A schema version the held entries waited for was learned (or failed): unpack them (up to
        the next one written with a version not known yet)."""
        held, self.held = self.held, []
        if held:
            self.on_entries(held)

    def unpack(self, delivered: broker_pb2.DeliveredEntry) -> tuple[list[Message[T]], int]:
        """An entry's messages and the permits to give back now (see `_unpack`)."""
        return self._unpack(delivered, delivered.ledger_id, delivered.entry_id, delivered.data)

    def _unpack(
        self, delivered: broker_pb2.DeliveredEntry, ledger_id: int, entry_id: int, data: bytes,
    ) -> tuple[list[Message[T]], int]:
        """An entry's messages, less those this consumer already acked (in a redelivered batch),
        and the permits to give back now: what the broker took for the entry less what is queued
        (each queued message gives its own back once taken). Everything is sized by the records
        the entry holds, never by the count its metadata claims. `data` is the entry's bytes."""
        opened = open_entry(data)  # either format: Herald's, or Pulsar's as its producers send it
        metadata = opened.metadata
        permits = opened.permits
        version = metadata.schema_version if metadata.HasField("schema_version") else None
        decoders = self.decoders
        decode = self._decode if decoders is None else decoders.decoder(version)
        if metadata.num_chunks:
            whole = self.chunks.unpack((ledger_id, entry_id), delivered.redelivery_count, opened, self._clock(),
                                       decode, version)
            return whole, permits - len(whole)
        # Decompressed bytes are read as they are; an uncompressed payload is a view of `data`.
        restored = opened.restore(self._max_payload)
        info = EntryInfo(self.topic, ledger_id, entry_id, self.partition, metadata.producer_name,
                         metadata.publish_time, delivered.redelivery_count, 0, decode, version, metadata.sequence_id)
        if self._traced:
            info.traceparent = delivered.traceparent  # the broker's deliver span
        tracker = self.tracker
        if metadata.batched and opened.pulsar is None and not tracker.has_unacked_messages(ledger_id, entry_id):
            # Herald's batch delivered whole (not a redelivery of one partly acked here): its
            # Messages made in one pass over the payload, every one of them queued.
            messages, compacted = build_messages(restored, records_claimed(metadata), Message, _detailed, info)
            count = info.num_messages = len(messages) + len(compacted)
            info.acks = tracker.batch(ledger_id, entry_id, count)
            for index in compacted:
                # Compaction removed it from a compacted ledger's entry (its place kept): never
                # delivered, and counted acknowledged so that the entry's ack completes.
                tracker.acknowledge(ledger_id, entry_id, index, count)
            return messages, permits - len(messages)
        records = list(opened.records(restored))
        count = info.num_messages = len(records)
        messages = []
        append = messages.append
        if not metadata.batched:
            for value, key, event_time, sequence_id, properties, _, _ in records:
                append(_message(value, key, properties, event_time, sequence_id, -1, info))
            return messages, permits - count
        acks = info.acks = tracker.batch(ledger_id, entry_id, count)
        unacked = acks.unacked if acks is not None else None  # a redelivery leaves out what was acked
        for index, (value, key, event_time, sequence_id, properties, compacted_out, _) in enumerate(records):
            if compacted_out:
                tracker.acknowledge(ledger_id, entry_id, index, count)  # as above
                continue
            if unacked is None or unacked[index]:
                append(_message(value, key, properties, event_time, sequence_id, index, info))
        return messages, permits - len(messages)

    def rewound(self, position: Position, pending: list[Message[T]]) -> int:
        """The broker went back to `position` (a redelivery): drop what is held from there on, as
        it comes again. Returns how many were dropped (their permits go back)."""
        dropped = 0
        while pending and _position(pending[-1]) >= position:
            pending.pop()
            dropped += 1
        queue = self.queue
        while not pending and queue and _position(queue[-1]) >= position:
            queue.pop()
            dropped += 1
        self._on_dropped(position)
        return dropped

    def seeked(self) -> None:
        """A seek succeeded: everything held is from before it, and so is what the old stream
        still brings until the broker ends it."""
        self._seeking = True
        self.epoch += 1
        self.queue.clear()
        self.held.clear()
        self.tracker.reset()
        if self.unacked is not None:
            self.unacked.clear()
        self.chunks.forget_incomplete()
        self._last_ledger = self._last_entry = -1
        self._on_dropped(None)

    # ---- acknowledging ----------------------------------------------------------------------

    def acknowledge(self, ledger_id: int, entry_id: int, batch_index: int, num_messages: int = 0) -> bool:
        """Record an ack; True when its entry is acked as a whole (an Ack waits for the next
        group). `num_messages`: the batch's size when known. (TopicConsumer.acknowledge does the
        same inline: it is the application's hot path.)"""
        done = self.tracker.acknowledge(ledger_id, entry_id, batch_index, num_messages)
        if done and (self.whole or self.unacked is not None):
            self.entry_acked((ledger_id, entry_id))
        return done

    def acknowledge_cumulative(self, ledger_id: int, entry_id: int, batch_index: int, num_messages: int = 0) -> bool:
        """Record a cumulative ack; True when a cumulative Ack waits for the next group."""
        tracker = self.tracker
        done = tracker.acknowledge_cumulative(ledger_id, entry_id, batch_index, num_messages)
        # A batch acked only up to this message still has its entry unacked.
        covered = (ledger_id, entry_id - 1 if tracker.has_unacked_messages(ledger_id, entry_id) else entry_id)
        if self.unacked is not None:
            self.unacked.remove_up_to(covered)
        if self.whole:
            for last in [last for last in self.whole if last <= covered]:
                del self.whole[last]
        return done

    def entry_acked(self, position: Position) -> None:
        """An entry is acked: so are the other chunks of a chunked message, and none is timed."""
        positions = self.whole.pop(position, None) if self.whole else None
        if positions is not None:
            for ledger_id, entry_id in positions[:-1]:
                self.tracker.acknowledge(ledger_id, entry_id, -1)
        if self.unacked is not None:
            for acked in positions or (position,):
                self.unacked.remove(acked)

    def nacked(self, message_id: MessageId) -> tuple[Position, ...]:
        """A message was negatively acknowledged: the positions of its entries (every chunk of a
        chunked message), no longer timed."""
        position = (message_id.ledger_id, message_id.entry_id)
        positions = (self.whole.pop(position, None) if self.whole else None) or (position,)
        if self.unacked is not None:
            for nacked in positions:
                self.unacked.remove(nacked)
        self.nacks += 1
        return positions

    def redeliver_all(self) -> None:
        """Ask for everything unacknowledged again; what is queued here comes with it, so it goes
        (and its permits with it, as Pulsar's client does)."""
        dropped = len(self.queue)
        self.queue.clear()
        if self.unacked is not None:
            self.unacked.clear()
        self.chunks.forget_incomplete()
        self.send(_REDELIVER)
        self._on_dropped(None)
        self.taken(dropped)


def _schema_version(data: bytes) -> int | None:
    """The schema version an entry was written with (None: none, or an entry that does not read:
    unpacking drops it)."""
    try:
        metadata = read_metadata(data, verify=False)
    except Exception:
        return None
    return metadata.schema_version if metadata.HasField("schema_version") else None


def _message(
    value: bytes, key: str | None, properties: dict[str, str], event_time: int, sequence_id: int | None,
    index: int, info: EntryInfo,
) -> Message[Any]:
    """A record's Message: a plain one when it is nothing but its value (sequence id the entry's
    first plus its index)."""
    if key is None and not properties and not event_time and sequence_id is None:
        return Message(value, index, info)
    if sequence_id is None:
        sequence_id = info.sequence_id + index if index > 0 else info.sequence_id
    return DetailedMessage(value, key, properties or None, event_time, sequence_id, index, info)


def _detailed(record: Record, index: int, info: EntryInfo) -> Message[Any]:
    """build_messages' maker of a record with more than its value."""
    return _message(record.value, record.key, record.properties, record.event_time, record.sequence_id, index, info)


def _position(message: Message[Any]) -> Position:
    entry = message._entry
    return entry.ledger_id, entry.entry_id
