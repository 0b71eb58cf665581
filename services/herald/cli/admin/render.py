"""What `herald admin` prints: for people, tables and "key: value" lines; for scripts (--json), one
JSON document with every field of a message named as in the admin contract. Nothing here calls the
admin API."""

from __future__ import annotations

import argparse
import base64
import datetime
import json
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from herald.api.v1 import admin_pb2, common_pb2
from herald.client.config import DEFAULT_MAX_MESSAGE_SIZE
from herald.common.codec.entry import ENTRY_FRAMING_ALLOWANCE, unpack_entry
from herald.common.errors import HeraldError


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
        print(f"{indent}{key + ':':{width + 1}} {as_text(value)}")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "") -> None:
    if not rows:
        print(f"{indent}(none)")
        return
    cells = [[as_text(cell) for cell in row] for row in rows]
    widths = [max(len(headers[i]), *(len(row[i]) for row in cells)) for i in range(len(headers))]
    print(indent + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        print(indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def as_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, common_pb2.Position):
        return f"{value.ledger_id}:{value.entry_id}"
    if isinstance(value, list | tuple):
        return ", ".join(as_text(v) for v in value) or "-"
    return str(value)


def print_names(names: Sequence[str]) -> None:
    for name in names:
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
    pairs = [f"[{as_text(a)}..{as_text(b)}]" for a, b in zip(ends[::2], ends[1::2], strict=False)]
    return " ".join(pairs) or "-"


def decoded_entries(entries: Sequence[Any]) -> list[dict[str, Any]]:
    """Peeked entries with their messages unpacked (value as text when it is UTF-8, and always as
    base64)."""
    out = []
    for entry in entries:
        try:
            # Either format, decompressed within the default max message size (a bomb is shown as
            # undecodable, never inflated).
            metadata, records = unpack_entry(bytes(entry.data), DEFAULT_MAX_MESSAGE_SIZE + ENTRY_FRAMING_ALLOWANCE)
        except HeraldError as error:  # shown as it is stored: never hide an entry
            out.append({"ledger_id": entry.ledger_id, "entry_id": entry.entry_id,
                        "redelivery_count": entry.redelivery_count, "producer_name": None, "sequence_id": None,
                        "publish_time": None, "messages": [], "undecodable": str(error),
                        "data_base64": base64.b64encode(entry.data).decode()})
            continue
        messages = []
        for index, record in enumerate(records):
            if record.compacted_out:  # removed by compaction (its batch index kept)
                continue
            value = bytes(record.value)
            try:
                text: str | None = value.decode()
            except UnicodeDecodeError:
                text = None
            messages.append({
                "batch_index": index, "key": record.key, "properties": dict(record.properties or {}),
                "sequence_id": metadata.sequence_id + index if record.sequence_id is None else record.sequence_id,
                "event_time": record.event_time, "value": text, "value_base64": base64.b64encode(value).decode(),
            })
        out.append({
            "ledger_id": entry.ledger_id, "entry_id": entry.entry_id, "redelivery_count": entry.redelivery_count,
            "producer_name": metadata.producer_name, "sequence_id": metadata.sequence_id,
            "publish_time": metadata.publish_time, "messages": messages, "undecodable": None, "data_base64": None,
        })
    return out


def print_entry(entry: dict[str, Any], *, details: bool = False) -> None:
    """One decoded entry (decoded_entries) for people: its id, then each message (with `details`:
    its properties, publish and event times too). A value that is not UTF-8 is shown in base64."""
    redeliveries = f", redelivery count {entry['redelivery_count']}" if not details else ""
    print(f"entry {entry['ledger_id']}:{entry['entry_id']} (producer {entry['producer_name']}{redeliveries})")
    if details and entry["publish_time"] is not None:
        print(f"  publish time: {_millis_text(entry['publish_time'])}")
    if entry["undecodable"]:
        print(f"  cannot decode it ({entry['undecodable']}): base64:{entry['data_base64']}")
    for message in entry["messages"]:
        key = f" key={message['key']}" if message["key"] is not None else ""
        value = message["value"] if message["value"] is not None else f"base64:{message['value_base64']}"
        print(f"  [{message['batch_index']}]{key}: {value}")
        if details:
            for name, prop in sorted(message["properties"].items()):
                print(f"      property {name}={prop}")
            if message["event_time"]:
                print(f"      event time: {_millis_text(message['event_time'])}")


def _millis_text(millis: int) -> str:
    when = datetime.datetime.fromtimestamp(millis / 1000, tz=datetime.UTC)
    return f"{when.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} ({millis})"


def show_policies(policies: admin_pb2.Policies, args: argparse.Namespace) -> Any:
    return to_json(policies) if args.json else print_policies(policies)


def shorten(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"
