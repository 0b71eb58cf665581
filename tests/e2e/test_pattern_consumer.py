"""The pattern consumer against a real `herald standalone`: every topic of the pattern's namespace
whose full name matches (partitioned topics by their base name, read on every partition), and no
other; topics created later picked up and deleted ones dropped within the discovery period; a
pattern without a domain meaning persistent; the errors (no literal namespace, a bad domain, an
unknown namespace, retries with a pattern); and the blocking facade."""

from __future__ import annotations

import re
from typing import Any

import pytest
from herald.client import AsyncClient, AsyncConsumer, Client, ConsumerType, InitialPosition, InvalidArgumentError
from herald.client.admin import AdminClient
from herald.client.pattern_consumer import PatternConsumer, parse_pattern
from herald.common.errors import NotFoundError

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_name

EARLIEST = InitialPosition.Earliest


@pytest.fixture
def prefix() -> str:
    return unique_name("pat")


async def produce(client: AsyncClient, topic: str, *values: bytes) -> None:
    producer = await client.create_producer(topic, batching_enabled=False)
    for value in values:
        await producer.send(value)
    await producer.close()


async def received(consumer: AsyncConsumer[Any], count: int) -> dict[str, list[bytes]]:
    """`count` messages by the topic they came from; nothing more comes."""
    by_topic: dict[str, list[bytes]] = {}
    for _ in range(count):
        message = await consumer.receive(timeout=10)
        assert message is not None, f"only {sum(map(len, by_topic.values()))} of {count} messages arrived"
        by_topic.setdefault(message.topic, []).append(message.data())
        consumer.acknowledge(message)
    assert await consumer.receive(timeout=0.2) is None
    return by_topic


async def test_a_pattern_reads_every_matching_topic_of_its_namespace_and_no_other(
    client: AsyncClient, admin: AdminClient, prefix: str,
) -> None:
    namespace = f"public/{prefix}-ns"
    await admin.create_namespace(namespace)
    base = f"persistent://public/default/{prefix}"
    plain, parted, other = f"{base}-a", f"{base}-b", f"persistent://public/default/x{prefix}-c"
    elsewhere = f"persistent://{namespace}/{prefix}-d"
    await admin.create_topic(parted, partitions=2)
    for topic in (plain, parted, other, elsewhere):
        await produce(client, topic, b"1", b"2")
    consumer = await client.subscribe(re.compile(f"persistent://public/default/{prefix}-.*"), "s",
                                      initial_position=EARLIEST)
    assert isinstance(consumer, PatternConsumer)
    assert consumer.topic == f"persistent://public/default/{prefix}-.*"
    assert sorted(consumer.topics) == [plain, parted]
    got = await received(consumer, 4)
    assert got == {plain: [b"1", b"2"], f"{parted}-partition-0": [b"1"], f"{parted}-partition-1": [b"2"]} or got == {
        plain: [b"1", b"2"], f"{parted}-partition-0": [b"2"], f"{parted}-partition-1": [b"1"]}


async def test_the_whole_name_must_match(client: AsyncClient, prefix: str) -> None:
    await produce(client, f"{prefix}-abc", b"x")
    await produce(client, f"{prefix}-abcd", b"y")
    consumer = await client.subscribe(re.compile(f"persistent://public/default/{prefix}-abc"), "s",
                                      initial_position=EARLIEST)
    assert await received(consumer, 1) == {f"persistent://public/default/{prefix}-abc": [b"x"]}


async def test_topics_created_later_are_picked_up_and_deleted_ones_dropped(
    client: AsyncClient, admin: AdminClient, prefix: str,
) -> None:
    first = f"persistent://public/default/{prefix}-first"
    await produce(client, first, b"old")
    consumer = await client.subscribe(re.compile(f"public/default/{prefix}-.*"), "s", ConsumerType.Shared,
                                      initial_position=EARLIEST, pattern_auto_discovery_period=0.2)
    assert isinstance(consumer, PatternConsumer)
    assert await received(consumer, 1) == {first: [b"old"]}
    later, parted = f"persistent://public/default/{prefix}-later", f"persistent://public/default/{prefix}-parted"
    await admin.create_topic(parted, partitions=2)
    await produce(client, later, b"new")  # made by its first producer
    await eventually(lambda: sorted(consumer.topics) == [first, later, parted], "the new topics subscribed")
    assert len(consumer.partitions) == 4
    await produce(client, parted, b"p1", b"p2")
    got = await received(consumer, 3)
    assert got.pop(later) == [b"new"] and sorted(value for values in got.values() for value in values) == [b"p1", b"p2"]
    # Deleted topics: their consumers close rather than reconnect (which would make them again).
    await admin.delete_topic(first, force=True)
    await eventually(lambda: first not in consumer.topics, "the deleted topic dropped")
    assert [member.topic for member in consumer.partitions] == [later, f"{parted}-partition-0",
                                                                 f"{parted}-partition-1"]
    await admin.delete_topic(parted, force=True)
    await eventually(lambda: consumer.topics == [later], "the deleted partitioned topic dropped")
    assert [member.topic for member in consumer.partitions] == [later]
    assert set(await admin.list_topics("public/default")).isdisjoint({first, parted, f"{parted}-partition-0"})
    # A topic made again under a deleted one's name is found again.
    await produce(client, first, b"again")
    assert await received(consumer, 1) == {first: [b"again"]}


async def test_a_pattern_may_match_nothing_yet(client: AsyncClient, prefix: str) -> None:
    consumer = await client.subscribe(re.compile(f"persistent://public/default/{prefix}-.*"), "s",
                                      initial_position=EARLIEST, pattern_auto_discovery_period=0.2)
    assert isinstance(consumer, PatternConsumer) and consumer.topics == []
    assert not consumer.has_reached_end_of_topic()
    await produce(client, f"{prefix}-one", b"first")
    message = await consumer.receive(timeout=20)
    assert message is not None and message.data() == b"first"


def test_a_pattern_names_its_domain_and_namespace_literally() -> None:
    assert parse_pattern(re.compile("persistent://public/default/a-.*"))[:2] == (True, "public/default")
    assert parse_pattern(re.compile("non-persistent://t/n/.*"))[:2] == (False, "t/n")
    assert parse_pattern(re.compile("my\\.tenant/ns\\-1/x.*"))[:2] == (True, "my.tenant/ns-1")
    assert parse_pattern(re.compile(re.escape("persistent://a-b/c.d/") + ".*"))[:2] == (True, "a-b/c.d")
    covers = parse_pattern(re.compile("public/default/A.*", re.IGNORECASE))
    assert covers.rest.fullmatch("public/default/abc") and not covers.rest.fullmatch("public/default/bc")


@pytest.mark.parametrize(("pattern", "error"), [
    ("my-topic-.*", "names no namespace"),
    ("public/.*", "names no namespace"),
    (".*/default/x", "must be literal names"),
    ("public/def(ault)?/x", "must be literal names"),
    ("persist.*://public/default/x", "the domain must be"),
])
async def test_a_pattern_without_a_literal_namespace_is_refused(client: AsyncClient, pattern: str, error: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(error)):
        await client.subscribe(re.compile(pattern), "s")
    assert not client._consumers


async def test_a_pattern_over_an_unknown_namespace_fails_the_subscription(client: AsyncClient) -> None:
    with pytest.raises(NotFoundError):
        await client.subscribe(re.compile("persistent://public/no-such-namespace/.*"), "s")
    assert not client._consumers


async def test_retries_cannot_be_combined_with_a_pattern(client: AsyncClient, prefix: str) -> None:
    with pytest.raises(InvalidArgumentError, match="retry_enable cannot be used with a topics pattern"):
        await client.subscribe(re.compile(f"public/default/{prefix}.*"), "s", ConsumerType.Shared, retry_enable=True)


def test_the_blocking_client_subscribes_with_a_pattern(shared_standalone: StandaloneProcess, prefix: str) -> None:
    with Client(shared_standalone.service_url) as client:
        client.create_producer(f"{prefix}-sync").send(b"hello")
        consumer = client.subscribe(re.compile(f"public/default/{prefix}-.*"), "s", initial_position=EARLIEST)
        assert consumer.topic == f"public/default/{prefix}-.*"
        message = consumer.receive(timeout=10)
        assert message is not None and (message.data(), message.topic) == (
            b"hello", f"persistent://public/default/{prefix}-sync")
