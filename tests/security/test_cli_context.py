"""Contexts carry credentials: against a standalone with TLS, token authentication and authorization,
a selected context's URL, CA bundle and token are what `herald admin` uses without a flag; a context
without a token is refused; a flag (or HERALD_* variable) still wins over the context's token."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import VENV_BIN, StandaloneProcess, service_env
from tests.security.conftest import Keys, Pki

_CLIENT_VARIABLES = ("HERALD_SERVICE_URL", "HERALD_CONTEXT", "HERALD_AUTH_TOKEN_FILE", "HERALD_TLS_TRUST_CERTS_FILE",
                     "HERALD_TLS_CERT_FILE", "HERALD_TLS_KEY_FILE")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    made = {name: value for name, value in service_env().items() if name not in _CLIENT_VARIABLES}
    made["HERALD_CONFIG_DIR"] = str(tmp_path / "config")
    return made


def herald(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "herald"), *args], capture_output=True, text=True, env=env, timeout=120)


def test_a_contexts_credentials_reach_a_secured_service_and_flags_still_win(
    tmp_path: Path, secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, env: dict[str, str],
) -> None:
    url, ca = secure_standalone.service_url, str(pki.ca_cert)
    admin_token = keys.token_file("admin")
    added = herald("context", "add", "secure", "--url", url, "--tls-trust-certs-file", ca,
                   "--auth-token-file", str(admin_token), "--select", env=env)
    assert added.returncode == 0, added
    saved = tmp_path / "config" / "context" / "secure.toml"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600  # it names the admin's token file

    listed = herald("admin", "tenants", "list", env=env)  # no --url, no --tls-*, no token flag
    assert listed.returncode == 0, listed
    assert "public" in listed.stdout

    assert herald("context", "add", "anonymous", "--url", url, "--tls-trust-certs-file", ca, env=env).returncode == 0
    refused = herald("--context", "anonymous", "admin", "tenants", "list", env=env)
    assert refused.returncode == 1, refused
    assert "no token was given" in refused.stderr

    # A flag over the context's admin token: the call is made as `nobody`, and refused.
    nobody = herald("admin", "--auth-token-file", str(keys.token_file("nobody")), "tenants", "create", "ctx-denied",
                    env=env)
    assert nobody.returncode == 1, nobody
    assert "AUTHORIZATION_ERROR" in nobody.stderr, nobody.stderr
    # The variable too.
    nobody = herald("admin", "tenants", "create", "ctx-denied",
                    env={**env, "HERALD_AUTH_TOKEN_FILE": str(keys.token_file("nobody"))})
    assert nobody.returncode == 1 and "AUTHORIZATION_ERROR" in nobody.stderr, nobody
