"""The client's per-message costs, without a server: what TopicProducer.send_async does to pack a
message into the open batch (closing and encoding batches included), what a receipt costs to hand
out the ids, what a partitioned producer adds (routing each message), and what the consumer does to
turn a delivered entry into Messages and hand them to receive() (for one topic, and through a
multi-topic consumer's shared queue over 4 partitions). Prints microseconds per message;
the target is about 1-2 us each.

    .venv/bin/python bench/client_hot_path.py [--messages 200000] [--size 100] [--repeat 5] [--only consumer]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from herald.api.v1 import broker_pb2
from herald.client.accumulator import BatchAccumulator, PendingOp
from herald.client.config import ClientConfig, ConsumerConfig, HashingScheme, ProducerConfig
from herald.client.connection import ConnectionPool
from herald.client.lookup import LookupService
from herald.client.multi_topic_consumer import MultiTopicConsumer, member_queue_size
from herald.client.partitioned_producer import PartitionedProducer
from herald.client.routing import make_router
from herald.client.topic_consumer import TopicConsumer
from herald.client.topic_producer import TopicProducer
from herald.common.codec.entry import EntryMetadata, decode_entry, encode_entry, iter_records, pack_record

TOPIC = "persistent://public/default/bench"
RESULTS = Path(__file__).resolve().parent / "results" / "client_hot_path.jsonl"


def offline_parts() -> tuple[ClientConfig, ConnectionPool, LookupService]:
    config = ClientConfig("herald://127.0.0.1:1")
    pool = ConnectionPool(config)
    return config, pool, LookupService(pool, config)


def offline_producer(batch: int) -> TopicProducer:
    """A producer that never connects: batches pile up as pending ops, as they would while the
    writer is busy."""
    config, pool, lookup = offline_parts()
    producer: TopicProducer[bytes] = TopicProducer(
        TOPIC, ProducerConfig(max_pending_messages=10**9, batching_max_messages=batch, send_timeout=0),
        config, pool, lookup, lambda _p: None,
    )
    producer._acc.producer_name = "bench"
    return producer


def offline_partitioned(batch: int, partitions: int, **options: Any) -> PartitionedProducer[bytes]:
    """A partitioned producer over offline partition producers (see offline_producer)."""
    config, pool, lookup = offline_parts()
    producer_config = ProducerConfig(max_pending_messages=10**9, max_pending_messages_across_partitions=10**9,
                                     batching_max_messages=batch, send_timeout=0, **options)

    def make(topic: str, partition_config: ProducerConfig, max_pending: int) -> TopicProducer[bytes]:
        made: TopicProducer[bytes] = TopicProducer(topic, partition_config, config, pool, lookup, lambda _p: None,
                                                   max_pending_messages=max_pending)
        made._acc.producer_name = "bench"
        return made

    made = [make(f"{TOPIC}-partition-{i}", producer_config, 10**9) for i in range(partitions)]
    return PartitionedProducer(TOPIC, made, producer_config, make, lookup.partitions, lambda _p: None)


def offline_consumer(queue_size: int) -> TopicConsumer[bytes]:
    config, pool, lookup = offline_parts()
    return TopicConsumer(TOPIC, ConsumerConfig("bench", receiver_queue_size=queue_size), config, pool, lookup,
                         lambda _c: None)


async def bench_send_async(messages: int, payload: bytes, batch: int) -> float:
    producer = offline_producer(batch)
    send_async = producer.send_async
    started = time.perf_counter()
    for _ in range(messages):
        await send_async(payload)
    producer._acc.flush()
    elapsed = time.perf_counter() - started
    pending = producer._protocol.pending
    assert sum(op.num_messages for op in pending) == messages
    pending.clear()  # nobody awaits these futures: drop them rather than fail them
    await producer._shutdown()
    return elapsed


async def bench_partitioned_send_async(messages: int, payload: bytes, batch: int, keys: int = 0) -> float:
    """PartitionedProducer.send_async over 4 partitions: routing plus the partition's send_async.
    keys=0: no key (round robin by batching window); else that many distinct keys in turn."""
    producer = offline_partitioned(batch, 4)
    send_async = producer.send_async
    names = [f"user-{i:08d}" for i in range(keys)] if keys else [None]
    rounds = messages // len(names)
    started = time.perf_counter()
    for _ in range(rounds):
        for key in names:
            await send_async(payload, key=key)
    for partition in producer.partitions:
        partition.flush_nowait()
    elapsed = time.perf_counter() - started
    for partition in producer.partitions:
        assert isinstance(partition, TopicProducer)
        partition._protocol.pending.clear()
        await partition._shutdown()
    return elapsed * messages / (rounds * len(names))


async def bench_route(messages: int, payload: bytes, batch: int, scheme: HashingScheme | None = None,
                      keys: int = 0) -> float:
    """Router.choose alone: no key (batching window), or keys hashed by a scheme, `keys` distinct
    ones in turn (more than MAX_CACHED_KEYS: every hash computed)."""
    router = make_router(ProducerConfig(hashing_scheme=scheme or HashingScheme.JavaStringHash), 4)
    assert router is not None
    choose = router.choose
    names = [f"user-{i:08d}" for i in range(keys)] if keys else [None]
    rounds = messages // len(names)
    started = time.perf_counter()
    for _ in range(rounds):
        for key in names:
            choose(key, 4)
    return (time.perf_counter() - started) * messages / (rounds * len(names))


async def bench_accumulator(messages: int, payload: bytes, batch: int) -> float:
    ops: list[PendingOp] = []
    loop = asyncio.get_running_loop()
    acc = BatchAccumulator(max_messages=batch, max_bytes=1 << 30, max_delay=60.0, batched=True,
                           emit=ops.append, loop=loop, producer_name="bench")
    append, new_future = acc.append, loop.create_future
    started = time.perf_counter()
    for seq in range(messages):
        append(payload, None, None, 0, seq, new_future())
    acc.flush()
    return time.perf_counter() - started


async def bench_receipts(messages: int, payload: bytes, batch: int) -> float:
    producer = offline_producer(batch)
    for _ in range(messages):
        await producer.send_async(payload)
    producer._acc.flush()
    protocol = producer._protocol
    ops = list(protocol.pending)
    started = time.perf_counter()
    for entry_id, op in enumerate(ops):
        protocol.on_receipt(broker_pb2.SendReceipt(
            sequence_id=op.sequence_id, highest_sequence_id=op.highest_sequence_id, ledger_id=1, entry_id=entry_id,
        ))
    elapsed = time.perf_counter() - started
    assert not protocol.pending
    await producer._shutdown()
    return elapsed


def entries(messages: int, payload: bytes, batch: int, keyed: bool) -> list[broker_pb2.DeliveredEntry]:
    out = []
    for entry_id, first in enumerate(range(0, messages, batch)):
        count = min(batch, messages - first)
        buffer = bytearray()
        for _ in range(count):
            if keyed:
                pack_record(buffer, payload, key="key", properties={"a": "b"}, event_time=1)
            else:
                pack_record(buffer, payload)
        metadata = EntryMetadata(producer_name="bench", sequence_id=first, highest_sequence_id=first + count - 1,
                                 num_messages=count, publish_time=1, batched=True)
        data = encode_entry(metadata, buffer)
        out.append(broker_pb2.DeliveredEntry(ledger_id=1, entry_id=entry_id, data=data))
    return out


async def bench_unpack(messages: int, payload: bytes, batch: int, keyed: bool = False) -> float:
    consumer = offline_consumer(messages)
    delivered = entries(messages, payload, batch, keyed)
    unpack = consumer._protocol.unpack
    started = time.perf_counter()
    count = 0
    for entry in delivered:
        count += len(unpack(entry)[0])
    elapsed = time.perf_counter() - started
    assert count == messages
    return elapsed


async def bench_deliver_and_receive(messages: int, payload: bytes, batch: int) -> float:
    consumer = offline_consumer(messages)
    delivered = entries(messages, payload, batch, False)
    receive = consumer.receive
    started = time.perf_counter()
    for at in range(0, len(delivered), 10):  # as the broker sends them: several entries per EntryBatch
        consumer._protocol.on_entries(delivered[at:at + 10])
        while consumer._queue:
            message = await receive()
            consumer.acknowledge(message)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    consumer._acks.stop(flush=False)  # the ack group's timer: nobody runs the loop to fire it
    return elapsed


async def bench_multi_deliver_and_receive(messages: int, payload: bytes, batch: int, partitions: int = 4) -> float:
    """The same through a MultiTopicConsumer of `partitions` offline members: each member's entries
    move to the shared queue, receive() takes from it and acknowledge() routes to the member."""
    config, pool, lookup = offline_parts()
    consumer_config = ConsumerConfig("bench", receiver_queue_size=messages,
                                     max_total_receiver_queue_size_across_partitions=messages * partitions)
    consumer: MultiTopicConsumer[bytes] = MultiTopicConsumer([TOPIC], consumer_config, config, pool, lookup,
                                                             lambda _c: None)
    member_config = dataclasses.replace(consumer._member_config,
                                        receiver_queue_size=member_queue_size(consumer_config, partitions))
    members = [consumer._new_member(f"{TOPIC}-partition-{i}", member_config) for i in range(partitions)]
    delivered = entries(messages, payload, batch, False)
    receive, acknowledge = consumer.receive, consumer.acknowledge
    started = time.perf_counter()
    for at in range(0, len(delivered), 10):
        members[(at // 10) % partitions]._protocol.on_entries(delivered[at:at + 10])
        while consumer._queue:
            acknowledge(await receive())  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    for member in members:
        member._acks.stop(flush=False)
    return elapsed


async def bench_raw_iter_records(messages: int, payload: bytes, batch: int) -> float:
    """The floor: decode_entry + iter_records alone, no Message objects."""
    delivered = entries(messages, payload, batch, False)
    started = time.perf_counter()
    for entry in delivered:
        for _ in iter_records(decode_entry(entry.data)[1]):
            pass
    return time.perf_counter() - started


CASES: list[tuple[str, Callable[[int, bytes, int], Awaitable[float]]]] = [
    ("producer: accumulator.append (+ future, batch encode)", bench_accumulator),
    ("producer: TopicProducer.send_async (whole hot path)", bench_send_async),
    ("producer: receipt -> ids to every future", bench_receipts),
    ("partitioned: send_async, 4 partitions, no key", bench_partitioned_send_async),
    ("partitioned: send_async, 4 partitions, 100 keys", lambda n, p, b: bench_partitioned_send_async(n, p, b, 100)),
    ("routing: choose, no key (batching window)", bench_route),
    ("routing: choose, Java hash, 100 keys (cached)",
     lambda n, p, b: bench_route(n, p, b, HashingScheme.JavaStringHash, 100)),
    ("routing: choose, Java hash, 10000 keys (computed)",
     lambda n, p, b: bench_route(n, p, b, HashingScheme.JavaStringHash, 10_000)),
    ("routing: choose, Murmur3, 10000 keys (computed)",
     lambda n, p, b: bench_route(n, p, b, HashingScheme.Murmur3_32Hash, 10_000)),
    ("consumer: decode_entry + iter_records only (floor)", bench_raw_iter_records),
    ("consumer: entry -> Message objects (unpack)", bench_unpack),
    ("consumer: keyed entry -> Message objects", lambda n, p, b: bench_unpack(n, p, b, keyed=True)),
    ("consumer: deliver + receive() + acknowledge()", bench_deliver_and_receive),
    ("multi-topic: the same, 4 partitions, shared queue", bench_multi_deliver_and_receive),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--batch", type=int, default=1000, help="messages per batch")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case; the best is reported")
    parser.add_argument("--only", nargs="+", default=[], metavar="PREFIX",
                        help="run only the cases whose name starts so (say: consumer multi-topic)")
    parser.add_argument("--label", default="", help="a note stored with the line (which code ran)")
    args = parser.parse_args()
    payload = b"x" * args.size
    print(f"{args.messages} messages of {args.size} B, batches of {args.batch}; best of {args.repeat}")

    figures: dict[str, float] = {}

    async def run() -> None:
        for name, case in CASES:
            if args.only and not name.startswith(tuple(args.only)):
                continue
            best = min([await case(args.messages, payload, args.batch) for _ in range(args.repeat)])
            figures[name] = round(best / args.messages * 1e6, 3)
            print(f"  {name:<55} {figures[name]:6.2f} us/message")

    asyncio.run(run())
    record = {"at": datetime.datetime.now().isoformat(timespec="seconds"), "label": args.label,
              "messages": args.messages,
              "size": args.size, "batch": args.batch, "us_per_message": figures}
    with RESULTS.open("a") as results:
        results.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
