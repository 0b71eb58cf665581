"""Making Herald what a resource's spec says, through the admin API (herald.client.admin), and
reading back what the status shows. One direction only: the resource is the source of truth, so
each pass compares Herald with the spec and changes what differs; a pass with nothing to change
makes no write. Partitions are the exception: Herald (like Pulsar) cannot remove partitions, so a
spec asking for fewer than Herald has is reported (a Problem), never applied.

Errors are the HeraldError the admin API raised; the handlers decide what they mean for kopf.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from herald.api.v1 import admin_pb2
from herald.client.admin import AdminClient
from herald.common.codec.names import TopicName
from herald.common.errors import AlreadyExistsError, NotFoundError

from herald_operator.desired import (
    MANAGED_POLICIES,
    DeletionPolicy,
    DesiredDeadLetterPolicy,
    DesiredSubscription,
    DesiredTopic,
)

# Synced=False reasons of partition counts Herald cannot take.
SHRINK_REFUSED = "PartitionsShrinkRefused"  # the spec was lowered below Herald's count
PARTITIONS_DRIFTED = "PartitionsDrifted"  # Herald's count was raised past the spec's outside the operator
PARTITIONING_IMMUTABLE = "PartitioningImmutable"  # a non-partitioned topic cannot become partitioned


@dataclass(frozen=True)
class Problem:
    """Why Herald differs from the spec after a pass (Synced=False)."""

    reason: str
    message: str


@dataclass
class Report:
    """What a pass changed and what it could not."""

    changes: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    partitions: int = 0  # the topic's count in Herald after the pass


@dataclass(frozen=True)
class TopicObservation:
    partitions: int
    backlog: int  # messages not acknowledged by the slowest subscription
    msg_rate_in: float
    msg_rate_out: float


@dataclass(frozen=True)
class SubscriptionObservation:
    backlog: int
    consumers: int
    type: str  # as the broker reports it ("" with no consumer ever)


class TopicNotReadyError(Exception):
    """A subscription's topic does not exist in Herald (yet): try again later."""


async def ensure_namespace(admin: AdminClient, tenant: str, namespace: str, report: Report) -> None:
    """Create the tenant and namespace when missing (never deleted by the operator)."""
    try:
        await admin.namespace_policies(namespace)
        return
    except NotFoundError:
        pass
    try:
        await admin.create_tenant(tenant)
        report.changes.append(f"created tenant {tenant}")
    except AlreadyExistsError:
        pass
    try:
        await admin.create_namespace(namespace)
        report.changes.append(f"created namespace {namespace}")
    except AlreadyExistsError:
        pass


async def topic_exists(admin: AdminClient, topic: str) -> tuple[bool, int]:
    """(whether the topic exists, its partition count: 0 when not partitioned)."""
    partitions = await admin.get_partitions(topic)
    if partitions > 0:
        return True, partitions
    try:
        listed = await admin.list_topics(TopicName.parse(topic).namespace_name)
    except NotFoundError:
        return False, 0
    return topic in listed, 0


async def reconcile_topic(admin: AdminClient, desired: DesiredTopic, *, shrink_reason: str = SHRINK_REFUSED) -> Report:
    """One pass over a topic: namespace, existence, partitions, then policies. `shrink_reason` is
    the reason given when Herald has more partitions than the spec (the caller knows whether the
    spec was lowered or Herald raised)."""
    report = Report()
    await ensure_namespace(admin, desired.tenant, desired.namespace, report)
    exists, current = await topic_exists(admin, desired.topic)
    if not exists:
        try:
            await admin.create_topic(desired.topic, desired.partitions)
            report.changes.append(f"created with {desired.partitions} partitions")
            current = desired.partitions
        except AlreadyExistsError:  # made meanwhile by someone else: look again
            exists, current = await topic_exists(admin, desired.topic)
    if current == 0 and desired.partitions > 0 and exists:
        report.problems.append(Problem(PARTITIONING_IMMUTABLE, (
            f"spec.partitions is {desired.partitions} but {desired.topic} exists as a non-partitioned topic: "
            "Herald cannot partition it; delete the topic in Herald or set spec.partitions to 0")))
    elif desired.partitions > current > 0:
        current = await admin.update_partitions(desired.topic, desired.partitions)
        report.changes.append(f"partitions raised to {current}")
    elif desired.partitions < current:
        if shrink_reason == SHRINK_REFUSED:
            message = (f"spec.partitions was lowered to {desired.partitions} but {desired.topic} has {current}: "
                       f"partitions can only grow; nothing was changed (set spec.partitions to {current} or more)")
        else:
            message = (f"{desired.topic} has {current} partitions, more than spec.partitions {desired.partitions}: "
                       f"they were added outside the operator and cannot be removed; set spec.partitions to {current}")
        report.problems.append(Problem(shrink_reason, message))
    report.partitions = current
    await _reconcile_policies(admin, desired, report)
    return report


def policies_differ(desired: admin_pb2.Policies, actual: admin_pb2.Policies) -> tuple[list[str], list[str]]:
    """(managed fields to set, managed fields to clear) for `actual` to become `desired`."""
    to_set, to_clear = [], []
    for name in MANAGED_POLICIES:
        field_name = cast(Any, name)  # the stubs want literal names; the unit tests check these
        if desired.HasField(field_name):
            if not actual.HasField(field_name) or getattr(actual, name) != getattr(desired, name):
                to_set.append(name)
        elif actual.HasField(field_name):
            to_clear.append(name)
    return to_set, to_clear


async def _reconcile_policies(admin: AdminClient, desired: DesiredTopic, report: Report) -> None:
    actual = await admin.topic_policies(desired.topic)
    to_set, to_clear = policies_differ(desired.policies, actual)
    if to_set or to_clear:
        await admin.set_topic_policies(desired.topic, desired.policies, clear=to_clear)
        report.changes.append(f"policies set {to_set} cleared {to_clear}")


async def delete_topic(admin: AdminClient, desired: DesiredTopic) -> bool:
    """Delete the topic in Herald, unless its deletion policy retains it; whether it was deleted
    now. Producers and consumers still connected are disconnected: the resource's deletion says so."""
    if desired.deletion_policy is DeletionPolicy.RETAIN:
        return False
    try:
        await admin.delete_topic(desired.topic, force=True)
    except NotFoundError:
        return False
    return True


async def observe_topic(admin: AdminClient, topic: str) -> TopicObservation:
    stats = await admin.topic_stats(topic)
    backlog = max((sub.msg_backlog for sub in stats.subscriptions), default=0)
    return TopicObservation(await admin.get_partitions(topic), backlog, stats.msg_rate_in, stats.msg_rate_out)


# ---- subscriptions ----

async def reconcile_subscription(admin: AdminClient, desired: DesiredSubscription) -> Report:
    """Make the subscription (at its initial position) when missing, then its dead-letter policy.
    TopicNotReadyError when the topic does not exist in Herald."""
    report = Report()
    exists, partitions = await topic_exists(admin, desired.topic)
    if not exists:
        raise TopicNotReadyError(f"topic {desired.topic} does not exist in Herald (yet)")
    report.partitions = partitions
    if desired.subscription not in await admin.list_subscriptions(desired.topic):
        await admin.create_subscription(desired.topic, desired.subscription, desired.initial_position)
        report.changes.append(f"created at {desired.initial_position.name}")
    actual = await admin.dead_letter_policy(desired.topic, desired.subscription)
    wanted = desired.dead_letter_policy or DesiredDeadLetterPolicy(0)
    if (actual.max_redeliver_count, actual.dead_letter_topic, actual.retry_letter_topic) != (
            wanted.max_redeliver_count, wanted.dead_letter_topic, wanted.retry_letter_topic):
        await admin.set_dead_letter_policy(desired.topic, desired.subscription, wanted.max_redeliver_count,
                                           wanted.dead_letter_topic, wanted.retry_letter_topic)
        report.changes.append("dead-letter policy set" if wanted.max_redeliver_count else "dead-letter policy removed")
    return report


async def delete_subscription(admin: AdminClient, desired: DesiredSubscription) -> bool:
    """Delete the subscription (its consumers are disconnected) unless retained; whether it was."""
    if desired.deletion_policy is DeletionPolicy.RETAIN or not desired.topic:
        return False
    try:
        await admin.delete_subscription(desired.topic, desired.subscription, force=True)
    except NotFoundError:
        return False
    return True


async def observe_subscription(admin: AdminClient, desired: DesiredSubscription) -> SubscriptionObservation:
    stats = await admin.topic_stats(desired.topic)
    for sub in stats.subscriptions:
        if sub.name == desired.subscription:
            return SubscriptionObservation(sub.msg_backlog, sub.consumers, sub.type)
    return SubscriptionObservation(0, 0, "")
