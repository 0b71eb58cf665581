"""DeadLetterService: the thin gRPC adapter between a dlq-worker's Letters stream and the broker's
DeadLetterQueue (broker.core.dead_letters). Each stream is one worker: its flows, moved and failed
reports go to the queue; the letters lent to it are written back; when the stream ends, its
outstanding letters go back to the queue for another worker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from herald.api.v1 import deadletter_pb2, deadletter_pb2_grpc
from herald.broker.core.dead_letters import DeadLetter, DeadLetterQueue, DeadLetterWorker
from herald.common import errors
from herald.common.tasks import cancel_and_wait
from herald.common.transport.rpc import EOF, error_to_proto

Context = grpc.aio.ServicerContext[Any, Any]
Write = Callable[[deadletter_pb2.DeadLetterResponse], Awaitable[None]]


class DeadLetterServicer(deadletter_pb2_grpc.DeadLetterServiceServicer):
    def __init__(self, queue: DeadLetterQueue) -> None:
        self.queue = queue

    async def Letters(  # type: ignore[override]
        self, request_iterator: AsyncIterator[deadletter_pb2.DeadLetterRequest], context: Context,
    ) -> None:
        write_lock = asyncio.Lock()  # letters (sender task) and errors (this task) share the stream

        async def write(reply: deadletter_pb2.DeadLetterResponse) -> None:
            async with write_lock:
                await context.write(reply)

        worker = self.queue.attach_worker()
        sender = asyncio.create_task(self._send(write, worker))
        read: asyncio.Future[Any] | None = None
        try:
            while True:
                read = asyncio.ensure_future(context.read())
                done, _ = await asyncio.wait({read, sender}, return_when=asyncio.FIRST_COMPLETED)
                if read not in done:
                    read.cancel()
                    break  # the sender failed: the stream is broken
                request = read.result()
                if request is EOF:
                    break
                try:
                    self._handle(worker, request)
                except errors.HeraldError as error:
                    await write(deadletter_pb2.DeadLetterResponse(error=error_to_proto(error)))
        finally:
            worker.close()
            if read is not None:  # a read left pending when the call was cancelled (server stopping)
                read.cancel()
                read.add_done_callback(_retrieve)
            await cancel_and_wait(sender, swallow_errors=True)

    @staticmethod
    def _handle(worker: DeadLetterWorker, request: deadletter_pb2.DeadLetterRequest) -> None:
        command = request.WhichOneof("command")
        if command == "flow":
            worker.flow(request.flow.permits)
        elif command == "moved":
            worker.moved(request.moved.letter_id)
        elif command == "failed":
            worker.failed(request.failed.letter_id, request.failed.reason)
        else:
            raise errors.InvalidArgumentError("a DeadLetterRequest needs a command: flow, moved or failed")

    @staticmethod
    async def _send(write: Write, worker: DeadLetterWorker) -> None:
        while letters := await worker.next_letters():
            await write(_letters_reply(letters))


def _retrieve(read: asyncio.Future[Any]) -> None:
    """Take a finished read's error, so that it is not logged as never retrieved."""
    if not read.cancelled():
        read.exception()


def _letters_reply(letters: list[DeadLetter]) -> deadletter_pb2.DeadLetterResponse:
    """The letters, built in place: each entry's bytes are copied once, into the reply."""
    reply = deadletter_pb2.DeadLetterResponse()
    add = reply.letters.letters.add
    for letter in letters:
        item = add(letter_id=letter.letter_id, topic=letter.topic, subscription=letter.subscription,
                   data=letter.data, redelivery_count=letter.redelivery_count,
                   dead_letter_topic=letter.dead_letter_topic, retry_letter_topic=letter.retry_letter_topic,
                   role=letter.role)
        item.position.ledger_id, item.position.entry_id = letter.position
    return reply
