"""subscribe() refuses a bad request before any network call, with the errors of SEEDS §3 in
Pulsar's order: client closed; empty subscription name; read_compacted only on Exclusive / Failover
subscriptions of persistent topics; a consumer event listener only on Failover; topic names and a
pattern are exclusive. Each check is shown to come before the next by breaking both at once."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from herald.client import (
    AlreadyClosedError,
    AsyncClient,
    Client,
    ConsumerEventListener,
    ConsumerType,
    InvalidArgumentError,
)

UNREACHABLE = "herald://127.0.0.1:1"  # nothing listens: any network call would time out, not fail fast
LISTENER = ConsumerEventListener()
PATTERN = re.compile("persistent://public/default/.*")


@pytest.fixture
async def client() -> AsyncIterator[AsyncClient]:
    made = AsyncClient(UNREACHABLE, connection_timeout=30, operation_timeout=30)
    yield made
    if not made.closed:
        await made.close()


async def refused(client: AsyncClient, topic: Any, subscription: str, consumer_type: ConsumerType,
                  **options: Any) -> str:
    with pytest.raises((InvalidArgumentError, AlreadyClosedError)) as raised:
        await client.subscribe(topic, subscription, consumer_type, **options)
    return str(raised.value)


async def test_a_closed_client_is_reported_before_anything_else(client: AsyncClient) -> None:
    await client.close()
    message = await refused(client, ["a", PATTERN], "", ConsumerType.Shared, read_compacted=True,
                            consumer_event_listener=LISTENER)
    assert message == "client already closed"


async def test_an_empty_subscription_name_comes_next(client: AsyncClient) -> None:
    message = await refused(client, ["a", PATTERN], "", ConsumerType.Shared, read_compacted=True,
                            consumer_event_listener=LISTENER)
    assert message.startswith("subscription name is empty")


@pytest.mark.parametrize("consumer_type", [ConsumerType.Shared, ConsumerType.KeyShared])
async def test_read_compacted_needs_an_exclusive_or_failover_subscription(
    client: AsyncClient, consumer_type: ConsumerType,
) -> None:
    message = await refused(client, ["a", PATTERN], "s", consumer_type, read_compacted=True,
                            consumer_event_listener=LISTENER)
    assert message == "read_compacted can only be used with Exclusive or Failover subscriptions of persistent topics"


async def test_read_compacted_needs_persistent_topics(client: AsyncClient) -> None:
    for topic in ("non-persistent://public/default/t", ["t", "non-persistent://public/default/t"],
                  re.compile("non-persistent://public/default/.*")):
        message = await refused(client, topic, "s", ConsumerType.Failover, read_compacted=True)
        assert message.startswith("read_compacted can only be used")


@pytest.mark.parametrize("consumer_type", [ConsumerType.Exclusive, ConsumerType.Shared, ConsumerType.KeyShared])
async def test_an_event_listener_needs_a_failover_subscription(
    client: AsyncClient, consumer_type: ConsumerType,
) -> None:
    message = await refused(client, ["a", PATTERN], "s", consumer_type, consumer_event_listener=LISTENER)
    assert message == "a consumer_event_listener is only supported on Failover subscriptions"


async def test_topic_names_and_a_pattern_are_exclusive(client: AsyncClient) -> None:
    message = await refused(client, ["a", PATTERN], "s", ConsumerType.Failover, consumer_event_listener=LISTENER)
    assert message.startswith("topic names and a topics pattern cannot be combined")


@pytest.mark.parametrize("topic", [[], (), 42, None])
async def test_a_topic_that_is_no_name_list_or_pattern_is_refused(client: AsyncClient, topic: object) -> None:
    message = await refused(client, topic, "s", ConsumerType.Exclusive)
    assert message.startswith("topic must be a topic name, a non-empty list of names or a compiled pattern")


async def test_a_bad_topic_in_a_list_is_named(client: AsyncClient) -> None:
    message = await refused(client, ["good", "bad name"], "s", ConsumerType.Exclusive)
    assert "'bad name'" in message


def test_the_blocking_client_refuses_in_the_same_order() -> None:
    client = Client(UNREACHABLE, connection_timeout=30, operation_timeout=30)
    try:
        with pytest.raises(InvalidArgumentError, match=r"^subscription name is empty"):
            client.subscribe(["a", PATTERN], "", ConsumerType.Shared, read_compacted=True)
        with pytest.raises(InvalidArgumentError, match=r"^read_compacted can only be used"):
            client.subscribe("t", "s", ConsumerType.Shared, read_compacted=True, consumer_event_listener=LISTENER)
        with pytest.raises(InvalidArgumentError, match=r"^a consumer_event_listener is only supported"):
            client.subscribe("t", "s", ConsumerType.Shared, consumer_event_listener=LISTENER)
    finally:
        client.close()
    with pytest.raises(AlreadyClosedError, match=r"^client already closed$"):
        client.subscribe("t", "", ConsumerType.Shared)
