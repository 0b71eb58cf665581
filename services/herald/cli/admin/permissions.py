"""The produce / consume grants of `herald admin namespaces` and `topics`: grant-permission,
revoke-permission, permissions (each group adds them after its own commands)."""

from __future__ import annotations

import argparse
from typing import Any

from herald.cli.admin.arguments import CommandGroup, Handler
from herald.client.admin import AdminClient


def _actions(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _target(kind: str, args: argparse.Namespace) -> dict[str, str]:
    return {"namespace": args.namespace} if kind == "namespace" else {"topic": args.topic}


def _permission_handlers(kind: str) -> tuple[Handler, Handler, Handler]:
    async def grant(admin: AdminClient, args: argparse.Namespace) -> Any:
        target = _target(kind, args)
        await admin.grant_permission(args.role, _actions(args.actions), **target)
        name = next(iter(target.values()))
        return {"granted": args.role, "actions": _actions(args.actions), kind: name} if args.json else print(
            f"granted {','.join(_actions(args.actions))} on {name} to {args.role}")

    async def revoke(admin: AdminClient, args: argparse.Namespace) -> Any:
        target = _target(kind, args)
        await admin.revoke_permission(args.role, **target)
        name = next(iter(target.values()))
        return {"revoked": args.role, kind: name} if args.json else print(
            f"revoked the permissions of {args.role} on {name}")

    async def show(admin: AdminClient, args: argparse.Namespace) -> Any:
        grants = await admin.get_permissions(**_target(kind, args))
        if args.json:
            return {"permissions": grants}
        if not grants:
            print("(no permissions granted here)")
        for role, actions in sorted(grants.items()):
            print(f"{role}: {','.join(actions)}")
        return None

    return grant, revoke, show


def add_permission_commands(commands: CommandGroup, kind: str) -> None:
    """The grant commands of a group of `kind` "namespace" or "topic" (its positional argument)."""
    grant, revoke, show = _permission_handlers(kind)
    what = "tenant/namespace" if kind == "namespace" else "topic name"
    sub = commands.command("grant-permission", f"grant produce and/or consume on a {kind} to a role", grant)
    sub.add_argument(kind, help=what)
    sub.add_argument("--role", required=True, help="the role (a token's subject, a certificate's common name)")
    sub.add_argument("--actions", required=True, help="produce, consume or produce,consume")
    sub = commands.command("revoke-permission", f"remove a role's permissions on a {kind}", revoke)
    sub.add_argument(kind, help=what)
    sub.add_argument("--role", required=True, help="the role whose permissions are removed")
    sub = commands.command("permissions", f"the roles granted permissions on a {kind}", show)
    sub.add_argument(kind, help=what)
