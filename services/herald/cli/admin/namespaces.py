"""`herald admin namespaces`: list, create, delete, and their policies (policies, set-policy,
clear-policy) and grants."""

from __future__ import annotations

import argparse
from typing import Any

from herald.api.v1 import admin_pb2
from herald.cli.admin.arguments import CommandGroup
from herald.cli.admin.permissions import add_permission_commands
from herald.cli.admin.policies import (
    add_clear_flags,
    add_policy_flags,
    any_policy_flag,
    cleared_fields,
    policies_from_flags,
)
from herald.cli.admin.render import print_names, show_policies
from herald.client.admin import AdminClient


async def namespaces_list(admin: AdminClient, args: argparse.Namespace) -> Any:
    namespaces = await admin.list_namespaces(args.tenant)
    return {"namespaces": namespaces} if args.json else print_names(namespaces)


async def namespaces_create(admin: AdminClient, args: argparse.Namespace) -> Any:
    policies = policies_from_flags(args, admin_pb2.Policies()) if any_policy_flag(args) else None
    return show_policies(await admin.create_namespace(args.namespace, policies), args)


async def namespaces_delete(admin: AdminClient, args: argparse.Namespace) -> Any:
    await admin.delete_namespace(args.namespace)
    return {"deleted": args.namespace} if args.json else print(f"namespace {args.namespace} deleted")


async def namespaces_policies(admin: AdminClient, args: argparse.Namespace) -> Any:
    return show_policies(await admin.namespace_policies(args.namespace), args)


async def namespaces_set_policy(admin: AdminClient, args: argparse.Namespace) -> Any:
    current = await admin.namespace_policies(args.namespace)
    policies = policies_from_flags(args, current)
    return show_policies(await admin.set_namespace_policies(args.namespace, policies), args)


async def namespaces_clear_policy(admin: AdminClient, args: argparse.Namespace) -> Any:
    fields = cleared_fields(args)
    return show_policies(await admin.set_namespace_policies(args.namespace, clear=fields), args)


def add_namespace_commands(groups: CommandGroup) -> None:
    namespaces = groups.group("namespaces", "namespaces and their policies: list, create, delete, policies, "
                                            "set-policy, clear-policy")
    sub = namespaces.command("list", "list a tenant's namespaces", namespaces_list)
    sub.add_argument("tenant", help="tenant name")
    sub = namespaces.command("create", "create a namespace, with policies if given", namespaces_create)
    sub.add_argument("namespace", help="tenant/namespace")
    add_policy_flags(sub)
    sub = namespaces.command("delete", "delete a namespace (refused while it has topics)", namespaces_delete)
    sub.add_argument("namespace", help="tenant/namespace")
    sub = namespaces.command("policies", "show a namespace's policies", namespaces_policies)
    sub.add_argument("namespace", help="tenant/namespace")
    sub = namespaces.command("set-policy", "set policies of a namespace", namespaces_set_policy)
    sub.add_argument("namespace", help="tenant/namespace")
    add_policy_flags(sub)
    sub = namespaces.command("clear-policy", "remove policies of a namespace (broker defaults apply again)",
                             namespaces_clear_policy)
    sub.add_argument("namespace", help="tenant/namespace")
    add_clear_flags(sub)
    add_permission_commands(namespaces, "namespace")
