"""The broker core's protocol-neutral sessions (ProducerSession, ConsumerSession), driven with plain
calls and awaitables as any front end drives them, no gRPC: receipts in request order from one
completion point, flow control at max_pending_sends, the first request's admission (grants, the
dead-letter policy's topics, properties limits) on a real Authorizer, the dead-letter policy merge,
cursor commands with their results, events, a broker-side close, and the entry's bytes passed by
reference from the session to the consumer. Over a real metadata store and storage node."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from herald.broker.core.admission import Admission
from herald.broker.core.consumer import ActiveConsumerChanged, Delivery, EndOfTopic
from herald.broker.core.consumer_session import ConsumerSession, SubscribeRequest
from herald.broker.core.cursor import InitialPosition
from herald.broker.core.metrics import BrokerMetrics
from herald.broker.core.producer_session import ProducerSession, Receipt
from herald.broker.core.service import BrokerService
from herald.broker.core.subscription_type import SubscriptionType
from herald.broker.core.topic import PersistentTopic
from herald.broker.settings import BrokerSettings
from herald.common.errors import (
    AuthorizationError,
    ConsumerClosedError,
    InvalidArgumentError,
    NotAllowedError,
    PersistenceError,
    PreconditionFailedError,
    ServiceNotReadyError,
)
from herald.metadata.authorization import Authorizer, Permissions
from herald.metadata.resources import Resources, StoredDeadLetterPolicy, Tenant
from herald.storage.client.storage_client import StorageClient
from prometheus_client import CollectorRegistry

from tests.integration import test_broker_core
from tests.integration.test_broker_core import DEADLINE, AllowAll, Cluster, entry

cluster = test_broker_core.cluster  # the fixture: a metadata store, a storage node, brokers on demand

TOPIC = "persistent://public/default/sessions"
NP_TOPIC = "non-persistent://public/default/sessions"
EARLIEST = InitialPosition.EARLIEST


async def broker(cluster: Cluster, settings: BrokerSettings | None = None,
                 metrics: BrokerMetrics | None = None) -> BrokerService:
    """A broker observed by `metrics` (cluster.broker() makes one observed by nobody)."""
    if metrics is None:
        return await cluster.broker(settings)
    client = StorageClient(cluster.store, [cluster.storage_server.address])
    await client.start()
    cluster.clients.append(client)
    settings = settings or BrokerSettings()
    settings.ensemble_size = settings.write_quorum = settings.ack_quorum = 1
    service = BrokerService(settings, cluster.store, client, AllowAll(), metrics)
    cluster.services.append(service)
    return service


async def registered(service: BrokerService, name: str = "p", topic: str = TOPIC,
                     admission: Admission | None = None, role: str | None = None) -> ProducerSession:
    session = ProducerSession(service, admission or Admission(service.settings), role)
    await session.register(topic, name, {})
    return session


async def receipts(session: ProducerSession, count: int) -> list[Receipt]:
    got: list[Receipt] = []
    while len(got) < count:
        got += await asyncio.wait_for(session.receipts(), DEADLINE)
    return got


async def subscribed(service: BrokerService, subscription: str = "s", topic: str = TOPIC,
                     sub_type: SubscriptionType = SubscriptionType.EXCLUSIVE, **fields: object) -> ConsumerSession:
    session = ConsumerSession(service, Admission(service.settings))
    await session.subscribe(SubscribeRequest(topic, subscription, sub_type, EARLIEST, **fields))  # type: ignore[arg-type]
    return session


async def deliveries(session: ConsumerSession, count: int) -> list[Delivery]:
    got: list[Delivery] = []
    while len(got) < count:
        got += await asyncio.wait_for(session.deliveries(), DEADLINE)
    return got


# ---- producer sessions: receipts ----

async def test_receipts_come_back_in_request_order_when_a_later_send_completes_first(cluster: Cluster) -> None:
    service = await cluster.broker()
    session = await registered(service)
    session.publish(0, 0, 1, entry("p", 0))
    first = await receipts(session, 1)
    assert (first[0].sequence_id, first[0].ledger_id >= 0, first[0].error) == (0, True, None)
    # 1 and 2 go to storage; the resent 0 is a duplicate, answered at once, before 1 is stored.
    session.publish(1, 1, 1, entry("p", 1))
    session.publish(0, 0, 1, entry("p", 0))
    session.publish(2, 2, 1, entry("p", 2))
    got = await receipts(session, 3)
    assert [r.sequence_id for r in got] == [1, 0, 2]
    assert [(r.ledger_id, r.entry_id) for r in got][1] == (-1, -1)
    assert got[0].entry_id + 1 == got[2].entry_id and got[0].ledger_id == got[2].ledger_id
    await session.close(drain=True)
    assert await asyncio.wait_for(session.receipts(), DEADLINE) == []  # drained: the end


async def test_a_refused_send_is_a_receipt_with_its_error_in_its_place(cluster: Cluster) -> None:
    service = await cluster.broker()
    session = await registered(service)
    session.publish(0, 0, 1, entry("p", 0))
    session.publish(1, 1, 1, entry("someone-else", 1))  # its metadata names another producer
    session.publish(2, 2, 1, entry("p", 2))
    got = await receipts(session, 3)
    assert [(r.sequence_id, type(r.error).__name__) for r in got] == [
        (0, "NoneType"), (1, "InvalidArgumentError"), (2, "NoneType")]
    assert "names producer 'someone-else'" in str(got[1].error)


async def test_room_waits_at_max_pending_sends_and_counts_the_stall(cluster: Cluster) -> None:
    metrics = BrokerMetrics(CollectorRegistry())
    service = await broker(cluster, BrokerSettings(max_pending_sends=2), metrics)
    session = await registered(service)
    assert session.has_room and await session.room()
    session.publish(0, 0, 1, entry("p", 0))
    session.publish(1, 1, 1, entry("p", 1))
    assert not session.has_room  # two sends whose receipts were not taken
    waiting = asyncio.ensure_future(session.room())
    assert [r.sequence_id for r in await receipts(session, 2)] == [0, 1]
    assert await asyncio.wait_for(waiting, DEADLINE) is True
    assert session.has_room
    assert metrics.registry.get_sample_value("herald_broker_throttled_sends_total") == 1


async def test_room_is_refused_once_the_broker_closes_the_producer(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(max_pending_sends=1))
    session = await registered(service)
    session.publish(0, 0, 1, entry("p", 0))
    waiting = asyncio.ensure_future(session.room())
    await service.unload_topic(TOPIC)
    assert await asyncio.wait_for(waiting, DEADLINE) is False
    await asyncio.wait_for(session.wait_closed(), DEADLINE)
    assert session.closed
    error = session.closed_error()
    assert isinstance(error, ServiceNotReadyError)
    assert str(error) == "producer p was closed by the broker: reconnect"


async def test_a_session_closed_without_drain_abandons_what_is_outstanding(cluster: Cluster) -> None:
    # A backlog quota of 100 bytes with producer_request_hold: the third send is held.
    service = await cluster.broker(BrokerSettings(backlog_quota_limit_bytes=100, backlog_quota_check_interval=0.1))
    consumer = await subscribed(service)  # a durable subscription: what it has not acked is backlog
    abandoned, drained = await registered(service, "gone"), await registered(service, "done")
    big = b"x" * 60  # two such entries are over the quota
    abandoned.publish(0, 0, 1, entry("gone", 0, big))
    drained.publish(0, 0, 1, entry("done", 0, big))
    await receipts(abandoned, 1)
    await receipts(drained, 1)
    abandoned.publish(1, 1, 1, entry("gone", 1, big))
    drained.publish(1, 1, 1, entry("done", 1, big))
    topic = await service.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)
    ledger = topic.ledger
    assert (topic.backlog_quota.held, ledger.number_of_entries_total) == (2, 2)
    await abandoned.close(drain=False)
    assert await asyncio.wait_for(abandoned.receipts(), DEADLINE) == []  # at once: nobody will read them
    await drained.close(drain=True)
    consumer.flow(10)
    batch = await deliveries(consumer, 2)
    consumer.ack([(d.ledger_id, d.entry_id) for d in batch])
    # Under quota again: the held sends are released, and refused (their producers are gone).
    got = await receipts(drained, 1)
    assert isinstance(got[0].error, PersistenceError) and str(got[0].error) == "Producer is closed"
    assert await asyncio.wait_for(drained.receipts(), DEADLINE) == []
    assert ledger.number_of_entries_total == 2  # neither held send was stored


# ---- producer sessions: admission ----

@pytest.fixture
async def authorizer(cluster: Cluster) -> AsyncIterator[Authorizer]:
    resources = Resources(cluster.store)
    await resources.create_tenant(Tenant("acme", ["acme-admin"], []))
    await resources.create_namespace("acme/ns")
    permissions = Permissions(cluster.store)
    await permissions.grant("writer", ["produce"], namespace="acme/ns")
    await permissions.grant("reader", ["consume"], namespace="acme/ns")
    await permissions.grant("reader", ["produce"], topic="persistent://acme/ns/letters")
    yield Authorizer(cluster.store, cache_seconds=0)


ACME = "persistent://acme/ns/orders"


async def test_a_producer_needs_the_produce_grant(cluster: Cluster, authorizer: Authorizer) -> None:
    service = await cluster.broker()
    admission = Admission(service.settings, authorizer)
    with pytest.raises(AuthorizationError, match=f"role 'reader' may not produce on {ACME}"):
        await registered(service, topic=ACME, admission=admission, role="reader")
    with pytest.raises(AuthorizationError, match="not authenticated"):
        await registered(service, topic=ACME, admission=admission, role=None)
    assert service.topic_names() == []  # refused before the topic was touched
    session = await registered(service, topic=ACME, admission=admission, role="writer")
    assert session.producer is not None and session.producer.name == "p"


async def test_a_producer_s_properties_are_limited(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(max_properties=2))
    session = ProducerSession(service, Admission(service.settings))
    with pytest.raises(InvalidArgumentError, match=r"a producer's properties are 3 pairs.*\(max_properties\)"):
        await session.register(TOPIC, "p", {"a": "1", "b": "2", "c": "3"})


async def test_a_consumer_needs_the_consume_grant_and_produce_on_its_dead_letter_topics(
    cluster: Cluster, authorizer: Authorizer,
) -> None:
    service = await cluster.broker()
    admission = Admission(service.settings, authorizer)

    async def subscribe(role: str, **fields: object) -> str:
        session = ConsumerSession(service, admission, role)
        return await session.subscribe(SubscribeRequest(ACME, "s", **fields))  # type: ignore[arg-type]

    with pytest.raises(AuthorizationError, match=f"role 'writer' may not consume on {ACME}"):
        await subscribe("writer")
    # The reader may produce on letters, not on the default retry topic.
    with pytest.raises(AuthorizationError, match="retry_letter_topic of the dead-letter policy: role 'reader'"):
        await subscribe("reader", max_redeliver_count=3, dead_letter_topic="persistent://acme/ns/letters")
    # A malformed policy is refused first, whoever asks.
    with pytest.raises(InvalidArgumentError, match="max_redeliver_count must be positive"):
        await subscribe("nobody", max_redeliver_count=-1)
    assert service.topic_names() == []
    assert await subscribe("reader", max_redeliver_count=3, dead_letter_topic="persistent://acme/ns/letters",
                           retry_letter_topic="persistent://acme/ns/letters", consumer_name="c") == "c"


async def test_a_subscribe_request_s_numbers_are_checked(cluster: Cluster) -> None:
    service = await cluster.broker()
    with pytest.raises(InvalidArgumentError, match="subscription type 9 is invalid: use EXCLUSIVE"):
        await subscribed(service, sub_type=9)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="initial position 7 is invalid: use EARLIEST or LATEST"):
        await ConsumerSession(service, Admission(service.settings)).subscribe(
            SubscribeRequest(TOPIC, "s", initial_position=7))


# ---- consumer sessions ----

async def test_the_admin_s_dead_letter_policy_wins_over_the_subscriber_s(cluster: Cluster) -> None:
    service = await cluster.broker()
    await subscribed(service, "mine", max_redeliver_count=5)
    topic = await service.get_topic(TOPIC)
    policy = topic.subscriptions["mine"].dead_letter_policy
    assert policy is not None and (policy.max_redeliver_count, policy.dead_letter_topic) == (5, f"{TOPIC}-mine-DLQ")
    await service.set_dead_letter_policy(TOPIC, "theirs", StoredDeadLetterPolicy(2, "", "", "admin"))
    await subscribed(service, "theirs", sub_type=SubscriptionType.SHARED, max_redeliver_count=9)
    policy = topic.subscriptions["theirs"].dead_letter_policy
    assert policy is not None and (policy.max_redeliver_count, policy.role) == (2, "admin")


async def test_deliveries_events_and_acks_through_a_session(cluster: Cluster) -> None:
    service = await cluster.broker()
    first = await subscribed(service, sub_type=SubscriptionType.FAILOVER, consumer_name="a")
    second = await subscribed(service, sub_type=SubscriptionType.FAILOVER, consumer_name="b")
    assert await asyncio.wait_for(first.next_event(), DEADLINE) == ActiveConsumerChanged(is_active=True)
    assert await asyncio.wait_for(second.next_event(), DEADLINE) == ActiveConsumerChanged(is_active=False)
    producer = await registered(service)
    data = entry("p", 0)
    producer.publish(0, 0, 1, data)
    await receipts(producer, 1)
    first.flow(5)
    [delivery] = await deliveries(first, 1)
    # The entry's bytes are passed by reference from the send to the delivery: no copy in between.
    assert delivery.data is data
    first.ack([(delivery.ledger_id, delivery.entry_id)])
    await service.terminate(TOPIC)
    assert await asyncio.wait_for(first.next_event(), DEADLINE) == EndOfTopic()


async def test_a_non_persistent_delivery_is_the_sent_bytes_object(cluster: Cluster) -> None:
    service = await cluster.broker()
    consumer = await subscribed(service, topic=NP_TOPIC)
    consumer.flow(1)
    producer = await registered(service, topic=NP_TOPIC)
    data = entry("p", 0)
    producer.publish(0, 0, 1, data)
    assert [(r.ledger_id, r.entry_id) for r in await receipts(producer, 1)] == [(-1, -1)]
    [delivery] = await deliveries(consumer, 1)
    assert delivery.data is data


async def test_seek_and_unsubscribe_answer_with_a_result(cluster: Cluster) -> None:
    service = await cluster.broker()
    first = await subscribed(service, sub_type=SubscriptionType.SHARED)
    second = await subscribed(service, sub_type=SubscriptionType.SHARED)
    error = await first.unsubscribe()
    assert isinstance(error, PreconditionFailedError) and "has 1 other consumer(s) connected" in str(error)
    assert await first.seek(InitialPosition.EARLIEST) is None
    # A seek disconnects the subscription's consumers: their clients reconnect.
    for session in (first, second):
        await asyncio.wait_for(session.wait_closed(), DEADLINE)
        with pytest.raises(ConsumerClosedError, match="the subscription was reset"):
            await session.deliveries()
    third = await subscribed(service)
    assert await third.unsubscribe() is None
    assert await service.list_subscriptions(TOPIC) == []


async def test_seeking_a_non_persistent_topic_is_refused_by_its_capability(cluster: Cluster) -> None:
    service = await cluster.broker()
    session = await subscribed(service, topic=NP_TOPIC)
    error = await session.seek(InitialPosition.EARLIEST)
    assert isinstance(error, NotAllowedError)
    assert str(error) == f"resetting a cursor is not supported on non-persistent topics ({NP_TOPIC})"
    topic = await service.get_topic(NP_TOPIC)
    with pytest.raises(NotAllowedError, match=r"^pull is not supported on non-persistent topics"):
        topic.persistent_ops("pull")
    assert (await service.get_topic(TOPIC)).persistent_ops("pull").name == TOPIC


async def test_a_consumer_closed_by_the_broker_is_told_so(cluster: Cluster) -> None:
    service = await cluster.broker()
    session = await subscribed(service, consumer_name="c")
    await service.unload_topic(TOPIC)
    await asyncio.wait_for(session.wait_closed(), DEADLINE)
    assert str(session.closed_error()) == "consumer c was closed by the broker: reconnect"
    with pytest.raises(ConsumerClosedError, match="the topic was unloaded"):
        await session.next_event()
    await session.close()  # idempotent after the broker's close
