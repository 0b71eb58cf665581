"""`herald admin`: the admin API from the command line, over herald.client.admin.

    herald admin [--url URL] [--json] <group> <command> [arguments]

Groups: tenants, namespaces, topics, subscriptions, brokers, dlq (dead letters). Output is for people (tables and
key: value lines) or, with --json, one JSON document for scripts (snake_case keys named as in the
admin contract, every field present, unset policies as null). A failed call prints one line
"error: <CODE>: <message>" on stderr and exits with status 1; a usage error exits with status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from herald.api.v1 import admin_pb2, common_pb2
from herald.cli.admin_security import (
    add_permission_commands,
    add_token_commands,
    client_security,
    client_security_flags,
)
from herald.client.admin import AdminClient
from herald.client.config import DEFAULT_MAX_MESSAGE_SIZE, InitialPosition
from herald.common.codec.entry import decode_entry, iter_records, records_claimed
from herald.common.errors import ConnectionError_, HeraldError, InvalidArgumentError
from herald.dlq.letters import ORIGIN_PROPERTIES
from herald.dlq.peek import DeadMessage, dead_letter_topic, peek, topic_exists
from herald.dlq.replay import Replayed, replay

DEFAULT_URL = "herald://127.0.0.1:6650"
URL_HELP = ("a service URL, herald://host:port (lookup names a broker), or a broker's host:port "
            f"(default: $HERALD_SERVICE_URL, else {DEFAULT_URL})")
EPILOG = """\
examples:
  herald admin tenants create acme
  herald admin namespaces create acme/orders --retention-time 7d --retention-size 10G
  herald admin namespaces set-policy acme/orders --ttl 1h --max-consumers 10
  herald admin topics create persistent://acme/orders/created --partitions 4
  herald admin --json topics stats persistent://acme/orders/created
  herald admin subscriptions reset persistent://acme/orders/created billing --time 2024-05-01T00:00:00Z
  herald admin dlq peek persistent://acme/orders/created --subscription billing
  herald admin dlq replay persistent://acme/orders/created --subscription billing --limit 100

A failed call prints "error: <CODE>: <message>" on stderr and exits with status 1 (2 for usage errors).
"""

Handler = Callable[[AdminClient, argparse.Namespace], Awaitable[Any]]

# ---- argument values ----

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_DURATION = re.compile(r"^(-?\d+)([smhdw]?)$")
_SIZE = re.compile(r"^(-?\d+)([bkmgt]?)(?:i?b)?$")


def duration(text: str) -> int:
    """Seconds from "45s", "30m", "1h", "7d", "2w" or a plain number of seconds; -1 is unlimited."""
    match = _DURATION.match(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: use e.g. 30s, 10m, 1h, 7d, 2w (or -1)")
    value = int(match.group(1))
    return value if value < 0 else value * _DURATION_UNITS.get(match.group(2) or "s", 1)


def size(text: str) -> int:
    """Bytes from "512", "64K", "100M", "10G", "1T" (powers of 1024); -1 is unlimited."""
    match = _SIZE.match(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: use e.g. 512, 64K, 100M, 10G (or -1)")
    value = int(match.group(1))
    return value if value < 0 else value * _SIZE_UNITS[match.group(2)]


def on_off(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("on", "true", "yes", "1"):
        return True
    if lowered in ("off", "false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"invalid value {text!r}: use on or off")


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: use a whole number, 0 or more")
    return value


def positive(text: str) -> int:
    value = non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: use a whole number, 1 or more")
    return value


def position(text: str) -> tuple[int, int]:
    """"ledger:entry" (a message id's first two parts; more parts are ignored)."""
    parts = text.split(":")
    try:
        if len(parts) < 2:
            raise ValueError
        return int(parts[0]), int(parts[1])
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid position {text!r}: use LEDGER:ENTRY, e.g. 12:0") from None


def start_position(text: str) -> InitialPosition | tuple[int, int]:
    lowered = text.strip().lower()
    if lowered == "earliest":
        return InitialPosition.Earliest
    if lowered == "latest":
        return InitialPosition.Latest
    return position(text)


def publish_time(text: str) -> int:
    """Unix milliseconds, or an ISO 8601 time (UTC unless it names a zone)."""
    if text.strip().lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: use unix milliseconds or ISO 8601, e.g. 2024-05-01T12:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


# ---- policies from flags ----

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
}


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


class HeraldUsageError(Exception):
    """A usage mistake found after parsing (exit status 2, like argparse's own)."""


# ---- output ----

def to_json(message: Message) -> dict[str, Any]:
    """Every field of a message, named as in the contract: numbers stay numbers (int64 too),
    enums are their names, unset optional fields and messages are null."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            out[field.name] = {key: _json_value(field.message_type.fields_by_name["value"], item)
                               for key, item in value.items()}
        elif field.is_repeated:
            out[field.name] = [_json_value(field, item) for item in value]
        elif field.has_presence and not message.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _json_value(field, value)
    return out


def _json_value(field: Any, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return to_json(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        known = field.enum_type.values_by_number
        return known[value].name if value in known else value
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def print_json(document: Any) -> None:
    print(json.dumps(document, indent=2, sort_keys=False))


def print_pairs(pairs: Sequence[tuple[str, Any]], indent: str = "") -> None:
    width = max((len(key) for key, _ in pairs), default=0)
    for key, value in pairs:
        print(f"{indent}{key + ':':{width + 1}} {_text(value)}")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "") -> None:
    if not rows:
        print(f"{indent}(none)")
        return
    cells = [[_text(cell) for cell in row] for row in rows]
    widths = [max(len(headers[i]), *(len(row[i]) for row in cells)) for i in range(len(headers))]
    print(indent + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        print(indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, common_pb2.Position):
        return f"{value.ledger_id}:{value.entry_id}"
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value) or "-"
    return str(value)


def print_names(names_: Sequence[str]) -> None:
    for name in names_:
        print(name)


def _human_seconds(seconds: int) -> str:
    if seconds < 0:
        return "unlimited"
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % span == 0:
            return f"{seconds // span}{unit}"
    return f"{seconds}s"


def _human_bytes(count: int) -> str:
    if count < 0:
        return "unlimited"
    for unit, span in (("T", 1024**4), ("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if count and count % span == 0:
            return f"{count // span}{unit}"
    return f"{count}"


def print_policies(policies: admin_pb2.Policies) -> None:
    inherited = "(inherited)"
    retention = (f"time {_human_seconds(policies.retention.time_seconds)}, "
                 f"size {_human_bytes(policies.retention.size_bytes)}"
                 if policies.HasField("retention") else inherited)
    quota = policies.backlog_quota
    backlog = (f"size {_human_bytes(quota.limit_bytes) if quota.limit_bytes > 0 else 'unlimited'}, "
               f"age {_human_seconds(quota.limit_seconds) if quota.limit_seconds > 0 else 'unlimited'}, "
               f"policy {admin_pb2.BacklogQuotaPolicy.Name(quota.policy).lower()}"
               if policies.HasField("backlog_quota") else inherited)
    persistence = policies.persistence
    quorums = (f"E={persistence.ensemble_size} Qw={persistence.write_quorum} Qa={persistence.ack_quorum}"
               if policies.HasField("persistence") else inherited)

    def optional(name: Any, show: Callable[[Any], str] = str) -> str:
        return show(getattr(policies, name)) if policies.HasField(name) else inherited

    print_pairs([
        ("retention", retention),
        ("message_ttl", optional("message_ttl_seconds", lambda s: "never" if s == 0 else _human_seconds(s))),
        ("backlog_quota", backlog),
        ("max_producers_per_topic", optional("max_producers_per_topic", _unlimited_if_zero)),
        ("max_consumers_per_topic", optional("max_consumers_per_topic", _unlimited_if_zero)),
        ("max_consumers_per_subscription", optional("max_consumers_per_subscription", _unlimited_if_zero)),
        ("deduplication", optional("deduplication_enabled", lambda on: "on" if on else "off")),
        ("encryption_required", optional("encryption_required", lambda on: "on" if on else "off")),
        ("persistence", quorums),
        ("max_message_size", optional("max_message_size", lambda n: f"{n} bytes")),
        ("max_topics", optional("max_topics", _unlimited_if_zero)),
        ("max_partitions_per_topic", optional("max_partitions_per_topic")),
    ])


def _unlimited_if_zero(value: int) -> str:
    return "unlimited" if value == 0 else str(value)


def print_topic_stats(stats: admin_pb2.TopicStats) -> None:
    print_pairs([
        ("topic", stats.topic),
        ("persistent", stats.persistent),
        ("partitions", stats.partitions),
        ("terminated", stats.terminated),
        ("msg_in_counter", stats.msg_in_counter),
        ("bytes_in_counter", stats.bytes_in_counter),
        ("msg_rate_in", stats.msg_rate_in),
        ("msg_throughput_in", stats.msg_throughput_in),
        ("msg_out_counter", stats.msg_out_counter),
        ("bytes_out_counter", stats.bytes_out_counter),
        ("msg_rate_out", stats.msg_rate_out),
        ("msg_throughput_out", stats.msg_throughput_out),
        ("entries", stats.entries),
        ("storage_size", stats.storage_size),
        ("backlog_size", stats.backlog_size),
        ("msg_dropped_counter", stats.msg_dropped_counter),
    ])
    print("\nproducers:")
    print_table(["NAME", "MSG IN", "BYTES IN", "MSG/S", "BYTES/S"], [
        [p.producer_name, p.msg_in_counter, p.bytes_in_counter, p.msg_rate_in, p.msg_throughput_in]
        for p in stats.producers
    ], indent="  ")
    print("\nsubscriptions:")
    print_table(
        ["NAME", "TYPE", "CONSUMERS", "BACKLOG", "MSG BACKLOG", "BACKLOG BYTES", "UNACKED", "MSG OUT", "MSG/S",
         "DEAD LETTERS", "DELAYED", "EXPIRED", "DURABLE"],
        [[s.name, s.type, s.consumers, s.backlog_entries, s.msg_backlog, s.backlog_size, s.unacked_messages,
          s.msg_out_counter, s.msg_rate_out, s.dead_letters, s.delayed_messages, s.msg_expired_counter, s.durable]
         for s in stats.subscriptions],
        indent="  ",
    )
    consumers = [(s.name, c) for s in stats.subscriptions for c in s.consumer_stats]
    if consumers:
        print("\nconsumers:")
        print_table(
            ["SUBSCRIPTION", "NAME", "MSG OUT", "BYTES OUT", "MSG/S", "BYTES/S", "UNACKED", "PERMITS", "PRIORITY",
             "ACTIVE", "KEY HASH RANGES"],
            [[sub, c.consumer_name, c.msg_out_counter, c.bytes_out_counter, c.msg_rate_out, c.msg_throughput_out,
              c.unacked_messages, c.available_permits, c.priority_level, c.is_active,
              " ".join(f"[{r.start}, {r.end}]" for r in c.key_hash_ranges)] for sub, c in consumers],
            indent="  ",
        )
    if stats.partition_stats:
        print("\npartitions:")
        print_table(["TOPIC", "MSG IN", "MSG OUT", "ENTRIES", "STORAGE", "BACKLOG BYTES"], [
            [p.topic, p.msg_in_counter, p.msg_out_counter, p.entries, p.storage_size, p.backlog_size]
            for p in stats.partition_stats
        ], indent="  ")


def print_internal_stats(stats: admin_pb2.InternalStats) -> None:
    print_pairs([
        ("topic", stats.topic),
        ("state", stats.state),
        ("number_of_entries", stats.number_of_entries),
        ("total_size", stats.total_size),
        ("current_ledger_id", stats.current_ledger_id),
        ("last_confirmed_entry", stats.last_confirmed_entry),
    ])
    print("\nledgers:")
    print_table(["LEDGER", "ENTRIES", "SIZE"], [[x.ledger_id, x.entries, x.size] for x in stats.ledgers], "  ")
    print("\ncursors:")
    print_table(
        ["NAME", "MARK DELETE", "READ", "BACKLOG", "DURABLE", "ACKED RANGES"],
        [[c.name, c.mark_delete_position, c.read_position, c.backlog_entries, c.durable,
          _ranges(list(c.individually_acked_ranges))] for c in stats.cursors],
        "  ",
    )


def _ranges(ends: list[common_pb2.Position]) -> str:
    pairs = [f"[{_text(a)}..{_text(b)}]" for a, b in zip(ends[::2], ends[1::2], strict=False)]
    return " ".join(pairs) or "-"


def decoded_entries(entries: Sequence[Any]) -> list[dict[str, Any]]:
    """Peeked entries with their messages unpacked (value as text when it is UTF-8, and always as
    base64)."""
    out = []
    for entry in entries:
        try:
            metadata, payload = decode_entry(bytes(entry.data))
            records = list(iter_records(payload, records_claimed(metadata)))
        except HeraldError as error:  # shown as it is stored: never hide an entry
            out.append({"ledger_id": entry.ledger_id, "entry_id": entry.entry_id,
                        "redelivery_count": entry.redelivery_count, "producer_name": None, "sequence_id": None,
                        "publish_time": None, "messages": [], "undecodable": str(error),
                        "data_base64": base64.b64encode(entry.data).decode()})
            continue
        messages = []
        for index, record in enumerate(records):
            value = bytes(record.value)
            try:
                text: str | None = value.decode()
            except UnicodeDecodeError:
                text = None
            messages.append({
                "batch_index": index, "key": record.key, "properties": dict(record.properties or {}),
                "event_time": record.event_time, "value": text, "value_base64": base64.b64encode(value).decode(),
            })
        out.append({
            "ledger_id": entry.ledger_id, "entry_id": entry.entry_id, "redelivery_count": entry.redelivery_count,
            "producer_name": metadata.producer_name, "sequence_id": metadata.sequence_id,
            "publish_time": metadata.publish_time, "messages": messages, "undecodable": None, "data_base64": None,
        })
    return out


# ---- commands ----

async def tenants_list(admin: AdminClient, args: argparse.Namespace) -> Any:
    tenants = await admin.list_tenants()
    return {"tenants": tenants} if args.json else print_names(tenants)


def _show_tenant(tenant: admin_pb2.Tenant, args: argparse.Namespace) -> Any:
    if args.json:
        return to_json(tenant)
    print_pairs([("name", tenant.name), ("admin_roles", list(tenant.admin_roles)),
                 ("allowed_clusters", list(tenant.allowed_clusters))])
    return None


async def tenants_get(admin: AdminClient, args: argparse.Namespace) -> Any:
    return _show_tenant(await admin.get_tenant(args.tenant), args)


async def tenants_create(admin: AdminClient, args: argparse.Namespace) -> Any:
    return _show_tenant(await admin.create_tenant(args.tenant, args.admin_roles or (), args.allowed_clusters or ()),
                        args)


async def tenants_update(admin: AdminClient, args: argparse.Namespace) -> Any:
    current = await admin.get_tenant(args.tenant)
    roles = args.admin_roles if args.admin_roles is not None else list(current.admin_roles)
    clusters = args.allowed_clusters if args.allowed_clusters is not None else list(current.allowed_clusters)
    return _show_tenant(await admin.update_tenant(args.tenant, roles, clusters), args)


async def tenants_delete(admin: AdminClient, args: argparse.Namespace) -> Any:
    await admin.delete_tenant(args.tenant)
    return {"deleted": args.tenant} if args.json else print(f"tenant {args.tenant} deleted")


async def namespaces_list(admin: AdminClient, args: argparse.Namespace) -> Any:
    namespaces = await admin.list_namespaces(args.tenant)
    return {"namespaces": namespaces} if args.json else print_names(namespaces)


def _show_policies(policies: admin_pb2.Policies, args: argparse.Namespace) -> Any:
    return to_json(policies) if args.json else print_policies(policies)


async def namespaces_create(admin: AdminClient, args: argparse.Namespace) -> Any:
    given = _any_policy_flag(args)
    policies = policies_from_flags(args, admin_pb2.Policies()) if given else None
    return _show_policies(await admin.create_namespace(args.namespace, policies), args)


def _any_policy_flag(args: argparse.Namespace) -> bool:
    flags = ("retention_time", "retention_size", "ttl", "backlog_quota_size", "backlog_quota_age",
             "backlog_quota_policy", "max_producers", "max_consumers", "max_consumers_per_subscription",
             "deduplication", "encryption_required", "ensemble", "write_quorum", "ack_quorum", "max_message_size",
             "max_topics", "max_partitions")
    return any(getattr(args, flag) is not None for flag in flags)


async def namespaces_delete(admin: AdminClient, args: argparse.Namespace) -> Any:
    await admin.delete_namespace(args.namespace)
    return {"deleted": args.namespace} if args.json else print(f"namespace {args.namespace} deleted")


async def namespaces_policies(admin: AdminClient, args: argparse.Namespace) -> Any:
    return _show_policies(await admin.namespace_policies(args.namespace), args)


async def namespaces_set_policy(admin: AdminClient, args: argparse.Namespace) -> Any:
    current = await admin.namespace_policies(args.namespace)
    policies = policies_from_flags(args, current)
    return _show_policies(await admin.set_namespace_policies(args.namespace, policies), args)


async def namespaces_clear_policy(admin: AdminClient, args: argparse.Namespace) -> Any:
    fields = cleared_fields(args)
    return _show_policies(await admin.set_namespace_policies(args.namespace, clear=fields), args)


async def topics_list(admin: AdminClient, args: argparse.Namespace) -> Any:
    topics = await admin.list_topics(args.namespace)
    return {"topics": topics} if args.json else print_names(topics)


async def topics_create(admin: AdminClient, args: argparse.Namespace) -> Any:
    await admin.create_topic(args.topic, args.partitions)
    if args.json:
        return {"created": args.topic, "partitions": args.partitions}
    detail = f" with {args.partitions} partitions" if args.partitions else ""
    print(f"topic {args.topic} created{detail}")
    return None


async def topics_delete(admin: AdminClient, args: argparse.Namespace) -> Any:
    await admin.delete_topic(args.topic, args.force)
    return {"deleted": args.topic} if args.json else print(f"topic {args.topic} deleted")


async def topics_stats(admin: AdminClient, args: argparse.Namespace) -> Any:
    stats = await admin.topic_stats(args.topic)
    return to_json(stats) if args.json else print_topic_stats(stats)


async def topics_internal_stats(admin: AdminClient, args: argparse.Namespace) -> Any:
    stats = await admin.internal_stats(args.topic)
    return to_json(stats) if args.json else print_internal_stats(stats)


async def topics_unload(admin: AdminClient, args: argparse.Namespace) -> Any:
    await admin.unload_topic(args.topic)
    return {"unloaded": args.topic} if args.json else print(f"topic {args.topic} unloaded")


async def topics_terminate(admin: AdminClient, args: argparse.Namespace) -> Any:
    last = await admin.terminate_topic(args.topic)
    if args.json:
        return {"terminated": args.topic, "last": to_json(last)}
    print(f"topic {args.topic} terminated; last entry {_text(last)}")
    return None


async def topics_partitions_get(admin: AdminClient, args: argparse.Namespace) -> Any:
    count = await admin.get_partitions(args.topic)
    return {"topic": args.topic, "partitions": count} if args.json else print(count)


async def topics_partitions_update(admin: AdminClient, args: argparse.Namespace) -> Any:
    count = await admin.update_partitions(args.topic, args.partitions)
    if args.json:
        return {"topic": args.topic, "partitions": count}
    print(f"topic {args.topic} now has {count} partitions")
    return None


async def topics_policies(admin: AdminClient, args: argparse.Namespace) -> Any:
    policies = await (admin.effective_policies(args.topic) if args.effective else admin.topic_policies(args.topic))
    return _show_policies(policies, args)


async def topics_set_policy(admin: AdminClient, args: argparse.Namespace) -> Any:
    current = await admin.topic_policies(args.topic)
    policies = policies_from_flags(args, current)
    return _show_policies(await admin.set_topic_policies(args.topic, policies), args)


async def topics_clear_policy(admin: AdminClient, args: argparse.Namespace) -> Any:
    fields = cleared_fields(args)
    return _show_policies(await admin.set_topic_policies(args.topic, clear=fields), args)


async def subscriptions_list(admin: AdminClient, args: argparse.Namespace) -> Any:
    subscriptions = await admin.list_subscriptions(args.topic)
    return {"subscriptions": subscriptions} if args.json else print_names(subscriptions)


async def subscriptions_create(admin: AdminClient, args: argparse.Namespace) -> Any:
    await admin.create_subscription(args.topic, args.subscription, args.position)
    if args.json:
        return {"created": args.subscription, "topic": args.topic}
    print(f"subscription {args.subscription} created on {args.topic}")
    return None


async def subscriptions_delete(admin: AdminClient, args: argparse.Namespace) -> Any:
    await admin.delete_subscription(args.topic, args.subscription, args.force)
    if args.json:
        return {"deleted": args.subscription, "topic": args.topic}
    print(f"subscription {args.subscription} deleted from {args.topic}")
    return None


async def subscriptions_reset(admin: AdminClient, args: argparse.Namespace) -> Any:
    if args.position is not None:
        await admin.reset_cursor(args.topic, args.subscription, position=args.position)
        target = f"position {args.position[0]}:{args.position[1]}"
    elif args.time is not None:
        await admin.reset_cursor(args.topic, args.subscription, publish_time=args.time)
        target = f"publish time {args.time}"
    else:
        edge = InitialPosition.Earliest if args.earliest else InitialPosition.Latest
        await admin.reset_cursor(args.topic, args.subscription, edge=edge)
        target = "the earliest message" if args.earliest else "the latest message"
    if args.json:
        return {"reset": args.subscription, "topic": args.topic, "target": target}
    print(f"subscription {args.subscription} on {args.topic} reset to {target}")
    return None


async def subscriptions_skip(admin: AdminClient, args: argparse.Namespace) -> Any:
    if args.count is None and not args.all:
        raise HeraldUsageError("give a number of entries to skip, or --all")
    if args.count is not None and args.all:
        raise HeraldUsageError("give either a number of entries to skip or --all, not both")
    skipped = await admin.skip_messages(args.topic, args.subscription, None if args.all else args.count)
    return {"skipped": skipped} if args.json else print(f"skipped {skipped} entries")


async def subscriptions_peek(admin: AdminClient, args: argparse.Namespace) -> Any:
    entries = decoded_entries(await admin.peek_messages(args.topic, args.subscription, args.count))
    if args.json:
        return {"entries": entries}
    if not entries:
        print("(no unacknowledged messages)")
    for entry in entries:
        print(f"entry {entry['ledger_id']}:{entry['entry_id']} (producer {entry['producer_name']}, "
              f"redelivery count {entry['redelivery_count']})")
        if entry["undecodable"]:
            print(f"  cannot decode it ({entry['undecodable']}): base64:{entry['data_base64']}")
        for message in entry["messages"]:
            key = f" key={message['key']}" if message["key"] is not None else ""
            value = message["value"] if message["value"] is not None else f"base64:{message['value_base64']}"
            print(f"  [{message['batch_index']}]{key}: {value}")
    return None


async def brokers_list(admin: AdminClient, args: argparse.Namespace) -> Any:
    brokers = await admin.list_brokers()
    if args.json:
        return {"brokers": [to_json(b) for b in brokers]}
    print_table(
        ["BROKER", "ADDRESS", "CLUSTER", "TOPICS", "PRODUCERS", "CONSUMERS", "MSG/S IN", "MSG/S OUT"],
        [[b.broker_id, b.address, b.cluster, b.owned_topics, b.load.producers, b.load.consumers, b.load.msg_rate_in,
          b.load.msg_rate_out] for b in brokers],
    )
    return None


# ---- dead letters (herald.dlq) ----

def _dlq_topic(args: argparse.Namespace) -> str:
    return str(args.dlq_topic or dead_letter_topic(args.topic, args.subscription))


def _service_url(args: argparse.Namespace) -> str:
    if "://" not in args.url:
        raise HeraldUsageError(f"dlq commands need a service URL (herald://host:port), not a broker's address "
                               f"({args.url}): give --url herald://...")
    return str(args.url)


def _dead_message(message: DeadMessage) -> dict[str, Any]:
    try:
        text: str | None = message.value.decode()
    except UnicodeDecodeError:
        text = None
    return {
        "message_id": str(message.message_id), "key": message.key, "value": text,
        "value_base64": base64.b64encode(message.value).decode(), "event_time": message.event_time,
        "publish_time": message.publish_time,
        "origin": {name: message.properties[name] for name in ORIGIN_PROPERTIES if name in message.properties},
        "properties": {name: value for name, value in message.properties.items() if name not in ORIGIN_PROPERTIES},
    }


def _shorten(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


async def dlq_peek(admin: AdminClient, args: argparse.Namespace) -> Any:
    from herald.client import AsyncClient

    topic = _dlq_topic(args)
    async with AsyncClient(_service_url(args), operation_timeout=args.timeout, stats_interval=0,
                           **client_security(args)) as client:
        messages = [_dead_message(message)
                    for message in await peek(client, admin, topic, args.count, args.max_message_size)]
    if args.json:
        return {"dead_letter_topic": topic, "messages": messages}
    if not messages:
        print(f"(no dead letters in {topic})")
        return None
    print(f"dead letters in {topic}, oldest first:")
    print_table(
        ["MESSAGE ID", "REAL_TOPIC", "ORIGIN_MESSAGE_ID", "SUBSCRIPTION", "REDELIVERIES", "REASON", "KEY", "VALUE",
         "PROPERTIES"],
        [[m["message_id"], m["origin"].get("REAL_TOPIC"), m["origin"].get("ORIGIN_MESSAGE_ID"),
          m["origin"].get("SUBSCRIPTION"), m["origin"].get("REDELIVERY_COUNT"), m["origin"].get("REASON"), m["key"],
          _shorten(m["value"] if m["value"] is not None else "base64:" + m["value_base64"]),
          " ".join(f"{k}={v}" for k, v in m["properties"].items()) or None] for m in messages],
    )
    return None


async def dlq_replay(admin: AdminClient, args: argparse.Namespace) -> Any:
    topic = _dlq_topic(args)
    url = _service_url(args)
    replayed = Replayed()
    if await topic_exists(admin, topic):
        replayed = await replay(url, topic, args.topic, args.limit, args.timeout, **client_security(args))
    if args.json:
        return {"dead_letter_topic": topic, "replayed": replayed.messages, "already_there": replayed.duplicates}
    print(f"replayed {replayed.messages} messages from {topic} to their topics")
    if replayed.duplicates:
        print(f"{replayed.duplicates} more were there already (published by an interrupted replay, or by one whose "
              "--limit cut their entry short) and are acknowledged now")
    return None


# ---- the parser ----

def add_admin_parser(commands: Any) -> None:
    """Add `admin` and its groups to the `herald` command's subparsers."""
    env_url = os.environ.get("HERALD_SERVICE_URL", DEFAULT_URL)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help=URL_HELP)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print one JSON document (for scripts) instead of tables")
    common.add_argument("--timeout", type=float, default=argparse.SUPPRESS, metavar="SECONDS",
                        help="give up on a call after this long (default 30)")
    client_security_flags(common, defaults="inherited")

    admin = commands.add_parser(
        "admin", help="administer tenants, namespaces, topics, subscriptions, brokers and dead letters",
        description="Administer a Herald cluster through any broker's admin API.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    admin.add_argument("--url", default=env_url, help=URL_HELP)
    admin.add_argument("--json", action="store_true", default=False,
                       help="print one JSON document (for scripts) instead of tables")
    admin.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                       help="give up on a call after this long (default 30)")
    client_security_flags(admin)
    groups = admin.add_subparsers(dest="admin_group", required=True, metavar="GROUP")

    def group(name: str, help_text: str) -> Any:
        parser = groups.add_parser(name, help=help_text, description=help_text)
        return parser.add_subparsers(dest="admin_command", required=True, metavar="COMMAND")

    def command(subs: Any, name: str, help_text: str, handler: Handler) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = subs.add_parser(name, help=help_text, description=help_text,
                                                          parents=[common])
        parser.set_defaults(admin_handler=handler)
        return parser

    tenants = group("tenants", "tenants: list, get, create, update, delete")
    command(tenants, "list", "list the tenants", tenants_list)
    sub = command(tenants, "get", "show a tenant", tenants_get)
    sub.add_argument("tenant", help="tenant name")
    for name, help_text, handler in (("create", "create a tenant", tenants_create),
                                     ("update", "change a tenant's admin roles or allowed clusters (others kept)",
                                      tenants_update)):
        sub = command(tenants, name, help_text, handler)
        sub.add_argument("tenant", help="tenant name")
        sub.add_argument("--admin-roles", type=names, metavar="ROLE,...", help="comma-separated admin roles")
        sub.add_argument("--allowed-clusters", type=names, metavar="CLUSTER,...",
                         help="comma-separated clusters the tenant may use")
    sub = command(tenants, "delete", "delete a tenant (refused while it has namespaces)", tenants_delete)
    sub.add_argument("tenant", help="tenant name")

    namespaces = group("namespaces", "namespaces and their policies: list, create, delete, policies, set-policy, "
                                     "clear-policy")
    sub = command(namespaces, "list", "list a tenant's namespaces", namespaces_list)
    sub.add_argument("tenant", help="tenant name")
    sub = command(namespaces, "create", "create a namespace, with policies if given", namespaces_create)
    sub.add_argument("namespace", help="tenant/namespace")
    add_policy_flags(sub)
    sub = command(namespaces, "delete", "delete a namespace (refused while it has topics)", namespaces_delete)
    sub.add_argument("namespace", help="tenant/namespace")
    sub = command(namespaces, "policies", "show a namespace's policies", namespaces_policies)
    sub.add_argument("namespace", help="tenant/namespace")
    sub = command(namespaces, "set-policy", "set policies of a namespace", namespaces_set_policy)
    sub.add_argument("namespace", help="tenant/namespace")
    add_policy_flags(sub)
    sub = command(namespaces, "clear-policy", "remove policies of a namespace (broker defaults apply again)",
                  namespaces_clear_policy)
    sub.add_argument("namespace", help="tenant/namespace")
    add_clear_flags(sub)

    topics = group("topics", "topics: list, create, delete, stats, internal-stats, unload, terminate, partitions, "
                             "policies, set-policy, clear-policy")
    sub = command(topics, "list", "list a namespace's topics", topics_list)
    sub.add_argument("namespace", help="tenant/namespace")
    sub = command(topics, "create", "create a topic", topics_create)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("--partitions", type=non_negative, default=0, metavar="N",
                     help="make it a partitioned topic of N partitions (default 0: not partitioned)")
    sub = command(topics, "delete", "delete a topic and its data", topics_delete)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("--force", action="store_true", help="disconnect its producers and consumers first")
    sub = command(topics, "stats", "show a topic's stats (a partitioned topic's sum its partitions')", topics_stats)
    sub.add_argument("topic", help="topic name")
    sub = command(topics, "internal-stats", "show a topic's ledgers and cursors", topics_internal_stats)
    sub.add_argument("topic", help="topic name")
    sub = command(topics, "unload", "close the topic on its broker and release it (lookup assigns it anew)",
                  topics_unload)
    sub.add_argument("topic", help="topic name")
    sub = command(topics, "terminate", "refuse further writes to a topic", topics_terminate)
    sub.add_argument("topic", help="topic name")
    partitions = topics.add_parser("partitions", help="get or grow a topic's partition count",
                                   description="get or grow a topic's partition count")
    partition_commands = partitions.add_subparsers(dest="partitions_command", required=True, metavar="COMMAND")
    sub = command(partition_commands, "get", "show the partition count (0: not partitioned)", topics_partitions_get)
    sub.add_argument("topic", help="topic name")
    sub = command(partition_commands, "update", "grow to N partitions (shrinking is refused)",
                  topics_partitions_update)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("partitions", type=positive, metavar="N", help="the new partition count")
    sub = command(topics, "policies", "show a topic's own policies (or, with --effective, those in force)",
                  topics_policies)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("--effective", action="store_true",
                     help="the policies in force: topic over namespace over broker defaults")
    sub = command(topics, "set-policy", "set policies of a topic (overriding its namespace's)", topics_set_policy)
    sub.add_argument("topic", help="topic name")
    add_policy_flags(sub)
    sub = command(topics, "clear-policy", "remove policies of a topic (its namespace's apply again)",
                  topics_clear_policy)
    sub.add_argument("topic", help="topic name")
    add_clear_flags(sub)

    subscriptions = group("subscriptions", "subscriptions: list, create, delete, reset, skip, peek")
    sub = command(subscriptions, "list", "list a topic's subscriptions", subscriptions_list)
    sub.add_argument("topic", help="topic name")
    sub = command(subscriptions, "create", "create a durable subscription", subscriptions_create)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("subscription", help="subscription name")
    sub.add_argument("--position", type=start_position, default=InitialPosition.Latest,
                     metavar="earliest|latest|LEDGER:ENTRY", help="where it starts (default latest)")
    sub = command(subscriptions, "delete", "delete a subscription (unsubscribe)", subscriptions_delete)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("subscription", help="subscription name")
    sub.add_argument("--force", action="store_true", help="disconnect its consumers first")
    sub = command(subscriptions, "reset", "move a subscription's cursor", subscriptions_reset)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("subscription", help="subscription name")
    target = sub.add_mutually_exclusive_group(required=True)
    target.add_argument("--position", type=position, metavar="LEDGER:ENTRY", help="to this message")
    target.add_argument("--time", type=publish_time, metavar="ISO|MS",
                        help="to the first message published at or after this time (ISO 8601, UTC unless a "
                             "zone is given, or unix milliseconds)")
    target.add_argument("--earliest", action="store_true", help="to the first message kept")
    target.add_argument("--latest", action="store_true", help="past the last message")
    sub = command(subscriptions, "skip", "acknowledge the oldest unacknowledged entries without delivering them",
                  subscriptions_skip)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("subscription", help="subscription name")
    sub.add_argument("count", nargs="?", type=positive, metavar="N", help="how many entries to skip")
    sub.add_argument("--all", action="store_true", help="skip the whole backlog")
    sub = command(subscriptions, "peek", "show the oldest unacknowledged entries (they stay unacknowledged)",
                  subscriptions_peek)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("subscription", help="subscription name")
    sub.add_argument("count", nargs="?", type=positive, default=1, metavar="N", help="how many entries (default 1)")

    add_permission_commands(namespaces, topics, command)
    add_token_commands(group("tokens", "authentication tokens: create-secret-key, create-key-pair, create"), command)
    brokers = group("brokers", "brokers: list")
    command(brokers, "list", "list the live brokers with their load", brokers_list)

    dlq = group("dlq", "dead letters (moved by the dlq-worker): peek, replay")
    for name, help_text, handler in (
            ("peek", "show a subscription's dead letters with their origin, oldest first (nothing is consumed)",
             dlq_peek),
            ("replay", "move a subscription's dead letters back to their topics (each at most once)", dlq_replay)):
        sub = command(dlq, name, help_text, handler)
        sub.add_argument("topic", help="the topic whose subscription's dead letters these are")
        sub.add_argument("--subscription", "-s", required=True, help="the subscription")
        sub.add_argument("--dlq-topic", metavar="TOPIC",
                         help="the dead-letter topic, when the subscription's policy names one "
                              "(default <topic>-<subscription>-DLQ)")
        if name == "peek":
            sub.add_argument("--count", "-n", type=positive, default=10, metavar="N",
                             help="how many messages (default 10)")
            sub.add_argument("--max-message-size", type=positive, default=DEFAULT_MAX_MESSAGE_SIZE, metavar="BYTES",
                             help="the largest message shown decompressed (default 5 MiB): a dead letter that would "
                                  "decompress to more is left out with a warning")
        else:
            sub.add_argument("--limit", "-n", type=positive, default=None, metavar="N",
                             help="replay at most N messages (default: all)")
    admin.set_defaults(func=run_admin)


def error_code(error: HeraldError) -> str:
    if isinstance(error, ConnectionError_):
        return "UNAVAILABLE"
    try:
        return common_pb2.ErrorCode.Name(error.code)  # type: ignore[arg-type]
    except ValueError:
        return "UNKNOWN_ERROR"


def run_admin(args: argparse.Namespace) -> None:
    """Run the chosen admin command; exit status 1 on a failed call, 2 on a usage error."""
    try:
        admin = AdminClient(args.url, timeout=args.timeout, **client_security(args))
    except InvalidArgumentError as error:
        print(f"herald admin: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        document = asyncio.run(_run(admin, args))
    except HeraldUsageError as error:
        print(f"herald admin: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except HeraldError as error:
        message = " ".join(str(error).split())
        print(f"error: {error_code(error)}: {message}", file=sys.stderr)
        raise SystemExit(1) from None
    if args.json:
        print_json(document)


async def _run(admin: AdminClient, args: argparse.Namespace) -> Any:
    async with admin:
        return await args.admin_handler(admin, args)
