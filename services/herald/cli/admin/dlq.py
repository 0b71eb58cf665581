"""`herald admin dlq`: a subscription's dead letters (moved by the dlq-worker to its dead-letter topic),
shown with their origin (peek) or moved back to their topics (replay), through herald.dlq."""

from __future__ import annotations

import argparse
import base64
from typing import Any

from herald.cli.admin.arguments import CommandGroup, HeraldUsageError, positive
from herald.cli.admin.progress import CommandProgress
from herald.cli.admin.render import print_table, shorten
from herald.cli.client_options import client_security
from herald.client.admin import AdminClient
from herald.client.config import DEFAULT_MAX_MESSAGE_SIZE
from herald.dlq.letters import ORIGIN_PROPERTIES
from herald.dlq.peek import REPLAY_SUBSCRIPTION, DeadMessage, dead_letter_topic, peek, topic_exists
from herald.dlq.replay import Replayed, replay


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
          shorten(m["value"] if m["value"] is not None else "base64:" + m["value_base64"]),
          " ".join(f"{k}={v}" for k, v in m["properties"].items()) or None] for m in messages],
    )
    return None


async def _to_replay(admin: AdminClient, topic: str, limit: int | None) -> int | None:
    """How many messages a replay will move, for its progress: the replay subscription's backlog
    (the dead-letter topic's entries before the first replay), at most `limit`."""
    stats = await admin.topic_stats(topic)
    backlog = next((sub.msg_backlog for sub in stats.subscriptions if sub.name == REPLAY_SUBSCRIPTION), stats.entries)
    return backlog if limit is None else min(limit, backlog)


async def dlq_replay(admin: AdminClient, args: argparse.Namespace) -> Any:
    topic = _dlq_topic(args)
    url = _service_url(args)
    replayed = Replayed()
    if await topic_exists(admin, topic):
        with CommandProgress("replayed", await _to_replay(admin, topic, args.limit), enabled=not args.json) as shown:
            replayed = await replay(url, topic, args.topic, args.limit, args.timeout, **client_security(args),
                                    progress=lambda counts: shown.update(counts.messages + counts.duplicates))
    if args.json:
        return {"dead_letter_topic": topic, "replayed": replayed.messages, "already_there": replayed.duplicates}
    print(f"replayed {replayed.messages} messages from {topic} to their topics")
    if replayed.duplicates:
        print(f"{replayed.duplicates} more were there already (published by an interrupted replay, or by one whose "
              "--limit cut their entry short) and are acknowledged now")
    return None


def add_dlq_commands(groups: CommandGroup) -> None:
    dlq = groups.group("dlq", "dead letters (moved by the dlq-worker): peek, replay")
    for name, help_text, handler in (
            ("peek", "show a subscription's dead letters with their origin, oldest first (nothing is consumed)",
             dlq_peek),
            ("replay", "move a subscription's dead letters back to their topics (each at most once)", dlq_replay)):
        sub = dlq.command(name, help_text, handler)
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
