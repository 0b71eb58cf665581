"""A resource's spec as the Herald state it asks for: the full topic name, the partition count,
the topic-level policies (admin.proto's Policies), the subscription and its dead-letter policy.

Pure code: no I/O. The CRD's schema already checked types, ranges and enums when the resource was
applied; what a schema cannot say (quorum ordering, a name Herald refuses) raises SpecError here.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from herald.api.v1 import admin_pb2
from herald.client.config import InitialPosition
from herald.common.codec.names import TopicName
from herald.common.errors import InvalidArgumentError

# The topic policies a Topic resource owns. One its spec leaves out is cleared (inherited from
# the namespace); policies the CRD has no field for are left as admins set them.
MANAGED_POLICIES: tuple[str, ...] = (
    "retention", "message_ttl_seconds", "backlog_quota", "max_producers_per_topic", "max_consumers_per_topic",
    "max_consumers_per_subscription", "deduplication_enabled", "persistence",
)

_QUOTA_POLICIES = {
    "producer_request_hold": admin_pb2.PRODUCER_REQUEST_HOLD,
    "producer_exception": admin_pb2.PRODUCER_EXCEPTION,
    "consumer_backlog_eviction": admin_pb2.CONSUMER_BACKLOG_EVICTION,
}
_POSITIONS = {"Earliest": InitialPosition.Earliest, "Latest": InitialPosition.Latest}


class SpecError(ValueError):
    """The spec asks for something Herald cannot do; editing the resource is the only fix."""


class DeletionPolicy(enum.Enum):
    DELETE = "Delete"  # deleting the resource deletes it in Herald
    RETAIN = "Retain"  # deleting the resource leaves it in Herald


@dataclass(frozen=True)
class DesiredTopic:
    topic: str  # persistent://tenant/namespace/name
    tenant: str
    namespace: str  # tenant/namespace
    partitions: int  # 0: not partitioned
    policies: admin_pb2.Policies  # only MANAGED_POLICIES, and only those the spec sets
    deletion_policy: DeletionPolicy


@dataclass(frozen=True)
class DesiredDeadLetterPolicy:
    max_redeliver_count: int
    dead_letter_topic: str = ""  # "": <topic>-<subscription>-DLQ
    retry_letter_topic: str = ""  # "": <topic>-<subscription>-RETRY


@dataclass(frozen=True)
class DesiredSubscription:
    topic_ref: str  # a Topic resource's name (same namespace), or "" when `topic` is given in full
    topic: str  # the full topic name when given in full; else "" until the Topic resource is found
    subscription: str
    initial_position: InitialPosition
    dead_letter_policy: DesiredDeadLetterPolicy | None
    deletion_policy: DeletionPolicy

    def with_topic(self, topic: str) -> DesiredSubscription:
        return DesiredSubscription(self.topic_ref, topic, self.subscription, self.initial_position,
                                   self.dead_letter_policy, self.deletion_policy)


def _int(spec: Mapping[str, Any], key: str, default: int) -> int:
    value = spec.get(key, default)
    return default if value is None else int(value)


def topic_name(spec: Mapping[str, Any], resource_name: str) -> str:
    """The full Herald name a Topic resource's spec names."""
    domain = "persistent" if spec.get("persistent", True) else "non-persistent"
    text = f"{domain}://{spec.get('tenant') or 'public'}/{spec.get('namespace') or 'default'}/"
    text += str(spec.get("name") or resource_name)
    try:
        return str(TopicName.parse(text))
    except InvalidArgumentError as exc:
        raise SpecError(str(exc)) from None


def topic_policies(spec: Mapping[str, Any]) -> admin_pb2.Policies:
    """The topic-level policies the spec sets (a field left out stays unset: inherited)."""
    policies = admin_pb2.Policies()
    if (retention := spec.get("retention")) is not None:
        # A limit left out is no limit: data is kept while within both.
        policies.retention.CopyFrom(admin_pb2.RetentionPolicy(
            time_seconds=_int(retention, "timeSeconds", -1), size_bytes=_int(retention, "sizeBytes", -1)))
    if spec.get("ttlSeconds") is not None:
        policies.message_ttl_seconds = int(spec["ttlSeconds"])
    if (quota := spec.get("backlogQuota")) is not None:
        policy = str(quota.get("policy") or "producer_request_hold")
        if policy not in _QUOTA_POLICIES:
            raise SpecError(f"backlogQuota.policy {policy!r} is invalid: use one of {', '.join(_QUOTA_POLICIES)}")
        policies.backlog_quota.CopyFrom(admin_pb2.BacklogQuota(
            limit_bytes=_int(quota, "limitBytes", -1), limit_seconds=_int(quota, "limitSeconds", -1),
            policy=_QUOTA_POLICIES[policy]))
    if spec.get("deduplication") is not None:
        policies.deduplication_enabled = bool(spec["deduplication"])
    if (persistence := spec.get("persistence")) is not None:
        e, qw, qa = (int(persistence[key]) for key in ("ensembleSize", "writeQuorum", "ackQuorum"))
        if not e >= qw >= qa >= 1:
            raise SpecError(f"persistence {e}/{qw}/{qa} is invalid: need ensembleSize >= writeQuorum >= ackQuorum >= 1")
        policies.persistence.CopyFrom(admin_pb2.PersistencePolicy(ensemble_size=e, write_quorum=qw, ack_quorum=qa))
    for key, field in (("maxProducers", "max_producers_per_topic"), ("maxConsumers", "max_consumers_per_topic"),
                       ("maxConsumersPerSubscription", "max_consumers_per_subscription")):
        if spec.get(key) is not None:
            setattr(policies, field, int(spec[key]))
    return policies


def desired_topic(spec: Mapping[str, Any], resource_name: str) -> DesiredTopic:
    topic = topic_name(spec, resource_name)
    name = TopicName.parse(topic)
    partitions = _int(spec, "partitions", 0)
    if partitions < 0:
        raise SpecError(f"partitions {partitions} is invalid: use 0 (not partitioned) or more")
    return DesiredTopic(topic, name.tenant, name.namespace_name, partitions, topic_policies(spec),
                        _deletion_policy(spec))


def desired_subscription(spec: Mapping[str, Any], resource_name: str) -> DesiredSubscription:
    ref = str(spec.get("topic") or "")
    if not ref:
        raise SpecError("spec.topic is empty: name a Topic resource in this namespace or a full topic name")
    topic = ""
    if "://" in ref:
        try:
            topic = str(TopicName.parse(ref))
        except InvalidArgumentError as exc:
            raise SpecError(f"spec.topic: {exc}") from None
        ref = ""
    subscription = str(spec.get("subscriptionName") or resource_name)
    position = str(spec.get("initialPosition") or "Latest")
    if position not in _POSITIONS:
        raise SpecError(f"initialPosition {position!r} is invalid: use Earliest or Latest")
    dead_letter = None
    if (policy := spec.get("deadLetterPolicy")) is not None:
        count = _int(policy, "maxRedeliverCount", 0)
        if count < 1:
            raise SpecError(f"deadLetterPolicy.maxRedeliverCount {count} is invalid: it must be 1 or more")
        dead_letter = DesiredDeadLetterPolicy(count, _full_name(policy, "deadLetterTopic"),
                                              _full_name(policy, "retryLetterTopic"))
    return DesiredSubscription(ref, topic, subscription, _POSITIONS[position], dead_letter, _deletion_policy(spec))


def _full_name(policy: Mapping[str, Any], key: str) -> str:
    text = str(policy.get(key) or "")
    if not text:
        return ""
    try:
        return str(TopicName.parse(text))
    except InvalidArgumentError as exc:
        raise SpecError(f"deadLetterPolicy.{key}: {exc}") from None


def _deletion_policy(spec: Mapping[str, Any]) -> DeletionPolicy:
    text = str(spec.get("deletionPolicy") or "Delete")
    try:
        return DeletionPolicy(text)
    except ValueError:
        raise SpecError(f"deletionPolicy {text!r} is invalid: use Delete or Retain") from None


def check_unchanged(applied: str, wanted: str, fields: str) -> None:
    """Refuse a spec naming another object than the one this resource already manages (`applied`, from
    its status): the CRDs' CEL rules refuse such an edit at the API server, and the operator refuses it
    too, for API servers that do not run them."""
    if applied and applied != wanted:
        raise SpecError(f"{fields} cannot change: this resource manages {applied} and its spec now names {wanted}; "
                        "put the old values back, or delete the resource and create a new one")
