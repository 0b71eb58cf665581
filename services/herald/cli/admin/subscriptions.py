"""`herald admin subscriptions`: list, create, delete, reset (move the cursor), skip, peek."""

from __future__ import annotations

import argparse
from typing import Any

from herald.cli.admin.arguments import (
    CommandGroup,
    HeraldUsageError,
    add_edge_aliases,
    add_subscription_argument,
    count_of,
    no_extra_arguments,
    positive,
    publish_time,
    start_position,
)
from herald.cli.admin.render import decoded_entries, print_entry, print_names
from herald.client.admin import AdminClient
from herald.client.config import InitialPosition


async def subscriptions_list(admin: AdminClient, args: argparse.Namespace) -> Any:
    subscriptions = await admin.list_subscriptions(args.topic)
    return {"subscriptions": subscriptions} if args.json else print_names(subscriptions)


async def subscriptions_create(admin: AdminClient, args: argparse.Namespace) -> Any:
    no_extra_arguments(args)
    await admin.create_subscription(args.topic, args.subscription, args.position)
    if args.json:
        return {"created": args.subscription, "topic": args.topic}
    print(f"subscription {args.subscription} created on {args.topic}")
    return None


async def subscriptions_delete(admin: AdminClient, args: argparse.Namespace) -> Any:
    no_extra_arguments(args)
    await admin.delete_subscription(args.topic, args.subscription, args.force)
    if args.json:
        return {"deleted": args.subscription, "topic": args.topic}
    print(f"subscription {args.subscription} deleted from {args.topic}")
    return None


async def subscriptions_reset(admin: AdminClient, args: argparse.Namespace) -> Any:
    no_extra_arguments(args)
    if args.time is not None:
        await admin.reset_cursor(args.topic, args.subscription, publish_time=args.time)
        target = f"publish time {args.time}"
    elif isinstance(args.position, InitialPosition):
        await admin.reset_cursor(args.topic, args.subscription, edge=args.position)
        target = "the earliest message" if args.position is InitialPosition.Earliest else "the latest message"
    else:
        await admin.reset_cursor(args.topic, args.subscription, position=args.position)
        target = f"position {args.position[0]}:{args.position[1]}"
    if args.json:
        return {"reset": args.subscription, "topic": args.topic, "target": target}
    print(f"subscription {args.subscription} on {args.topic} reset to {target}")
    return None


async def subscriptions_skip(admin: AdminClient, args: argparse.Namespace) -> Any:
    count = count_of(args, None)
    if count is None and not args.all:
        raise HeraldUsageError("give a number of entries to skip, or --all (-n N or --all)")
    if count is not None and args.all:
        raise HeraldUsageError("give either a number of entries to skip (-n N) or --all, not both")
    skipped = await admin.skip_messages(args.topic, args.subscription, None if args.all else count)
    return {"skipped": skipped} if args.json else print(f"skipped {skipped} entries")


async def subscriptions_peek(admin: AdminClient, args: argparse.Namespace) -> Any:
    count = count_of(args, 1)
    assert count is not None
    entries = decoded_entries(await admin.peek_messages(args.topic, args.subscription, count))
    if args.json:
        return {"entries": entries}
    if not entries:
        print("(no unacknowledged messages)")
    for entry in entries:
        print_entry(entry)
    return None


def add_subscription_commands(groups: CommandGroup) -> None:
    subscriptions = groups.group("subscriptions", "subscriptions: list, create, delete, reset, skip, peek")
    sub = subscriptions.command("list", "list a topic's subscriptions", subscriptions_list)
    sub.add_argument("topic", help="topic name")
    sub = subscriptions.command("create", "create a durable subscription", subscriptions_create)
    sub.add_argument("topic", help="topic name")
    add_subscription_argument(sub)
    sub.add_argument("--position", type=start_position, default=InitialPosition.Latest,
                     metavar="earliest|latest|LEDGER:ENTRY", help="where it starts (default latest)")
    sub = subscriptions.command("delete", "delete a subscription (unsubscribe)", subscriptions_delete)
    sub.add_argument("topic", help="topic name")
    add_subscription_argument(sub)
    sub.add_argument("--force", action="store_true", help="disconnect its consumers first")
    sub = subscriptions.command("reset", "move a subscription's cursor", subscriptions_reset)
    sub.add_argument("topic", help="topic name")
    add_subscription_argument(sub)
    target = sub.add_mutually_exclusive_group(required=True)
    target.add_argument("--position", type=start_position, metavar="earliest|latest|LEDGER:ENTRY",
                        help="to the first message kept (earliest), past the last one (latest), or to this message")
    target.add_argument("--time", type=publish_time, metavar="ISO|MS",
                        help="to the first message published at or after this time (ISO 8601, UTC unless a "
                             "zone is given, or unix milliseconds)")
    add_edge_aliases(target, "position")
    sub.set_defaults(position=None, time=None)
    sub = subscriptions.command("skip", "acknowledge the oldest unacknowledged entries without delivering them",
                                subscriptions_skip)
    sub.add_argument("topic", help="topic name")
    add_subscription_argument(sub, legacy_count=True)
    sub.add_argument("-n", "--count", type=positive, metavar="N", help="how many entries to skip")
    sub.add_argument("--all", action="store_true", help="skip the whole backlog")
    sub = subscriptions.command("peek", "show the oldest unacknowledged entries (they stay unacknowledged)",
                                subscriptions_peek)
    sub.add_argument("topic", help="topic name")
    add_subscription_argument(sub, legacy_count=True)
    sub.add_argument("-n", "--count", type=positive, metavar="N", help="how many entries (default 1)")
