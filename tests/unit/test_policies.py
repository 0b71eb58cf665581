"""Policies: merging (topic > namespace > broker defaults), clearing, validation with clear errors,
JSON and proto round trips, and the broker's limit checks and backlog measure."""

from __future__ import annotations

import pytest
from herald.api.v1 import admin_pb2
from herald.broker.core.ledger_list import LedgerInfo, LedgerList, Position
from herald.broker.core.policies import (
    affected_by,
    broker_defaults,
    check_consumer_limits,
    check_partition_limit,
    check_producer_limit,
)
from herald.broker.settings import BrokerSettings
from herald.common.codec.names import TopicName
from herald.common.errors import ConsumerBusyError, InvalidArgumentError, NotAllowedError, ProducerBusyError
from herald.metadata.policies import (
    POLICY_FIELDS,
    BacklogQuota,
    BacklogQuotaPolicy,
    PersistencePolicy,
    Policies,
    RetentionPolicy,
)
from herald.metadata.policies_proto import policies_from_proto, policies_to_proto

FULL = Policies(
    retention=RetentionPolicy(3600, 10_000),
    message_ttl_seconds=60,
    backlog_quota=BacklogQuota(1000, 30, BacklogQuotaPolicy.PRODUCER_EXCEPTION),
    max_producers_per_topic=2,
    max_consumers_per_topic=3,
    max_consumers_per_subscription=1,
    deduplication_enabled=False,
    encryption_required=True,
    persistence=PersistencePolicy(3, 2, 2),
    max_message_size=1024,
)


def test_topic_overrides_namespace_which_overrides_broker_defaults() -> None:
    defaults = broker_defaults(BrokerSettings())
    namespace = Policies(message_ttl_seconds=60, max_producers_per_topic=5)
    topic = Policies(max_producers_per_topic=1)
    effective = topic.merged_over(namespace).merged_over(defaults)
    assert effective.max_producers_per_topic == 1
    assert effective.message_ttl_seconds == 60
    assert effective.max_message_size == BrokerSettings().max_message_size
    assert effective.is_complete()
    assert not topic.is_complete()


def test_broker_defaults_mirror_the_settings() -> None:
    settings = BrokerSettings(ensemble_size=1, write_quorum=1, ack_quorum=1, backlog_quota_limit_bytes=10,
                              backlog_quota_policy="consumer_backlog_eviction", max_consumers_per_topic=7)
    defaults = broker_defaults(settings)
    assert defaults.persistence == PersistencePolicy(1, 1, 1)
    assert defaults.backlog_quota == BacklogQuota(10, -1, BacklogQuotaPolicy.CONSUMER_BACKLOG_EVICTION)
    assert defaults.max_consumers_per_topic == 7
    assert defaults.deduplication_enabled is True and defaults.encryption_required is False


def test_clearing_fields_inherits_them_again() -> None:
    cleared = FULL.without(["retention", "max_message_size"])
    assert cleared.retention is None and cleared.max_message_size is None
    assert cleared.message_ttl_seconds == 60


def test_clearing_an_unknown_field_names_the_known_ones() -> None:
    with pytest.raises(InvalidArgumentError, match="'ttl' is not a policy: use one of retention, message_ttl"):
        FULL.without(["ttl"])


def test_json_round_trip_keeps_every_field_and_omits_unset_ones() -> None:
    assert Policies.from_bytes(FULL.to_bytes()) == FULL
    assert Policies().to_json() == {}
    assert Policies(message_ttl_seconds=0).to_json() == {"message_ttl_seconds": 0}
    assert FULL.to_json()["backlog_quota"] == {"limit_bytes": 1000, "limit_seconds": 30,
                                               "policy": "producer_exception"}


def test_malformed_or_unknown_json_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown policies"):
        Policies.from_json({"colour": "red"})
    with pytest.raises(InvalidArgumentError, match="malformed"):
        Policies.from_json({"retention": {"time_seconds": 1}})


def test_proto_round_trip_keeps_presence() -> None:
    assert policies_from_proto(policies_to_proto(FULL)) == FULL
    only_ttl = admin_pb2.Policies(message_ttl_seconds=0)
    assert policies_from_proto(only_ttl) == Policies(message_ttl_seconds=0)
    assert policies_from_proto(admin_pb2.Policies()) == Policies()
    assert not policies_to_proto(Policies()).HasField("retention")


@pytest.mark.parametrize(("policies", "message"), [
    (Policies(persistence=PersistencePolicy(2, 2, 3)),
     "persistence 2/2/3 is invalid: ack quorum 3 > write quorum 2; need ensemble size >= write quorum"),
    (Policies(persistence=PersistencePolicy(1, 2, 1)),
     "persistence 1/2/1 is invalid: write quorum 2 > ensemble size 1"),
    (Policies(persistence=PersistencePolicy(1, 1, 0)), "ack quorum must be at least 1"),
    (Policies(retention=RetentionPolicy(-2, 0)), "retention time_seconds -2 is invalid: use -1 .forever."),
    (Policies(retention=RetentionPolicy(0, -5)), "retention size_bytes -5 is invalid"),
    (Policies(message_ttl_seconds=-1), "message_ttl_seconds -1 is invalid: use 0 .never expire."),
    (Policies(backlog_quota=BacklogQuota(-3, 0)), "backlog quota limit_bytes -3 is invalid"),
    (Policies(backlog_quota=BacklogQuota(0, -7)), "backlog quota limit_seconds -7 is invalid"),
    (Policies(max_producers_per_topic=-1), "max_producers_per_topic -1 is invalid: use 0 .unlimited."),
    (Policies(max_consumers_per_subscription=-1), "max_consumers_per_subscription -1 is invalid"),
    (Policies(max_message_size=0), "max_message_size 0 is invalid: it must be a positive number of bytes"),
    (Policies(max_partitions_per_topic=0), "max_partitions_per_topic 0 is invalid: use 1 or more .there is no "
                                           "unlimited., or clear the policy"),
])
def test_validation_names_the_invalid_field(policies: Policies, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        policies.validate()


def test_valid_policies_pass_validation() -> None:
    assert FULL.validate() is FULL
    assert Policies(retention=RetentionPolicy(-1, -1), backlog_quota=BacklogQuota(-1, -1)).validate()


def test_quota_policy_names_parse_loosely_and_refuse_unknown() -> None:
    assert BacklogQuotaPolicy.parse("Producer-Exception") is BacklogQuotaPolicy.PRODUCER_EXCEPTION
    with pytest.raises(InvalidArgumentError, match="backlog quota policy 'drop' is invalid: use one of"):
        BacklogQuotaPolicy.parse("drop")


def test_every_proto_field_is_a_policy_field() -> None:
    assert set(POLICY_FIELDS) == {f.name for f in admin_pb2.Policies.DESCRIPTOR.fields}


def test_partitions_per_topic_default_to_1000_and_cannot_be_unlimited() -> None:
    settings = BrokerSettings()
    assert settings.max_partitions_per_topic == 1000
    assert broker_defaults(settings).max_partitions_per_topic == 1000
    for wrong in (0, -1):
        with pytest.raises(InvalidArgumentError, match=f"max_partitions_per_topic must be at least 1, got {wrong}"):
            BrokerSettings(max_partitions_per_topic=wrong)
    orders = TopicName.parse("persistent://acme/eu/orders")
    check_partition_limit(orders, Policies(max_partitions_per_topic=4), 4, from_namespace=True)
    with pytest.raises(NotAllowedError, match=r"cannot have 5 partitions: the limit is 4 per topic \(namespace "
                                              r"acme/eu's policy max_partitions_per_topic\)"):
        check_partition_limit(orders, Policies(max_partitions_per_topic=4), 5, from_namespace=True)
    with pytest.raises(NotAllowedError, match=r"the limit is 1000 per topic \(the broker setting"):
        check_partition_limit(orders, broker_defaults(settings), 2**31 - 1, from_namespace=False)


def test_producer_and_consumer_limits_have_pulsars_messages() -> None:
    limits = Policies(max_producers_per_topic=2, max_consumers_per_topic=3, max_consumers_per_subscription=1)
    check_producer_limit("t", limits, 1)
    with pytest.raises(ProducerBusyError, match=r"^Topic reached max producers limit \(2\)"):
        check_producer_limit("t", limits, 2)
    check_consumer_limits("t", limits, 2, 0)
    with pytest.raises(ConsumerBusyError, match=r"^Topic reached max consumers limit \(3\)"):
        check_consumer_limits("t", limits, 3, 0)
    with pytest.raises(ConsumerBusyError, match=r"^Subscription reached max consumers limit \(1\)"):
        check_consumer_limits("t", limits, 1, 1)
    unlimited = Policies(max_producers_per_topic=0, max_consumers_per_topic=0, max_consumers_per_subscription=0)
    check_producer_limit("t", unlimited, 10_000)
    check_consumer_limits("t", unlimited, 10_000, 10_000)


def test_policy_keys_say_which_topics_they_concern() -> None:
    orders = TopicName.parse("persistent://acme/eu/orders")
    partition = orders.partition(3)
    other = TopicName.parse("persistent://acme/us/orders")
    namespace_change = affected_by("/admin/policies/acme/eu")
    assert namespace_change is not None
    assert namespace_change(orders) and namespace_change(partition) and not namespace_change(other)
    topic_change = affected_by("/admin/topic-policies/persistent://acme/eu/orders")
    assert topic_change is not None
    assert topic_change(orders) and topic_change(partition) and not topic_change(other)
    assert affected_by("/admin/tenants/acme") is None


def test_size_after_a_position_estimates_within_its_ledger() -> None:
    ledgers = LedgerList([LedgerInfo(1, entries=10, size=1000), LedgerInfo(2, entries=4, size=400),
                          LedgerInfo(3, entries=0, size=0)])
    assert ledgers.size_after(Position(-1, -1)) == 1400
    assert ledgers.size_after(Position(1, -1)) == 1400
    assert ledgers.size_after(Position(1, 4)) == 500 + 400
    assert ledgers.size_after(Position(1, 9)) == 400
    assert ledgers.size_after(Position(2, 3)) == 0
    assert ledgers.size_after(Position(3, -1)) == 0
