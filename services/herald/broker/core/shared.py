"""Shared dispatch: entries go round-robin to the consumers with permits, highest priority first; a
leaving consumer's unacknowledged entries are replayed to the others."""

from __future__ import annotations

from herald.broker.core.consumer import Consumer
from herald.broker.core.dispatcher import Dispatcher, DispatchSource, Entries
from herald.broker.core.ledger_list import Position
from herald.broker.core.selection import RoundRobin
from herald.broker.settings import BrokerSettings


class SharedDispatcher(Dispatcher):
    """Entries go round-robin to the consumers with permits, highest priority (lowest level)
    first, dispatch_round_robin_batch entries per turn (by default one, which gives Pulsar's
    documented order: C1(level 0, 2 permits), C2(0, 1), C3(0, 1), C4(1, 2), C5(1, 1) are served
    C1, C2, C3, C1, C4, C5, C4). A leaving consumer's unacknowledged entries are replayed to the
    others, each with its redelivery count raised."""

    type_name = "Shared"
    delays_delivery = True

    def __init__(self, subscription: DispatchSource, settings: BrokerSettings) -> None:
        super().__init__(subscription, settings)
        self._round_robin = RoundRobin()

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.notify()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            self._put_back(consumer, None)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        self._put_back(consumer, positions)

    def negative_ack(self, consumer: Consumer, positions: list[Position], delay_ms: int) -> None:
        _, nacked = self._delivered(consumer, positions)
        if not nacked:
            return
        self._count_redelivery(nacked)
        self._after(delay_ms, lambda: self._replay_now(nacked))

    def _replay_now(self, positions: list[Position]) -> None:
        self._add_replay(positions)
        self.notify()

    def _put_back(self, consumer: Consumer, positions: list[Position] | None) -> None:
        undelivered, delivered = self._delivered(consumer, positions)
        self._count_redelivery(delivered)
        self._add_replay(undelivered)
        self._add_replay(delivered)
        self.notify()

    def _read_budget(self) -> int:
        return sum(self._room(c) for c in self.consumers if c.can_receive)

    def _dispatch(self, entries: Entries) -> Entries:
        batch = max(1, self._settings.dispatch_round_robin_batch)
        i = 0
        while i < len(entries):
            consumer = self._round_robin.next(self.consumers)
            if consumer is None:
                break
            sent = 0
            while i < len(entries) and sent < batch and consumer.can_receive:
                self._deliver(consumer, entries[i])
                i += 1
                sent += 1
        return entries[i:]
