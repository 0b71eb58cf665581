"""A durable subscription: a cursor in the topic's managed ledger, the consumers attached to it and
the dispatcher (chosen by subscription type) that feeds them. Acks and redelivery requests arrive
here from consumers; the redelivery count of each entry is kept here, per subscription."""

from __future__ import annotations

import enum
import itertools
import secrets

from herald.broker.consumer import Consumer
from herald.broker.cursor import InitialPosition, ManagedCursor
from herald.broker.dispatcher import Dispatcher, ExclusiveDispatcher, SharedDispatcher
from herald.broker.managed_ledger import ManagedLedger, Position
from herald.broker.settings import BrokerSettings
from herald.common.errors import ConsumerBusyError, NotAllowedError

__all__ = ["InitialPosition", "Subscription", "SubscriptionType"]


class SubscriptionType(enum.IntEnum):
    """Values as in the wire contract."""

    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    SubscriptionType.EXCLUSIVE: "Exclusive",
    SubscriptionType.SHARED: "Shared",
    SubscriptionType.FAILOVER: "Failover",
    SubscriptionType.KEY_SHARED: "Key_Shared",
}
_DISPATCHERS: dict[SubscriptionType, type[Dispatcher]] = {
    SubscriptionType.EXCLUSIVE: ExclusiveDispatcher,
    SubscriptionType.SHARED: SharedDispatcher,
}
_NO_CUMULATIVE = (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED)


class Subscription:
    def __init__(
        self, topic_name: str, cursor: ManagedCursor, ledger: ManagedLedger, settings: BrokerSettings,
    ) -> None:
        self.topic_name = topic_name
        self.name = cursor.name
        self.cursor = cursor
        self.ledger = ledger
        self._settings = settings
        self.type = SubscriptionType.EXCLUSIVE
        self.dispatcher: Dispatcher | None = None
        self.redelivery_counts: dict[Position, int] = {}
        self.msg_out_counter = 0
        self.closed = False
        self._consumer_ids = itertools.count(1)

    @property
    def consumers(self) -> list[Consumer]:
        return list(self.dispatcher.consumers) if self.dispatcher is not None else []

    async def add_consumer(
        self, sub_type: SubscriptionType, consumer_name: str | None, priority_level: int = 0,
    ) -> Consumer:
        if self.closed:
            raise NotAllowedError(f"subscription {self.name} on {self.topic_name} is closed")
        dispatcher_class = _DISPATCHERS.get(sub_type)
        if dispatcher_class is None:
            raise NotAllowedError(f"{sub_type.label} subscriptions are not supported yet: use Exclusive or Shared")
        if self.dispatcher is not None and self.dispatcher.consumers:
            if sub_type is not self.type:
                raise ConsumerBusyError(
                    f"Subscription is of a different type: {self.name} is {self.type.label} and has "
                    f"consumers; close them or subscribe as {self.type.label}")
        elif self.dispatcher is None or sub_type is not self.type:
            if self.dispatcher is not None:
                await self.dispatcher.close()
                # The old dispatcher's replay set dies with it: read everything unacked again.
                self.cursor.rewind()
            self.type = sub_type
            self.dispatcher = dispatcher_class(self, self._settings)
            self.dispatcher.start()
        consumer = Consumer(self, next(self._consumer_ids), consumer_name or secrets.token_hex(5),
                            priority_level, self._settings.consumer_max_buffered_entries)
        self.dispatcher.add_consumer(consumer)
        return consumer

    def remove_consumer(self, consumer: Consumer) -> None:
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)

    def notify(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.notify()

    def ack(self, consumer: Consumer, positions: list[Position], cumulative: bool) -> None:
        if not positions:
            return
        counts = self.redelivery_counts
        pending = consumer.pending
        if cumulative:
            if self.type in _NO_CUMULATIVE:
                raise NotAllowedError(f"Cumulative ack is not allowed on a {self.type.label} subscription")
            position = max(positions)
            self.cursor.ack_cumulative(position)
            # Pending is in dispatch order, which is position order on these subscription types.
            while pending:
                first = next(iter(pending))
                if first > position:
                    break
                pending.popitem(last=False)
            if counts:
                for done in [p for p in counts if p <= position]:
                    del counts[done]
        else:
            self.cursor.ack(positions)
            for position in positions:
                pending.pop(position, None)
                if counts:
                    counts.pop(position, None)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if self.dispatcher is not None:
            self.dispatcher.redeliver(consumer, positions)

    @property
    def backlog(self) -> int:
        return self.cursor.backlog

    async def close(self, reason: str = "the topic was unloaded", persist: bool = True) -> None:
        """Disconnect every consumer (their clients reconnect) and persist the cursor (not when
        another broker owns the topic now: its cursor is no longer ours to write)."""
        if self.closed:
            return
        self.closed = True
        for consumer in self.consumers:
            consumer._mark_closed(reason)
        if self.dispatcher is not None:
            await self.dispatcher.close()
        if persist:
            await self.cursor.close()

    async def delete(self) -> None:
        """Unsubscribe: drop the cursor for good (only without consumers)."""
        if self.consumers:
            raise ConsumerBusyError(f"subscription {self.name} has consumers connected: close them first")
        self.closed = True
        if self.dispatcher is not None:
            await self.dispatcher.close()
        await self.cursor.delete()
