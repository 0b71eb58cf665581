"""The security commands of `herald admin`: `tokens` (make keys and JWTs, like `pulsar tokens`) and
the produce / consume grants of `namespaces` and `topics` (grant-permission, revoke-permission,
permissions). admin_cli adds them to its parser; their handlers share its calling convention."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from herald.client.admin import AdminClient
from herald.common.errors import InvalidArgumentError
from herald.common.security.credentials import AuthenticationToken
from herald.common.security.tokens import create_token, new_key_pair, new_secret_key, parse_expiry, read_key_file

Command = Callable[..., argparse.ArgumentParser]


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


def _actions(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _target(kind: str, args: argparse.Namespace) -> dict[str, str]:
    return {"namespace": args.namespace} if kind == "namespace" else {"topic": args.topic}


def _permission_handlers(kind: str) -> tuple[Any, Any, Any]:
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


def add_permission_commands(namespaces: Any, topics: Any, command: Command) -> None:
    for subs, kind, argument in ((namespaces, "namespace", "namespace"), (topics, "topic", "topic")):
        grant, revoke, show = _permission_handlers(kind)
        what = "tenant/namespace" if kind == "namespace" else "topic name"
        sub = command(subs, "grant-permission", f"grant produce and/or consume on a {kind} to a role", grant)
        sub.add_argument(argument, help=what)
        sub.add_argument("--role", required=True, help="the role (a token's subject, a certificate's common name)")
        sub.add_argument("--actions", required=True, help="produce, consume or produce,consume")
        sub = command(subs, "revoke-permission", f"remove a role's permissions on a {kind}", revoke)
        sub.add_argument(argument, help=what)
        sub.add_argument("--role", required=True)
        sub = command(subs, "permissions", f"the roles granted permissions on a {kind}", show)
        sub.add_argument(argument, help=what)


def add_token_commands(tokens: Any, command: Command) -> None:
    sub = command(tokens, "create-secret-key", "make a random HS256 secret key (base64)", tokens_create_secret_key)
    sub.add_argument("--output", help="write it to this file (mode 600) instead of printing it")
    sub = command(tokens, "create-key-pair", "make an RS256 key pair (PEM files)", tokens_create_key_pair)
    sub.add_argument("--private-key", required=True, help="file for the private key (mode 600): makes tokens")
    sub.add_argument("--public-key", required=True, help="file for the public key: the services check tokens with it")
    sub = command(tokens, "create", "make a token for a role, signed with a secret key or a private key", tokens_create)
    sub.add_argument("--subject", required=True, help="the role the token names")
    sub.add_argument("--expiry", help="lifetime, e.g. 30m, 1h, 30d, 1y (default: never expires)")
    key = sub.add_mutually_exclusive_group(required=True)
    key.add_argument("--secret-key", help="HS256 secret key file (create-secret-key)")
    key.add_argument("--private-key", help="RS256 private key file (create-key-pair)")
    sub.add_argument("--audience", help="the token's audience (services with token_audience check it)")


CLIENT_SECURITY_FLAGS = ("auth_token_file", "tls_trust_certs_file", "tls_cert_file", "tls_key_file")


def client_security_flags(parser: argparse.ArgumentParser, *, defaults: str = "environment",
                          env_prefix: str = "HERALD_") -> None:
    """--auth-token-file, --tls-trust-certs-file and the client certificate (--tls-cert-file,
    --tls-key-file), for every command that opens a client or an admin client. `defaults`:
    "environment" reads HERALD_AUTH_TOKEN_FILE, HERALD_TLS_TRUST_CERTS_FILE, ...; "settings" leaves
    them None for a settings loader that reads `env_prefix` variables itself (the dlq-worker, the
    operator); "inherited" leaves them out of the namespace unless given, so a subcommand's copy
    does not hide the flags given to its parent command."""
    def default(name: str) -> Any:
        if defaults == "inherited":
            return argparse.SUPPRESS
        return os.environ.get(f"HERALD_{name}") if defaults == "environment" else None

    parser.add_argument("--auth-token-file", default=default("AUTH_TOKEN_FILE"), metavar="FILE",
                        help=f"file holding the token to authenticate with (env {env_prefix}AUTH_TOKEN_FILE; "
                             "re-read when it changes)")
    parser.add_argument("--tls-trust-certs-file", default=default("TLS_TRUST_CERTS_FILE"), metavar="FILE",
                        help=f"CA bundle for herald+ssl:// URLs (env {env_prefix}TLS_TRUST_CERTS_FILE; "
                             "default: the system's)")
    parser.add_argument("--tls-cert-file", default=default("TLS_CERT_FILE"), metavar="FILE",
                        help=f"client certificate (PEM) to present, for services that require one "
                             f"(env {env_prefix}TLS_CERT_FILE)")
    parser.add_argument("--tls-key-file", default=default("TLS_KEY_FILE"), metavar="FILE",
                        help=f"the client certificate's private key (PEM) (env {env_prefix}TLS_KEY_FILE)")


def client_security(args: argparse.Namespace) -> dict[str, Any]:
    """Client options from the client security flags (for AsyncClient, Client and AdminClient)."""
    options: dict[str, Any] = {}
    if getattr(args, "auth_token_file", None):
        options["auth"] = AuthenticationToken.from_file(args.auth_token_file)
    if getattr(args, "tls_trust_certs_file", None):
        options["tls_trust_certs_file_path"] = args.tls_trust_certs_file
    if getattr(args, "tls_cert_file", None):
        options["tls_certificate_file_path"] = args.tls_cert_file
    if getattr(args, "tls_key_file", None):
        options["tls_private_key_file_path"] = args.tls_key_file
    return options
