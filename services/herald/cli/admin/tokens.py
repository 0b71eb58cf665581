"""`herald admin tokens`: make keys and JWTs, like `pulsar tokens` (no call to the admin API: the
handlers take the admin client only to share the calling convention of every admin command)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from herald.cli.admin.arguments import CommandGroup
from herald.client.admin import AdminClient
from herald.common.errors import InvalidArgumentError
from herald.common.security.tokens import create_token, new_key_pair, new_secret_key, parse_expiry, read_key_file


def _write_secret(path: str, data: bytes, mode: int = 0o600) -> None:
    """Write a key file (by default readable by its owner only)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot write {path!r}: {exc.strerror}") from None


async def tokens_create_secret_key(admin: AdminClient, args: argparse.Namespace) -> Any:
    key = new_secret_key()
    if args.output:
        _write_secret(args.output, key + b"\n")
        return {"secret_key_file": args.output} if args.json else print(f"secret key written to {args.output}")
    sys.stdout.write(key.decode() + "\n")
    return None


async def tokens_create_key_pair(admin: AdminClient, args: argparse.Namespace) -> Any:
    private, public = new_key_pair()
    _write_secret(args.private_key, private)
    _write_secret(args.public_key, public, 0o644)
    if args.json:
        return {"private_key_file": args.private_key, "public_key_file": args.public_key}
    print(f"private key written to {args.private_key}, public key to {args.public_key}")
    return None


async def tokens_create(admin: AdminClient, args: argparse.Namespace) -> Any:
    token = create_token(
        args.subject,
        secret_key=read_key_file(args.secret_key, "--secret-key") if args.secret_key else None,
        private_key=read_key_file(args.private_key, "--private-key") if args.private_key else None,
        expiry_seconds=parse_expiry(args.expiry) if args.expiry else None,
        audience=args.audience or None,
    )
    if args.json:
        return {"token": token}
    sys.stdout.write(token + "\n")
    return None


def add_token_commands(groups: CommandGroup) -> None:
    tokens = groups.group("tokens", "authentication tokens: create-secret-key, create-key-pair, create")
    sub = tokens.command("create-secret-key", "make a random HS256 secret key (base64)", tokens_create_secret_key)
    sub.add_argument("--output", help="write it to this file (mode 600) instead of printing it")
    sub = tokens.command("create-key-pair", "make an RS256 key pair (PEM files)", tokens_create_key_pair)
    sub.add_argument("--private-key", required=True, help="file for the private key (mode 600): makes tokens")
    sub.add_argument("--public-key", required=True, help="file for the public key: the services check tokens with it")
    sub = tokens.command("create", "make a token for a role, signed with a secret key or a private key",
                         tokens_create)
    sub.add_argument("--subject", required=True, help="the role the token names")
    sub.add_argument("--expiry", help="lifetime, e.g. 30m, 1h, 30d, 1y (default: never expires)")
    key = sub.add_mutually_exclusive_group(required=True)
    key.add_argument("--secret-key", help="HS256 secret key file (create-secret-key)")
    key.add_argument("--private-key", help="RS256 private key file (create-key-pair)")
    sub.add_argument("--audience", help="the token's audience (services with token_audience check it)")
