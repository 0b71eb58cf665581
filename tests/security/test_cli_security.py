"""Security on the command line: every service command takes every security setting as a flag (a
lookup started with TLS, authentication and authorization from flags alone), and every command that
opens a client or an admin client takes --auth-token-file and --tls-trust-certs-file: `herald admin
dlq replay`, `herald dlq-worker`, `herald operator`."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from herald.api.v1 import lookup_pb2, lookup_pb2_grpc
from herald.cli.main import build_parser
from herald.cli.service_flags import SERVICE_SECURITY_FLAGS
from herald.cli.services import operator_settings
from herald.client import AsyncClient, AuthenticationToken
from herald.common.errors import AuthenticationError, AuthorizationError
from herald.common.transport.rpc import error_from_rpc
from herald.local_cluster import free_port

from tests.conftest import VENV_BIN, StandaloneProcess, service_env
from tests.helpers import unique_topic
from tests.security.conftest import ADMIN, Keys, Pki
from tests.security.test_standalone_security import FAST

SERVICES = ("lookup", "broker", "storage", "proxy")


def _herald(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "herald"), *args], capture_output=True, text=True, timeout=60,
                          env=env or service_env(), check=False)


# ---- service commands: a flag per security setting ----

@pytest.mark.parametrize("service", SERVICES)
def test_every_security_setting_is_a_flag_of_each_service_command(service: str) -> None:
    shown = _herald(service, "--help")
    assert shown.returncode == 0, shown.stderr
    for name in SERVICE_SECURITY_FLAGS:
        assert f"--{name.replace('_', '-')}" in shown.stdout, name
        assert f"HERALD_{service.upper()}_{name.upper()}" in " ".join(shown.stdout.split()), name
    assert "--authentication," in shown.stdout and "--authorization," in shown.stdout  # standalone's spelling


@pytest.mark.parametrize("command", [("dlq-worker",), ("operator",), ("admin",), ("admin", "dlq", "replay"),
                                     ("admin", "dlq", "peek"), ("produce",), ("consume",)])
def test_every_client_command_takes_the_client_security_flags(command: tuple[str, ...]) -> None:
    shown = _herald(*command, "--help")
    assert shown.returncode == 0, shown.stderr
    assert "--auth-token-file" in shown.stdout and "--tls-trust-certs-file" in shown.stdout
    assert "--tls-cert-file" in shown.stdout and "--tls-key-file" in shown.stdout  # mutual TLS


class LookupProcess:
    def __init__(self, directory: Path, *flags: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.log = directory / f"lookup-{self.port}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(VENV_BIN / "herald"), "lookup", "--port", str(self.port), "--metrics-port", "-1",
                 "--metadata-url", f"sqlite:///{directory / f'meta-{self.port}.db'}", *flags],
                stdout=out, stderr=subprocess.STDOUT, env=env or service_env())

    def wait_started(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while "lookup listening on" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"lookup did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def wait_failed(self, timeout: float = 30.0) -> str:
        self.proc.wait(timeout=timeout)
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture
def secure_lookup(tmp_path: Path, pki: Pki, keys: Keys) -> Iterator[LookupProcess]:
    """`herald lookup` with TLS, authentication and authorization from flags alone; the environment
    says authentication is off, and the flag wins."""
    env = {**service_env(), "HERALD_LOOKUP_AUTHENTICATION_ENABLED": "false"}
    lookup = LookupProcess(
        tmp_path, "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
        "--tls-ca-file", str(pki.ca_cert), "--authentication", "--token-secret-key-file", str(keys.secret_key),
        "--authorization-enabled", "--superuser-roles", f"{ADMIN},other-admin", "--broker-roles", "broker",
        env=env)
    try:
        lookup.wait_started()
        yield lookup
    finally:
        lookup.stop()


async def test_a_lookup_started_with_security_flags_serves_tls_and_checks_tokens_and_roles(
    secure_lookup: LookupProcess, pki: Pki, keys: Keys,
) -> None:
    credentials = grpc.ssl_channel_credentials(pki.ca_cert.read_bytes())
    async with grpc.aio.secure_channel(f"127.0.0.1:{secure_lookup.port}", credentials) as channel:
        stub = lookup_pb2_grpc.LookupServiceStub(channel)
        for role in (ADMIN, "other-admin"):  # both super-user roles of the comma-separated flag
            await stub.GetClusterInfo(lookup_pb2.ClusterInfoRequest(), timeout=5,
                                      metadata=[("authorization", f"Bearer {keys.token(role)}")])
        with pytest.raises(grpc.aio.AioRpcError) as unauthenticated:
            await stub.GetClusterInfo(lookup_pb2.ClusterInfoRequest(), timeout=5)
        assert isinstance(error_from_rpc(unauthenticated.value), AuthenticationError)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.LookupTopic(lookup_pb2.LookupTopicRequest(topic="persistent://public/default/t"), timeout=5,
                                   metadata=[("authorization", f"Bearer {keys.token('nobody')}")])
        assert isinstance(error_from_rpc(refused.value), AuthorizationError)
    async with AsyncClient(f"herald://127.0.0.1:{secure_lookup.port}", auth=AuthenticationToken(keys.token(ADMIN)),
                           **FAST) as plaintext:
        with pytest.raises(Exception):  # noqa: B017 - a TLS port: the plaintext client never gets an answer
            await plaintext.get_partitions_for_topic("persistent://public/default/t")


def test_a_lookup_refuses_to_start_with_inconsistent_security_flags(tmp_path: Path, pki: Pki) -> None:
    lookup = LookupProcess(tmp_path, "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
                           "--tls-client-auth")
    assert "tls_client_auth needs TLS with tls_require_client_cert" in lookup.wait_failed()
    assert lookup.proc.returncode == 2


def test_a_lookup_refuses_to_start_with_an_unreadable_certificate_flag(tmp_path: Path, pki: Pki) -> None:
    lookup = LookupProcess(tmp_path, "--tls-cert-file", str(tmp_path / "missing.crt"),
                           "--tls-key-file", str(pki.server_key))
    assert "missing.crt" in lookup.wait_failed()
    assert lookup.proc.returncode != 0


# ---- herald admin dlq replay ----

def test_dlq_replay_takes_the_token_and_trust_flags(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys,
) -> None:
    topic = unique_topic("replay")
    token = str(keys.token_file(ADMIN))
    tls = ["--tls-trust-certs-file", str(pki.ca_cert)]
    url = secure_standalone.service_url
    sent = _herald("produce", f"{topic}-s-DLQ", "-n", "3", "-m", "dead-{i}", "--url", url,
                   "--auth-token-file", token, *tls)
    assert sent.returncode == 0, sent.stderr

    refused = _herald("admin", "--url", url, *tls, "dlq", "replay", topic, "-s", "s")
    assert refused.returncode == 1 and "no token was given" in refused.stderr, refused.stderr
    missing = _herald("admin", "--url", url, "--auth-token-file", str(Path(token).parent / "none.token"), *tls,
                      "dlq", "replay", topic, "-s", "s")
    assert missing.returncode != 0 and "none.token" in missing.stderr, missing.stderr
    # the flags after the subcommand, as well as before it
    replayed = _herald("admin", "--url", url, "dlq", "replay", topic, "-s", "s", "--auth-token-file", token, *tls)
    assert replayed.returncode == 0 and "replayed 3 messages" in replayed.stdout, replayed.stderr
    got = _herald("consume", topic, "-s", "check", "-n", "3", "--url", url, "--auth-token-file", token, *tls)
    assert got.returncode == 0, got.stderr
    assert all(f"dead-{i}" in got.stdout for i in range(3)), got.stdout


# ---- herald operator ----

def test_the_operator_flags_go_into_its_settings_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HERALD_OPERATOR_AUTH_TOKEN_FILE", "/from/env.token")
    monkeypatch.setenv("HERALD_OPERATOR_TLS_TRUST_CERTS_FILE", "/from/env.pem")
    from_env = operator_settings(build_parser().parse_args(["operator"]))
    assert (from_env.auth_token_file, from_env.tls_trust_certs_file) == ("/from/env.token", "/from/env.pem")
    flagged = operator_settings(build_parser().parse_args(
        ["operator", "--auth-token-file", "/flag.token", "--tls-trust-certs-file", "/flag.pem"]))
    assert (flagged.auth_token_file, flagged.tls_trust_certs_file) == ("/flag.token", "/flag.pem")
    monkeypatch.setenv("HERALD_OPERATOR_TLS_CERT_FILE", "/from/env.crt")
    monkeypatch.setenv("HERALD_OPERATOR_TLS_KEY_FILE", "/from/env.key")
    certified = operator_settings(build_parser().parse_args(["operator", "--tls-cert-file", "/flag.crt"]))
    assert (certified.tls_cert_file, certified.tls_key_file) == ("/flag.crt", "/from/env.key")
