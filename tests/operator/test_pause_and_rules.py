"""Item 10 (issue 22), in the operator itself: the pause annotation (herald.io/paused: "true")
stops reconciliation and says so in the status, removing it resumes; and the operator refuses what
the CRDs' CEL rules refuse (a changed tenant/namespace/name/persistent or subscriptionName, quorums
out of order) without relying on an API server to run them."""

from __future__ import annotations

from herald.client.admin import AdminClient

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_name
from tests.operator.conftest import Cluster, OperatorStarter, assert_status_declared

PAUSED = "herald.io/paused"


async def synced_is(cluster: Cluster, kind: str, name: str, status: str, reason: str) -> dict[str, object] | None:
    found = await cluster.condition(kind, name, "Synced")
    return found if found is not None and (found["status"], found["reason"]) == (status, reason) else None


async def test_a_paused_topic_is_not_reconciled_until_the_annotation_goes(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    operator = await start_operator(herald.service_url)
    name = unique_name("paused")
    topic = f"persistent://public/default/{name}"
    await cluster.apply("Topic", name, {"ttlSeconds": 100, "deletionPolicy": "Delete"})
    await eventually(lambda: synced_is(cluster, "Topic", name, "True", "Reconciled"), "Synced")
    await cluster.annotate("Topic", name, {PAUSED: "true"})
    found = await eventually(lambda: synced_is(cluster, "Topic", name, "False", "ReconciliationPaused"), "paused")
    assert PAUSED in str(found["message"])
    obj = await cluster.get("Topic", name)
    assert obj is not None and obj["status"]["phase"] == "Paused"
    assert_status_declared("topic", obj)

    # While paused, a spec change and drift made through the admin API are both left alone.
    await cluster.patch("Topic", name, {"ttlSeconds": 200})
    policies = await admin.topic_policies(topic)
    policies.message_ttl_seconds = 5
    await admin.set_topic_policies(topic, policies)

    def paused_passes() -> float:
        return operator.metrics.registry.get_sample_value(
            "herald_operator_reconciles_total", {"kind": "topic", "result": "paused"}) or 0.0
    before = paused_passes()
    await eventually(lambda: paused_passes() >= before + 3, "three paused passes")
    assert (await admin.topic_policies(topic)).message_ttl_seconds == 5

    await cluster.annotate("Topic", name, {PAUSED: None})

    async def resumed() -> bool:
        return (await admin.topic_policies(topic)).message_ttl_seconds == 200
    await eventually(resumed, "the spec applied after unpausing")
    await eventually(lambda: synced_is(cluster, "Topic", name, "True", "Reconciled"), "Synced again")


async def test_deleting_a_paused_topic_resource_leaves_the_topic(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    name = unique_name("pausedgone")
    await cluster.apply("Topic", name, {"partitions": 2, "deletionPolicy": "Delete"})
    await eventually(lambda: synced_is(cluster, "Topic", name, "True", "Reconciled"), "Synced")
    await cluster.annotate("Topic", name, {PAUSED: "true"})
    await eventually(lambda: synced_is(cluster, "Topic", name, "False", "ReconciliationPaused"), "paused")
    await cluster.delete("Topic", name)

    async def released() -> bool:
        return await cluster.get("Topic", name) is None
    await eventually(released, "released")
    assert await admin.get_partitions(f"persistent://public/default/{name}") == 2


async def test_a_changed_topic_name_is_refused_and_changes_nothing(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    name = unique_name("fixed")
    await cluster.apply("Topic", name, {"tenant": "acme", "namespace": "fixed", "ttlSeconds": 50})
    await eventually(lambda: synced_is(cluster, "Topic", name, "True", "Reconciled"), "Synced")
    for change in ({"namespace": "elsewhere"}, {"tenant": "other"}, {"name": f"{name}-renamed"},
                   {"persistent": False}):
        await cluster.patch("Topic", name, {"tenant": "acme", "namespace": "fixed", "ttlSeconds": 60, **change})
        found = await eventually(lambda: synced_is(cluster, "Topic", name, "False", "InvalidSpec"), f"{change}")
        assert "cannot change" in str(found["message"]) and f"persistent://acme/fixed/{name}" in str(found["message"])
        assert (await admin.topic_policies(f"persistent://acme/fixed/{name}")).message_ttl_seconds == 50
        await cluster.patch("Topic", name, {"tenant": "acme", "namespace": "fixed", "ttlSeconds": 50, "name": None,
                                            "persistent": True})
        await eventually(lambda: synced_is(cluster, "Topic", name, "True", "Reconciled"), "back")
    assert f"persistent://acme/fixed/{name}-renamed" not in await admin.list_topics("acme/fixed")


async def test_quorums_out_of_order_are_refused_by_the_operator(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    name = unique_name("quorum")
    await cluster.apply("Topic", name, {"persistence": {"ensembleSize": 2, "writeQuorum": 3, "ackQuorum": 1}})
    found = await eventually(lambda: synced_is(cluster, "Topic", name, "False", "InvalidSpec"), "InvalidSpec")
    assert "ensembleSize >= writeQuorum >= ackQuorum" in str(found["message"])
    assert name not in " ".join(await admin.list_topics("public/default"))


async def test_a_changed_subscription_name_is_refused(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    topic_name = unique_name("subs")
    topic = f"persistent://public/default/{topic_name}"
    await cluster.apply("Topic", topic_name, {})
    await cluster.apply("Subscription", "s", {"topic": topic_name, "subscriptionName": "one"})
    await eventually(lambda: synced_is(cluster, "Subscription", "s", "True", "Reconciled"), "Synced")
    await cluster.patch("Subscription", "s", {"subscriptionName": "two"})
    found = await eventually(lambda: synced_is(cluster, "Subscription", "s", "False", "InvalidSpec"), "refused")
    assert "spec.subscriptionName cannot change" in str(found["message"])
    assert await admin.list_subscriptions(topic) == ["one"]
