"""`herald context add | list | show | select | remove`: named sets of client options (a service URL and
credentials), like `nats context` or pulsar's client.conf, so that a command needs no --url or --tls-*
flags. Files and their layout: herald.cli.context_store; the precedence rule (flag > HERALD_* >
context > default): herald.cli.client_options."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from herald.cli.client_options import chosen_context_name
from herald.cli.context_store import Context, ContextNotFoundError, ContextStore, check_name
from herald.common.errors import HeraldError


def _absolute(path: str | None) -> str | None:
    # A context is used from any directory: a relative path is kept as the absolute path it named here.
    return None if path is None else os.path.abspath(os.path.expanduser(path))


def cmd_add(args: argparse.Namespace) -> None:
    store = ContextStore()
    context = Context(name=check_name(args.name), url=args.url, auth_token_file=_absolute(args.auth_token_file),
                      tls_trust_certs_file=_absolute(args.tls_trust_certs_file),
                      tls_cert_file=_absolute(args.tls_cert_file), tls_key_file=_absolute(args.tls_key_file),
                      description=args.description)
    replaced = store.path(context.name).exists()
    path = store.save(context)
    print(f"context {context.name} {'replaced' if replaced else 'saved'} in {path}", flush=True)
    if args.select:
        store.select(context.name)
        print(f"context {context.name} selected", flush=True)


def cmd_list(args: argparse.Namespace) -> None:
    store = ContextStore()
    names = store.names()
    if not names:
        print(f"no contexts in {store.context_dir}: herald context add NAME --url URL", flush=True)
        return
    active = chosen_context_name(store=store)
    width = max(len(name) for name in names)
    for name in names:
        mark = "*" if name == active else " "
        try:
            context = store.load(name)
        except HeraldError as error:  # one broken file does not hide the others
            print(f"{mark} {name:{width}}  (unreadable: {error})", flush=True)
            continue
        description = f"  {context.description}" if context.description else ""
        print(f"{mark} {name:{width}}  {context.url or '-'}{description}", flush=True)


def cmd_show(args: argparse.Namespace) -> None:
    store = ContextStore()
    name = args.name or chosen_context_name(store=store)
    if name is None:
        known = ", ".join(store.names()) or "none"
        raise ContextNotFoundError(f"no context is selected: name one, or herald context select NAME "
                                   f"(known contexts: {known})")
    context = store.load(name)
    print(f"context {name} ({store.path(name)})", flush=True)
    for key, value in context.options().items():
        print(f"  {key:22} {value if value is not None else '-'}", flush=True)
        if key.endswith("_file") and value is not None and not Path(value).exists():
            print(f"  {'':22} (warning: {value} does not exist)", flush=True)


def cmd_select(args: argparse.Namespace) -> None:
    ContextStore().select(args.name)
    print(f"context {args.name} selected", flush=True)


def cmd_remove(args: argparse.Namespace) -> None:
    ContextStore().remove(args.name)
    print(f"context {args.name} removed", flush=True)


def add_context_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `context` and its subcommands to the `herald` command's subparsers."""
    description = ("Named sets of client options (service URL, token, TLS files), stored one TOML file "
                   "each in $HERALD_CONFIG_DIR/context/ (else $XDG_CONFIG_HOME/herald/context/, else "
                   "~/.config/herald/context/). Each option is taken from its flag, else its HERALD_* "
                   "variable, else the context (herald --context NAME, else $HERALD_CONTEXT, else the "
                   "selected one), else the built-in default.")
    context = commands.add_parser("context", help="save and choose service URLs and credentials (contexts)",
                                  description=description)
    actions = context.add_subparsers(dest="context_command", required=True, metavar="COMMAND")

    sub = actions.add_parser("add", help="save a context (replacing one of the same name)")
    sub.add_argument("name", metavar="NAME", help="the context's name (letters, digits, '_', '.', '-')")
    sub.add_argument("--url", help="service URL, herald://host:port or herald+ssl://host:port")
    sub.add_argument("--auth-token-file", metavar="FILE", help="file holding the token to authenticate with")
    sub.add_argument("--tls-trust-certs-file", metavar="FILE", help="CA bundle for herald+ssl:// URLs")
    sub.add_argument("--tls-cert-file", metavar="FILE", help="client certificate (PEM) to present")
    sub.add_argument("--tls-key-file", metavar="FILE", help="the client certificate's private key (PEM)")
    sub.add_argument("--description", metavar="TEXT", help="a note shown by herald context list")
    sub.add_argument("--select", action="store_true", help="select it too (as herald context select NAME)")
    sub.set_defaults(func=cmd_add)

    sub = actions.add_parser("list", help="list the contexts; * marks the one in use")
    sub.set_defaults(func=cmd_list)

    sub = actions.add_parser("show", help="print a context's options")
    sub.add_argument("name", metavar="NAME", nargs="?", help="the context to show (default: the one in use)")
    sub.set_defaults(func=cmd_show)

    sub = actions.add_parser("select", help="use this context when no --context or $HERALD_CONTEXT names one")
    sub.add_argument("name", metavar="NAME", help="the context to select")
    sub.set_defaults(func=cmd_select)

    sub = actions.add_parser("remove", help="delete a context (and its selection)")
    sub.add_argument("name", metavar="NAME", help="the context to delete")
    sub.set_defaults(func=cmd_remove)
