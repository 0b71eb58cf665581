"""Mutual TLS: `herald standalone` that requires a client certificate signed by the cluster's CA and
takes its common name as the role of a call without a token (tls_client_auth); and one that requires
a certificate besides a token, whose own dlq-worker must present one too."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from herald.client import (
    AsyncClient,
    AuthenticationTls,
    AuthenticationToken,
    AuthorizationError,
    ConsumerType,
    DeadLetterPolicy,
    InitialPosition,
)
from herald.client.admin import AdminClient
from herald.client.config import ClientConfig
from herald.common.errors import ConnectionError_, HeraldTimeoutError, InvalidArgumentError
from herald.dlq.settings import DlqWorkerSettings
from herald.local_cluster import free_port
from herald_operator.handlers import HeraldOperator
from herald_operator.settings import OperatorSettings

from tests.conftest import VENV_BIN, StandaloneProcess, service_env
from tests.helpers import eventually_passes, eventually_sync, unique_topic
from tests.security.conftest import ADMIN, Keys, Pki

FAST = {"operation_timeout": 5.0, "connection_timeout": 2.0, "stats_interval": 0}


@pytest.fixture(scope="module")
def mtls_standalone(tmp_path_factory: pytest.TempPathFactory, pki: Pki, keys: Keys) -> Iterator[StandaloneProcess]:
    server = StandaloneProcess(tmp_path_factory.mktemp("mtls") / "data", service_env())
    server.scheme = "herald+ssl"
    server.extra_args = [
        "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
        "--tls-ca-file", str(pki.ca_cert), "--tls-require-client-cert", "--tls-client-auth",
        "--authentication", "--token-secret-key-file", str(keys.secret_key),
        "--authorization", "--superuser-roles", ADMIN,
    ]
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_the_certificates_common_name_is_the_role(mtls_standalone: StandaloneProcess, pki: Pki) -> None:
    topic = unique_topic("mtls")
    cert, key = pki.client("cert-user")
    admin_cert, admin_key = pki.client(ADMIN)
    async with (AdminClient(mtls_standalone.service_url, timeout=10, tls_trust_certs_file_path=str(pki.ca_cert),
                            auth=AuthenticationTls(str(admin_cert), str(admin_key))) as admin,
                AsyncClient(mtls_standalone.service_url, auth=AuthenticationTls(str(cert), str(key)),
                            tls_trust_certs_file_path=str(pki.ca_cert), **FAST) as client):
        with pytest.raises(AuthorizationError, match="'cert-user'"):
            await client.create_producer(topic)
        await admin.grant_permission("cert-user", ["produce"], topic=topic)
        # The grant is seen within the authorization cache's second.
        producer = await eventually_passes(lambda: client.create_producer(topic), "the grant seen",
                                           retry=(AuthorizationError,))
        await producer.send(b"by certificate")
        await producer.close()


async def test_a_client_without_a_certificate_cannot_connect(
    mtls_standalone: StandaloneProcess, pki: Pki, keys: Keys,
) -> None:
    async with AsyncClient(mtls_standalone.service_url, auth=AuthenticationToken(keys.token(ADMIN)),
                           tls_trust_certs_file_path=str(pki.ca_cert), **FAST) as client:
        with pytest.raises((ConnectionError_, HeraldTimeoutError)):
            await client.create_producer(unique_topic("mtls"))


def test_a_certificate_needs_a_tls_url(pki: Pki) -> None:
    cert, key = pki.client("someone")
    with pytest.raises(InvalidArgumentError, match=r"herald\+ssl"):
        AsyncClient("herald://127.0.0.1:6660", auth=AuthenticationTls(str(cert), str(key)))


# ---- mutual TLS besides tokens: every internal client presents a certificate ----

@pytest.fixture(scope="module")
def mtls_whole(tmp_path_factory: pytest.TempPathFactory, pki: Pki, keys: Keys) -> Iterator[StandaloneProcess]:
    """Every service, the dlq-worker included, behind TLS that requires a client certificate, with
    token authentication and authorization (no tls_client_auth: the certificate only opens the door)."""
    server = StandaloneProcess(tmp_path_factory.mktemp("mtls-whole") / "data", service_env(), dlq_worker=True)
    server.scheme = "herald+ssl"
    server.extra_args = [
        "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
        "--tls-ca-file", str(pki.ca_cert), "--tls-require-client-cert",
        "--authentication", "--token-secret-key-file", str(keys.secret_key),
        "--authorization", "--superuser-roles", ADMIN,
    ]
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _readyz(server: StandaloneProcess) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/readyz", timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_standalone_requiring_client_certificates_becomes_ready_with_its_dlq_worker(
    mtls_whole: StandaloneProcess,
) -> None:
    _, body = eventually_sync(lambda: _readyz(mtls_whole), "/readyz answering 200",
                              until=lambda answer: answer[0] == 200)
    assert body["checks"]["dlq-worker/lookup"] == {"ok": True}


async def test_clients_with_a_certificate_and_a_token_produce_and_consume_directly_and_through_the_proxy(
    mtls_whole: StandaloneProcess, pki: Pki, keys: Keys,
) -> None:
    cert, key = pki.client("app-with-cert")
    for url in (mtls_whole.service_url, mtls_whole.proxy_url):
        topic = unique_topic("mtls")
        async with AsyncClient(url, auth=AuthenticationToken(keys.token(ADMIN)),
                               tls_trust_certs_file_path=str(pki.ca_cert), tls_certificate_file_path=str(cert),
                               tls_private_key_file_path=str(key), **FAST) as client:
            producer = await client.create_producer(topic)
            consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
            sent = [await producer.send(f"m{i}".encode()) for i in range(3)]
            got = [await consumer.receive(timeout=10) for _ in range(3)]
            assert [m.message_id for m in got if m is not None] == sent, url


async def test_the_standalones_own_dlq_worker_moves_a_dead_letter_under_mutual_tls(
    mtls_whole: StandaloneProcess, pki: Pki, keys: Keys,
) -> None:
    topic = unique_topic("mtls")
    cert, key = pki.client("dlq-test")
    async with AsyncClient(mtls_whole.service_url, auth=AuthenticationToken(keys.token(ADMIN)),
                           tls_trust_certs_file_path=str(pki.ca_cert), tls_certificate_file_path=str(cert),
                           tls_private_key_file_path=str(key), **FAST) as client:
        await (await client.create_producer(topic)).send(b"poison", key="k")
        consumer = await client.subscribe(
            topic, "handler", ConsumerType.Shared, initial_position=InitialPosition.Earliest,
            negative_ack_redelivery_delay=0.05, dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2))
        dead = await client.subscribe(f"{topic}-handler-DLQ", "inspect", initial_position=InitialPosition.Earliest)
        for _ in range(2):
            message = await consumer.receive(timeout=10)
            assert message is not None
            consumer.negative_acknowledge(message)
        moved = await dead.receive(timeout=30)
        assert moved is not None and (moved.value, moved.key) == (b"poison", "k")
        assert moved.properties["REAL_TOPIC"] == topic and moved.properties["SUBSCRIPTION"] == "handler"


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except (urllib.error.URLError, ConnectionError):
        return 0, {}


def test_a_dlq_worker_process_presents_the_certificate_its_flags_name(
    mtls_whole: StandaloneProcess, pki: Pki, tmp_path: Path,
) -> None:
    cert, key = pki.client("dlq-worker")
    metrics_port = free_port()
    log = tmp_path / "dlq-worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [str(VENV_BIN / "herald"), "dlq-worker", "--url", mtls_whole.service_url,
             "--metrics-port", str(metrics_port), "--tls-trust-certs-file", str(pki.ca_cert),
             "--tls-cert-file", str(cert), "--tls-key-file", str(key),
             "--auth-token-file", str(mtls_whole.data_dir / "internal.token")],
            stdout=out, stderr=subprocess.STDOUT, env=service_env())
    try:
        def ready() -> tuple[int, dict[str, Any]]:
            assert worker.poll() is None, log.read_text()
            return _get(f"http://127.0.0.1:{metrics_port}/readyz")

        _, body = eventually_sync(ready, "the worker's /readyz answering 200", until=lambda answer: answer[0] == 200)
        assert body["checks"]["dlq-worker/lookup"] == {"ok": True}
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def test_the_cli_produces_and_consumes_with_a_certificate_and_a_token(
    mtls_whole: StandaloneProcess, pki: Pki, keys: Keys,
) -> None:
    cert, key = pki.client("cli-user")
    topic = unique_topic("mtls")
    security = ["--url", mtls_whole.service_url, "--auth-token-file", str(keys.token_file(ADMIN)),
                "--tls-trust-certs-file", str(pki.ca_cert), "--tls-cert-file", str(cert), "--tls-key-file", str(key)]

    def herald(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(VENV_BIN / "herald"), *args], capture_output=True, text=True, timeout=60,
                              env=service_env(), check=False)

    sent = herald("produce", topic, "-n", "2", "-m", "cert-{i}", *security)
    assert sent.returncode == 0, sent.stderr
    got = herald("consume", topic, "-s", "check", "-n", "2", *security)
    assert got.returncode == 0 and "cert-0" in got.stdout and "cert-1" in got.stdout, got.stderr
    listed = herald("admin", "--url", mtls_whole.service_url, *security[2:], "tenants", "list")
    assert listed.returncode == 0 and "public" in listed.stdout, listed.stderr


async def test_the_operators_admin_client_presents_its_certificate(
    mtls_whole: StandaloneProcess, pki: Pki, keys: Keys,
) -> None:
    cert, key = pki.client("operator")
    operator = HeraldOperator(OperatorSettings(
        admin_url=mtls_whole.service_url, auth_token_file=str(keys.token_file(ADMIN)),
        tls_trust_certs_file=str(pki.ca_cert), tls_cert_file=str(cert), tls_key_file=str(key)))
    try:
        assert "public" in await operator.admin.list_tenants()
    finally:
        await operator.close()


def test_a_client_certificate_beside_a_token_is_checked_where_it_is_given(pki: Pki, keys: Keys) -> None:
    cert, key = pki.client("someone")
    url = "herald+ssl://127.0.0.1:6660"
    with pytest.raises(InvalidArgumentError, match="needs both tls_certificate_file_path and tls_private_key_file"):
        ClientConfig(url, tls_certificate_file_path=str(cert))
    with pytest.raises(InvalidArgumentError, match=r"tls_certificate_file_path needs a herald\+ssl://"):
        ClientConfig("herald://127.0.0.1:6660", tls_certificate_file_path=str(cert), tls_private_key_file_path=str(key))
    with pytest.raises(InvalidArgumentError, match="AuthenticationTls already names the client certificate"):
        ClientConfig(url, auth=AuthenticationTls(str(cert), str(key)), tls_certificate_file_path=str(cert),
                     tls_private_key_file_path=str(key))
    with pytest.raises(InvalidArgumentError, match="a client certificate needs TLS"):
        AdminClient("127.0.0.1:6661", auth=AuthenticationToken(keys.token(ADMIN)),
                    tls_certificate_file_path=str(cert), tls_private_key_file_path=str(key))
    with pytest.raises(InvalidArgumentError, match="tls_cert_file and tls_key_file go together"):
        DlqWorkerSettings(service_url=url, tls_cert_file=str(cert))
    with pytest.raises(InvalidArgumentError, match=r"tls_cert_file needs a herald\+ssl:// service_url"):
        DlqWorkerSettings(service_url="herald://127.0.0.1:6660", tls_cert_file=str(cert), tls_key_file=str(key))
    with pytest.raises(InvalidArgumentError, match="tls_cert_file and tls_key_file go together"):
        OperatorSettings(tls_key_file=str(key))
