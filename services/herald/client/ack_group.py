"""A consumer's outgoing acknowledgements. Acks (recorded in the AckTracker) and negative acks wait
for ack_group_time, or until ack_group_max_size of them are waiting, and then go as Ack and
NegativeAck requests (the nack carrying negative_ack_redelivery_delay: the broker holds the entry
back that long). The ack timeout ticks here too: positions the UnackedTracker finds expired are
asked for again, only those on Shared and Key_Shared (in requests of at most 1000), everything
unacknowledged on the other types, whose dispatchers rewind."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from herald.api.v1 import broker_pb2, common_pb2
from herald.client.acks import AckTracker
from herald.client.config import ConsumerConfig, ConsumerType
from herald.client.interceptors import run_hook
from herald.client.unacked_tracker import UnackedTracker
from herald.common.codec.message_id import MessageId

log = logging.getLogger(__name__)

Position = tuple[int, int]

# One RedeliverUnacknowledged names at most this many positions (Pulsar's MAX_REDELIVER_UNACKNOWLEDGED).
MAX_REDELIVER_POSITIONS = 1000
_SHARED_TYPES = (ConsumerType.Shared, ConsumerType.KeyShared)


def _positions(positions: Any) -> list[common_pb2.Position]:
    return [common_pb2.Position(ledger_id=ledger_id, entry_id=entry_id) for ledger_id, entry_id in positions]


class AckGroup:
    """Groups and sends one consumer's acks and negative acks, and runs its ack timeout."""

    def __init__(
        self, consumer: Any, config: ConsumerConfig, tracker: AckTracker, unacked: UnackedTracker | None,
        partition: int, send: Callable[[broker_pb2.ConsumeRequest], None], redeliver_all: Callable[[], None],
    ) -> None:
        self._consumer = consumer  # as interceptors are told
        self._config = config
        self._tracker = tracker
        self._unacked = unacked
        self._partition = partition
        self._send = send  # queue a request on the stream
        self._redeliver_all = redeliver_all
        self._interceptors = tuple(config.interceptors)
        self._nack_delay_ms = round(config.negative_ack_redelivery_delay * 1000)
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._tick_timer: asyncio.TimerHandle | None = None
        self._nacked: list[MessageId] = []
        self._nacked_positions: set[Position] = set()
        self.acks_sent = 0  # positions acknowledged on the broker, and cumulative acks
        self.ack_timeouts = 0  # entries the ack timeout asked for again

    def queued(self) -> None:
        """An ack or nack was recorded: send the group now if it is full (or grouping is off),
        else once the group time passes."""
        group_time = self._config.ack_group_time
        if not group_time or len(self._tracker) + len(self._nacked) >= self._config.ack_group_max_size:
            self.flush()
        elif self._timer is None:
            self._timer = self._loop.call_later(group_time, self.flush)

    def nack(self, message_id: MessageId, positions: tuple[Position, ...]) -> None:
        """Record a negative ack of a message whose entries are at `positions`."""
        self._nacked_positions.update(positions)
        self._nacked.append(message_id)
        self.queued()

    def flush(self) -> None:
        """Send what waits: the cumulative ack, the individual acks, then the negative acks."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if len(self._tracker):
            individual, cumulative = self._tracker.take()
            self.acks_sent += len(individual) + (cumulative is not None)
            if cumulative is not None:
                self._send(broker_pb2.ConsumeRequest(ack=broker_pb2.Ack(positions=_positions([cumulative]),
                                                                        cumulative=True)))
            if individual:
                self._send(broker_pb2.ConsumeRequest(ack=broker_pb2.Ack(positions=_positions(individual))))
        if self._nacked_positions:
            nacked, self._nacked = self._nacked, []
            positions, self._nacked_positions = sorted(self._nacked_positions), set()
            self._send(broker_pb2.ConsumeRequest(nack=broker_pb2.NegativeAck(
                positions=_positions(positions), delay_ms=self._nack_delay_ms)))
            for interceptor in self._interceptors:
                run_hook(interceptor.on_negative_acks_send, self._consumer, nacked, default=None)

    def start(self) -> None:
        if self._unacked is not None:
            self._tick_timer = self._loop.call_later(self._config.ack_timeout_tick, self._tick)

    def stop(self, flush: bool) -> None:
        """Stop the timers, sending what waits first when `flush` (a graceful close)."""
        if flush:
            self.flush()
        for timer in (self._timer, self._tick_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._tick_timer = None

    def _tick(self) -> None:
        unacked = self._unacked
        assert unacked is not None
        self._tick_timer = self._loop.call_later(self._config.ack_timeout_tick, self._tick)
        expired = unacked.tick()
        if not expired:
            return
        self.ack_timeouts += len(expired)
        if self._interceptors:
            ids = [MessageId(ledger_id, entry_id, self._partition, -1) for ledger_id, entry_id in expired]
            for interceptor in self._interceptors:
                run_hook(interceptor.on_ack_timeout_send, self._consumer, ids, default=None)
        log.info("%r: %d entries not acknowledged within the ack timeout of %gs; asking for them again",
                 self._consumer, len(expired), self._config.ack_timeout)
        self.flush()  # what was acked meanwhile is not asked for
        if self._config.consumer_type not in _SHARED_TYPES:
            self._redeliver_all()
            return
        for start in range(0, len(expired), MAX_REDELIVER_POSITIONS):
            self._send(broker_pb2.ConsumeRequest(redeliver=broker_pb2.RedeliverUnacknowledged(
                positions=_positions(expired[start:start + MAX_REDELIVER_POSITIONS]))))
