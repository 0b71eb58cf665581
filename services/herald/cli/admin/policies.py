"""Policies from flags, for `namespaces` and `topics` (create, set-policy, clear-policy): a flag per
policy, the Policies message they make over the current one, and the fields clear-policy removes."""

from __future__ import annotations

import argparse

from herald.api.v1 import admin_pb2
from herald.cli.admin.arguments import HeraldUsageError, duration, non_negative, on_off, positive, size

_BACKLOG_POLICIES = {
    "producer_request_hold": admin_pb2.PRODUCER_REQUEST_HOLD,
    "producer_exception": admin_pb2.PRODUCER_EXCEPTION,
    "consumer_backlog_eviction": admin_pb2.CONSUMER_BACKLOG_EVICTION,
}
# clear-policy flag -> the Policies field it removes.
_CLEARABLE = {
    "retention": ("retention", "retention (time and size)"),
    "ttl": ("message_ttl_seconds", "message TTL"),
    "backlog_quota": ("backlog_quota", "backlog quota (size, age and policy)"),
    "max_producers": ("max_producers_per_topic", "max producers per topic"),
    "max_consumers": ("max_consumers_per_topic", "max consumers per topic"),
    "max_consumers_per_subscription": ("max_consumers_per_subscription", "max consumers per subscription"),
    "deduplication": ("deduplication_enabled", "deduplication on/off"),
    "encryption_required": ("encryption_required", "encryption required on/off"),
    "persistence": ("persistence", "storage quorums (ensemble, write and ack quorum)"),
    "max_message_size": ("max_message_size", "max message size"),
    "max_topics": ("max_topics", "max topics per namespace"),
    "max_partitions": ("max_partitions_per_topic", "max partitions per topic"),
    "compaction_threshold": ("compaction_threshold", "compaction threshold"),
}
# The destinations of add_policy_flags' flags.
_POLICY_FLAGS = ("retention_time", "retention_size", "ttl", "backlog_quota_size", "backlog_quota_age",
                 "backlog_quota_policy", "max_producers", "max_consumers", "max_consumers_per_subscription",
                 "deduplication", "encryption_required", "ensemble", "write_quorum", "ack_quorum", "max_message_size",
                 "max_topics", "max_partitions", "compaction_threshold")


def add_policy_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("policies (each flag sets one; unset ones stay as they are)")
    group.add_argument("--retention-time", type=duration, metavar="DURATION",
                       help="keep consumed messages this long, e.g. 7d (-1: forever, 0: not at all)")
    group.add_argument("--retention-size", type=size, metavar="SIZE",
                       help="keep at most this much consumed data, e.g. 10G (-1: unlimited, 0: none)")
    group.add_argument("--ttl", type=duration, metavar="DURATION",
                       help="message time to live: older unacknowledged messages are acknowledged, e.g. 1h "
                            "(0: never)")
    group.add_argument("--backlog-quota-size", type=size, metavar="SIZE",
                       help="largest backlog allowed, e.g. 10G (-1 or 0: no size limit)")
    group.add_argument("--backlog-quota-age", type=duration, metavar="DURATION",
                       help="oldest unacknowledged message allowed, e.g. 1d (-1 or 0: no age limit)")
    group.add_argument("--backlog-quota-policy", choices=sorted(_BACKLOG_POLICIES),
                       help="what happens over the quota")
    group.add_argument("--max-producers", type=non_negative, metavar="N",
                       help="producers per topic (0: unlimited)")
    group.add_argument("--max-consumers", type=non_negative, metavar="N",
                       help="consumers per topic (0: unlimited)")
    group.add_argument("--max-consumers-per-subscription", type=non_negative, metavar="N",
                       help="consumers per subscription (0: unlimited)")
    group.add_argument("--deduplication", type=on_off, metavar="on|off", help="deduplicate by producer sequence id")
    group.add_argument("--encryption-required", type=on_off, metavar="on|off",
                       help="refuse messages that are not encrypted")
    group.add_argument("--ensemble", type=positive, metavar="E", help="storage nodes per ledger")
    group.add_argument("--write-quorum", type=positive, metavar="QW", help="copies of each entry")
    group.add_argument("--ack-quorum", type=positive, metavar="QA", help="copies acknowledged before a send is")
    group.add_argument("--max-message-size", type=size, metavar="SIZE", help="largest message accepted, e.g. 5M")
    group.add_argument("--max-topics", type=non_negative, metavar="N",
                       help="topics in the namespace, a partitioned topic counting its partitions (0: unlimited; "
                            "namespaces only)")
    group.add_argument("--max-partitions", type=positive, metavar="N",
                       help="partitions of one partitioned topic (at least 1; above the broker's "
                            "max_partitions_per_topic only by a super-user; namespaces only)")
    group.add_argument("--compaction-threshold", type=size, metavar="SIZE",
                       help="compact a topic once this much was written since its last compaction, e.g. 100M "
                            "(0: never automatically)")


def any_policy_flag(args: argparse.Namespace) -> bool:
    return any(getattr(args, flag) is not None for flag in _POLICY_FLAGS)


def policies_from_flags(args: argparse.Namespace, current: admin_pb2.Policies) -> admin_pb2.Policies:
    """The Policies message the flags set. A flag for half of a group (retention time without
    size, say) keeps the other half at its current value, or at no limit when none is set."""
    policies = admin_pb2.Policies()
    if args.retention_time is not None or args.retention_size is not None:
        has = current.HasField("retention")
        policies.retention.time_seconds = _first(args.retention_time, current.retention.time_seconds if has else -1)
        policies.retention.size_bytes = _first(args.retention_size, current.retention.size_bytes if has else -1)
    if args.ttl is not None:
        policies.message_ttl_seconds = args.ttl
    if any(v is not None for v in (args.backlog_quota_size, args.backlog_quota_age, args.backlog_quota_policy)):
        has = current.HasField("backlog_quota")
        quota = current.backlog_quota
        policies.backlog_quota.limit_bytes = _first(args.backlog_quota_size, quota.limit_bytes if has else -1)
        policies.backlog_quota.limit_seconds = _first(args.backlog_quota_age, quota.limit_seconds if has else -1)
        policies.backlog_quota.policy = (_BACKLOG_POLICIES[args.backlog_quota_policy]
                                         if args.backlog_quota_policy is not None else quota.policy)
    if args.max_producers is not None:
        policies.max_producers_per_topic = args.max_producers
    if args.max_consumers is not None:
        policies.max_consumers_per_topic = args.max_consumers
    if args.max_consumers_per_subscription is not None:
        policies.max_consumers_per_subscription = args.max_consumers_per_subscription
    if args.max_topics is not None:
        policies.max_topics = args.max_topics
    if args.max_partitions is not None:
        policies.max_partitions_per_topic = args.max_partitions
    if args.deduplication is not None:
        policies.deduplication_enabled = args.deduplication
    if args.encryption_required is not None:
        policies.encryption_required = args.encryption_required
    quorums = (args.ensemble, args.write_quorum, args.ack_quorum)
    if any(v is not None for v in quorums):
        has = current.HasField("persistence")
        if not has and None in quorums:
            raise HeraldUsageError("give --ensemble, --write-quorum and --ack-quorum together "
                                   "(no storage quorums are set here to complete)")
        policies.persistence.ensemble_size = _first(args.ensemble, current.persistence.ensemble_size)
        policies.persistence.write_quorum = _first(args.write_quorum, current.persistence.write_quorum)
        policies.persistence.ack_quorum = _first(args.ack_quorum, current.persistence.ack_quorum)
    if args.max_message_size is not None:
        policies.max_message_size = args.max_message_size
    if args.compaction_threshold is not None:
        policies.compaction_threshold = args.compaction_threshold
    if not policies.ListFields():
        raise HeraldUsageError("no policy given: see --help for the policy flags")
    return policies


def _first(value: int | None, fallback: int) -> int:
    return value if value is not None else fallback


def add_clear_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("policies to clear (they are inherited again)")
    for flag, (_field, what) in _CLEARABLE.items():
        group.add_argument("--" + flag.replace("_", "-"), action="store_true", dest=f"clear_{flag}",
                           help=f"clear the {what}")
    group.add_argument("--all", action="store_true", dest="clear_all", help="clear every policy")


def cleared_fields(args: argparse.Namespace) -> list[str]:
    fields = [name for flag, (name, _) in _CLEARABLE.items() if args.clear_all or getattr(args, f"clear_{flag}")]
    if not fields:
        raise HeraldUsageError("nothing to clear: name at least one policy flag (see --help) or --all")
    return fields
