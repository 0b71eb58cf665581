"""The single-topic producer against a real `herald standalone`, through the client API: schemas,
compression, chunking (and chunks resent across a restart stored once), deliver-at times,
key-based batching and the keys an entry carries, interceptors, producer properties in the topic's
stats, the producer's own stats and their periodic log, and the blocking facade with every send
option. What the broker stored is read back raw through its Pull RPC where the entry's layout is
the point (compressed payloads, chunk fields, entry keys)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import os
import threading
import time
from typing import Any

import pytest
from herald.api.v1 import admin_pb2, broker_pb2, common_pb2, entry_pb2
from herald.client import (
    AsyncClient,
    BatchingType,
    Client,
    CompressionType,
    ConsumerType,
    HeraldError,
    InitialPosition,
    InvalidArgumentError,
    JsonSchema,
    Message,
    MessageId,
    MessageTooLargeError,
    OutgoingMessage,
    ProducerClosedError,
    ProducerInterceptor,
    ProducerQueueIsFullError,
    SchemaError,
    StringSchema,
    chunking,
)
from herald.client.admin import AdminClient
from herald.client.config import ProducerConfig
from herald.client.stats import ProducerStats
from herald.client.topic_producer import TopicProducer
from herald.common.codec.compression import decompress
from herald.common.codec.entry import EntryMetadata, Record, decode_entry, iter_records

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_topic
from tests.wire import WireClient

EARLIEST = InitialPosition.Earliest


async def stored(port: int, topic: str) -> list[broker_pb2.DeliveredEntry]:
    """Every entry of the topic, oldest first, as the broker stored it (raw Pull RPC)."""
    entries: list[broker_pb2.DeliveredEntry] = []
    async with WireClient(port) as wire:
        stub = await wire.broker(topic)
        start: common_pb2.Position | None = None
        while True:
            reply = await stub.Pull(  # type: ignore[misc]
                broker_pb2.PullRequest(topic=topic, start=start, max_entries=100))
            if not reply.entries:
                return entries
            entries.extend(reply.entries)
            start = reply.next


def unpack(data: bytes) -> tuple[EntryMetadata, list[Record]]:
    """An entry's metadata and its records, decompressed when it says so."""
    metadata, payload = decode_entry(data)
    raw = decompress(metadata.compression, payload, metadata.uncompressed_size, metadata.uncompressed_size)
    return metadata, list(iter_records(raw))


def rebuild(entries: list[broker_pb2.DeliveredEntry]) -> list[tuple[list[EntryMetadata], Record]]:
    """The messages of stored entries, chunked ones put back together (each chunk stored once, in
    order, or the assertion says what is wrong); unbatched and batched entries as they are."""
    messages: list[tuple[list[EntryMetadata], Record]] = []
    partial: dict[str, tuple[list[EntryMetadata], list[bytes]]] = {}
    for entry in entries:
        metadata, payload = decode_entry(entry.data)
        if not metadata.num_chunks:
            messages.extend(([metadata], record) for record in unpack(entry.data)[1])
            continue
        metas, parts = partial.setdefault(metadata.uuid, ([], []))
        assert metadata.chunk_id == len(parts), f"chunk {metadata.chunk_id} of {metadata.uuid} after {len(parts)}"
        metas.append(metadata)
        parts.append(bytes(payload))
        if len(parts) == metadata.num_chunks:
            del partial[metadata.uuid]
            whole = b"".join(parts)
            assert len(whole) == metadata.total_chunk_size
            (record,) = iter_records(decompress(metadata.compression, whole, metadata.uncompressed_size,
                                                metadata.uncompressed_size))
            messages.append((metas, record))
    assert not partial, f"incomplete chunked messages: {list(partial)}"
    return messages


async def drain(consumer: Any, count: int) -> list[Message[Any]]:
    received: list[Message[Any]] = []
    for _ in range(count):
        message = await consumer.receive(timeout=10)
        assert message is not None, f"only {len(received)} of {count} messages arrived"
        received.append(message)
    return received


# ---- schemas ----

@dataclasses.dataclass
class Order:
    id: int
    total: float


async def test_a_schema_encodes_the_values_sent(client: AsyncClient) -> None:
    texts, orders_topic = unique_topic("schema-text"), unique_topic("schema-orders")
    text_consumer = await client.subscribe(texts, "sub", initial_position=EARLIEST)
    orders_consumer = await client.subscribe(orders_topic, "sub", initial_position=EARLIEST)
    text = await client.create_producer(texts, schema=StringSchema())
    orders = await client.create_producer(orders_topic, schema=JsonSchema(Order))
    await text.send("héllo")
    await orders.send(Order(7, 9.5))
    (first,) = await drain(text_consumer, 1)
    (second,) = await drain(orders_consumer, 1)
    assert first.data() == "héllo".encode()
    assert JsonSchema(Order).decode(second.data()) == Order(7, 9.5)
    assert text.encode("x") == b"x"


async def test_a_value_its_schema_refuses_fails_the_send_and_the_producer_carries_on(client: AsyncClient) -> None:
    topic = unique_topic("schema-refused")
    text = await client.create_producer(topic, schema=StringSchema())
    with pytest.raises(SchemaError, match="StringSchema sends str values, got bytes"):
        await text.send(b"bytes")  # type: ignore[arg-type]
    plain = await client.create_producer(topic)
    with pytest.raises(SchemaError, match="must be bytes, got str"):
        await plain.send_async("text")  # type: ignore[arg-type]
    with pytest.raises(SchemaError):
        plain.encode(42)  # type: ignore[arg-type]
    assert isinstance(await text.send("fine"), MessageId)
    assert isinstance(await plain.send(bytearray(b"also fine")), MessageId)  # type: ignore[arg-type]


async def test_create_producer_refuses_something_that_is_not_a_schema(client: AsyncClient) -> None:
    with pytest.raises(InvalidArgumentError, match=r"schema must be a herald\.client\.Schema"):
        await client.create_producer(unique_topic("producer"), schema=str)  # type: ignore[call-overload]


# ---- compression ----

@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
@pytest.mark.parametrize("codec", [CompressionType.LZ4, CompressionType.ZLIB, CompressionType.ZSTD])
async def test_compressed_entries_are_stored_compressed_and_decompress_to_the_messages(
    client: AsyncClient, shared_standalone: StandaloneProcess, codec: CompressionType, batched: bool,
) -> None:
    topic = unique_topic("compressed")
    producer = await client.create_producer(topic, compression_type=codec, batching_enabled=batched,
                                            batching_max_publish_delay=10.0)
    values = [b"message %d says the same thing again and again " % i * 4 for i in range(30)]
    futures = [await producer.send_async(value, key=f"k{i % 3}", properties={"i": str(i)})
               for i, value in enumerate(values)]
    await producer.flush()
    assert all(isinstance(future.result(), MessageId) for future in futures)
    entries = await stored(shared_standalone.port, topic)
    assert len(entries) == (1 if batched else 30)
    for entry in entries:
        metadata, payload = decode_entry(entry.data)
        assert metadata.compression == codec.value
        assert len(payload) < metadata.uncompressed_size
    records = [record for entry in entries for record in unpack(entry.data)[1]]
    assert [(r.value, r.key, r.properties) for r in records] == [
        (value, f"k{i % 3}", {"i": str(i)}) for i, value in enumerate(values)]


# ---- chunking ----

async def small_limit_topic(admin: AdminClient, limit: int, prefix: str) -> str:
    topic = unique_topic(prefix)
    await admin.set_topic_policies(topic, admin_pb2.Policies(max_message_size=limit))
    return topic


async def test_a_message_over_the_max_size_is_stored_as_chunks_that_rebuild_it(
    client: AsyncClient, admin: AdminClient, shared_standalone: StandaloneProcess,
) -> None:
    limit = 32 * 1024
    topic = await small_limit_topic(admin, limit, "chunked")
    producer = await client.create_producer(topic, producer_name="chunker", chunking_enabled=True,
                                            batching_enabled=False)
    assert producer.max_message_size == limit  # type: ignore[attr-defined]
    big = os.urandom(100_000)
    before = await producer.send(b"before")
    big_id = await producer.send(big, key="big", properties={"p": "v"}, event_time=1234)
    after = await producer.send(b"after")
    entries = await stored(shared_standalone.port, topic)
    chunks = entries[1:-1]
    assert len(chunks) == 4
    assert all(len(entry.data) <= limit for entry in entries)
    metas = [decode_entry(entry.data)[0] for entry in entries]
    # Each chunk has a sequence id of its own; the next message continues after the last one.
    assert [m.sequence_id for m in metas] == [0, 1, 2, 3, 4, 5]
    assert producer.last_sequence_id == 5
    assert [(m.uuid, m.chunk_id, m.num_chunks) for m in metas[1:-1]] == [("chunker-1", i, 4) for i in range(4)]
    assert {m.total_chunk_size for m in metas[1:-1]} == {sum(len(decode_entry(e.data)[1]) for e in chunks)}
    # The send completes with the last chunk's id.
    assert (big_id.ledger_id, big_id.entry_id, big_id.batch_index) == (chunks[-1].ledger_id, chunks[-1].entry_id, -1)
    assert before < big_id < after
    messages = rebuild(entries)
    assert [record.value for _, record in messages] == [b"before", big, b"after"]
    _, record = messages[1]
    assert (record.key, record.properties, record.event_time) == ("big", {"p": "v"}, 1234)


async def test_a_compressed_message_is_chunked_after_compression(
    client: AsyncClient, admin: AdminClient, shared_standalone: StandaloneProcess,
) -> None:
    topic = await small_limit_topic(admin, 16 * 1024, "chunked-compressed")
    producer = await client.create_producer(topic, chunking_enabled=True, batching_enabled=False,
                                            compression_type=CompressionType.ZSTD)
    noise = os.urandom(50_000)  # does not compress: chunks
    # 160 KB that compress under the limit: one entry, a chunk (an unchunked entry may not declare
    # more than the max message size uncompressed: consumers bound decompression by it)
    text = b"compresses well " * 10_000
    await producer.send(noise)
    await producer.send(text)
    entries = await stored(shared_standalone.port, topic)
    metas = [decode_entry(entry.data)[0] for entry in entries]
    assert [m.num_chunks for m in metas] == [4, 4, 4, 4, 1]
    assert {m.compression for m in metas} == {entry_pb2.ZSTD}
    assert [record.value for _, record in rebuild(entries)] == [noise, text]


async def test_without_chunking_a_message_over_the_max_size_is_refused_naming_the_option(
    client: AsyncClient, admin: AdminClient,
) -> None:
    topic = await small_limit_topic(admin, 8 * 1024, "unchunked")
    producer = await client.create_producer(topic, batching_enabled=False)
    with pytest.raises(MessageTooLargeError, match=r"larger than the maximum message size of 8192 bytes .* "
                                                   r"chunking_enabled=True"):
        await producer.send(b"x" * (8 * 1024 + 1))
    with pytest.raises(MessageTooLargeError):
        producer.encode(b"x" * (8 * 1024 + 1))


async def test_a_message_larger_than_a_chunked_message_may_be_is_refused(
    client: AsyncClient, admin: AdminClient, monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = await small_limit_topic(admin, 8 * 1024, "chunked-limit")
    producer = await client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    monkeypatch.setattr(chunking, "MAX_CHUNKED_SIZE", 50_000)  # the real one is 2 GiB
    with pytest.raises(MessageTooLargeError, match="50001 bytes is larger than 50000 bytes, the most a chunked"):
        await producer.send(b"x" * 50_001)
    assert isinstance(await producer.send(b"x" * 40_000), MessageId)


async def test_chunked_and_compressed_messages_resent_across_a_crash_are_stored_once(
    standalone: StandaloneProcess, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="herald.client")
    topic = unique_topic("chunks-restart")
    async with AdminClient(standalone.service_url, timeout=20) as admin:
        await admin.set_topic_policies(topic, admin_pb2.Policies(max_message_size=32 * 1024))
    values = [os.urandom(70_000 + i) for i in range(40)]  # 3 chunks each, LZ4 cannot shrink them
    async with AsyncClient(standalone.service_url, operation_timeout=60) as client:
        producer = await client.create_producer(
            topic, producer_name="chunky", chunking_enabled=True, batching_enabled=False,
            compression_type=CompressionType.LZ4, block_if_queue_full=True, max_pending_messages=8)
        futures = []
        restart: asyncio.Future[None] | None = None
        for index, value in enumerate(values):
            futures.append(await producer.send_async(value))
            if index == 12:  # mid-stream: chunks are in flight, stored or not, their receipts lost
                restart = asyncio.ensure_future(asyncio.to_thread(crash_and_start, standalone))
        assert restart is not None
        await restart
        await asyncio.wait_for(producer.flush(), 60)
        assert all(isinstance(future.result(), MessageId) for future in futures)
        assert producer.last_sequence_id == 3 * len(values) - 1
    resent = [int(r.getMessage().split("resending ")[1].split()[0]) for r in caplog.records
              if "resending" in r.getMessage()]
    assert resent and resent[0] > 0, "nothing was pending when the standalone went down"
    entries = await stored(standalone.port, topic)
    positions = [(metadata.uuid, metadata.chunk_id) for metadata in (decode_entry(e.data)[0] for e in entries)]
    assert len(positions) == len(set(positions)) == 3 * len(values), "a chunk was stored twice, or lost"
    assert [record.value for _, record in rebuild(entries)] == values


def crash_and_start(server: StandaloneProcess) -> None:
    server.kill()
    server.start()


async def test_a_chunk_the_broker_refuses_fails_its_whole_message_and_the_producer_carries_on(
    client: AsyncClient, admin: AdminClient, shared_standalone: StandaloneProcess, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="herald.client")
    topic = await small_limit_topic(admin, 32 * 1024, "chunk-refused")
    producer = await client.create_producer(topic, producer_name="refused", chunking_enabled=True,
                                            batching_enabled=False, batching_max_publish_delay=10.0)
    # The limit drops under the producer's feet: its chunks (~32 KiB) are now too large.
    await admin.set_topic_policies(topic, admin_pb2.Policies(max_message_size=4 * 1024))
    async with WireClient(shared_standalone.port) as wire:
        probe = await wire.producer(topic, "probe")

        async def lowered() -> bool:
            return (await probe.send(b"p" * 20 * 1024)).HasField("send_error")

        await eventually(lowered, "the lower limit applied")
        await probe.close()
    big = await producer.send_async(os.urandom(100_000))
    after = await producer.send_async(b"after")
    with pytest.raises(MessageTooLargeError, match="larger than the maximum message size of 4096 bytes"):
        await big
    assert isinstance(await after, MessageId)
    stats = producer.stats()
    assert (stats.send_failures, stats.messages_sent, stats.pending_messages) == (1, 1, 0)
    assert producer.last_sequence_id == 4  # the after message took the id after the four chunks
    entries = await stored(shared_standalone.port, topic)
    mine = [e.data for e in entries if decode_entry(e.data)[0].producer_name == "refused"]
    chunks = [decode_entry(data)[0] for data in mine if decode_entry(data)[0].num_chunks]
    assert [unpack(data)[1][0].value for data in mine if not decode_entry(data)[0].num_chunks] == [b"after"]
    # A chunk small enough (the last) may be stored: the consumer drops the incomplete message.
    assert all(m.uuid == "refused-0" and m.chunk_id > 0 for m in chunks)
    # The refusals of the chunks after the first were about a settled message: no reconnect.
    assert "registered again" not in caplog.text and "disconnected" not in caplog.text


@pytest.mark.parametrize("codec", list(CompressionType))
async def test_a_consumer_receives_compressed_and_chunked_messages_whole(
    client: AsyncClient, admin: AdminClient, codec: CompressionType,
) -> None:
    topic = await small_limit_topic(admin, 16 * 1024, "chunked-received")
    consumer = await client.subscribe(topic, "sub", initial_position=EARLIEST)
    producer = await client.create_producer(topic, chunking_enabled=True, batching_enabled=False,
                                            compression_type=codec)
    values = [b"small", os.urandom(60_000), b"text " * 20_000, b"last"]
    ids = [await producer.send(value, key=f"k{i}") for i, value in enumerate(values)]
    received = await drain(consumer, 4)
    assert [(m.data(), m.key) for m in received] == [(value, f"k{i}") for i, value in enumerate(values)]
    assert [m.message_id for m in received] == ids
    for message in received:
        consumer.acknowledge(message)


# ---- deliver-at times ----

async def test_a_delayed_message_goes_alone_after_the_batch_queued_before_it(
    client: AsyncClient, shared_standalone: StandaloneProcess,
) -> None:
    topic = unique_topic("delayed-entry")
    producer = await client.create_producer(topic, batching_max_publish_delay=10.0)
    first = await producer.send_async(b"a")
    second = await producer.send_async(b"b")
    before = int(time.time() * 1000)
    delayed = await producer.send_async(b"later", deliver_after=datetime.timedelta(seconds=30))
    after = int(time.time() * 1000)
    at = datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC)
    fixed = await producer.send_async(b"fixed", deliver_at=at)
    last = await producer.send_async(b"c")
    await producer.flush()
    entries = await stored(shared_standalone.port, topic)
    unpacked = [unpack(entry.data) for entry in entries]
    assert [[r.value for r in records] for _, records in unpacked] == [[b"a", b"b"], [b"later"], [b"fixed"], [b"c"]]
    deliver = [metadata.deliver_at_time for metadata, _ in unpacked]
    assert deliver[0] == deliver[3] == 0
    assert before + 30_000 <= deliver[1] <= after + 30_000
    assert deliver[2] == int(at.timestamp() * 1000)
    assert [metadata.batched for metadata, _ in unpacked] == [True, False, False, True]
    ids = [future.result() for future in (first, second, delayed, fixed, last)]
    assert ids == sorted(ids)
    assert [i.batch_index for i in ids] == [0, 1, -1, -1, 0]


async def test_a_delayed_message_reaches_a_shared_subscription_after_later_ones(client: AsyncClient) -> None:
    topic = unique_topic("delayed")
    consumer = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, initial_position=EARLIEST)
    producer = await client.create_producer(topic)
    await producer.send(b"delayed", deliver_after=2.0)
    await producer.send(b"now", deliver_at=int(time.time() * 1000) - 1000)
    await producer.send(b"plain")
    received = await drain(consumer, 3)
    assert [m.data() for m in received] == [b"now", b"plain", b"delayed"]


async def test_deliver_options_are_checked_at_the_call(client: AsyncClient) -> None:
    producer = await client.create_producer(unique_topic("delayed-bad"))
    with pytest.raises(InvalidArgumentError, match="give deliver_at or deliver_after, not both"):
        await producer.send_async(b"x", deliver_at=1, deliver_after=1.0)
    with pytest.raises(InvalidArgumentError, match="timezone-aware"):
        await producer.send_async(b"x", deliver_at=datetime.datetime(2100, 1, 1))
    with pytest.raises(InvalidArgumentError, match="zero or more seconds"):
        await producer.send_async(b"x", deliver_after=-1)
    with pytest.raises(InvalidArgumentError, match="unix milliseconds or a datetime"):
        await producer.send_async(b"x", deliver_at="tomorrow")  # type: ignore[arg-type]
    assert producer.stats().pending_messages == 0


# ---- keys and batching ----

async def test_key_based_batching_stores_one_key_per_entry_with_ascending_sequence_ids(
    client: AsyncClient, shared_standalone: StandaloneProcess,
) -> None:
    topic = unique_topic("key-based")
    consumer = await client.subscribe(topic, "sub", initial_position=EARLIEST)
    producer = await client.create_producer(topic, batching_type=BatchingType.KeyBased,
                                            batching_max_publish_delay=10.0, batching_max_messages=7)
    keys = ["k0", "k1", "k2", None]
    sent = [(b"%d" % i, keys[i % 4]) for i in range(60)]
    futures = [await producer.send_async(value, key=key) for value, key in sent]
    await producer.flush()
    ids = [future.result() for future in futures]
    assert len(set(ids)) == 60
    entries = await stored(shared_standalone.port, topic)
    next_sequence_id = 0
    for entry in entries:
        metadata, records = unpack(entry.data)
        assert {r.key for r in records} == {metadata.partition_key or None}
        assert len(records) <= 7
        assert metadata.sequence_id == next_sequence_id  # contiguous, entry after entry
        next_sequence_id = metadata.highest_sequence_id + 1
    assert next_sequence_id == 60 and producer.last_sequence_id == 59
    received = await drain(consumer, 60)
    for key in keys:  # every key's messages in the order they were sent
        assert [m.data() for m in received if m.key == key] == [v for v, k in sent if k == key]
    assert sorted(m.sequence_id for m in received) == list(range(60))


async def test_key_based_batching_keeps_each_key_with_one_key_shared_consumer(client: AsyncClient) -> None:
    topic = unique_topic("key-shared")
    consumers = [await client.subscribe(topic, "sub", consumer_type=ConsumerType.KeyShared,
                                        initial_position=EARLIEST) for _ in range(2)]
    producer = await client.create_producer(topic, batching_type=BatchingType.KeyBased,
                                            batching_max_publish_delay=10.0)
    keys = [f"key-{i}" for i in range(12)]
    for round_ in range(10):
        for key in keys:
            await producer.send_async(b"%s:%d" % (key.encode(), round_), key=key)
    await producer.flush()
    got: list[list[Message[Any]]] = [[], []]
    deadline = time.monotonic() + 20
    while sum(map(len, got)) < 120 and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            message = await consumer.receive(timeout=0.1)
            if message is not None:
                got[index].append(message)
                consumer.acknowledge(message)
    assert sum(map(len, got)) == 120
    owners = [{m.key for m in messages} for messages in got]
    assert not owners[0] & owners[1]  # no key went to both consumers
    for messages in got:
        for key in {m.key for m in messages if m.key is not None}:
            assert [m.data() for m in messages if m.key == key] == [b"%s:%d" % (key.encode(), r) for r in range(10)]


async def test_default_batching_gives_an_entry_only_the_keys_all_its_messages_share(
    client: AsyncClient, shared_standalone: StandaloneProcess,
) -> None:
    topic = unique_topic("entry-keys")
    producer = await client.create_producer(topic, batching_max_publish_delay=10.0)
    for _ in range(3):
        await producer.send_async(b"same", key="k", ordering_key=b"o")
    await producer.flush()
    await producer.send_async(b"one", key="k", ordering_key=b"o")
    await producer.send_async(b"two", key="other", ordering_key=b"o")
    await producer.flush()
    await producer.send_async(b"keyed", key="k")
    await producer.send_async(b"unkeyed")
    await producer.flush()
    metas = [decode_entry(entry.data)[0] for entry in await stored(shared_standalone.port, topic)]
    assert [(m.num_messages, m.partition_key, m.ordering_key) for m in metas] == [
        (3, "k", b"o"), (2, "", b"o"), (2, "", b"")]


# ---- interceptors ----

class Recorder(ProducerInterceptor):
    def __init__(self) -> None:
        self.acknowledged: list[tuple[bytes, MessageId | None, Exception | None]] = []

    def on_send_acknowledgement(self, producer: Any, message: OutgoingMessage, message_id: MessageId | None,
                                error: Exception | None) -> None:
        self.acknowledged.append((message.value, message_id, error))


class Stamper(ProducerInterceptor):
    def before_send(self, producer: Any, message: OutgoingMessage) -> OutgoingMessage:
        properties = dict(message.properties or {}, stamped=producer.producer_name)
        return dataclasses.replace(message, value=message.value.upper(), properties=properties)


async def test_interceptors_change_messages_before_they_are_sent_and_hear_their_outcome(
    client: AsyncClient,
) -> None:
    topic = unique_topic("intercepted")
    consumer = await client.subscribe(topic, "sub", initial_position=EARLIEST)
    recorder = Recorder()
    producer = await client.create_producer(topic, producer_name="stamp", interceptors=[Stamper(), recorder],
                                            batching_max_publish_delay=10.0)
    first = await producer.send(b"one", properties={"a": "1"})
    second = await producer.send(b"two", deliver_after=0)
    received = await drain(consumer, 2)
    assert [(m.data(), m.properties) for m in received] == [
        (b"ONE", {"a": "1", "stamped": "stamp"}), (b"TWO", {"stamped": "stamp"})]
    assert recorder.acknowledged == [(b"ONE", first, None), (b"TWO", second, None)]
    # A message that fails reaches on_send_acknowledgement with its error.
    pending = await producer.send_async(b"never", sequence_id=100)
    await producer.close()
    with pytest.raises(ProducerClosedError):
        await pending
    value, message_id, error = recorder.acknowledged[-1]
    assert (value, message_id, type(error)) == (b"NEVER", None, ProducerClosedError)


class Raising(ProducerInterceptor):
    def before_send(self, producer: Any, message: OutgoingMessage) -> OutgoingMessage:
        raise RuntimeError("interceptor bug")

    def on_send_acknowledgement(self, producer: Any, message: OutgoingMessage, message_id: MessageId | None,
                                error: Exception | None) -> None:
        raise RuntimeError("interceptor bug")


class WrongReturn(ProducerInterceptor):
    def before_send(self, producer: Any, message: OutgoingMessage) -> OutgoingMessage:
        return b"not a message"  # type: ignore[return-value]


async def test_an_interceptor_that_raises_or_returns_garbage_is_skipped(
    client: AsyncClient, caplog: pytest.LogCaptureFixture,
) -> None:
    topic = unique_topic("bad-interceptors")
    consumer = await client.subscribe(topic, "sub", initial_position=EARLIEST)
    recorder = Recorder()
    producer = await client.create_producer(topic, interceptors=[Raising(), WrongReturn(), recorder])
    with caplog.at_level(logging.ERROR):
        message_id = await producer.send(b"unchanged")
    (message,) = await drain(consumer, 1)
    assert message.data() == b"unchanged"
    assert recorder.acknowledged == [(b"unchanged", message_id, None)]
    assert "interceptor hook" in caplog.text and "not an OutgoingMessage" in caplog.text


class Inflate(ProducerInterceptor):
    def before_send(self, producer: Any, message: OutgoingMessage) -> OutgoingMessage:
        return dataclasses.replace(message, value=message.value * 1_000_000)  # 10 MB


async def test_a_message_an_interceptor_makes_too_large_is_refused_and_acknowledged_with_the_error(
    shared_standalone: StandaloneProcess, client: AsyncClient,
) -> None:
    recorder = Recorder()
    producer = await client.create_producer(unique_topic("inflated"), interceptors=[Inflate(), recorder])
    with pytest.raises(MessageTooLargeError):
        await producer.send_async(b"0123456789")
    assert [(message_id, type(error)) for _, message_id, error in recorder.acknowledged] == [
        (None, MessageTooLargeError)]
    assert producer.stats().pending_messages == 0
    with Client(shared_standalone.service_url) as sync_client:
        sync_recorder = Recorder()
        sync_producer = sync_client.create_producer(unique_topic("inflated-sync"),
                                                    interceptors=[Inflate(), sync_recorder])
        outcome: list[HeraldError | None] = []
        done = threading.Event()

        def callback(error: HeraldError | None, message_id: MessageId | None) -> None:
            outcome.append(error)
            done.set()

        sync_producer.send_async(b"0123456789", callback)
        assert done.wait(10)
        assert isinstance(outcome[0], MessageTooLargeError)
        assert isinstance(sync_recorder.acknowledged[0][2], MessageTooLargeError)


class Stringify(ProducerInterceptor):
    def before_send(self, producer: Any, message: OutgoingMessage) -> OutgoingMessage:
        return dataclasses.replace(message, value=message.value.decode())  # type: ignore[arg-type]


async def test_a_message_an_interceptor_gives_a_value_other_than_bytes_is_refused(client: AsyncClient) -> None:
    recorder = Recorder()
    producer = await client.create_producer(unique_topic("stringified"), interceptors=[Stringify(), recorder])
    with pytest.raises(SchemaError, match="must be bytes, got str"):
        await producer.send(b"text")
    assert [type(error) for _, _, error in recorder.acknowledged] == [SchemaError]


# ---- producer properties and stats ----

async def test_producer_properties_are_shown_in_the_topics_stats(client: AsyncClient, admin: AdminClient) -> None:
    topic = unique_topic("properties")
    producer = await client.create_producer(topic, producer_name="with-props",
                                            properties={"app": "billing", "région": "eu"})
    await producer.send(b"x")
    stats = await admin.topic_stats(topic)
    (shown,) = [p for p in stats.producers if p.producer_name == "with-props"]
    assert dict(shown.properties) == {"app": "billing", "région": "eu"}


async def test_stats_count_messages_bytes_receipts_and_latencies_per_entry(client: AsyncClient) -> None:
    producer = await client.create_producer(unique_topic("stats"), batching_max_publish_delay=10.0,
                                            batching_max_messages=10)
    assert producer.stats() == ProducerStats(0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)
    futures = [await producer.send_async(b"x" * 95) for _ in range(25)]
    assert producer.stats().pending_messages == 25
    await producer.flush()
    assert all(future.done() for future in futures)
    stats = producer.stats()
    assert (stats.messages_sent, stats.receipts, stats.pending_messages, stats.send_failures) == (25, 3, 0, 0)
    assert stats.bytes_sent == 25 * (95 + 5)  # values with their record headers
    assert 0 < stats.send_latency_p50_ms <= stats.send_latency_p95_ms <= stats.send_latency_p99_ms
    assert stats.send_latency_p99_ms <= stats.send_latency_p999_ms <= stats.send_latency_max_ms


async def test_stats_count_messages_that_failed_after_being_queued(client: AsyncClient) -> None:
    producer = await client.create_producer(unique_topic("stats-failed"), batching_max_publish_delay=10.0,
                                            max_pending_messages=3)
    pending = [await producer.send_async(b"x") for _ in range(3)]
    with pytest.raises(ProducerQueueIsFullError):
        await producer.send_async(b"refused at the call")  # raised: not counted
    await producer.close()
    for future in pending:
        with pytest.raises(ProducerClosedError):
            await future
    stats = producer.stats()
    assert (stats.send_failures, stats.messages_sent, stats.pending_messages) == (3, 0, 0)


async def test_stats_are_logged_every_stats_interval(
    shared_standalone: StandaloneProcess, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="herald.client")
    async with AsyncClient(shared_standalone.service_url, stats_interval=0.1) as client:
        producer = await client.create_producer(unique_topic("stats-logged"), producer_name="logged")
        await producer.send(b"x")
        await eventually(lambda: "receipts" in caplog.text, "a stats line")
    logged = [r for r in caplog.records if r.getMessage().startswith("producer logged on ")]
    assert logged and {r.levelno for r in logged} == {logging.INFO}
    assert any("1 receipts" in r.getMessage() for r in logged)
    assert "msg/s" in logged[0].getMessage() and "send latency ms p50" in logged[0].getMessage()


async def test_a_stats_interval_of_zero_logs_no_stats(
    shared_standalone: StandaloneProcess, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="herald.client")
    async with AsyncClient(shared_standalone.service_url, stats_interval=0) as client:
        producer = await client.create_producer(unique_topic("stats-off"), producer_name="silent")
        await producer.send(b"x")
        assert producer._stats_timer is None  # type: ignore[attr-defined]
    assert "msg/s" not in caplog.text


# ---- one partition's producer ----

async def test_a_producer_made_with_its_own_max_pending_uses_it(client: AsyncClient) -> None:
    config = ProducerConfig(max_pending_messages=1000, batching_max_publish_delay=10.0)
    producer: TopicProducer[bytes] = TopicProducer(unique_topic("max-pending"), config, client.config, client._pool,
                                                   client._lookup, lambda _: None, max_pending_messages=2)
    await producer._start()
    try:
        await producer.send_async(b"1")
        await producer.send_async(b"2")
        with pytest.raises(ProducerQueueIsFullError, match="max_pending_messages=2"):
            await producer.send_async(b"3")
    finally:
        await producer.close()
    with pytest.raises(InvalidArgumentError, match="max_pending_messages must be a positive integer"):
        TopicProducer(unique_topic("producer"), config, client.config, client._pool, client._lookup, lambda _: None,
                      max_pending_messages=0)


async def test_enqueue_nowait_reports_refusals_to_its_callback(client: AsyncClient) -> None:
    outcomes: list[tuple[HeraldError | None, MessageId | None]] = []

    def callback(error: HeraldError | None, message_id: MessageId | None) -> None:
        outcomes.append((error, message_id))

    producer = await client.create_producer(unique_topic("enqueue"), max_pending_messages=1,
                                            batching_max_publish_delay=10.0)
    assert producer.enqueue_nowait(b"x" * (producer.max_message_size + 1), callback)  # type: ignore[attr-defined]
    assert producer.enqueue_nowait(b"queued", callback, "k", None, {"a": "b"}, 5, None, None)
    assert producer.enqueue_nowait(b"no room", callback)
    assert [type(error) for error, _ in outcomes] == [MessageTooLargeError, ProducerQueueIsFullError]
    await producer.flush()
    assert outcomes[2][0] is None and isinstance(outcomes[2][1], MessageId)
    blocking = await client.create_producer(unique_topic("enqueue-blocking"), max_pending_messages=1,
                                            block_if_queue_full=True, batching_max_publish_delay=10.0)
    assert blocking.enqueue_nowait(b"first", callback)
    assert not blocking.enqueue_nowait(b"offer again later", callback)  # full, and it blocks
    await blocking.close()
    assert blocking.enqueue_nowait(b"closed", callback)
    assert isinstance(outcomes[-1][0], ProducerClosedError)


# ---- the blocking facade ----

def test_sync_producer_sends_with_every_option(shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("sync-options")
    with Client(shared_standalone.service_url) as client:
        consumer = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, initial_position=EARLIEST)
        producer = client.create_producer(topic, schema=StringSchema(), batching_max_publish_delay=10.0)
        delayed = producer.send("delayed", deliver_after=datetime.timedelta(seconds=0.2))
        first = producer.send("first", key="k", ordering_key=b"o", properties={"a": "b"}, event_time=42,
                              sequence_id=10)
        outcome: list[tuple[HeraldError | None, MessageId | None]] = []
        done = threading.Event()

        def callback(error: HeraldError | None, message_id: MessageId | None) -> None:
            outcome.append((error, message_id))
            done.set()

        producer.send_async("second", callback, deliver_at=0)
        producer.flush()
        assert done.wait(10) and outcome[0][0] is None
        assert delayed.batch_index == -1 and first < outcome[0][1]  # type: ignore[operator]
        assert producer.last_sequence_id == 11
        received = {m.data(): m for m in (consumer.receive(timeout=10) for _ in range(3)) if m is not None}
        assert sorted(received) == [b"delayed", b"first", b"second"]
        message = received[b"first"]
        assert (message.key, message.properties, message.event_time, message.sequence_id) == ("k", {"a": "b"}, 42, 10)
        stats = producer.stats()
        assert (stats.messages_sent, stats.pending_messages) == (3, 0)
        assert producer.is_connected and not producer.closed
        producer.close()
        assert producer.closed


def test_sync_producer_refuses_on_the_callers_thread(shared_standalone: StandaloneProcess) -> None:
    with Client(shared_standalone.service_url) as client:
        producer = client.create_producer(unique_topic("sync-refused"))
        with pytest.raises(MessageTooLargeError):
            producer.send(b"x" * (5 * 1024 * 1024 + 1))  # the broker's default max message size
        with pytest.raises(SchemaError):
            producer.send_async("text")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="not both"):
            producer.send(b"x", deliver_at=1, deliver_after=1)
        producer.close()
        with pytest.raises(ProducerClosedError):
            producer.send(b"after close")


def test_sync_send_async_reports_a_full_queue_to_its_callback(shared_standalone: StandaloneProcess) -> None:
    with Client(shared_standalone.service_url) as client:
        producer = client.create_producer(unique_topic("sync-full"), max_pending_messages=1,
                                          batching_max_publish_delay=10.0)
        errors: list[HeraldError | None] = []
        refused = threading.Event()

        def callback(error: HeraldError | None, message_id: MessageId | None) -> None:
            errors.append(error)
            if error is not None:
                refused.set()

        producer.send_async(b"1", callback)
        producer.send_async(b"2", callback)  # the first waits in its batch: no room for this one
        assert refused.wait(10)
        assert len(errors) == 1 and isinstance(errors[0], ProducerQueueIsFullError)
        producer.flush()
        assert errors[1:] == [None]
