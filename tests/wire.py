"""The broker's wire contract driven by hand (grpc.aio), for tests of server-side behaviour that the
client does not expose yet, or must never trigger: raw Produce / Consume streams, Pull, admin stubs.

    async with WireClient(standalone.port) as wire:
        producer = await wire.producer("my-topic")
        await producer.send(b"a", b"b", key="k")          # one entry per call
        consumer = await wire.consumer("my-topic", "sub", type=broker_pb2.SHARED)
        await consumer.flow(10)
        entries = await consumer.receive(2)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import grpc
import grpc.aio
from herald.api.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    deadletter_pb2,
    deadletter_pb2_grpc,
    lookup_pb2,
    lookup_pb2_grpc,
)
from herald.common.codec.entry import EntryMetadata, decode_entry, encode_entry, iter_records, pack_record

_REPLY_TIMEOUT = 10.0


def make_entry(
    producer: str, sequence_id: int, *values: bytes, key: str = "", ordering_key: bytes = b"",
    deliver_at: int = 0, publish_time: int | None = None, properties: dict[str, str] | None = None,
    encryption_keys: tuple[str, ...] = (),
) -> bytes:
    """One entry (a producer batch) holding `values`, each with `key` when given."""
    payload = bytearray()
    for value in values:
        pack_record(payload, value, key=key or None, properties=properties)
    metadata = EntryMetadata(
        producer_name=producer, sequence_id=sequence_id, highest_sequence_id=sequence_id + len(values) - 1,
        num_messages=len(values), batched=True, deliver_at_time=deliver_at, partition_key=key,
        ordering_key=ordering_key, encryption_keys=list(encryption_keys),
        publish_time=int(time.time() * 1000) if publish_time is None else publish_time,
    )
    return encode_entry(metadata, payload)


def values_of(entry: broker_pb2.DeliveredEntry) -> list[bytes]:
    """The message values inside a delivered entry."""
    _, payload = decode_entry(entry.data)
    return [bytes(record.value) for record in iter_records(payload)]


def position(entry: broker_pb2.DeliveredEntry) -> common_pb2.Position:
    return common_pb2.Position(ledger_id=entry.ledger_id, entry_id=entry.entry_id)


class _Stream:
    """A bidi stream fed from a queue, its replies read by a background task."""

    def __init__(self, call: Any, requests: asyncio.Queue[Any]) -> None:
        self.call = call
        self._requests = requests
        self.replies: asyncio.Queue[Any] = asyncio.Queue()
        self.ended = asyncio.Event()
        self.end_error: BaseException | None = None
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @staticmethod
    async def feed(requests: asyncio.Queue[Any]) -> AsyncIterator[Any]:
        while True:
            request = await requests.get()
            if request is None:
                return
            yield request

    async def _read(self) -> None:
        try:
            async for reply in self.call:
                await self.replies.put(reply)
        except grpc.aio.AioRpcError as exc:
            self.end_error = exc
        finally:
            self.ended.set()

    async def send(self, request: Any) -> None:
        await self._requests.put(request)

    async def reply(self, timeout: float = _REPLY_TIMEOUT) -> Any:  # noqa: ASYNC109 - one deadline
        return await asyncio.wait_for(self.replies.get(), timeout)

    async def next_reply(self, timeout: float) -> Any:  # noqa: ASYNC109 - one deadline
        """The next reply; None on timeout, or when the stream ended with none left."""
        get = asyncio.ensure_future(self.replies.get())
        ended = asyncio.ensure_future(self.ended.wait())
        done, _ = await asyncio.wait({get, ended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        ended.cancel()
        if get not in done:
            get.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await get
            if not get.done() or get.cancelled():
                return None
        return get.result()

    async def close(self) -> None:
        await self._requests.put(None)
        self.call.cancel()
        with contextlib.suppress(BaseException):
            await self._reader


class WireProducer:
    def __init__(self, stream: _Stream, name: str, last_sequence_id: int) -> None:
        self.stream = stream
        self.name = name
        self.last_sequence_id = last_sequence_id
        self._sequence = itertools.count(last_sequence_id + 1)

    async def send_entry(self, data: bytes, sequence_id: int, num_messages: int = 1) -> broker_pb2.ProduceResponse:
        """Send one encoded entry and wait for its receipt (or send error)."""
        await self.stream.send(broker_pb2.ProduceRequest(send=broker_pb2.SendEntry(
            sequence_id=sequence_id, highest_sequence_id=sequence_id + num_messages - 1,
            num_messages=num_messages, entry=data)))
        reply: broker_pb2.ProduceResponse = await self.stream.reply()
        return reply

    async def send(self, *values: bytes, **options: Any) -> broker_pb2.ProduceResponse:
        """Send `values` as one entry (see make_entry for options); returns the receipt reply."""
        first = next(self._sequence)
        for _ in values[1:]:
            next(self._sequence)
        return await self.send_entry(make_entry(self.name, first, *values, **options), first, len(values))

    async def close(self) -> None:
        await self.stream.close()


class WireConsumer:
    def __init__(self, stream: _Stream, name: str, topic: str = "", subscription: str = "",
                 admin: admin_pb2_grpc.AdminServiceStub | None = None) -> None:
        self.stream = stream
        self.name = name
        self.topic = topic
        self.subscription = subscription
        self._admin = admin  # the broker it subscribed at: its stats say what it sent this consumer
        self.entries: list[broker_pb2.DeliveredEntry] = []  # received, not yet taken by receive()
        self.events: list[broker_pb2.ConsumeResponse] = []  # replies other than entries
        self.bytes_received = 0  # of every entry that arrived: what the broker counts as sent
        self._request_ids = itertools.count(1)

    async def _pump(self, timeout: float) -> bool:  # noqa: ASYNC109 - one deadline
        """Move one reply into entries / events; False on timeout or when the stream ended."""
        reply = await self.stream.next_reply(timeout)
        if reply is None:
            return False
        self._file(reply)
        return True

    def _file(self, reply: broker_pb2.ConsumeResponse) -> None:
        if reply.HasField("entries"):
            self.entries.extend(reply.entries.entries)
            self.bytes_received += sum(len(entry.data) for entry in reply.entries.entries)
        else:
            self.events.append(reply)

    async def receive(
        self, count: int, timeout: float = _REPLY_TIMEOUT,  # noqa: ASYNC109 - one deadline, many replies
    ) -> list[broker_pb2.DeliveredEntry]:
        """Wait for `count` entries (fewer when the timeout passes first) and take them."""
        deadline = time.monotonic() + timeout
        while len(self.entries) < count:
            left = deadline - time.monotonic()
            if left <= 0 or not await self._pump(left):
                break
        taken, self.entries = self.entries[:count], self.entries[count:]
        return taken

    async def sent_so_far(self, timeout: float = _REPLY_TIMEOUT) -> list[broker_pb2.DeliveredEntry]:  # noqa: ASYNC109
        """Every entry the broker has sent this consumer up to now that receive() has not taken:
        the broker's stats say how many bytes of entries it handed this consumer (bytes_out_counter),
        and this waits until that much has arrived. A test asserting that nothing more was sent
        expects []: a state of the broker, not a quiet spell waited out."""
        sent = await self._bytes_sent()
        deadline = time.monotonic() + timeout
        while self.bytes_received < sent:
            left = deadline - time.monotonic()
            if left <= 0 or not await self._pump(left):
                raise AssertionError(f"{self.name} on {self.topic}: the broker sent {sent} bytes of entries, "
                                     f"{self.bytes_received} arrived within {timeout}s")
        taken, self.entries = self.entries, []
        return taken

    async def _bytes_sent(self) -> int:
        assert self._admin is not None, "a consumer made by WireClient.consumer() knows its broker"
        stats = await self._admin.GetTopicStats(admin_pb2.TopicStatsRequest(topic=self.topic))
        mine = [consumer for sub in stats.subscriptions if sub.name == self.subscription
                for consumer in sub.consumer_stats if consumer.consumer_name == self.name]
        assert len(mine) == 1, f"{len(mine)} consumers named {self.name!r} on {self.topic}/{self.subscription}: " \
                               "give each its own consumer_name"
        return int(mine[0].bytes_out_counter)

    async def event(
        self, kind: str, timeout: float = _REPLY_TIMEOUT,  # noqa: ASYNC109 - one deadline, many replies
    ) -> broker_pb2.ConsumeResponse:
        """Wait for the next reply of a kind ("active_change", "result", "error", "end_of_topic")."""
        deadline = time.monotonic() + timeout
        while True:
            for i, reply in enumerate(self.events):
                if reply.WhichOneof("reply") == kind:
                    return self.events.pop(i)
            left = deadline - time.monotonic()
            if left <= 0 or not await self._pump(left):
                if self.stream.ended.is_set() and self.stream.replies.empty():
                    raise AssertionError(f"stream ended without a {kind!r} reply; events: {self.events}")
                if left <= 0:
                    raise TimeoutError(f"no {kind!r} reply within {timeout}s; events: {self.events}")

    async def flow(self, permits: int) -> None:
        await self.stream.send(broker_pb2.ConsumeRequest(flow=broker_pb2.Flow(permits=permits)))

    async def handled(self) -> None:
        """Return once the broker has handled every request sent before on this stream (acks,
        nacks and redelivery requests are not answered): a flow of -1 permits, refused on the
        stream and changing nothing, is answered after them."""
        await self.flow(-1)
        error = (await self.event("error")).error
        assert error.code == common_pb2.INVALID_ARGUMENT and "must not be negative" in error.message, error

    async def ack(self, *entries: broker_pb2.DeliveredEntry | common_pb2.Position, cumulative: bool = False) -> None:
        positions = [e if isinstance(e, common_pb2.Position) else position(e) for e in entries]
        await self.stream.send(broker_pb2.ConsumeRequest(ack=broker_pb2.Ack(positions=positions,
                                                                             cumulative=cumulative)))

    async def nack(self, *entries: broker_pb2.DeliveredEntry, delay_ms: int = 0) -> None:
        await self.stream.send(broker_pb2.ConsumeRequest(nack=broker_pb2.NegativeAck(
            positions=[position(e) for e in entries], delay_ms=delay_ms)))

    async def redeliver(self, *entries: broker_pb2.DeliveredEntry) -> None:
        await self.stream.send(broker_pb2.ConsumeRequest(redeliver=broker_pb2.RedeliverUnacknowledged(
            positions=[position(e) for e in entries])))

    async def seek(self, **target: Any) -> broker_pb2.CommandResult:
        """seek(position=Position(...)) | seek(publish_time=ms) | seek(edge=broker_pb2.EARLIEST)."""
        request_id = next(self._request_ids)
        await self.stream.send(broker_pb2.ConsumeRequest(seek=broker_pb2.Seek(request_id=request_id, **target)))
        reply = await self.event("result")
        assert reply.result.request_id == request_id
        return reply.result

    async def unsubscribe(self) -> broker_pb2.CommandResult:
        request_id = next(self._request_ids)
        await self.stream.send(broker_pb2.ConsumeRequest(unsubscribe=broker_pb2.Unsubscribe(request_id=request_id)))
        reply = await self.event("result")
        return reply.result

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.stream.send(broker_pb2.ConsumeRequest(close=broker_pb2.CloseConsumer()))
        await self.stream.close()


class WireError(Exception):
    def __init__(self, error: common_pb2.Error) -> None:
        super().__init__(f"{common_pb2.ErrorCode.Name(error.code)}: {error.message}")
        self.error = error
        self.code = error.code


class WireClient:
    """Channels to a standalone's (or a cluster's) lookup and to topic owners."""

    def __init__(self, lookup_port: int, host: str = "127.0.0.1",
                 credentials: grpc.ChannelCredentials | None = None) -> None:
        """`credentials`: TLS (and a token, composed in) for every channel; None: plaintext."""
        self.lookup_address = f"{host}:{lookup_port}"
        self._credentials = credentials
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._streams: list[_Stream] = []

    async def __aenter__(self) -> WireClient:
        return self

    async def __aexit__(self, *exc: tuple[type[BaseException], BaseException, TracebackType] | None) -> None:
        for stream in self._streams:
            await stream.close()
        for channel in self._channels.values():
            await channel.close()

    def channel(self, address: str) -> grpc.aio.Channel:
        if address not in self._channels:
            self._channels[address] = (grpc.aio.insecure_channel(address) if self._credentials is None
                                       else grpc.aio.secure_channel(address, self._credentials))
        return self._channels[address]

    @property
    def lookup(self) -> lookup_pb2_grpc.LookupServiceStub:
        return lookup_pb2_grpc.LookupServiceStub(self.channel(self.lookup_address))

    async def owner(self, topic: str) -> str:
        reply = await self.lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic))
        return str(reply.broker_address)

    async def broker(self, topic: str) -> broker_pb2_grpc.BrokerServiceStub:
        return broker_pb2_grpc.BrokerServiceStub(self.channel(await self.owner(topic)))

    async def admin(self, topic: str = "any") -> admin_pb2_grpc.AdminServiceStub:
        return admin_pb2_grpc.AdminServiceStub(self.channel(await self.owner(topic)))

    async def _stub(self, topic: str, address: str | None) -> broker_pb2_grpc.BrokerServiceStub:
        """The topic's owner, or the broker at `address` whoever owns the topic (it answers
        NOT_OWNER when the topic is not assigned to it)."""
        if address is None:
            return await self.broker(topic)
        return broker_pb2_grpc.BrokerServiceStub(self.channel(address))

    async def register(
        self, topic: str, name: str = "", address: str | None = None, properties: dict[str, str] | None = None,
    ) -> tuple[WireProducer, broker_pb2.ProducerRegistered]:
        """A producer and the broker's whole ProducerRegistered reply (max_message_size and all);
        WireError when refused."""
        stub = await self._stub(topic, address)
        requests: asyncio.Queue[Any] = asyncio.Queue()
        await requests.put(broker_pb2.ProduceRequest(register=broker_pb2.RegisterProducer(
            topic=topic, producer_name=name, properties=properties)))
        stream = _Stream(stub.Produce(_Stream.feed(requests)), requests)
        self._streams.append(stream)
        reply = await stream.reply()
        if reply.HasField("error"):
            await stream.close()
            raise WireError(reply.error)
        registered: broker_pb2.ProducerRegistered = reply.registered
        return WireProducer(stream, registered.producer_name, registered.last_sequence_id), registered

    async def producer(
        self, topic: str, name: str = "", address: str | None = None, properties: dict[str, str] | None = None,
    ) -> WireProducer:
        return (await self.register(topic, name, address, properties))[0]

    async def consumer(
        self, topic: str, subscription: str, address: str | None = None, **options: Any,
    ) -> WireConsumer:
        """Subscribe (options are Subscribe fields: type, initial_position, consumer_name,
        priority_level, non_durable, start_position, dead_letter_policy, ...); WireError when
        refused. `address`: subscribe at that broker rather than the topic's owner."""
        channel = self.channel(address if address is not None else await self.owner(topic))
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        requests: asyncio.Queue[Any] = asyncio.Queue()
        await requests.put(broker_pb2.ConsumeRequest(subscribe=broker_pb2.Subscribe(
            topic=topic, subscription=subscription, **options)))
        stream = _Stream(stub.Consume(_Stream.feed(requests)), requests)
        self._streams.append(stream)
        reply = await stream.reply()
        if reply.HasField("error"):
            await stream.close()
            raise WireError(reply.error)
        return WireConsumer(stream, reply.subscribed.consumer_name, topic, subscription,
                            admin_pb2_grpc.AdminServiceStub(channel))


# ---- dead letters: a dlq-worker's Letters stream (DeadLetterService, served by each broker) ----

class WireLetters:
    """One Letters stream: flow permits in, letters and errors out, moved / failed reports in."""

    def __init__(self, stream: _Stream) -> None:
        self.stream = stream
        self.letters: list[deadletter_pb2.DeadLetter] = []  # received, not yet taken by receive()
        self.errors: list[common_pb2.Error] = []

    async def _pump(self, timeout: float) -> bool:  # noqa: ASYNC109 - one deadline
        """Move one reply into letters / errors; False on timeout or when the stream ended."""
        reply: deadletter_pb2.DeadLetterResponse | None = await self.stream.next_reply(timeout)
        if reply is None:
            return False
        if reply.HasField("letters"):
            self.letters.extend(reply.letters.letters)
        else:
            self.errors.append(reply.error)
        return True

    async def receive(
        self, count: int, timeout: float = _REPLY_TIMEOUT,  # noqa: ASYNC109 - one deadline, many replies
    ) -> list[deadletter_pb2.DeadLetter]:
        """Wait for `count` letters (fewer when the timeout passes first) and take them."""
        deadline = time.monotonic() + timeout
        while len(self.letters) < count:
            left = deadline - time.monotonic()
            if left <= 0 or not await self._pump(left):
                break
        taken, self.letters = self.letters[:count], self.letters[count:]
        return taken

    async def lent_so_far(self) -> list[deadletter_pb2.DeadLetter]:
        """Every letter the broker has lent this stream up to now that receive() has not taken: a
        flow of -1 permits, refused and changing nothing, is answered on the stream after the
        letters lent before the broker read it (a test asserting that nothing was lent expects [])."""
        await self.flow(-1)
        error = await self.error()
        assert error.code == common_pb2.INVALID_ARGUMENT and "must not be negative" in error.message, error
        taken, self.letters = self.letters, []
        return taken

    async def error(self, timeout: float = _REPLY_TIMEOUT) -> common_pb2.Error:  # noqa: ASYNC109
        """Wait for the next error reply."""
        deadline = time.monotonic() + timeout
        while not self.errors:
            left = deadline - time.monotonic()
            if left <= 0 or not await self._pump(left):
                raise AssertionError(f"no error reply within {timeout}s (stream ended: {self.stream.ended.is_set()})")
        return self.errors.pop(0)

    async def flow(self, permits: int) -> None:
        await self.stream.send(deadletter_pb2.DeadLetterRequest(flow=deadletter_pb2.DeadLetterFlow(permits=permits)))

    async def moved(self, letter_id: int) -> None:
        await self.stream.send(deadletter_pb2.DeadLetterRequest(moved=deadletter_pb2.DeadLetterDone(
            letter_id=letter_id)))

    async def failed(self, letter_id: int, reason: str = "") -> None:
        await self.stream.send(deadletter_pb2.DeadLetterRequest(failed=deadletter_pb2.DeadLetterDone(
            letter_id=letter_id, reason=reason)))

    async def close(self) -> None:
        await self.stream.close()


async def open_letters(wire: WireClient, address: str) -> WireLetters:
    """A Letters stream to the broker at `address` (`await wire.owner(topic)`), closed with `wire`."""
    stub = deadletter_pb2_grpc.DeadLetterServiceStub(wire.channel(address))
    requests: asyncio.Queue[Any] = asyncio.Queue()
    stream = _Stream(stub.Letters(_Stream.feed(requests)), requests)
    wire._streams.append(stream)
    return WireLetters(stream)


async def abandon(consumer: WireConsumer) -> None:
    """End a consumer's stream as a killed client does: no CloseConsumer and no half-close, the
    call is cut (RST_STREAM) and whatever the broker sent after is never read."""
    consumer.stream.call.cancel()
    with contextlib.suppress(BaseException):
        await consumer.stream.ended.wait()
