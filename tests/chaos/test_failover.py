"""Failover on a local cluster of real processes (issue 21 items 5 and 7): a topic whose owner
broker is SIGKILLed, unloaded or shut down moves to the other broker and producing goes on with
nothing lost; a Redis pause shorter than the session timeout moves nothing. Gaps are measured by
bench/failover_gap.py (bench/results/issue21_failover.md), never asserted here."""

from __future__ import annotations

import asyncio
import time

import pytest
from herald.client.admin import SyncAdminClient
from herald.common.ownership import OWNERSHIP_PREFIX
from herald.local_cluster import LocalCluster
from herald.metadata.redis import RedisMetadataStore
from herald.metadata.store import Versioned

from tests.chaos.checker import PHASE_SECONDS, ContinuousProducer, check, read_everything
from tests.chaos.test_chaos import owner_of, run_for
from tests.helpers import eventually_sync

pytestmark = pytest.mark.timeout(600)


def ownership_records(cluster: LocalCluster) -> dict[str, Versioned]:
    """Every /ownership/ record as stored: a lease that expired and a topic assigned again show as
    a new version under a new lease, even when the same broker gets it back."""

    async def read() -> dict[str, Versioned]:
        store = RedisMetadataStore(cluster.metadata_url)
        await store.start()
        try:
            return await store.list(OWNERSHIP_PREFIX)
        finally:
            await store.close()

    return asyncio.run(read())


def test_a_redis_pause_shorter_than_the_session_timeout_moves_no_topic(local_cluster: LocalCluster) -> None:
    """Item 7: Redis SIGSTOPped for 1.5 s (the brokers' lease TTL is 3 heartbeats of 0.5 s): every
    topic stays with the broker that owned it, under the same lease, and producing goes on."""
    topics = [f"blip-{n}" for n in range(6)]
    producers = [ContinuousProducer(local_cluster.service_url, topic).start() for topic in topics[:2]]
    for producer in producers:
        producer.wait_for_acks(200)
    owners = {topic: owner_of(local_cluster, topic) for topic in topics}
    assert len(set(owners.values())) == 2, f"the topics should spread over both brokers: {owners}"
    before = ownership_records(local_cluster)
    assert len(before) == len(topics)
    local_cluster.redis.pause()
    time.sleep(1.5)  # the blip itself
    local_cluster.redis.resume()
    for producer in producers:
        run_for(producer, PHASE_SECONDS)
    assert ownership_records(local_cluster) == before
    assert {topic: owner_of(local_cluster, topic) for topic in topics} == owners
    for broker in local_cluster.brokers:
        assert "expired: dropping all topics" not in broker.log_path.read_text(), broker.name
    for producer in producers:
        history = producer.stop()
        assert not history.failed, history.errors[:3]
        check(history, read_everything(local_cluster.service_url, producer.topic))


def test_a_graceful_unload_moves_the_topic_and_every_send_succeeds(local_cluster: LocalCluster) -> None:
    """Item 5: `herald admin topics unload` while a producer sends: the topic moves to the other
    broker, every send is acknowledged (none fails) and nothing is lost or doubled."""
    topic = "unload-under-load"
    producer = ContinuousProducer(local_cluster.service_url, topic).start()
    producer.wait_for_acks(500)
    owner = owner_of(local_cluster, topic)
    with SyncAdminClient(owner) as admin:
        admin.unload_topic(topic)
    eventually_sync(lambda: owner_of(local_cluster, topic), "the unloaded topic assigned to the other broker",
                    until=lambda address: address != owner, timeout=60, interval=0.1)
    run_for(producer, PHASE_SECONDS)
    history = producer.stop()
    assert not history.failed, history.errors[:3]
    check(history, read_everything(local_cluster.service_url, topic))


def test_a_broker_shut_down_with_sigterm_hands_its_topic_over_and_every_send_succeeds(
    local_cluster: LocalCluster,
) -> None:
    """Item 5, a rolling restart's step: the owner broker gets SIGTERM while a producer sends; the
    topic moves to the other broker and every send is acknowledged, nothing lost or doubled."""
    topic = "sigterm-under-load"
    producer = ContinuousProducer(local_cluster.service_url, topic).start()
    producer.wait_for_acks(500)
    victim = local_cluster.broker_at(owner_of(local_cluster, topic))
    victim.stop()
    run_for(producer, PHASE_SECONDS)
    assert owner_of(local_cluster, topic) != victim.address
    history = producer.stop()
    assert not history.failed, history.errors[:3]
    check(history, read_everything(local_cluster.service_url, topic))


def test_a_producer_that_reconnects_while_lookup_is_paused_carries_on_when_lookup_wakes(
    local_cluster: LocalCluster,
) -> None:
    """Lookup SIGSTOPped as the owner broker dies: the producer's reconnect asks a silent lookup, and
    the client closes that silent connection (keep_alive 1 s) under the pending lookup call. Once
    lookup wakes, the producer must find the new owner and carry on; it once gave up for good, its
    stream ended by the closed call's CancelledError (seed 15 of the nemesis soak)."""
    topic = "reconnect-to-paused-lookup"
    producer = ContinuousProducer(local_cluster.service_url, topic).start()
    producer.wait_for_acks(200)
    owner = local_cluster.broker_at(owner_of(local_cluster, topic))
    local_cluster.lookup.pause()
    owner.kill()
    time.sleep(5)  # past two keepalive intervals: the lookup connection is closed under the lookup call
    local_cluster.lookup.resume()
    run_for(producer, PHASE_SECONDS, progress_within=30)
    history = producer.stop()
    check(history, read_everything(local_cluster.service_url, topic))
