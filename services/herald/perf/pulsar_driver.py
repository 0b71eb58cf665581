"""The drivers over the official Pulsar client (PyPI pulsar-client, the C++ client), against a
pulsar:// URL: Herald's Pulsar front end, or any Pulsar broker. That client blocks (a full send
window blocks send_async; receive blocks), so each producer's send loop and each consumer's
receive loop runs on a thread of its own, and the event loop only reports; acknowledgements come
on the client's own threads and go straight into locked recorders."""

from __future__ import annotations

import asyncio
import itertools
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from herald.common.errors import InvalidArgumentError
from herald.perf.endpoints import check_reachable, ensure_partitions
from herald.perf.herald_driver import CHUNK, Payloads, split
from herald.perf.options import E2E_HEADER, PerfOptions
from herald.perf.pacer import RatePacer
from herald.perf.payloads import Keys
from herald.perf.recorder import Recorder
from herald.perf.runner import DRAIN_TIMEOUT, Run

RECEIVE_WAIT_MS = 100  # a receive returns this often to see the stop signal
_HEADER = struct.Struct(">q")


def _pulsar() -> Any:
    try:
        import pulsar
    except ImportError:
        raise InvalidArgumentError(
            "--protocol pulsar needs the official Pulsar client: pip install 'pulsar-client>=3.13'") from None
    return pulsar


async def _in_threads(run: Run, targets: list[Callable[[threading.Event], None]]) -> None:
    """Run each target on a thread of its own until all return; `run.stopping` sets the event the
    targets watch. The first error of a target is raised here once all returned."""
    loop = asyncio.get_running_loop()
    stop = threading.Event()
    finished: list[asyncio.Future[None]] = [loop.create_future() for _ in targets]

    def body(target: Callable[[threading.Event], None], future: asyncio.Future[None]) -> None:
        try:
            target(stop)
        except BaseException as error:  # handed to the loop, raised there; the other threads stop too
            loop.call_soon_threadsafe(_settle, future, error)
            loop.call_soon_threadsafe(run.stop)
        else:
            loop.call_soon_threadsafe(_settle, future, None)

    for target, future in zip(targets, finished, strict=True):
        threading.Thread(target=body, args=(target, future), name="herald-perf-pulsar", daemon=True).start()
    watcher = asyncio.create_task(run.stopping.wait())
    watcher.add_done_callback(lambda _task: stop.set())
    try:
        results = await asyncio.gather(*finished, return_exceptions=True)
    finally:
        stop.set()
        watcher.cancel()
    for result in results:
        if isinstance(result, BaseException):
            raise result


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class PulsarSession:
    """One pulsar.Client and the producers and consumers the run asks for."""

    def __init__(self, options: PerfOptions) -> None:
        self.pulsar = _pulsar()
        self.options = options
        self.client = self.pulsar.Client(options.pulsar_url, operation_timeout_seconds=30,
                                         logger=self.pulsar.ConsoleLogger(self.pulsar.LoggerLevel.Error))

    def producers(self) -> list[Any]:
        knobs = self.options.produce
        compression = {"none": "NONE", "lz4": "LZ4", "zlib": "ZLib", "zstd": "ZSTD", "snappy": "SNAPPY"}
        return [self.client.create_producer(
            topic, max_pending_messages=knobs.max_pending, block_if_queue_full=True,
            batching_enabled=knobs.batching, batching_max_messages=knobs.batch_max_messages,
            batching_max_publish_delay_ms=max(1, round(knobs.batch_max_delay_ms)),
            compression_type=getattr(self.pulsar.CompressionType, compression[knobs.compression]))
            for topic in self.options.topics for _ in range(knobs.producers_per_topic)]

    def consumers(self) -> list[Any]:
        knobs = self.options.consume
        kind = {"Exclusive": "Exclusive", "Shared": "Shared", "Failover": "Failover", "Key_Shared": "KeyShared"}
        position = self.pulsar.InitialPosition.Earliest if knobs.initial_position == "earliest" \
            else self.pulsar.InitialPosition.Latest
        return [self.client.subscribe(
            topic, knobs.subscription, consumer_type=getattr(self.pulsar.ConsumerType, kind[knobs.subscription_type]),
            receiver_queue_size=knobs.receiver_queue_size, initial_position=position)
            for topic in self.options.topics for _ in range(knobs.consumers_per_topic)]

    def close(self) -> None:
        self.client.close()


def _send_loop(run: Run, loop: asyncio.AbstractEventLoop, producer: Any, recorder: Recorder, payloads: Payloads,
               keys: Keys, rate: float, count: int, stamped: bool) -> Callable[[threading.Event], None]:
    pulsar = _pulsar()
    ok = pulsar.Result.Ok
    record = recorder.record
    clock = time.monotonic_ns

    def target(stop: threading.Event) -> None:
        pacer = RatePacer(rate, time.monotonic())
        sent = 0
        while not stop.is_set() and (count == 0 or sent < count):
            due = pacer.due(time.monotonic(), CHUNK if count == 0 else min(CHUNK, count - sent))
            if due == 0:
                stop.wait(max(0.0, pacer.next_due() - time.monotonic()))
                continue
            for _ in range(due):
                payload = payloads()
                sent_ns = clock()
                if stamped:
                    payload = _HEADER.pack(sent_ns) + payload[E2E_HEADER:]
                size = len(payload)

                def done(result: Any, _message_id: Any, sent_ns: int = sent_ns, size: int = size) -> None:
                    if result == ok:
                        record((clock() - sent_ns) // 1000, size)
                    else:
                        loop.call_soon_threadsafe(run.error, f"send failed: {result}")
                        loop.call_soon_threadsafe(run.stop)  # as over Herald's protocol: the run ends

                key = keys.next()
                if key is None:
                    producer.send_async(payload, done)
                else:
                    producer.send_async(payload, done, partition_key=key)
            sent += due
        producer.flush()
    return target


def _receive_loop(run: Run, loop: asyncio.AbstractEventLoop, consumer: Any, recorder: Recorder, count: int,
                  taken: Iterator[int], stamped: bool) -> Callable[[threading.Event], None]:
    """`taken` numbers the messages over all the run's consumer threads (next() on an
    itertools.count is atomic), so that exactly `count` are recorded and acknowledged: a message
    past the count is left unacknowledged, for the broker to deliver again."""
    pulsar = _pulsar()
    timeout = pulsar.Timeout
    record = recorder.record

    def target(stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                message = consumer.receive(timeout_millis=RECEIVE_WAIT_MS)
            except timeout:
                continue
            number = next(taken)
            if count and number > count:
                break
            data = message.data()
            if stamped:
                latency = (time.monotonic_ns() - _HEADER.unpack_from(data)[0]) // 1000
            else:
                sent_ms = message.event_timestamp() or message.publish_timestamp()
                latency = time.time_ns() // 1000 - sent_ms * 1000
            record(latency, len(data))
            consumer.acknowledge(message)
            if number == count:
                break
        loop.call_soon_threadsafe(run.stop)
    return target


async def _session(options: PerfOptions) -> PulsarSession:
    await check_reachable(options.pulsar_url, "--pulsar-url")
    if options.produce.partitions:
        await ensure_partitions(options.url, options.security, options.topics, options.produce.partitions)
    return await asyncio.to_thread(PulsarSession, options)


async def produce(run: Run, options: PerfOptions, payloads: Payloads, keys: Keys) -> None:
    session = await _session(options)
    try:
        loop = asyncio.get_running_loop()
        producers = await asyncio.to_thread(session.producers)
        run.ready()
        rate = options.produce.rate / len(producers)
        counts = split(run.limits.count, len(producers))
        await _in_threads(run, [_send_loop(run, loop, producer, run.recorders[0], payloads, keys, rate, count, False)
                                for producer, count in zip(producers, counts, strict=True)])
    finally:
        await asyncio.wait_for(asyncio.to_thread(session.close), DRAIN_TIMEOUT)


async def consume(run: Run, options: PerfOptions) -> None:
    session = await _session(options)
    try:
        loop = asyncio.get_running_loop()
        consumers = await asyncio.to_thread(session.consumers)
        run.ready()
        taken = itertools.count(1)
        await _in_threads(run, [_receive_loop(run, loop, consumer, run.recorders[0], run.limits.count, taken, False)
                                for consumer in consumers])
    finally:
        await asyncio.wait_for(asyncio.to_thread(session.close), DRAIN_TIMEOUT)


async def end_to_end(run: Run, options: PerfOptions, payloads: Payloads, keys: Keys) -> None:
    session = await _session(options)
    send_recorder, receive_recorder = run.recorders
    try:
        loop = asyncio.get_running_loop()
        consumers = await asyncio.to_thread(session.consumers)
        producers = await asyncio.to_thread(session.producers)
        run.ready()
        rate = options.produce.rate / len(producers)
        counts = split(run.limits.count, len(producers))
        sending = asyncio.create_task(_in_threads(
            run, [_send_loop(run, loop, producer, send_recorder, payloads, keys, rate, count, True)
                  for producer, count in zip(producers, counts, strict=True)]))
        try:
            taken = itertools.count(1)
            await _in_threads(run, [_receive_loop(run, loop, consumer, receive_recorder, run.limits.count, taken,
                                                  True) for consumer in consumers])
        finally:
            run.stop()
            await sending
    finally:
        await asyncio.wait_for(asyncio.to_thread(session.close), DRAIN_TIMEOUT)
