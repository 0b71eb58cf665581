"""Received messages. The consumer makes one Message per record of every entry, so a Message holds
only what differs per record; what its whole entry shares (topic, position, producer, publish time,
redelivery count) lives once in an EntryInfo that all the entry's messages point to."""

from __future__ import annotations

from herald.common.message_id import MessageId

__all__ = ["EntryInfo", "Message", "MessageId"]

_new_id = MessageId._make


class EntryInfo:
    """What every message of one delivered entry shares."""

    __slots__ = (
        "entry_id", "ledger_id", "num_messages", "partition", "producer_name", "publish_time",
        "redelivery_count", "topic",
    )

    def __init__(
        self, topic: str, ledger_id: int, entry_id: int, partition: int, producer_name: str,
        publish_time: int, redelivery_count: int, num_messages: int,
    ) -> None:
        self.topic = topic
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.partition = partition
        self.producer_name = producer_name
        self.publish_time = publish_time
        self.redelivery_count = redelivery_count
        self.num_messages = num_messages


class Message:
    """One received message: its value (bytes), key, properties and the ids that place it."""

    __slots__ = ("_entry", "_event_time", "_properties", "batch_index", "key", "sequence_id", "value")

    def __init__(
        self, value: bytes, key: str | None, properties: dict[str, str] | None, event_time: int,
        sequence_id: int, batch_index: int, entry: EntryInfo,
    ) -> None:
        self.value = value  # the payload, as the producer sent it
        self.key = key
        self._properties = properties
        self._event_time = event_time
        self.sequence_id = sequence_id
        self.batch_index = batch_index  # -1 when the entry is not a batch
        self._entry = entry

    def data(self) -> bytes:
        """The payload (the `value` attribute), as Pulsar's clients spell it."""
        return self.value

    @property
    def properties(self) -> dict[str, str]:
        # A fresh dict for messages without properties, so a caller's changes stay its own.
        return self._properties if self._properties is not None else {}

    @property
    def event_time(self) -> int | None:
        """The producer's event time, unix milliseconds; None when it set none."""
        return self._event_time or None

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
        shown = self.value if len(self.value) <= 32 else self.value[:32] + b"..."
        return f"Message(id={self.message_id}, key={self.key!r}, value={shown!r})"
