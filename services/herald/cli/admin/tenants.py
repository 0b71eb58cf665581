"""`herald admin tenants`: list, get, create, update, delete."""

from __future__ import annotations

import argparse
from typing import Any

from herald.api.v1 import admin_pb2
from herald.cli.admin.arguments import CommandGroup, names
from herald.cli.admin.render import print_names, print_pairs, to_json
from herald.client.admin import AdminClient


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


def add_tenant_commands(groups: CommandGroup) -> None:
    tenants = groups.group("tenants", "tenants: list, get, create, update, delete")
    tenants.command("list", "list the tenants", tenants_list)
    sub = tenants.command("get", "show a tenant", tenants_get)
    sub.add_argument("tenant", help="tenant name")
    for name, help_text, handler in (("create", "create a tenant", tenants_create),
                                     ("update", "change a tenant's admin roles or allowed clusters (others kept)",
                                      tenants_update)):
        sub = tenants.command(name, help_text, handler)
        sub.add_argument("tenant", help="tenant name")
        sub.add_argument("--admin-roles", type=names, metavar="ROLE,...", help="comma-separated admin roles")
        sub.add_argument("--allowed-clusters", type=names, metavar="CLUSTER,...",
                         help="comma-separated clusters the tenant may use")
    sub = tenants.command("delete", "delete a tenant (refused while it has namespaces)", tenants_delete)
    sub.add_argument("tenant", help="tenant name")
