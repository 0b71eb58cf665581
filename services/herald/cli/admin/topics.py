"""`herald admin topics`: list, create, delete, stats, internal-stats, unload, terminate, compact,
compaction-status, partitions (get, update), and their policies (policies, set-policy,
clear-policy) and grants."""

from __future__ import annotations

import argparse
from typing import Any

from herald.cli.admin.arguments import CommandGroup, non_negative, positive
from herald.cli.admin.permissions import add_permission_commands
from herald.cli.admin.policies import add_clear_flags, add_policy_flags, cleared_fields, policies_from_flags
from herald.cli.admin.render import (
    as_text,
    print_internal_stats,
    print_names,
    print_topic_stats,
    show_policies,
    to_json,
)
from herald.client.admin import AdminClient


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
    return show_policies(policies, args)


async def topics_set_policy(admin: AdminClient, args: argparse.Namespace) -> Any:
    current = await admin.topic_policies(args.topic)
    policies = policies_from_flags(args, current)
    return show_policies(await admin.set_topic_policies(args.topic, policies), args)


async def topics_clear_policy(admin: AdminClient, args: argparse.Namespace) -> Any:
    fields = cleared_fields(args)
    return show_policies(await admin.set_topic_policies(args.topic, clear=fields), args)


def add_topic_commands(groups: CommandGroup) -> None:
    topics = groups.group("topics", "topics: list, create, delete, stats, internal-stats, unload, terminate, "
                                    "compact, compaction-status, partitions, policies, set-policy, clear-policy")
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
    add_permission_commands(topics, "topic")
