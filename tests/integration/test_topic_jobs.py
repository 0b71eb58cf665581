"""A broker's idle topics and subscriptions cost no task each (issue 20 items 4 and 6): cursor
flushes, retention, expiry and backlog quota checks of every persistent topic run in one task per
kind of work, the cursor flush visits only the topics whose cursors changed, and a subscription's
dispatcher holds a task only while it has work. Counted, never timed."""

from __future__ import annotations

import asyncio

from herald.broker.core.consumer import Consumer
from herald.broker.core.topic import PersistentTopic
from herald.broker.settings import BrokerSettings

from tests.helpers import eventually
from tests.integration.test_broker_core import DEADLINE, EARLIEST, EXCLUSIVE, Cluster, entry, publish_all, receive
from tests.integration.test_broker_core import cluster as cluster

TOPICS = 40


def topic_name(i: int) -> str:
    return f"persistent://public/default/idle-{i}"


async def test_idle_topics_and_consumers_hold_a_constant_number_of_tasks(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(cursor_flush_interval=0.05, retention_check_interval=0.05,
                                                  message_expiry_check_interval=0.05,
                                                  backlog_quota_check_interval=0.05))
    await publish_all(service, "p", 0, 1, topic=topic_name(0))
    before = len(asyncio.all_tasks())
    consumers: list[Consumer] = []
    for i in range(1, TOPICS + 1):
        await publish_all(service, "p", 0, 1, topic=topic_name(i))
        consumer = await service.subscribe(topic_name(i), "s", EXCLUSIVE, EARLIEST)
        consumer.flow(10)
        await receive(consumer, 1)
        consumers.append(consumer)
    for i in range(TOPICS + 1):
        assert isinstance(await service.get_topic(topic_name(i)), PersistentTopic)
    # Was 5 per topic: a cursor flush, retention, expiry and backlog quota task each, and a
    # dispatcher's read loop waiting for work for each subscription.
    await eventually(lambda: len(asyncio.all_tasks()) - before <= 4, "the idle topics' tasks gone",
                     timeout=DEADLINE)
    assert service.topic_jobs.tasks <= 4
    runs = service.topic_jobs.retention.runs
    await eventually(lambda: service.topic_jobs.retention.runs >= runs + TOPICS, "a retention pass over them all",
                     timeout=DEADLINE)
    # An idle consumer still gets what comes: its dispatcher's task starts again when needed.
    await publish_all(service, "p", 1, 1, topic=topic_name(TOPICS))
    assert len(await receive(consumers[-1], 1)) == 1
    for consumer in consumers:
        await consumer.close()


async def test_the_cursor_flush_visits_only_the_topics_whose_cursors_changed(cluster: Cluster) -> None:
    service = await cluster.broker(BrokerSettings(cursor_flush_interval=0.05))
    for i in range(TOPICS):
        await publish_all(service, "p", 0, 3, topic=topic_name(i))
        idle = await service.subscribe(topic_name(i), "s", EXCLUSIVE, EARLIEST)
        await idle.close()
    key = "/cursors/public/default/persistent/idle-0/s"
    flush = service.topic_jobs.cursor_flush
    consumer = await service.subscribe(topic_name(0), "s", EXCLUSIVE, EARLIEST)
    consumer.flow(10)
    got = await receive(consumer, 3)
    await eventually(lambda: flush.idle, "the cursor flushes of the setup done", timeout=DEADLINE)
    runs_before = flush.runs
    for delivery in got:
        consumer.ack([(delivery.ledger_id, delivery.entry_id)], cumulative=True)

        async def flushed(position: tuple[int, int] = (delivery.ledger_id, delivery.entry_id)) -> bool:
            stored = await cluster.store.get(key)
            return stored is not None and b"[%d,%d]" % position in stored.value

        await eventually(flushed, "the acknowledged position persisted", timeout=DEADLINE)
    # One topic's cursor changed three times: a visit of it each time, none of the 39 idle ones
    # (each of which had a producer leave: dedup's forgetting is on a timer, not every pass).
    assert flush.runs - runs_before <= 3 * 2
    await consumer.close()


async def test_held_sends_are_rechecked_without_waiting_for_the_quota_interval(cluster: Cluster) -> None:
    # The quota's periodic check is an hour away: the held send is released by the recheck timer
    # the shared job's check leaves behind while sends are held (as the per-topic task's 1 s wait was).
    from tests.integration.test_broker_sessions import TOPIC as SESSIONS_TOPIC
    from tests.integration.test_broker_sessions import deliveries, receipts, registered, subscribed

    service = await cluster.broker(BrokerSettings(backlog_quota_limit_bytes=100, backlog_quota_check_interval=3600))
    consumer = await subscribed(service)
    session = await registered(service, "p")
    big = b"x" * 60  # two such entries are over the quota
    session.publish(0, 0, 1, entry("p", 0, big))
    session.publish(1, 1, 1, entry("p", 1, big))
    assert [r.sequence_id for r in await receipts(session, 2)] == [0, 1]
    session.publish(2, 2, 1, entry("p", 2, big))
    topic = await service.get_topic(SESSIONS_TOPIC)
    assert isinstance(topic, PersistentTopic)
    await eventually(lambda: topic.backlog_quota.held == 1, "the third send held", timeout=DEADLINE)
    consumer.flow(10)
    batch = await deliveries(consumer, 2)
    consumer.ack([(d.ledger_id, d.entry_id) for d in batch])
    got = await receipts(session, 1)
    assert got[0].sequence_id == 2 and got[0].error is None
