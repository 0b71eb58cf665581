"""`herald admin brokers`: list the live brokers with their load."""

from __future__ import annotations

import argparse
from typing import Any

from herald.cli.admin.arguments import CommandGroup
from herald.cli.admin.render import print_table, to_json
from herald.client.admin import AdminClient


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


def add_broker_commands(groups: CommandGroup) -> None:
    brokers = groups.group("brokers", "brokers: list")
    brokers.command("list", "list the live brokers with their load", brokers_list)
