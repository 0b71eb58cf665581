"""The flags the service commands share: one per security setting (a service's, or standalone's
set for all of its services), and who may read /metrics. Each names the HERALD_* variable it
overrides; the settings loaders do the overriding."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

from herald.common.security.settings import MetricsEndpointSettings, SecuritySettings

STANDALONE_SECURITY_FLAGS = (
    "tls_cert_file", "tls_key_file", "tls_ca_file", "tls_require_client_cert", "tls_client_auth",
    "authentication_enabled", "token_secret_key_file", "token_public_key_file", "internal_token_file",
    "authorization_enabled", "superuser_roles",
)


def standalone_security_flags(sub: argparse.ArgumentParser) -> None:
    """TLS and authentication for every service of `herald standalone` (docs/security.md)."""
    sub.add_argument("--tls-cert-file", help="server certificate (PEM): TLS on every port")
    sub.add_argument("--tls-key-file", help="the certificate's private key (PEM)")
    sub.add_argument("--tls-ca-file", help="CA that signs the certificates (trusted between the services)")
    sub.add_argument("--tls-require-client-cert", action="store_const", const=True, default=None,
                     help="refuse clients without a certificate signed by --tls-ca-file (mutual TLS)")
    sub.add_argument("--tls-client-auth", action="store_const", const=True, default=None,
                     help="a client certificate's common name is the role of a call without a token")
    sub.add_argument("--authentication", dest="authentication_enabled", action="store_const", const=True,
                     default=None, help="authenticate every call (tokens or client certificates)")
    sub.add_argument("--token-secret-key-file", help="HS256 secret key the tokens are checked with")
    sub.add_argument("--token-public-key-file", help="RS256 public key the tokens are checked with")
    sub.add_argument("--internal-token-file", help="token the services use between themselves (default: made "
                                                   "with the secret key for role 'standalone')")
    sub.add_argument("--authorization", dest="authorization_enabled", action="store_const", const=True,
                     default=None, help="authorize every call (super-users, tenant admins, grants)")
    sub.add_argument("--superuser-roles", help="comma-separated roles that may do everything")


# Every field of SecuritySettings (which lookup, broker, storage and proxy settings derive from) is a
# flag of those commands; a new field without a line here fails `herald <service> --help`.
SERVICE_SECURITY_HELP = {
    "tls_cert_file": "certificate chain (PEM): TLS on this port, and over TLS to the other services",
    "tls_key_file": "the certificate's private key (PEM)",
    "tls_ca_file": "CA of the cluster's certificates: trusted when dialling the others, asked of client certificates",
    "tls_require_client_cert": "refuse clients without a certificate signed by --tls-ca-file (mutual TLS)",
    "tls_server_name": "the name the other services' certificates carry, when not the host dialled",
    "authentication_enabled": "authenticate every call (tokens, or client certificates)",
    "token_secret_key_file": "HS256 secret key the tokens are checked with",
    "token_public_key_file": "RS256 public key the tokens are checked with",
    "token_audience": "the aud claim tokens must carry (default: not checked)",
    "tls_client_auth": "a client certificate's common name is the role of a call without a token",
    "auth_token_file": "file holding this service's own token, for its calls to the others",
    "proxy_roles": "comma-separated roles of the proxies (the only ones that may name another principal)",
    "authorization_enabled": "authorize every call (super-users, tenant admins, grants)",
    "superuser_roles": "comma-separated roles that may do everything",
    "broker_roles": "comma-separated roles of the brokers",
    "dlq_worker_roles": "comma-separated roles of the dlq-workers",
}
SERVICE_SECURITY_FLAGS = tuple(field.name for field in dataclasses.fields(SecuritySettings))
# Who may read /metrics (docs/security.md "Metrics"): a flag per field, on every command serving it.
METRICS_ENDPOINT_FLAGS = tuple(field.name for field in dataclasses.fields(MetricsEndpointSettings))


def metrics_endpoint_flags(sub: argparse.ArgumentParser, section: str) -> None:
    """--metrics-auth-token-file, --metrics-tls-cert-file and --metrics-tls-key-file, over the
    [section] table and HERALD_<SECTION>_* variables."""
    env = f"HERALD_{section.upper().replace('-', '_')}_"
    sub.add_argument("--metrics-auth-token-file", metavar="FILE",
                     help="file holding the bearer token /metrics asks scrapers for (the probes stay open; "
                          f"env {env}METRICS_AUTH_TOKEN_FILE)")
    sub.add_argument("--metrics-tls-cert-file", metavar="FILE",
                     help=f"certificate chain (PEM): HTTPS on the metrics port (env {env}METRICS_TLS_CERT_FILE)")
    sub.add_argument("--metrics-tls-key-file", metavar="FILE",
                     help=f"the metrics certificate's private key (PEM) (env {env}METRICS_TLS_KEY_FILE)")


def metrics_flags(sub: argparse.ArgumentParser, default_port: int, section: str) -> None:
    """Where a service serves /metrics, and who may read it."""
    sub.add_argument("--metrics-host", help="address /metrics binds (default 127.0.0.1)")
    sub.add_argument("--metrics-port", type=int,
                     help=f"/metrics port (default {default_port}; 0 = any free port, -1 = none)")
    metrics_endpoint_flags(sub, section)


def service_security_flags(sub: argparse.ArgumentParser, service: str) -> None:
    """A flag per security setting (docs/security.md), over the [service] table and HERALD_<SERVICE>_*."""
    group = sub.add_argument_group("security (docs/security.md)")
    hints = typing.get_type_hints(SecuritySettings)
    for name in SERVICE_SECURITY_FLAGS:
        flags = [f"--{name.replace('_', '-')}"]
        if name.endswith("_enabled"):
            flags.insert(0, f"--{name.removesuffix('_enabled').replace('_', '-')}")  # as standalone spells it
        text = f"{SERVICE_SECURITY_HELP[name]} (env HERALD_{service.upper()}_{name.upper()})"
        if hints[name] is bool:
            group.add_argument(*flags, dest=name, action="store_const", const=True, default=None, help=text)
        else:
            metavar = "ROLE,..." if name.endswith("_roles") else "FILE" if name.endswith("_file") else "NAME"
            group.add_argument(*flags, dest=name, metavar=metavar, help=text)


def settings_flags(sub: argparse.ArgumentParser, settings: type[Any], section: str) -> None:
    """A flag for every field of the service's settings dataclass that has none yet: each setting
    is also a flag (defaults < TOML < HERALD_* < flags), so that nothing is reachable only through
    the environment. --name-with-dashes VALUE; a boolean is --name / --no-name; a list is comma-separated."""
    group = sub.add_argument_group(f"every other setting of [{section}] (docs/operations.md)")
    taken = {action.dest for action in sub._actions}
    env = f"HERALD_{section.upper().replace('-', '_')}_"
    hints = typing.get_type_hints(settings)
    for setting in dataclasses.fields(settings):
        name = setting.name
        flag = f"--{name.replace('_', '-')}"
        if name in taken or flag in sub._option_string_actions:
            continue
        kind = hints[name]
        default = setting.default if setting.default_factory is dataclasses.MISSING else setting.default_factory()
        text = f"default {default} (env {env}{name.upper()})"
        if kind is bool:
            group.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=text)
        elif kind in (int, float):
            group.add_argument(flag, dest=name, type=kind, metavar=kind.__name__.upper(), help=text)
        elif typing.get_origin(kind) is list:
            group.add_argument(flag, dest=name, metavar="A,B,...", help=text)
        else:
            group.add_argument(flag, dest=name, metavar="VALUE", help=text)


def settings_overrides(args: argparse.Namespace, settings: type[Any], *extra: str) -> dict[str, Any]:
    """The flags given for `settings`' fields (and `extra` names), for load_settings' overrides."""
    names = [field.name for field in dataclasses.fields(settings)] + list(extra)
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
