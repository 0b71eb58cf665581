"""The real operator (kopf) on kmock's Kubernetes emulator reconciling Topic resources into a real
Herald standalone: creation with partitions and policies, growth, refused shrinking, deletion per
deletionPolicy, drift reverted or reported by the resync timer, the admin API unreachable."""

from __future__ import annotations

from herald.client.admin import AdminClient
from herald.common.errors import NotFoundError
from herald_operator import desired, reconcile

from tests.conftest import StandaloneProcess
from tests.helpers import eventually, unique_name
from tests.operator.conftest import Cluster, OperatorStarter


async def synced(cluster: Cluster, name: str, status: str, reason: str | None = None) -> dict[str, object] | None:
    found = await cluster.condition("Topic", name, "Synced")
    if found is None or found["status"] != status or (reason is not None and found["reason"] != reason):
        return None
    return found


async def test_applied_topic_exists_with_its_partitions_and_policies(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    name = unique_name("orders")
    await cluster.apply("Topic", name, {
        "tenant": "acme", "namespace": "shop", "partitions": 3, "retention": {"timeSeconds": 3600},
        "ttlSeconds": 600, "deduplication": True, "maxProducers": 5,
        "backlogQuota": {"limitBytes": 1048576, "policy": "producer_exception"},
    })
    topic = f"persistent://acme/shop/{name}"
    await eventually(lambda: synced(cluster, name, "True"), "Synced=True")
    assert await admin.get_partitions(topic) == 3
    policies = await admin.topic_policies(topic)
    assert policies.retention.time_seconds == 3600 and policies.retention.size_bytes == -1
    assert policies.message_ttl_seconds == 600 and policies.deduplication_enabled
    assert policies.max_producers_per_topic == 5
    assert policies.backlog_quota.limit_bytes == 1048576
    obj = await cluster.get("Topic", name)
    assert obj is not None
    assert obj["status"]["topic"] == topic and obj["status"]["partitions"] == 3
    assert obj["status"]["phase"] == "Ready"
    assert "herald.io/finalizer" in obj["metadata"]["finalizers"]


async def test_partitions_grow_and_a_shrink_is_refused_changing_nothing(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    name = unique_name("grow")
    topic = f"persistent://public/default/{name}"
    await cluster.apply("Topic", name, {"partitions": 2})
    await eventually(lambda: synced(cluster, name, "True"), "Synced=True")
    await cluster.patch("Topic", name, {"partitions": 4})

    async def grown() -> bool:
        return await admin.get_partitions(topic) == 4
    await eventually(grown, "partitions grown to 4")

    await cluster.patch("Topic", name, {"partitions": 1})
    condition = await eventually(lambda: synced(cluster, name, "False", reconcile.SHRINK_REFUSED), "shrink refused")
    assert "can only grow" in str(condition["message"])
    assert await admin.get_partitions(topic) == 4
    events = cluster.events(name)
    assert any(e["reason"] == reconcile.SHRINK_REFUSED and e["type"] == "Warning" for e in events), events
    # The timer keeps refusing (and changes nothing) until the spec is raised again.
    obj = await cluster.get("Topic", name)
    assert obj is not None and obj["status"]["partitions"] == 4
    await cluster.patch("Topic", name, {"partitions": 4})
    await eventually(lambda: synced(cluster, name, "True"), "Synced=True again")


async def test_deleting_with_delete_policy_deletes_the_topic_and_releases_the_resource(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    name = unique_name("gone")
    topic = f"persistent://public/default/{name}"
    await cluster.apply("Topic", name, {"partitions": 2, "deletionPolicy": "Delete"})
    await eventually(lambda: synced(cluster, name, "True"), "Synced=True")
    await cluster.delete("Topic", name)

    async def released() -> bool:
        return await cluster.get("Topic", name) is None
    await eventually(released, "the resource released by its finalizer")
    assert await admin.get_partitions(topic) == 0
    assert topic not in await admin.list_topics("public/default")


async def test_deleting_with_retain_policy_keeps_the_topic(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    name = unique_name("kept")
    topic = f"persistent://public/default/{name}"
    await cluster.apply("Topic", name, {"partitions": 2, "deletionPolicy": "Retain"})
    await eventually(lambda: synced(cluster, name, "True"), "Synced=True")
    await cluster.delete("Topic", name)

    async def released() -> bool:
        return await cluster.get("Topic", name) is None
    await eventually(released, "the resource released by its finalizer")
    assert await admin.get_partitions(topic) == 2


async def test_policy_drift_is_reverted_and_partition_drift_reported_by_the_timer(
    cluster: Cluster, start_operator: OperatorStarter, herald: StandaloneProcess, admin: AdminClient,
) -> None:
    await start_operator(herald.service_url)
    name = unique_name("drift")
    topic = f"persistent://public/default/{name}"
    await cluster.apply("Topic", name, {"partitions": 2, "ttlSeconds": 300})
    await eventually(lambda: synced(cluster, name, "True"), "Synced=True")

    policies = await admin.topic_policies(topic)
    policies.message_ttl_seconds = 5
    policies.max_consumers_per_topic = 7  # not in the spec: cleared
    await admin.set_topic_policies(topic, policies)

    async def reverted() -> bool:
        now = await admin.topic_policies(topic)
        return now.message_ttl_seconds == 300 and not now.HasField("max_consumers_per_topic")
    await eventually(reverted, "policy drift reverted")

    await admin.update_partitions(topic, 3)
    condition = await eventually(lambda: synced(cluster, name, "False", reconcile.PARTITIONS_DRIFTED),
                                 "partition drift reported")
    assert "cannot be removed" in str(condition["message"])
    assert await admin.get_partitions(topic) == 3
    ready = await cluster.condition("Topic", name, "Ready")
    assert ready is not None and ready["status"] == "True"
    # Policy drift is still reverted while the partition drift lasts.
    await admin.set_topic_policies(topic, policies)
    await eventually(reverted, "policy drift reverted during partition drift")
    await cluster.patch("Topic", name, {"partitions": 3})
    await eventually(lambda: synced(cluster, name, "True"), "Synced=True once the spec agrees")


async def test_unreachable_admin_api_is_reported_then_recovers(
    cluster: Cluster, start_operator: OperatorStarter, standalone: StandaloneProcess,
) -> None:
    standalone.stop()
    await start_operator(standalone.service_url)
    name = unique_name("later")
    await cluster.apply("Topic", name, {"partitions": 1})
    condition = await eventually(lambda: synced(cluster, name, "False", "AdminUnavailable"), "AdminUnavailable")
    assert standalone.service_url.removeprefix("herald://") in str(condition["message"])
    ready = await cluster.condition("Topic", name, "Ready")
    assert ready is not None and ready["status"] == "Unknown"
    standalone.start()
    await eventually(lambda: synced(cluster, name, "True"), "Synced=True after Herald came back", timeout=40)
    async with AdminClient(standalone.service_url) as admin:
        assert await admin.get_partitions(f"persistent://public/default/{name}") == 1


async def test_reconciling_again_changes_nothing(herald: StandaloneProcess, admin: AdminClient) -> None:
    name = unique_name("again")
    spec = {"tenant": "idem", "namespace": "ns", "partitions": 2, "retention": {"sizeBytes": 1000},
            "backlogQuota": {"limitSeconds": 60}, "persistence": {"ensembleSize": 1, "writeQuorum": 1, "ackQuorum": 1},
            "maxConsumersPerSubscription": 2, "deduplication": False}
    wanted = desired.desired_topic(spec, name)
    first = await reconcile.reconcile_topic(admin, wanted)
    assert first.changes and not first.problems
    for _ in range(2):
        again = await reconcile.reconcile_topic(admin, wanted)
        assert again.changes == [] and again.problems == []
        assert again.partitions == 2
    assert await reconcile.delete_topic(admin, wanted)
    assert not await reconcile.delete_topic(admin, wanted)  # gone already: nothing to do
    try:
        await admin.topic_policies(wanted.topic)
    except NotFoundError:
        pass
