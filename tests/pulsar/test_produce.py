"""The official client producing: what it sends is stored as it came (Pulsar's entry format) and
read back by Pulsar consumers and by Herald's own client alike, batched or not, compressed with
every codec, keyed, with properties and event times; deduplication by producer name and sequence
id; a message over the limit refused."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from herald.client import Client, InitialPosition

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic

RECEIVE_MS = 10_000
CODECS = [pulsar.CompressionType.NONE, pulsar.CompressionType.LZ4, pulsar.CompressionType.ZLib,
          pulsar.CompressionType.ZSTD, pulsar.CompressionType.SNAPPY]


@pytest.fixture
def herald(server: StandaloneProcess) -> Iterator[Client]:
    with Client(server.service_url) as made:
        yield made


def send_all(producer: pulsar.Producer, count: int, *, batched: bool) -> list[bytes]:
    """`count` messages (keyed k<i>, property i, event time 1000+i); sent asynchronously when
    batched, so they share batches."""
    values = [f"value-{i}-".encode() * 8 for i in range(count)]
    options = [{"partition_key": f"k{i}", "properties": {"i": str(i)}, "event_timestamp": 1000 + i}
               for i in range(count)]
    if batched:
        for value, option in zip(values, options, strict=True):
            producer.send_async(value, None, **option)
        producer.flush()
    else:
        for value, option in zip(values, options, strict=True):
            producer.send(value, **option)
    return values


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: str(c).rsplit(".", 1)[-1])
def test_what_a_pulsar_producer_sends_a_pulsar_consumer_receives(
    client: pulsar.Client, batched: bool, codec: pulsar.CompressionType,
) -> None:
    topic = unique_topic("pulsar-produce")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, compression_type=codec, batching_enabled=batched)
    values = send_all(producer, 20, batched=batched)
    received = [consumer.receive(timeout_millis=RECEIVE_MS) for _ in values]
    for message in received:
        consumer.acknowledge(message)
    assert [m.data() for m in received] == values
    assert [m.partition_key() for m in received] == [f"k{i}" for i in range(20)]
    assert [m.properties() for m in received] == [{"i": str(i)} for i in range(20)]
    assert [m.event_timestamp() for m in received] == [1000 + i for i in range(20)]


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("codec", [pulsar.CompressionType.NONE, pulsar.CompressionType.SNAPPY],
                         ids=["NONE", "SNAPPY"])
def test_what_a_pulsar_producer_sends_herald_s_client_receives(
    client: pulsar.Client, herald: Client, batched: bool, codec: pulsar.CompressionType,
) -> None:
    topic = unique_topic("pulsar-to-herald")
    consumer = herald.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
    producer = client.create_producer(topic, compression_type=codec, batching_enabled=batched)
    values = send_all(producer, 10, batched=batched)
    received = [consumer.receive(timeout=10) for _ in values]
    assert [m.data() for m in received] == values
    assert [m.key for m in received] == [f"k{i}" for i in range(10)]
    assert [m.properties for m in received] == [{"i": str(i)} for i in range(10)]
    assert [m.event_time for m in received] == [1000 + i for i in range(10)]


def test_a_resent_sequence_id_is_stored_once(client: pulsar.Client) -> None:
    """Deduplication is on by default (the broker's deduplication_enabled): a producer that comes
    back under its name learns its last stored sequence id and a resend of it is not stored."""
    topic = unique_topic("pulsar-dedup")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, producer_name="dedup-me")
    producer.send(b"first", sequence_id=5)
    producer.close()
    again = client.create_producer(topic, producer_name="dedup-me")
    assert again.last_sequence_id() == 5
    again.send(b"first again", sequence_id=5)  # acknowledged, not stored
    again.send(b"second", sequence_id=6)
    assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"first"
    assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"second"


def test_a_message_over_the_limit_is_refused(client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-too-large")
    producer = client.create_producer(topic, batching_enabled=False)
    with pytest.raises(pulsar.PulsarException):
        producer.send(b"x" * (6 << 20))
    producer.send(b"small")  # the producer goes on


def test_a_chunked_message_is_put_back_together(client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-chunked")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    big = bytes(range(256)) * (12 << 12)  # 12 MiB: three chunks at the 5 MiB limit
    producer.send(big)
    assert consumer.receive(timeout_millis=30_000).data() == big
