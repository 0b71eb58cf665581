"""The security options of every command that opens a client or an admin client (produce, consume,
dlq-worker, operator, admin): the flags, and the client options they make."""

from __future__ import annotations

import argparse
import os
from typing import Any

from herald.common.security.credentials import AuthenticationToken

# The service URL of commands that open a client (env HERALD_SERVICE_URL overrides it).
DEFAULT_SERVICE_URL = "herald://127.0.0.1:6660"
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
