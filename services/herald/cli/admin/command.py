"""The `herald admin` command: its parser (the common options, then a group per resource, each filled
in by its module) and how a command runs: one admin client, the handler, the JSON document printed
with --json, and the exit statuses (1: a failed call, 2: a usage error)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from herald.api.v1 import common_pb2
from herald.cli.admin.arguments import CommandGroup, HeraldUsageError, common_options
from herald.cli.admin.brokers import add_broker_commands
from herald.cli.admin.dlq import add_dlq_commands
from herald.cli.admin.namespaces import add_namespace_commands
from herald.cli.admin.render import print_json
from herald.cli.admin.schemas import add_schema_commands
from herald.cli.admin.storage import add_storage_commands
from herald.cli.admin.subscriptions import add_subscription_commands
from herald.cli.admin.tenants import add_tenant_commands
from herald.cli.admin.tokens import add_token_commands
from herald.cli.admin.topics import add_topic_commands
from herald.cli.client_options import client_security
from herald.client.admin import AdminClient
from herald.common.errors import ConnectionError_, HeraldError, InvalidArgumentError

EPILOG = """\
examples:
  herald admin tenants create acme
  herald admin namespaces create acme/orders --retention-time 7d --retention-size 10G
  herald admin namespaces set-policy acme/orders --ttl 1h --max-consumers 10
  herald admin topics create persistent://acme/orders/created --partitions 4
  herald admin --json topics stats persistent://acme/orders/created
  herald admin topics lookup persistent://acme/orders/created
  herald admin subscriptions reset persistent://acme/orders/created -s billing --time 2024-05-01T00:00:00Z
  herald admin subscriptions peek persistent://acme/orders/created -s billing -n 5
  herald admin topics examine-message persistent://acme/orders/created-partition-0 --position earliest
  herald admin schemas upload persistent://acme/orders/created --type AVRO --file order.avsc
  herald admin dlq peek persistent://acme/orders/created --subscription billing
  herald admin dlq replay persistent://acme/orders/created --subscription billing --limit 100

A failed call prints "error: <CODE>: <message>" on stderr and exits with status 1 (a topic, subscription or
namespace that does not exist: NOT_FOUND, and nothing is created); usage errors exit with status 2.
"""
# The groups in the order `herald admin --help` lists them.
_GROUPS = (add_tenant_commands, add_namespace_commands, add_topic_commands, add_subscription_commands,
           add_schema_commands, add_token_commands, add_broker_commands, add_storage_commands, add_dlq_commands)


def add_admin_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `admin` and its groups to the `herald` command's subparsers."""
    admin = commands.add_parser(
        "admin", help="administer tenants, namespaces, topics, subscriptions, brokers and dead letters",
        description="Administer a Herald cluster through any broker's admin API.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter, parents=[common_options(inherited=False)],
    )
    groups = CommandGroup(admin.add_subparsers(dest="admin_group", required=True, metavar="GROUP"),
                          common_options(inherited=True))
    for add_group in _GROUPS:
        add_group(groups)
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
