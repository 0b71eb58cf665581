"""The client options of every command that opens a client or an admin client (produce, consume, perf,
admin): the service URL and the four security files, their flags, and the one rule that decides each
value: the flag, else its HERALD_* environment variable, else the chosen context (herald.cli.context),
else the built-in default. The dlq-worker and the operator take the security flags too, but read their
own HERALD_<SERVICE>_* variables through their settings loaders, so no context applies to them."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

from herald.cli.context_store import Context, ContextStore, config_dir

# The service URL of commands that open a client, when no flag, variable or context names one.
DEFAULT_SERVICE_URL = "herald://127.0.0.1:6660"
CLIENT_SECURITY_FLAGS = ("auth_token_file", "tls_trust_certs_file", "tls_cert_file", "tls_key_file")
CLIENT_OPTIONS = ("url", *CLIENT_SECURITY_FLAGS)
# The variable of each client option (over a context, under a flag).
ENVIRONMENT = {"url": "HERALD_SERVICE_URL", **{name: f"HERALD_{name.upper()}" for name in CLIENT_SECURITY_FLAGS}}
BUILT_IN = {"url": DEFAULT_SERVICE_URL}
# Set on the namespace of a command whose client options main() resolves after parsing.
RESOLVE_MARKER = "_herald_client_options"
URL_HELP = (f"service URL, herald://host:port or herald+ssl://host:port (default: $HERALD_SERVICE_URL, "
            f"else the context's, else {DEFAULT_SERVICE_URL})")

# `herald --context NAME` (main sets it before a command runs): over $HERALD_CONTEXT and context.txt.
_context_flag: str | None = None


def choose_context(name: str | None) -> None:
    global _context_flag
    _context_flag = name


def chosen_context_name(environ: Mapping[str, str] | None = None, store: ContextStore | None = None) -> str | None:
    """--context, else $HERALD_CONTEXT, else the selected one (`herald context select`), else None."""
    env = os.environ if environ is None else environ
    if _context_flag:
        return _context_flag
    if env.get("HERALD_CONTEXT"):
        return env["HERALD_CONTEXT"]
    return (store or ContextStore(config_dir(env))).selected()


def chosen_context(environ: Mapping[str, str] | None = None) -> Context | None:
    store = ContextStore(config_dir(environ))
    name = chosen_context_name(environ, store)
    return None if name is None else store.load(name)


def resolve_client_options(flags: Mapping[str, str | None], environ: Mapping[str, str] | None = None,
                           ) -> dict[str, str | None]:
    """The value of each client option (url and the four security files): flag > HERALD_* variable >
    context > built-in default. `flags` holds what the command line gave (None: not given). The context
    is read only when a flag and variable leave an option open, so a broken one does not stop a
    command that names everything."""
    env = os.environ if environ is None else environ
    resolved: dict[str, str | None] = {}
    context: Context | None = None
    context_read = False
    if _context_flag or env.get("HERALD_CONTEXT"):  # named on purpose: an unknown name is an error
        context, context_read = chosen_context(env), True
    for name in CLIENT_OPTIONS:
        value = flags.get(name) or env.get(ENVIRONMENT[name]) or None
        if value is None:
            if not context_read:
                context, context_read = chosen_context(env), True
            value = getattr(context, name) if context is not None else None
        resolved[name] = value if value is not None else BUILT_IN.get(name)
    return resolved


def default_service_url() -> str:
    """The service URL when no --url is given: $HERALD_SERVICE_URL, else the context's, else the default."""
    url = resolve_client_options({})["url"]
    assert url is not None  # BUILT_IN has one
    return url


def client_security_defaults() -> dict[str, str | None]:
    """The security files when no flag names them: each HERALD_* variable, else the context's."""
    resolved = resolve_client_options({})
    return {name: resolved[name] for name in CLIENT_SECURITY_FLAGS}


def apply_client_options(args: argparse.Namespace) -> None:
    """Fill in the client options a command's flags left unset (None), for a command whose parser
    took client_security_flags(defaults="environment" or "inherited")."""
    if not getattr(args, RESOLVE_MARKER, False):
        return
    given = {name: getattr(args, name, None) for name in CLIENT_OPTIONS}
    for name, value in resolve_client_options(given).items():
        if name != "url" or hasattr(args, "url"):
            setattr(args, name, value)


def client_security_flags(parser: argparse.ArgumentParser, *, defaults: str = "environment",
                          env_prefix: str = "HERALD_") -> None:
    """--auth-token-file, --tls-trust-certs-file and the client certificate (--tls-cert-file,
    --tls-key-file), for every command that opens a client or an admin client. `defaults`:
    "environment" leaves them None, for main() to resolve after parsing (flag > HERALD_* variable >
    context, and --url likewise when the command has one); "settings" leaves them None for a settings
    loader that reads `env_prefix` variables itself (the dlq-worker, the operator); "inherited" leaves
    them out of the namespace unless given, so a subcommand's copy does not hide the flags given to
    its parent command."""
    default = argparse.SUPPRESS if defaults == "inherited" else None
    if defaults != "settings":
        parser.set_defaults(**{RESOLVE_MARKER: True})
    where = (f"env {env_prefix}{{}}" if defaults == "settings"
             else f"default: ${env_prefix}{{}}, else the context's")
    parser.add_argument("--auth-token-file", default=default, metavar="FILE",
                        help=f"file holding the token to authenticate with ({where.format('AUTH_TOKEN_FILE')}; "
                             "re-read when it changes)")
    parser.add_argument("--tls-trust-certs-file", default=default, metavar="FILE",
                        help=f"CA bundle for herald+ssl:// URLs ({where.format('TLS_TRUST_CERTS_FILE')}; "
                             "else the system's)")
    parser.add_argument("--tls-cert-file", default=default, metavar="FILE",
                        help=f"client certificate (PEM) to present, for services that require one "
                             f"({where.format('TLS_CERT_FILE')})")
    parser.add_argument("--tls-key-file", default=default, metavar="FILE",
                        help=f"the client certificate's private key (PEM) ({where.format('TLS_KEY_FILE')})")


def client_security(args: argparse.Namespace) -> dict[str, Any]:
    """Client options from the client security flags (for AsyncClient, Client and AdminClient)."""
    from herald.common.security.credentials import AuthenticationToken  # grpc: not while completing

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
