"""Key_Shared with the official client: keys hash as Pulsar's broker hashes them (Murmur3 32-bit of
the key, & 0x7fffffff, % 65536), so STICKY consumers asking for hash ranges get exactly the keys
of those ranges, whoever produced them; a range another consumer holds is refused."""

from __future__ import annotations

from collections.abc import Iterator

import mmh3
import pulsar
import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar_api
from herald.client import Client

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic
from tests.pulsar.conftest import receive_until
from tests.pulsar.raw import Command, RawConnection


def pulsar_hash(key: str) -> int:
    """Pulsar's StickyKeyConsumerSelector hash of a message key."""
    return (mmh3.hash(key.encode(), 0) & 0x7FFFFFFF) % 65536


def sticky(*ranges: tuple[int, int], out_of_order: bool = False) -> pulsar.ConsumerKeySharedPolicy:
    return pulsar.ConsumerKeySharedPolicy(key_shared_mode=pulsar.KeySharedMode.Sticky,
                                          allow_out_of_order_delivery=out_of_order, sticky_ranges=list(ranges))


@pytest.fixture
def herald(server: StandaloneProcess) -> Iterator[Client]:
    with Client(server.service_url) as made:
        yield made


def test_sticky_consumers_get_exactly_the_keys_of_their_ranges(client: pulsar.Client, herald: Client) -> None:
    topic = unique_topic("pulsar-sticky")
    low, high = [client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared,
                                  initial_position=pulsar.InitialPosition.Earliest, key_shared_policy=sticky(r))
                 for r in ((0, 32767), (32768, 65535))]
    keys = [f"key-{i}" for i in range(40)]
    assert {pulsar_hash(k) < 32768 for k in keys} == {True, False}  # both consumers have keys
    producer = client.create_producer(topic, batching_enabled=False)
    for key in keys:
        producer.send(key.encode(), partition_key=key)
    producer.close()
    # Herald's own producer's keys hash the same way.
    herald_producer = herald.create_producer(topic, batching_enabled=False)
    for key in keys:
        herald_producer.send(key.encode(), key=key)
    herald_producer.close()
    got_low, got_high = receive_until([low, high], 2 * len(keys))
    assert sorted(m.partition_key() for m in got_low) == sorted(2 * [k for k in keys if pulsar_hash(k) < 32768])
    assert sorted(m.partition_key() for m in got_high) == sorted(2 * [k for k in keys if pulsar_hash(k) >= 32768])


def test_a_sticky_consumer_owning_part_of_the_range_gets_only_that_part(client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-sticky-part")
    keys = [f"k{i}" for i in range(60)]
    mine = sorted(k for k in keys if 1000 <= pulsar_hash(k) <= 30000 or pulsar_hash(k) >= 60000)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared,
                                initial_position=pulsar.InitialPosition.Earliest,
                                key_shared_policy=sticky((1000, 30000), (60000, 65535)))
    producer = client.create_producer(topic, batching_enabled=False)
    for key in keys:
        producer.send(key.encode(), partition_key=key)
    # A last key of this consumer's: it comes after every earlier one of its own, none of the others'.
    last = next(f"last-{i}" for i in range(1000) if 1000 <= pulsar_hash(f"last-{i}") <= 30000)
    producer.send(b"last", partition_key=last)
    producer.close()
    (got,) = receive_until([consumer], len(mine) + 1)
    assert [m.partition_key() for m in got] == [*sorted(mine, key=keys.index), last]


def test_an_overlapping_range_is_refused(client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-sticky-conflict")
    client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=sticky((0, 32767)))
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared,
                         key_shared_policy=sticky((30000, 40000)))
    # The disjoint rest is free.
    client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=sticky((32768, 65535)))
    # AUTO_SPLIT is the default, and may not join a STICKY subscription.
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.KeyShared)


def _subscribe(raw: RawConnection, topic: str, consumer_id: int, meta: pulsar_api.KeySharedMeta) -> Command:
    raw.send(Command(type=Command.SUBSCRIBE, subscribe=pulsar_api.CommandSubscribe(
        topic=topic, subscription="s", subType=pulsar_api.CommandSubscribe.Key_Shared, consumer_id=consumer_id,
        request_id=consumer_id, keySharedMeta=meta)))
    return raw.receive()


def sticky_meta(*ranges: tuple[int, int], out_of_order: bool = False) -> pulsar_api.KeySharedMeta:
    return pulsar_api.KeySharedMeta(keySharedMode=pulsar_api.STICKY, allowOutOfOrderDelivery=out_of_order,
                                    hashRanges=[pulsar_api.IntRange(start=s, end=e) for s, e in ranges])


def test_refusals_say_what_was_wrong(server: StandaloneProcess) -> None:
    topic = unique_topic("pulsar-sticky-raw")
    with RawConnection(server.pulsar_port) as raw:
        assert raw.connect().type == Command.CONNECTED
        raw.send(Command(type=Command.LOOKUP, lookupTopic=pulsar_api.CommandLookupTopic(topic=topic, request_id=99)))
        assert raw.receive().type == Command.LOOKUP_RESPONSE  # the topic gets its owner: this broker
        assert _subscribe(raw, topic, 1, sticky_meta((0, 99))).type == Command.SUCCESS
        answer = _subscribe(raw, topic, 2, sticky_meta((50, 150)))
        assert answer.type == Command.ERROR and answer.error.error == pulsar_api.ConsumerBusy
        assert "Range conflict: [50, 150] overlaps [0, 99]" in answer.error.message
        answer = _subscribe(raw, topic, 3, sticky_meta((100, 70000)))  # the official clients check this
        assert answer.type == Command.ERROR and "within 0..65535" in answer.error.message
        answer = _subscribe(raw, topic, 4, sticky_meta((100, 200), out_of_order=True))
        assert answer.type == Command.ERROR and answer.error.error == pulsar_api.ConsumerBusy
        assert "out-of-order delivery allowed" in answer.error.message
        assert _subscribe(raw, topic, 5, sticky_meta((100, 200))).type == Command.SUCCESS
