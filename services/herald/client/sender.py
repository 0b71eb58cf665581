"""The producer's sender (aiokafka's Sender): what happens to an entry once the accumulator closed
it. The sender hands it to the producer's protocol object (producer_protocol.py: the pending queue,
receipts, resends), runs the Produce stream that writes what the protocol asks for and feeds it
every receipt (stream.py), and keeps the send timeout's timer. The producer in front
(topic_producer.py) only packs messages and waits."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc.aio

from herald.api.v1 import broker_pb2
from herald.client.accumulator import PendingOp
from herald.client.config import ClientConfig
from herald.client.connection import ConnectionPool
from herald.client.lookup import LookupService
from herald.client.producer_protocol import ProducerProtocol
from herald.client.stream import BrokerStream
from herald.common import tracing
from herald.common.errors import HeraldError

if TYPE_CHECKING:
    import asyncio

    from herald.api.v1.broker_pb2_grpc import BrokerServiceAsyncStub

log = logging.getLogger(__name__)

ProduceCall = grpc.aio.StreamStreamCall[broker_pb2.ProduceRequest, broker_pb2.ProduceResponse]
_monotonic = time.monotonic


def open_produce(stub: BrokerServiceAsyncStub) -> ProduceCall:
    return stub.Produce(None, metadata=tracing.grpc_metadata())


class Sender:
    """Ships one producer's closed entries and matches their receipts, on one Produce stream.

    `on_timeout()` is called when the oldest pending entry passed the send timeout (the
    producer fails everything it holds); `connect_failed` is the stream's hook (stream.py).
    """

    def __init__(
        self, protocol: ProducerProtocol, client_config: ClientConfig, pool: ConnectionPool, lookup: LookupService,
        loop: asyncio.AbstractEventLoop, on_timeout: Callable[[], None],
        connect_failed: Callable[[HeraldError, bool], bool],
    ) -> None:
        self.protocol = protocol
        self._loop = loop
        self._on_timeout = on_timeout
        self.stream: BrokerStream[broker_pb2.ProduceRequest, broker_pb2.ProduceResponse,
                                  broker_pb2.ProducerRegistered] = BrokerStream(
            protocol, open_produce, client_config, pool, lookup, log, connect_failed=connect_failed)
        self._timer: asyncio.TimerHandle | None = None

    @property
    def connected(self) -> bool:
        return self.stream.connected

    async def start(self) -> None:
        """Register with the topic's broker (retrying what may pass within the operation
        timeout), then serve the stream in the background."""
        protocol = self.protocol
        await self.stream.start(f"creating a producer on {protocol.topic}", lambda: f"herald-producer-{protocol.name}")

    def ship(self, op: PendingOp) -> None:
        """The accumulator closed an entry: queue it behind the others and time it."""
        self.protocol.add(op)
        if self._timer is None and self.protocol.send_timeout > 0:
            self._timer = self._loop.call_later(self.protocol.send_timeout, self._check_timeout)

    def _check_timeout(self) -> None:
        self._timer = None
        overdue_in = self.protocol.overdue_in(_monotonic())
        if overdue_in is None:
            return
        if overdue_in > 0:
            self._timer = self._loop.call_later(overdue_in, self._check_timeout)
            return
        self._on_timeout()

    def cancel_timeout(self) -> None:
        """Nothing is pending any more (failed as a whole)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def end(self) -> None:
        """Nothing more is sent (the producer closes, or its topic was terminated)."""
        self.stream.end()

    async def stop(self, graceful: bool) -> None:
        """End the stream; graceful: after writing CloseProducer (see BrokerStream.stop)."""
        self.cancel_timeout()
        await self.stream.stop(graceful)
