"""Batch-index acknowledgements with the official client (batch_index_ack_enabled): acknowledging
some messages of a batch keeps only those acknowledged; the batch comes again with the others only
(MESSAGE.ack_set, so the client skips the rest); a cumulative acknowledgement inside a batch keeps
the messages after it. Partial acknowledgements live in the broker's memory: after a restart the
whole batch comes again (at-least-once)."""

from __future__ import annotations

import pulsar

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic
from tests.pulsar.conftest import OPERATION_TIMEOUT, QUIET

RECEIVE_MS = 10_000
BATCH = 10


def produce_batch_then_sentinel(client: pulsar.Client, topic: str) -> list[bytes]:
    """BATCH messages in one batch, then a last message on its own: what comes after a batch."""
    values = [f"m{i}".encode() for i in range(BATCH)]
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=BATCH,
                                      batching_max_publish_delay_ms=60_000)
    for value in values:
        producer.send_async(value, lambda *_: None)
    producer.flush()
    producer.close()
    single = client.create_producer(topic, batching_enabled=False)
    single.send(b"sentinel")
    single.close()
    return values


def subscribe(client: pulsar.Client, topic: str) -> pulsar.Consumer:
    return client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest,
                            batch_index_ack_enabled=True)


def receive(consumer: pulsar.Consumer, count: int) -> list[pulsar.Message]:
    return [consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(count)]


def received_batch(consumer: pulsar.Consumer) -> list[pulsar.Message]:
    batch = receive(consumer, BATCH)
    ids = {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in batch}
    assert len(ids) == 1, "the messages were not produced as one batch"
    return batch


def test_acking_some_messages_of_a_batch_redelivers_only_the_others(client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-batch-index-ack")
    values = produce_batch_then_sentinel(client, topic)
    consumer = subscribe(client, topic)
    batch = received_batch(consumer)
    acked = {1, 3, 4, 8}
    for i in acked:
        consumer.acknowledge(batch[i])
    consumer.close()  # the client sends its pending acknowledgements
    again = subscribe(client, topic)
    rest = receive(again, BATCH - len(acked) + 1)
    assert [m.data() for m in rest] == [v for i, v in enumerate(values) if i not in acked] + [b"sentinel"]
    assert [m.message_id().batch_index() for m in rest[:-1]] == [i for i in range(BATCH) if i not in acked]
    # Acknowledging the rest acknowledges the entry: next time only what follows it comes.
    for message in rest:
        again.acknowledge(message)
    again.close()
    single = client.create_producer(topic, batching_enabled=False)
    single.send(b"after")
    single.close()
    assert subscribe(client, topic).receive(timeout_millis=RECEIVE_MS).data() == b"after"


def test_a_cumulative_ack_inside_a_batch_keeps_the_messages_after_it(client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-batch-index-cumulative")
    values = produce_batch_then_sentinel(client, topic)
    consumer = subscribe(client, topic)
    batch = received_batch(consumer)
    consumer.acknowledge_cumulative(batch[3])
    consumer.close()
    again = subscribe(client, topic)
    rest = receive(again, BATCH - 4 + 1)
    assert [m.data() for m in rest] == [*values[4:], b"sentinel"]


def test_after_a_restart_a_partly_acknowledged_batch_comes_again_whole(standalone: StandaloneProcess) -> None:
    topic = unique_topic("pulsar-batch-index-restart")
    client = pulsar.Client(standalone.pulsar_url, operation_timeout_seconds=OPERATION_TIMEOUT, logger=QUIET)
    try:
        values = produce_batch_then_sentinel(client, topic)
        consumer = subscribe(client, topic)
        batch = received_batch(consumer)
        for message in batch[:4]:
            consumer.acknowledge(message)
        consumer.close()
        standalone.restart()
        again = subscribe(client, topic)
        assert [m.data() for m in receive(again, BATCH + 1)] == [*values, b"sentinel"]  # at-least-once
    finally:
        client.close()
