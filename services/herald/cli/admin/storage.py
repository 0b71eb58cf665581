"""`herald admin storage`: the storage nodes with the ledgers each must keep, and draining one."""

from __future__ import annotations

import argparse
from typing import Any

from herald.cli.admin.arguments import CommandGroup
from herald.cli.admin.render import print_table, to_json
from herald.client.admin import AdminClient


async def storage_list(admin: AdminClient, args: argparse.Namespace) -> Any:
    nodes = await admin.list_storage_nodes()
    if args.json:
        return {"nodes": [to_json(node) for node in nodes]}
    print_table(["ADDRESS", "STATE", "FREE BYTES", "LEDGERS"],
                [[node.address, node.state, node.free_bytes, node.ledgers] for node in nodes])
    return None


async def storage_drain(admin: AdminClient, args: argparse.Namespace) -> Any:
    node = await admin.drain_storage_node(args.address, undo=args.undo)
    if args.json:
        return to_json(node)
    print(f"storage node {node.address} is {node.state}; it holds entries of {node.ledgers} ledgers"
          + ("" if args.undo else " (autorecovery copies them elsewhere: wait for 0 in `herald admin storage list`)"))
    return None


def add_storage_commands(groups: CommandGroup) -> None:
    storage = groups.group("storage", "storage nodes: list, drain")
    storage.command("list", "list the storage nodes, their state and the ledgers each holds", storage_list)
    sub = storage.command("drain", "mark a storage node draining: no new ledger uses it and autorecovery copies "
                                   "its entries to other nodes, so it can then be stopped", storage_drain)
    sub.add_argument("address", help="host:port of the storage node, as `herald admin storage list` shows it")
    sub.add_argument("--undo", action="store_true", help="make the node available again")
