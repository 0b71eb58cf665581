"""The drivers over Herald's asyncio client: produce, consume, and both ends of one topic. Each is
thin: it sends or receives and records into the run's recorders; the run decides when to stop."""

from __future__ import annotations

import asyncio
import functools
import struct
import time
from collections.abc import Callable

from herald.client import AsyncClient, CompressionType, ConsumerType, InitialPosition
from herald.client.consumer import AsyncConsumer
from herald.client.producer import AsyncProducer
from herald.common.errors import HeraldError
from herald.perf.endpoints import check_reachable, ensure_partitions
from herald.perf.options import E2E_HEADER, PerfOptions
from herald.perf.pacer import RatePacer
from herald.perf.payloads import Keys
from herald.perf.recorder import Recorder
from herald.perf.runner import DRAIN_TIMEOUT, Run

CHUNK = 500  # messages queued between checks of the stop signal (and a yield to the loop)
RECEIVE_MANY = 1000
RECEIVE_WAIT = 0.1  # seconds a receive waits before the stop signal is checked again
_HEADER = struct.Struct(">q")

Payloads = Callable[[], bytes]

_COMPRESSION = {"none": CompressionType.NONE, "lz4": CompressionType.LZ4, "zlib": CompressionType.ZLIB,
                "zstd": CompressionType.ZSTD}
_CONSUMER_TYPE = {"Exclusive": ConsumerType.Exclusive, "Shared": ConsumerType.Shared,
                  "Failover": ConsumerType.Failover, "Key_Shared": ConsumerType.KeyShared}


def split(total: int, parts: int) -> list[int]:
    """`total` spread over `parts` as evenly as can be (0 stays 0: no limit)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def _producers(client: AsyncClient, options: PerfOptions) -> list[AsyncProducer[bytes]]:
    knobs = options.produce
    made = []
    for topic in options.topics:
        for _ in range(knobs.producers_per_topic):
            made.append(await client.create_producer(
                topic, max_pending_messages=knobs.max_pending, max_pending_messages_across_partitions=max(
                    knobs.max_pending, 50_000), block_if_queue_full=True, batching_enabled=knobs.batching,
                batching_max_messages=knobs.batch_max_messages,
                batching_max_publish_delay=knobs.batch_max_delay_ms / 1000,
                compression_type=_COMPRESSION[knobs.compression]))
    return made


async def _consumers(client: AsyncClient, options: PerfOptions) -> list[AsyncConsumer[bytes]]:
    knobs = options.consume
    position = InitialPosition.Earliest if knobs.initial_position == "earliest" else InitialPosition.Latest
    made = []
    for topic in options.topics:
        for _ in range(knobs.consumers_per_topic):
            made.append(await client.subscribe(
                topic, knobs.subscription, consumer_type=_CONSUMER_TYPE[knobs.subscription_type],
                initial_position=position, receiver_queue_size=knobs.receiver_queue_size))
    return made


async def send_loop(run: Run, producer: AsyncProducer[bytes], recorder: Recorder, payloads: Payloads,
                    keys: Keys, rate: float, count: int, *, stamped: bool = False) -> None:
    """Send `count` messages (0: until stopped) at `rate` msg/s (0: as fast as the send window
    lets), recording each send's latency (queued to stored) when its receipt comes. `stamped`:
    the payload starts with the send time (monotonic ns), for end-to-end latency."""
    record = recorder.record
    clock = time.monotonic_ns
    error = run.error

    def done(sent_ns: int, size: int, failure: HeraldError | None, _message_id: object) -> None:
        if failure is None:
            record((clock() - sent_ns) // 1000, size)
        else:  # the run ends: a producer that fails sends would otherwise fail every later one as fast
            error(f"send failed: {failure}")
            run.stop()

    try:
        await _send(run, producer, done, payloads, keys, rate, count, stamped)
    except BaseException:
        run.stop()  # the receiving side of an end-to-end run must not wait for messages that will not come
        raise


async def _send(run: Run, producer: AsyncProducer[bytes], done: Callable[..., None], payloads: Payloads,
                keys: Keys, rate: float, count: int, stamped: bool) -> None:
    clock = time.monotonic_ns
    pacer = RatePacer(rate, time.monotonic())
    sent = 0
    stopping = run.stopping
    while not stopping.is_set() and (count == 0 or sent < count):
        due = pacer.due(time.monotonic(), CHUNK if count == 0 else min(CHUNK, count - sent))
        if due == 0:
            await asyncio.sleep(max(0.0, pacer.next_due() - time.monotonic()))
            continue
        for _ in range(due):
            payload = payloads()
            sent_ns = clock()
            if stamped:
                payload = _HEADER.pack(sent_ns) + payload[E2E_HEADER:]
            callback = functools.partial(done, sent_ns, len(payload))
            key = keys.next()
            while not producer.enqueue_nowait(payload, callback, key):
                await producer.wait_for_room()
        sent += due
        await asyncio.sleep(0)  # let receipts and the reporter in between chunks
    try:
        await asyncio.wait_for(producer.flush(), DRAIN_TIMEOUT)
    except TimeoutError:
        run.error(f"messages still unacknowledged {DRAIN_TIMEOUT:g}s after the last send")


async def receive_loop(run: Run, consumer: AsyncConsumer[bytes], recorder: Recorder, count: int,
                       latency: Callable[[bytes, int, int], int]) -> None:
    """Receive and acknowledge until stopped or the recorder counted `count` (0: no limit);
    `latency(data, publish_or_event_time_ms, now_ns)` gives each message's latency in µs."""
    record = recorder.record
    acknowledge = consumer.acknowledge
    stopping = run.stopping
    while not stopping.is_set():
        # Never more than the count still wanted (the consumers share the loop thread, so this is exact).
        wanted = RECEIVE_MANY if not count else min(RECEIVE_MANY, count - recorder.total_messages)
        if wanted <= 0:
            run.stop()
            return
        messages = await consumer.receive_many(wanted, timeout=RECEIVE_WAIT)
        if not messages:
            continue
        now_ns = time.time_ns()
        for message in messages:
            data = message.data()
            record(latency(data, message.event_time or message.publish_time, now_ns), len(data))
            acknowledge(message)


def publish_latency(_data: bytes, sent_ms: int, now_ns: int) -> int:
    """From the publish (or event) time, unix ms, to now (the clocks of the producer's machine
    and this one: the same on one host)."""
    return now_ns // 1000 - sent_ms * 1000


def stamped_latency(data: bytes, _sent_ms: int, _now_ns: int) -> int:
    """From the send time the producer wrote in the payload to now, on the same monotonic clock."""
    sent_ns: int = _HEADER.unpack_from(data)[0]
    return (time.monotonic_ns() - sent_ns) // 1000


async def produce(run: Run, options: PerfOptions, payloads: Payloads, keys: Keys) -> None:
    await check_reachable(options.url, "--url")
    if options.produce.partitions:
        await ensure_partitions(options.url, options.security, options.topics, options.produce.partitions)
    async with AsyncClient(options.url, **options.security) as client:
        producers = await _producers(client, options)
        run.ready()
        rates = [options.produce.rate / len(producers)] * len(producers)
        counts = split(run.limits.count, len(producers))
        await asyncio.gather(*(send_loop(run, producer, run.recorders[0], payloads, keys, rate, count)
                               for producer, rate, count in zip(producers, rates, counts, strict=True)))
        for producer in producers:
            await producer.close()


async def consume(run: Run, options: PerfOptions) -> None:
    await check_reachable(options.url, "--url")
    async with AsyncClient(options.url, **options.security) as client:
        consumers = await _consumers(client, options)
        run.ready()
        await asyncio.gather(*(receive_loop(run, consumer, run.recorders[0], run.limits.count, publish_latency)
                               for consumer in consumers))
        for consumer in consumers:
            await consumer.close()


async def end_to_end(run: Run, options: PerfOptions, payloads: Payloads, keys: Keys) -> None:
    """One producer and one consumer per topic in this process; the consumer subscribes first so
    that it sees every message."""
    await check_reachable(options.url, "--url")
    if options.produce.partitions:
        await ensure_partitions(options.url, options.security, options.topics, options.produce.partitions)
    send_recorder, receive_recorder = run.recorders
    async with AsyncClient(options.url, **options.security) as client:
        consumers = await _consumers(client, options)
        producers = await _producers(client, options)
        run.ready()
        rate = options.produce.rate / len(producers)
        counts = split(run.limits.count, len(producers))
        sending = [asyncio.create_task(send_loop(run, producer, send_recorder, payloads, keys, rate, count,
                                                 stamped=True))
                   for producer, count in zip(producers, counts, strict=True)]
        try:
            await asyncio.gather(*(receive_loop(run, consumer, receive_recorder, run.limits.count, stamped_latency)
                                   for consumer in consumers))
        finally:
            run.stop()
            await asyncio.gather(*sending)
        for producer in producers:
            await producer.close()
        for consumer in consumers:
            await consumer.close()
