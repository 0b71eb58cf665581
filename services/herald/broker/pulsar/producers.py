"""A Pulsar producer on a connection: PRODUCER registers it through the core's ProducerSession
(PRODUCER_SUCCESS with its name and last sequence id, or ERROR); each SEND is published as the
entry the client sent, stored unchanged; SEND_RECEIPT / SEND_ERROR go back in send order. At the
broker's max_pending_sends sends without receipts the connection stops reading, as Pulsar's broker
does, until receipts went out. When the broker closes the producer (unload, fencing) the client is
told with CLOSE_PRODUCER and reconnects (a fenced one is then refused: ProducerFenced). Access modes
and topic epochs (broker.core.access_modes) and the producer's schema (broker.pulsar.schemas) are
carried to the core as they came."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.broker.core.access_modes import ProducerAccessMode
from herald.broker.core.producer_session import ProducerSession, Receipt
from herald.broker.pulsar import schemas
from herald.broker.pulsar.frontend import Connection
from herald.common.codec.names import TopicName
from herald.common.errors import HeraldError
from herald.common.pulsar.errors import server_error
from herald.common.pulsar.ids import from_wire, message_id, to_wire

log = logging.getLogger(__name__)
Command = pulsar.BaseCommand


class ProducerEndpoint:
    def __init__(self, connection: Connection, producer_id: int) -> None:
        self.connection = connection
        self.producer_id = producer_id
        frontend = connection.frontend
        self.session = ProducerSession(frontend.service, frontend.admission, connection.identity.role)
        self._registered: pulsar.CommandProducerSuccess | None = None
        self._partition = -1
        self._receipts: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._closed = False
        self._queued_name: str | None = None  # a WaitForExclusive producer waiting for the topic
        self.registering: asyncio.Task[None] | None = None  # its registration, while it waits

    async def register(self, request: pulsar.CommandProducer) -> bool:
        """Register (answering the client either way); False when refused. A WaitForExclusive
        producer that has to wait is told so first (PRODUCER_SUCCESS with producer_ready false, as
        Pulsar's broker does: its client then waits without a timeout) and answered again once it
        holds the topic."""
        connection = self.connection
        try:
            access_mode = ProducerAccessMode.parse(int(request.producer_access_mode))
            schema = schemas.from_wire(request.schema) if request.HasField("schema") else None
            registered = await self.session.register(
                request.topic, request.producer_name or None, {kv.key: kv.value for kv in request.metadata},
                access_mode=access_mode,
                topic_epoch=request.topic_epoch if request.HasField("topic_epoch") else None,
                on_queued=lambda: self._queued(request), schema=schema)
        except HeraldError as error:
            connection.error(request.request_id, error)
            return False
        if self._closed:  # the connection went away meanwhile
            await self.session.close(drain=False)
            return False
        self._partition = TopicName.parse(request.topic).partition_index
        success = pulsar.CommandProducerSuccess(request_id=request.request_id,
                                                producer_name=registered.producer_name,
                                                last_sequence_id=registered.last_sequence_id, producer_ready=True)
        if registered.topic_epoch is not None:
            success.topic_epoch = registered.topic_epoch
        if registered.schema_version is not None:
            success.schema_version = schemas.version_bytes(registered.schema_version)
        self._registered = success
        connection.write(Command(type=Command.PRODUCER_SUCCESS, producer_success=success))
        self._receipts = connection.spawn(self._write_receipts(), f"receipts of producer {self.producer_id}")
        self._watch = connection.spawn(self._watch_closed(), f"producer {self.producer_id} closed")
        return True

    def _queued(self, request: pulsar.CommandProducer) -> None:
        self._queued_name = request.producer_name
        self.connection.write(Command(type=Command.PRODUCER_SUCCESS, producer_success=pulsar.CommandProducerSuccess(
            request_id=request.request_id, producer_name=request.producer_name, producer_ready=False)))

    def answer_again(self, request_id: int) -> None:
        """The client sent PRODUCER again for this id (its first answer timed out there)."""
        if self._registered is None and self._queued_name is not None:  # still waiting for the topic
            self.connection.write(Command(type=Command.PRODUCER_SUCCESS, producer_success=pulsar.CommandProducerSuccess(
                request_id=request_id, producer_name=self._queued_name, producer_ready=False)))
            return
        if self._registered is None:
            self.connection.write(Command(type=Command.ERROR, error=pulsar.CommandError(
                request_id=request_id, error=pulsar.ServiceNotReady,
                message=f"producer {self.producer_id} is still being created")))
            return
        again = pulsar.CommandProducerSuccess()
        again.CopyFrom(self._registered)
        again.request_id = request_id
        self.connection.write(Command(type=Command.PRODUCER_SUCCESS, producer_success=again))

    async def send(self, send: pulsar.CommandSend, payload: memoryview | None) -> None:
        session = self.session
        if self._registered is None or session.closed:
            return  # closed by the broker: CLOSE_PRODUCER is on its way, the client resends after reconnecting
        if not session.has_room and not await session.room():
            return
        sequence_id = from_wire(send.sequence_id)
        count = max(send.num_messages, 1)
        highest = from_wire(send.highest_sequence_id) if send.HasField("highest_sequence_id") else 0
        if highest < sequence_id:
            highest = sequence_id + count - 1
        # The entry is stored as the client sent it (Pulsar's format): one copy, made here.
        entry = bytes(payload) if payload is not None else b""
        session.publish(sequence_id, highest, count, entry)

    async def _write_receipts(self) -> None:
        connection = self.connection
        while receipts := await self.session.receipts():
            for receipt in receipts:
                connection.write(self._answer(receipt))
            await connection.drain()

    def _answer(self, receipt: Receipt) -> pulsar.BaseCommand:
        sequence_id = to_wire(receipt.sequence_id)
        if receipt.error is not None:
            return Command(type=Command.SEND_ERROR, send_error=pulsar.CommandSendError(
                producer_id=self.producer_id, sequence_id=sequence_id, error=server_error(receipt.error),  # type: ignore[arg-type]
                message=str(receipt.error)))
        return Command(type=Command.SEND_RECEIPT, send_receipt=pulsar.CommandSendReceipt(
            producer_id=self.producer_id, sequence_id=sequence_id,
            highest_sequence_id=to_wire(receipt.highest_sequence_id),
            message_id=message_id(receipt.ledger_id, receipt.entry_id, self._partition)))

    async def _watch_closed(self) -> None:
        await self.session.wait_closed()
        if not self._closed:
            log.info("pulsar producer %s on %s closed by the broker: telling the client to reconnect",
                     self.producer_id, self.connection.peer)
            self._closed = True
            self.connection.producer_closed_by_broker(self)
            await self.session.close(drain=False)

    async def close(self, *, drain: bool) -> None:
        """The producer leaves: `drain` (CLOSE_PRODUCER) answers the sends already made first."""
        if self._closed and not drain:
            return
        self._closed = True
        registering = self.registering
        if registering is not None and not registering.done() and registering is not asyncio.current_task():
            registering.cancel()  # it leaves the queue for the topic
        await self.session.close(drain=drain)
        receipts = self._receipts
        if drain and receipts is not None and not receipts.done():
            drain_seconds = self.connection.frontend.settings.receipt_drain_seconds
            with contextlib.suppress(Exception):  # the receipts it could not write are lost with the connection
                await asyncio.wait_for(asyncio.shield(receipts), drain_seconds)
        for task in (self._receipts, self._watch):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
