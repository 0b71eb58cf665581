"""Mutual TLS: `herald standalone` that requires a client certificate signed by the cluster's CA and
takes its common name as the role of a call without a token (tls_client_auth)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from herald.client import AsyncClient, AuthenticationTls, AuthenticationToken, AuthorizationError
from herald.client.admin import AdminClient
from herald.common.errors import ConnectionError_, HeraldTimeoutError, InvalidArgumentError

from tests.conftest import StandaloneProcess, service_env
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


def _topic() -> str:
    return f"persistent://public/default/mtls-{uuid.uuid4().hex[:8]}"


async def test_the_certificates_common_name_is_the_role(mtls_standalone: StandaloneProcess, pki: Pki) -> None:
    topic = _topic()
    cert, key = pki.client("cert-user")
    admin_cert, admin_key = pki.client(ADMIN)
    async with (AdminClient(mtls_standalone.service_url, timeout=10, tls_trust_certs_file_path=str(pki.ca_cert),
                            auth=AuthenticationTls(str(admin_cert), str(admin_key))) as admin,
                AsyncClient(mtls_standalone.service_url, auth=AuthenticationTls(str(cert), str(key)),
                            tls_trust_certs_file_path=str(pki.ca_cert), **FAST) as client):
        with pytest.raises(AuthorizationError, match="'cert-user'"):
            await client.create_producer(topic)
        await admin.grant_permission("cert-user", ["produce"], topic=topic)
        producer = None
        for _ in range(50):  # the grant is seen within the authorization cache's second
            try:
                producer = await client.create_producer(topic)
                break
            except AuthorizationError:
                await asyncio.sleep(0.1)
        assert producer is not None
        await producer.send(b"by certificate")
        await producer.close()


async def test_a_client_without_a_certificate_cannot_connect(
    mtls_standalone: StandaloneProcess, pki: Pki, keys: Keys,
) -> None:
    async with AsyncClient(mtls_standalone.service_url, auth=AuthenticationToken(keys.token(ADMIN)),
                           tls_trust_certs_file_path=str(pki.ca_cert), **FAST) as client:
        with pytest.raises((ConnectionError_, HeraldTimeoutError)):
            await client.create_producer(_topic())


def test_a_certificate_needs_a_tls_url(pki: Pki) -> None:
    cert, key = pki.client("someone")
    with pytest.raises(InvalidArgumentError, match=r"herald\+ssl"):
        AsyncClient("herald://127.0.0.1:6650", auth=AuthenticationTls(str(cert), str(key)))
