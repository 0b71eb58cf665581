"""Messages. A received Message holds only what differs per record; what its whole entry shares
(topic, position, producer, publish time, first sequence id, redelivery count, schema) lives once
in an EntryInfo that all the entry's messages point to, since the consumer makes one Message per
record (a DetailedMessage when the record has a key, properties, event time or sequence id).
OutgoingMessage is a message on its way out, as interceptors and custom routers see it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from herald.client.acks import BatchAcks
from herald.client.schema_decoders import KeyedDecode
from herald.common.codec.message_id import MessageId

__all__ = ["DetailedMessage", "EntryInfo", "Message", "MessageId", "OutgoingMessage"]

T = TypeVar("T")
_new_id = MessageId._make


class EntryInfo:
    """What every message of one delivered entry shares."""

    __slots__ = (
        "acks", "decode", "entry_id", "ledger_id", "num_messages", "partition", "producer_name", "publish_time",
        "redelivery_count", "schema_version", "sequence_id", "topic", "traceparent",
    )

    def __init__(
        self, topic: str, ledger_id: int, entry_id: int, partition: int, producer_name: str,
        publish_time: int, redelivery_count: int, num_messages: int,
        decode: Callable[[bytes], Any] | None = None, schema_version: int | None = None, sequence_id: int = 0,
    ) -> None:
        self.topic = topic
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.partition = partition
        self.producer_name = producer_name
        self.publish_time = publish_time
        self.redelivery_count = redelivery_count
        self.num_messages = num_messages
        # The consumer's schema, for the version the entry was written with (client.schema_decoders);
        # None: values are the bytes themselves.
        self.decode = decode
        self.schema_version = schema_version  # the topic's schema version the producer wrote with
        self.traceparent = ""  # the broker's deliver span, when the consumer traces (herald.client.tracing)
        # The entry's first sequence id: a plain message's is this plus its batch index.
        self.sequence_id = sequence_id
        # A batch's acks as the consumer's AckTracker keeps them (None: not a batch of two or
        # more): acking a message that is not its batch's last clears a flag here.
        self.acks: BatchAcks | None = None


class Message(Generic[T]):
    """One received message: its value (decoded by the consumer's schema; bytes by default), key,
    properties and the ids that place it.

    A Message itself is a plain one (the common case, made for every record that is nothing but
    its value): three fields, its key None, no properties or event time, its sequence id the
    entry's first plus its index. A message with any of those of its own is a DetailedMessage.
    The consumer makes one object per message, so fewer fields set is fewer microseconds."""

    __slots__ = ("_data", "_entry", "batch_index")

    def __init__(self, data: bytes, batch_index: int, entry: EntryInfo) -> None:
        self._data = data
        self.batch_index = batch_index  # -1 when the entry is not a batch
        self._entry = entry

    @property
    def key(self) -> str | None:
        return None

    @property
    def sequence_id(self) -> int:
        index = self.batch_index
        first: int = self._entry.sequence_id
        return first + index if index > 0 else first

    @property
    def properties(self) -> dict[str, str]:
        return {}  # a fresh dict, so a caller's changes stay its own

    @property
    def event_time(self) -> int | None:
        """The producer's event time, unix milliseconds; None when it set none."""
        return None

    @property
    def value(self) -> T:
        """The value, decoded by the consumer's schema for the schema version the message was
        written with (SchemaError when it does not decode)."""
        decode = self._entry.decode
        if decode is None:
            return self._data  # type: ignore[return-value]
        if decode.__class__ is KeyedDecode:  # a KeyValue SEPARATED value: the key is half of it
            return decode.join(self.key, self._data)  # type: ignore[attr-defined,no-any-return]
        return decode(self._data)  # type: ignore[no-any-return]

    @property
    def schema_version(self) -> int | None:
        """The version of the topic's schema the producer wrote the message with (None: it gave none)."""
        return self._entry.schema_version

    def data(self) -> bytes:
        """The payload's bytes, as the producer sent them (before any schema)."""
        return self._data

    @property
    def publish_time(self) -> int:
        """When the producer sent the message's batch, unix milliseconds."""
        return self._entry.publish_time

    @property
    def producer_name(self) -> str:
        return self._entry.producer_name

    @property
    def topic(self) -> str:
        return self._entry.topic

    @property
    def redelivery_count(self) -> int:
        """How many times the broker delivered this message before (0 on first delivery)."""
        return self._entry.redelivery_count

    @property
    def message_id(self) -> MessageId:
        entry = self._entry
        return _new_id((entry.ledger_id, entry.entry_id, entry.partition, self.batch_index))

    def __repr__(self) -> str:
        data = self._data
        shown = data if len(data) <= 32 else data[:32] + b"..."
        return f"Message(id={self.message_id}, key={self.key!r}, data={shown!r})"


class DetailedMessage(Message[T]):
    """A received message with a key, properties, an event time or a sequence id of its own."""

    __slots__ = ("_event_time", "_key", "_properties", "_sequence_id")

    def __init__(
        self, data: bytes, key: str | None, properties: dict[str, str] | None, event_time: int,
        sequence_id: int, batch_index: int, entry: EntryInfo,
    ) -> None:
        self._data = data
        self._key = key
        self._properties = properties
        self._event_time = event_time
        self._sequence_id = sequence_id
        self.batch_index = batch_index
        self._entry = entry

    @property
    def key(self) -> str | None:
        return self._key

    @property
    def sequence_id(self) -> int:
        return self._sequence_id

    @property
    def properties(self) -> dict[str, str]:
        # A fresh dict for messages without properties, so a caller's changes stay its own.
        return self._properties if self._properties is not None else {}

    @property
    def event_time(self) -> int | None:
        return self._event_time or None


@dataclass(slots=True)
class OutgoingMessage:
    """A message being sent: its value already encoded by the producer's schema. Interceptors may
    return a changed copy from before_send; custom routers read it to choose a partition."""

    value: bytes
    key: str | None = None
    ordering_key: bytes | None = None
    properties: dict[str, str] | None = None
    event_time: int | None = None
    sequence_id: int | None = None
    deliver_at: int | None = None  # unix milliseconds
