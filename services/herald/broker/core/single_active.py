"""Single-active dispatch (Exclusive, Failover): one consumer at a time takes everything, in order;
redelivery rewinds the cursor so everything unacknowledged is read again, in order."""

from __future__ import annotations

import abc

from herald.broker.core.consumer import Consumer
from herald.broker.core.dispatcher import Dispatcher, DispatchSource, Entries
from herald.broker.core.ledger_list import Position
from herald.broker.core.selection import ActiveElection
from herald.broker.settings import BrokerSettings
from herald.common.codec.names import TopicName
from herald.common.errors import ConsumerBusyError


class SingleActiveDispatcher(Dispatcher):
    """One consumer at a time takes everything, in order (Exclusive, Failover). Redelivery rewinds
    the cursor: everything not acknowledged is read again, in order."""

    @abc.abstractmethod
    def active_consumer(self) -> Consumer | None:
        """The consumer entries go to."""

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        # Like Pulsar's single-consumer dispatchers: any redelivery request redelivers everything.
        if consumer is self.active_consumer():
            self._rewind(consumer)

    def negative_ack(self, consumer: Consumer, positions: list[Position], delay_ms: int) -> None:
        # As Pulsar's client does for these types: after the delay, redeliver everything unacked.
        self._after(delay_ms, lambda: self.redeliver(consumer, None))

    def _rewind(self, consumer: Consumer) -> None:
        """Take back what the consumer holds (counted as redelivered) and read again from just
        after the mark-delete position."""
        consumer.take_back_undelivered()
        self._count_redelivery(list(consumer.pending))
        consumer.pending.clear()
        self._cursor.rewind()
        self._epoch += 1
        self.notify()

    def _reads_compacted(self) -> bool:
        # As Pulsar's single-active dispatcher: the active consumer's own choice.
        consumer = self.active_consumer()
        return consumer is not None and consumer.read_compacted

    def _read_budget(self) -> int:
        consumer = self.active_consumer()
        if consumer is None or not consumer.can_receive:
            return 0
        return self._room(consumer)

    def _dispatch(self, entries: Entries) -> Entries:
        consumer = self.active_consumer()
        if consumer is None:
            return entries
        for i, entry in enumerate(entries):
            if not consumer.can_receive:
                return entries[i:]
            self._deliver(consumer, entry)  # the last one may overshoot the permits
        return []

    def _leftovers(self, entries: Entries) -> None:
        # Read ahead but not sent (out of permits): read them again, in order, when permits come.
        self._cursor.read_position = entries[0].position


class ExclusiveDispatcher(SingleActiveDispatcher):
    """One consumer, refused a second."""

    type_name = "Exclusive"

    def active_consumer(self) -> Consumer | None:
        return self.consumers[0] if self.consumers else None

    def add_consumer(self, consumer: Consumer) -> None:
        if self.consumers:
            raise ConsumerBusyError("Exclusive consumer is already connected")
        self.consumers.append(consumer)
        self.notify()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            self._rewind(consumer)


class FailoverDispatcher(SingleActiveDispatcher):
    """Any number of consumers, one active: the first by (priority level, name); on a partition
    of a partitioned topic, the (partition index mod n)-th of the highest-priority consumers by
    name, so a group's consumers share a topic's partitions (Pulsar's rule). Consumers are told
    their status when they join and whenever it changes. A displaced or leaving active consumer's
    entries are taken back and the new one continues from the mark-delete position."""

    type_name = "Failover"

    def __init__(self, subscription: DispatchSource, settings: BrokerSettings) -> None:
        super().__init__(subscription, settings)
        self._election = ActiveElection(TopicName.parse(subscription.topic_name).partition_index)

    def active_consumer(self) -> Consumer | None:
        return self._election.active

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self._election.elect(self.consumers, joined=consumer, displaced=self._rewind)
        self.notify()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        if self._election.leave(consumer):
            self._rewind(consumer)
        self._election.elect(self.consumers, displaced=self._rewind)
        self.notify()
