"""`herald admin topics`: list, create, delete, stats, internal-stats, lookup, unload, terminate, compact,
compaction-status, partitions (get, update), their policies (policies, set-policy, clear-policy) and
grants, and pulsar-admin's expire-messages, get-message-by-id and examine-message."""

from __future__ import annotations

import argparse
from typing import Any

from herald.api.v1 import admin_pb2
from herald.cli.admin.arguments import CommandGroup, HeraldUsageError, duration, non_negative, position, positive
from herald.cli.admin.permissions import add_permission_commands
from herald.cli.admin.policies import add_clear_flags, add_policy_flags, cleared_fields, policies_from_flags
from herald.cli.admin.progress import CommandProgress
from herald.cli.admin.render import (
    as_text,
    decoded_entries,
    print_entry,
    print_internal_stats,
    print_names,
    print_table,
    print_topic_stats,
    show_policies,
    to_json,
)
from herald.client.admin import AdminClient
from herald.common.errors import NotFoundError


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
    await admin.delete_topic(args.topic, args.force, keep_schema=args.keep_schema)
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


async def topics_compact(admin: AdminClient, args: argparse.Namespace) -> Any:
    await admin.compact_topic(args.topic)
    if args.json:
        return {"compacting": args.topic}
    print(f"compaction of {args.topic} started (see: herald admin topics compaction-status {args.topic})")
    return None


async def topics_compaction_status(admin: AdminClient, args: argparse.Namespace) -> Any:
    status = await admin.compaction_status(args.topic)
    if args.json:
        return to_json(status)
    print(f"status: {status.status}")
    if status.last_error:
        print(f"last error: {status.last_error}")
    if status.compacted_ledger_id >= 0:
        print(f"compacted ledger: {status.compacted_ledger_id} ({status.compacted_entries} entries) up to "
              f"{as_text(status.horizon)}")
    return None


async def topics_terminate(admin: AdminClient, args: argparse.Namespace) -> Any:
    last = await admin.terminate_topic(args.topic)
    if args.json:
        return {"terminated": args.topic, "last": to_json(last)}
    print(f"topic {args.topic} terminated; last entry {as_text(last)}")
    return None


async def topics_partitions_get(admin: AdminClient, args: argparse.Namespace) -> Any:
    count = await admin.get_partitions(args.topic, must_exist=True)
    return {"topic": args.topic, "partitions": count} if args.json else print(count)


async def topics_partitions_update(admin: AdminClient, args: argparse.Namespace) -> Any:
    count = await admin.update_partitions(args.topic, args.partitions)
    if args.json:
        return {"topic": args.topic, "partitions": count}
    print(f"topic {args.topic} now has {count} partitions")
    return None


async def topics_policies(admin: AdminClient, args: argparse.Namespace) -> Any:
    policies = await (admin.effective_policies(args.topic) if args.effective else admin.topic_policies(args.topic))
    return show_policies(policies, args)


async def topics_set_policy(admin: AdminClient, args: argparse.Namespace) -> Any:
    try:
        current = await admin.topic_policies(args.topic)
    except NotFoundError:
        # Policies may be set ahead of the topic (its first producer makes it with them): none yet.
        current = admin_pb2.Policies()
    policies = policies_from_flags(args, current)
    return show_policies(await admin.set_topic_policies(args.topic, policies), args)


async def topics_clear_policy(admin: AdminClient, args: argparse.Namespace) -> Any:
    fields = cleared_fields(args)
    return show_policies(await admin.set_topic_policies(args.topic, clear=fields), args)


async def topics_lookup(admin: AdminClient, args: argparse.Namespace) -> Any:
    owners = await admin.lookup_topic(args.topic)
    if args.json:
        return {"topic": args.topic, "owners": owners}
    print_table(["TOPIC", "BROKER"], [[topic, broker] for topic, broker in owners.items()])
    return None


async def topics_expire_messages(admin: AdminClient, args: argparse.Namespace) -> Any:
    if (args.subscription is None) == (not args.all_subscriptions):
        raise HeraldUsageError("give either -s/--subscription or --all-subscriptions (one)")
    if args.subscription is not None:
        expired = await admin.expire_messages(args.topic, args.subscription, args.expire_time)
        if args.json:
            return {"topic": args.topic, "expired": {args.subscription: expired}}
        print(f"expired {expired} messages of subscription {args.subscription} on {args.topic}")
        return None
    # One call per subscription, so that a topic with many shows how far it got.
    names = await admin.list_subscriptions(args.topic)
    expired_each: dict[str, int] = {}
    with CommandProgress("subscriptions expired", len(names), enabled=not args.json) as progress:
        for name in names:
            try:
                expired_each[name] = await admin.expire_messages(args.topic, name, args.expire_time)
            except NotFoundError:
                continue  # deleted since it was listed: nothing left to expire
            progress.update(len(expired_each))
    if args.json:
        return {"topic": args.topic, "expired": expired_each}
    print(f"expired {sum(expired_each.values())} messages of {len(expired_each)} subscriptions on {args.topic}")
    return None


async def topics_get_message_by_id(admin: AdminClient, args: argparse.Namespace) -> Any:
    entry = decoded_entries([await admin.get_message_by_id(args.topic, args.id)])[0]
    return entry if args.json else print_entry(entry, details=True)


async def topics_examine_message(admin: AdminClient, args: argparse.Namespace) -> Any:
    entry = decoded_entries([await admin.examine_message(args.topic, args.offset, latest=args.position == "latest")])[0]
    return entry if args.json else print_entry(entry, details=True)


def _edge(text: str) -> str:
    if text.strip().lower() not in ("earliest", "latest"):
        raise argparse.ArgumentTypeError(f"invalid position {text!r}: use earliest or latest")
    return text.strip().lower()


def _add_message_commands(topics: CommandGroup) -> None:
    sub = topics.command("lookup", "show which broker owns a topic (each partition's owner for a partitioned "
                         "topic); a topic without an owner is given one", topics_lookup)
    sub.add_argument("topic", help="topic name")
    sub = topics.command("expire-messages", "acknowledge, on a subscription, the messages published longer ago "
                         "than --expire-time (as message TTL would)", topics_expire_messages)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("-s", "--subscription", help="the subscription whose messages expire")
    sub.add_argument("--all-subscriptions", action="store_true", help="expire on every subscription of the topic")
    sub.add_argument("--expire-time", type=duration, required=True, metavar="DURATION",
                     help="messages published longer ago than this expire: e.g. 30s, 10m, 1h, 7d (0: all)")
    sub = topics.command("get-message-by-id", "show the message stored at an id (ledger:entry): its id, key, "
                         "properties, publish time and payload", topics_get_message_by_id)
    sub.add_argument("topic", help="topic name (a partition, for a partitioned topic)")
    sub.add_argument("--id", type=position, required=True, metavar="LEDGER:ENTRY", help="the message id, e.g. 12:0")
    sub = topics.command("examine-message", "show the message at an offset from the earliest or latest message "
                         "kept (like pulsar-admin's examine-message)", topics_examine_message)
    sub.add_argument("topic", help="topic name (a partition, for a partitioned topic)")
    sub.add_argument("--position", type=_edge, default="latest", metavar="earliest|latest",
                     help="count from the earliest or the latest message (default latest)")
    sub.add_argument("--offset", type=positive, default=1, metavar="N",
                     help="the N-th message from that end (default 1: the first, or the last)")


def add_topic_commands(groups: CommandGroup) -> None:
    topics = groups.group("topics", "topics: list, create, delete, stats, internal-stats, lookup, unload, "
                                    "terminate, compact, compaction-status, partitions, policies, set-policy, "
                                    "clear-policy, expire-messages, get-message-by-id, examine-message")
    sub = topics.command("list", "list a namespace's topics", topics_list)
    sub.add_argument("namespace", help="tenant/namespace")
    sub = topics.command("create", "create a topic", topics_create)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("--partitions", type=non_negative, default=0, metavar="N",
                     help="make it a partitioned topic of N partitions (default 0: not partitioned)")
    sub = topics.command("delete", "delete a topic and its data", topics_delete)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("--force", action="store_true", help="disconnect its producers and consumers first")
    sub.add_argument("--keep-schema", action="store_true",
                     help="keep its schemas (a topic made again under the name has them)")
    sub = topics.command("stats", "show a topic's stats (a partitioned topic's sum its partitions')", topics_stats)
    sub.add_argument("topic", help="topic name")
    sub = topics.command("internal-stats", "show a topic's ledgers and cursors", topics_internal_stats)
    sub.add_argument("topic", help="topic name")
    sub = topics.command("unload", "close the topic on its broker and release it (lookup assigns it anew)",
                         topics_unload)
    sub.add_argument("topic", help="topic name")
    sub = topics.command("terminate", "refuse further writes to a topic", topics_terminate)
    sub.add_argument("topic", help="topic name")
    sub = topics.command("compact", "compact a topic: keep the latest message of each key (each partition of a "
                         "partitioned topic)", topics_compact)
    sub.add_argument("topic", help="topic name")
    sub = topics.command("compaction-status", "show a topic's (a partition's) compaction: NOT_RUN, RUNNING, "
                         "SUCCESS or ERROR", topics_compaction_status)
    sub.add_argument("topic", help="topic name")
    partitions = topics.group("partitions", "get or grow a topic's partition count", dest="partitions_command")
    sub = partitions.command("get", "show the partition count (0: not partitioned)", topics_partitions_get)
    sub.add_argument("topic", help="topic name")
    sub = partitions.command("update", "grow to N partitions (shrinking is refused)", topics_partitions_update)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("partitions", type=positive, metavar="N", help="the new partition count")
    sub = topics.command("policies", "show a topic's own policies (or, with --effective, those in force)",
                         topics_policies)
    sub.add_argument("topic", help="topic name")
    sub.add_argument("--effective", action="store_true",
                     help="the policies in force: topic over namespace over broker defaults")
    sub = topics.command("set-policy", "set policies of a topic (overriding its namespace's)", topics_set_policy)
    sub.add_argument("topic", help="topic name")
    add_policy_flags(sub)
    sub = topics.command("clear-policy", "remove policies of a topic (its namespace's apply again)",
                         topics_clear_policy)
    sub.add_argument("topic", help="topic name")
    add_clear_flags(sub)
    _add_message_commands(topics)
    add_permission_commands(topics, "topic")
