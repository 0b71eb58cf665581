"""Item 9 (issue 22): two resources naming one Herald object. The one created later (by
creationTimestamp, then uid) gets Ready=False, reason ResourceConflict, naming the owner, and is
never applied: Herald keeps the owner's policies, and deleting the loser leaves the object. When the
owner goes, the other takes over at its next reconcile. Real operator on kmock, real standalone."""

from __future__ import annotations

import datetime

from herald.client.admin import AdminClient

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_name
from tests.operator.conftest import NAMESPACE, OTHER_NAMESPACE, Cluster, OperatorStarter, assert_status_declared

EARLIER = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
LATER = EARLIER + datetime.timedelta(minutes=5)


async def condition_is(cluster: Cluster, kind: str, name: str, type_: str, status: str, reason: str,
                       ns: str = NAMESPACE) -> dict[str, object] | None:
    found = await cluster.condition(kind, name, type_, ns)
    return found if found is not None and (found["status"], found["reason"]) == (status, reason) else None


async def test_a_later_topic_resource_naming_the_same_topic_is_never_applied_nor_deletes_it(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    operator = await start_operator(herald.service_url)
    local = unique_name("shared")
    topic = f"persistent://acme/shop/{local}"
    owner_spec = {"tenant": "acme", "namespace": "shop", "name": local, "partitions": 2, "ttlSeconds": 600,
                  "maxProducers": 5}
    await cluster.apply("Topic", "owner", owner_spec, created=EARLIER)
    await eventually(lambda: condition_is(cluster, "Topic", "owner", "Synced", "True", "Reconciled"), "owner Synced")
    # The same Herald topic from another Kubernetes namespace, created later, asking for other policies.
    await cluster.apply("Topic", "intruder", {
        "tenant": "acme", "namespace": "shop", "name": local, "partitions": 3, "ttlSeconds": 5,
        "deletionPolicy": "Delete"}, ns=OTHER_NAMESPACE, created=LATER)
    ready = await eventually(lambda: condition_is(cluster, "Topic", "intruder", "Ready", "False", "ResourceConflict",
                                                  OTHER_NAMESPACE), "intruder ResourceConflict")
    assert f"Topic {NAMESPACE}/owner" in str(ready["message"]) and topic in str(ready["message"])
    intruder = await cluster.get("Topic", "intruder", OTHER_NAMESPACE)
    assert intruder is not None and intruder["status"]["phase"] == "Failed"
    assert "topic" not in intruder["status"], "a resource never applied names no topic as its own"
    assert_status_declared("topic", intruder)
    assert_status_declared("topic", await cluster.get("Topic", "owner"))

    # Several resyncs of the loser (1 s each) later, Herald still has the owner's spec, never the intruder's.
    def conflicts() -> float:
        return operator.metrics.registry.get_sample_value(
            "herald_operator_reconciles_total", {"kind": "topic", "result": "conflict"}) or 0.0
    await eventually(lambda: conflicts() >= 3, "three passes of the loser")
    policies = await admin.topic_policies(topic)
    assert (policies.message_ttl_seconds, policies.max_producers_per_topic) == (600, 5)
    assert await admin.get_partitions(topic) == 2
    events = cluster.events("intruder")
    assert any(e["reason"] == "ResourceConflict" and e["type"] == "Warning" for e in events), events

    # Deleting the loser (deletionPolicy Delete) releases it and leaves the topic and its policies.
    await cluster.delete("Topic", "intruder", OTHER_NAMESPACE)

    async def released() -> bool:
        return await cluster.get("Topic", "intruder", OTHER_NAMESPACE) is None
    await eventually(released, "the loser released by its finalizer")
    assert await admin.get_partitions(topic) == 2
    assert (await admin.topic_policies(topic)).message_ttl_seconds == 600


async def test_the_conflicting_topic_resource_takes_over_when_the_owner_is_deleted(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    local = unique_name("handover")
    topic = f"persistent://public/default/{local}"
    await cluster.apply("Topic", "first", {"name": local, "partitions": 1, "ttlSeconds": 100,
                                           "deletionPolicy": "Retain"}, created=EARLIER)
    await eventually(lambda: condition_is(cluster, "Topic", "first", "Synced", "True", "Reconciled"), "first Synced")
    await cluster.apply("Topic", "second", {"name": local, "partitions": 1, "ttlSeconds": 200}, created=LATER)
    await eventually(lambda: condition_is(cluster, "Topic", "second", "Ready", "False", "ResourceConflict"),
                     "second ResourceConflict")
    assert (await admin.topic_policies(topic)).message_ttl_seconds == 100
    await cluster.delete("Topic", "first")
    await eventually(lambda: condition_is(cluster, "Topic", "second", "Synced", "True", "Reconciled"),
                     "second took over")
    assert (await admin.topic_policies(topic)).message_ttl_seconds == 200
    second = await cluster.get("Topic", "second")
    assert second is not None and second["status"]["topic"] == topic


async def test_same_creation_time_the_lower_uid_owns_the_topic(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    local = unique_name("tie")
    await cluster.apply("Topic", "a", {"name": local, "ttlSeconds": 11}, created=EARLIER)
    await cluster.apply("Topic", "b", {"name": local, "ttlSeconds": 22}, created=EARLIER)
    uids = {}
    for name in ("a", "b"):
        obj = await cluster.get("Topic", name)
        assert obj is not None
        uids[name] = obj["metadata"]["uid"]
    winner, loser = sorted(uids, key=uids.__getitem__)
    await eventually(lambda: condition_is(cluster, "Topic", loser, "Ready", "False", "ResourceConflict"), "loser")
    await eventually(lambda: condition_is(cluster, "Topic", winner, "Synced", "True", "Reconciled"), "winner")
    policies = await admin.topic_policies(f"persistent://public/default/{local}")
    assert policies.message_ttl_seconds == {"a": 11, "b": 22}[winner]


async def test_a_later_subscription_resource_naming_the_same_subscription_is_never_applied(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    topic_local = unique_name("jobs")
    topic = f"persistent://public/default/{topic_local}"
    await cluster.apply("Topic", topic_local, {"partitions": 1}, created=EARLIER)
    # One names the Topic resource, the other the full topic name from another namespace: same subscription.
    await cluster.apply("Subscription", "workers", {
        "topic": topic_local, "subscriptionName": "workers",
        "deadLetterPolicy": {"maxRedeliverCount": 3}}, created=EARLIER)
    await eventually(lambda: condition_is(cluster, "Subscription", "workers", "Synced", "True", "Reconciled"),
                     "owner Synced")
    await cluster.apply("Subscription", "copy", {
        "topic": topic, "subscriptionName": "workers", "deadLetterPolicy": {"maxRedeliverCount": 9}},
        ns=OTHER_NAMESPACE, created=LATER)
    ready = await eventually(lambda: condition_is(cluster, "Subscription", "copy", "Ready", "False",
                                                  "ResourceConflict", OTHER_NAMESPACE), "copy ResourceConflict")
    assert f"Subscription {NAMESPACE}/workers" in str(ready["message"])
    assert_status_declared("subscription", await cluster.get("Subscription", "copy", OTHER_NAMESPACE))
    assert_status_declared("subscription", await cluster.get("Subscription", "workers"))
    assert (await admin.dead_letter_policy(topic, "workers")).max_redeliver_count == 3
    await cluster.delete("Subscription", "copy", OTHER_NAMESPACE)

    async def released() -> bool:
        return await cluster.get("Subscription", "copy", OTHER_NAMESPACE) is None
    await eventually(released, "the loser released")
    assert await admin.list_subscriptions(topic) == ["workers"]
    assert (await admin.dead_letter_policy(topic, "workers")).max_redeliver_count == 3
