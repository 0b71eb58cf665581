"""Pure mapping of a resource's spec to the Herald state it asks for, policy differences, and the
status conditions' bookkeeping."""

from __future__ import annotations

import pytest
from herald.api.v1 import admin_pb2
from herald.client.config import InitialPosition
from herald_operator import desired, reconcile, status
from herald_operator.desired import DeletionPolicy, SpecError


def test_topic_defaults_to_a_non_partitioned_persistent_topic_named_after_the_resource() -> None:
    wanted = desired.desired_topic({}, "orders")
    assert wanted.topic == "persistent://public/default/orders"
    assert (wanted.tenant, wanted.namespace, wanted.partitions) == ("public", "public/default", 0)
    assert wanted.policies == admin_pb2.Policies()
    assert wanted.deletion_policy is DeletionPolicy.DELETE


def test_topic_spec_maps_every_policy() -> None:
    wanted = desired.desired_topic({
        "tenant": "acme", "namespace": "shop", "name": "created", "persistent": False, "partitions": 4,
        "retention": {"sizeBytes": 100}, "ttlSeconds": 60, "deduplication": False,
        "backlogQuota": {"limitSeconds": 30, "policy": "consumer_backlog_eviction"},
        "persistence": {"ensembleSize": 3, "writeQuorum": 2, "ackQuorum": 1},
        "maxProducers": 1, "maxConsumers": 2, "maxConsumersPerSubscription": 3, "deletionPolicy": "Retain",
    }, "ignored")
    assert wanted.topic == "non-persistent://acme/shop/created" and wanted.partitions == 4
    p = wanted.policies
    assert (p.retention.time_seconds, p.retention.size_bytes) == (-1, 100)
    assert p.message_ttl_seconds == 60 and p.HasField("deduplication_enabled") and not p.deduplication_enabled
    assert (p.backlog_quota.limit_bytes, p.backlog_quota.limit_seconds) == (-1, 30)
    assert p.backlog_quota.policy == admin_pb2.CONSUMER_BACKLOG_EVICTION
    assert (p.persistence.ensemble_size, p.persistence.write_quorum, p.persistence.ack_quorum) == (3, 2, 1)
    assert (p.max_producers_per_topic, p.max_consumers_per_topic, p.max_consumers_per_subscription) == (1, 2, 3)
    assert wanted.deletion_policy is DeletionPolicy.RETAIN


@pytest.mark.parametrize(("spec", "words"), [
    ({"persistence": {"ensembleSize": 1, "writeQuorum": 2, "ackQuorum": 1}}, "ensembleSize >= writeQuorum"),
    ({"partitions": -1}, "partitions -1"),
    ({"name": "a b"}, "invalid"),
    ({"deletionPolicy": "Orphan"}, "deletionPolicy"),
    ({"backlogQuota": {"policy": "nope"}}, "backlogQuota.policy"),
])
def test_specs_herald_cannot_take_raise_spec_errors(spec: dict[str, object], words: str) -> None:
    with pytest.raises(SpecError, match=words):
        desired.desired_topic(spec, "t")


def test_managed_policies_are_fields_of_the_contract() -> None:
    assert set(desired.MANAGED_POLICIES) <= set(admin_pb2.Policies.DESCRIPTOR.fields_by_name)


def test_policy_differences_name_fields_to_set_and_to_clear() -> None:
    wanted = desired.topic_policies({"ttlSeconds": 60, "maxProducers": 2})
    actual = admin_pb2.Policies(message_ttl_seconds=5, max_producers_per_topic=2, max_consumers_per_topic=9,
                                max_message_size=1024)  # max_message_size: not the operator's
    assert reconcile.policies_differ(wanted, actual) == (["message_ttl_seconds"], ["max_consumers_per_topic"])
    actual.message_ttl_seconds = 60
    actual.ClearField("max_consumers_per_topic")
    assert reconcile.policies_differ(wanted, actual) == ([], [])


def test_subscription_spec_maps_topic_reference_or_full_name() -> None:
    by_ref = desired.desired_subscription({"topic": "orders"}, "billing")
    assert (by_ref.topic_ref, by_ref.topic, by_ref.subscription) == ("orders", "", "billing")
    assert by_ref.initial_position is InitialPosition.Latest and by_ref.dead_letter_policy is None
    full = desired.desired_subscription({
        "topic": "persistent://acme/shop/orders", "subscriptionName": "s", "initialPosition": "Earliest",
        "deadLetterPolicy": {"maxRedeliverCount": 5, "deadLetterTopic": "persistent://acme/shop/dead"}}, "x")
    assert (full.topic_ref, full.topic, full.subscription) == ("", "persistent://acme/shop/orders", "s")
    assert full.initial_position is InitialPosition.Earliest
    assert full.dead_letter_policy == desired.DesiredDeadLetterPolicy(5, "persistent://acme/shop/dead", "")


@pytest.mark.parametrize("spec", [
    {}, {"topic": "persistent://a/b"}, {"topic": "t", "initialPosition": "Middle"},
    {"topic": "t", "deadLetterPolicy": {"maxRedeliverCount": 0}},
])
def test_bad_subscription_specs_raise_spec_errors(spec: dict[str, object]) -> None:
    with pytest.raises(SpecError):
        desired.desired_subscription(spec, "s")


def test_conditions_keep_their_transition_time_while_their_status_holds() -> None:
    first = status.merge_conditions(None, status.synced_conditions(True, [], "topic t"))
    since = {c["type"]: c["lastTransitionTime"] for c in first}
    again = status.merge_conditions(first, [status.condition("Synced", "True", "Reconciled", "other words")])
    assert {c["type"]: c["lastTransitionTime"] for c in again} == since
    assert status.phase(again) == "Ready"


def test_synced_transitions_are_reported_once_per_reason() -> None:
    problem = reconcile.Problem(reconcile.SHRINK_REFUSED, "no")
    previous = status.status_patch(None, status.synced_conditions(True, [], "t"), 1)
    refused = status.synced_conditions(True, [problem], "t")
    went = status.synced_transition(previous, refused)
    assert went is not None and went["reason"] == reconcile.SHRINK_REFUSED
    now = status.status_patch(previous, refused, 2)
    assert now["observedGeneration"] == 2 and now["phase"] == "Ready"
    assert status.synced_transition(now, refused) is None


def test_unreachable_admin_makes_ready_unknown_and_invalid_specs_fail() -> None:
    down = status.status_patch(None, status.failed_conditions(status.ADMIN_UNAVAILABLE, "down"), None)
    assert {c["type"]: c["status"] for c in down["conditions"]} == {"Ready": "Unknown", "Synced": "False"}
    assert down["phase"] == "Pending" and "observedGeneration" not in down
    bad = status.status_patch(None, status.failed_conditions(status.INVALID_SPEC, "bad"), 3)
    assert bad["phase"] == "Failed"


def test_a_spec_naming_another_object_than_the_applied_one_is_refused() -> None:
    from herald_operator.desired import SpecError, check_unchanged

    check_unchanged("", "persistent://a/b/c", "spec.name")  # never applied: anything goes
    check_unchanged("persistent://a/b/c", "persistent://a/b/c", "spec.name")
    with pytest.raises(SpecError, match=r"spec.name cannot change: this resource manages persistent://a/b/c"):
        check_unchanged("persistent://a/b/c", "persistent://a/b/d", "spec.name")
