"""Who may read and change a topic's schemas, against `herald standalone` with TLS, token
authentication and authorization on: BrokerService.GetSchema needs produce or consume on the topic
(as Pulsar's GET_SCHEMA needs a lookup's permission); the admin schema calls are the topic's tenant
admins' (and super-users'), through the admin client and `herald admin schemas` alike; a consumer
with consume only still decodes by version (its client's GetSchema is allowed)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator

import pytest
from herald.client import AsyncClient, AuthenticationToken, AuthorizationError
from herald.client.admin import AdminClient
from herald.client.schema import StringSchema
from herald.client.schema_fetcher import SchemaFetcher
from herald.common.codec.schema_info import SchemaInfo
from herald.common.errors import NotFoundError

from tests.conftest import VENV_BIN, StandaloneProcess, service_env
from tests.helpers import unique_name, unique_topic
from tests.security.conftest import ADMIN, Keys, Pki

FAST = {"operation_timeout": 10.0, "connection_timeout": 5.0, "stats_interval": 0}
ORDER = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}).encode()


def _admin(server: StandaloneProcess, pki: Pki, keys: Keys, role: str = ADMIN) -> AdminClient:
    return AdminClient(server.service_url, timeout=10, auth=AuthenticationToken(keys.token(role)),
                       tls_trust_certs_file_path=str(pki.ca_cert))


def _client(server: StandaloneProcess, pki: Pki, keys: Keys, role: str) -> AsyncClient:
    return AsyncClient(server.service_url, auth=AuthenticationToken(keys.token(role)),
                       tls_trust_certs_file_path=str(pki.ca_cert), **FAST)


@pytest.fixture
async def tenant(secure_standalone: StandaloneProcess, pki: Pki, keys: Keys) -> AsyncIterator[str]:
    """A tenant with namespace `ns`, administered by `<tenant>-admin`."""
    name = unique_name("schemas")
    async with _admin(secure_standalone, pki, keys) as admin:
        await admin.create_tenant(name, admin_roles=[f"{name}-admin"])
        await admin.create_namespace(f"{name}/ns")
    yield name


async def _fetch_latest(client: AsyncClient, topic: str) -> tuple[int, SchemaInfo] | None:
    """BrokerService.GetSchema as the client's consumers call it."""
    fetcher = SchemaFetcher(client._pool, client._lookup, client._config)  # the client's own connections
    return await fetcher.latest(topic)


async def test_get_schema_needs_produce_or_consume(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, tenant: str,
) -> None:
    topic = unique_topic("t", f"{tenant}/ns")
    async with _admin(secure_standalone, pki, keys) as admin:
        await admin.create_topic(topic)
        await admin.upload_schema(topic, SchemaInfo("AVRO", ORDER))
        await admin.grant_permission("reader", ["consume"], topic=topic)
        await admin.grant_permission("writer", ["produce"], topic=topic)
    for role in ("reader", "writer"):
        async with _client(secure_standalone, pki, keys, role) as client:
            latest = await _fetch_latest(client, topic)
            assert latest is not None and latest[1].data == ORDER
    async with _client(secure_standalone, pki, keys, "stranger") as client:
        with pytest.raises(AuthorizationError, match="neither produce nor consume"):
            await _fetch_latest(client, topic)


async def test_a_consumer_with_consume_only_decodes_by_version(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, tenant: str,
) -> None:
    topic = unique_topic("t", f"{tenant}/ns")
    async with _admin(secure_standalone, pki, keys) as admin:
        await admin.grant_permission("reader", ["consume"], topic=topic)
        await admin.grant_permission("writer", ["produce"], topic=topic)
    async with _client(secure_standalone, pki, keys, "reader") as reading, \
            _client(secure_standalone, pki, keys, "writer") as writing:
        producer = await writing.create_producer(topic, schema=StringSchema())
        consumer = await reading.subscribe(topic, "s", schema=StringSchema())
        await producer.send("allowed")
        message = await consumer.receive(timeout=10)
        assert message is not None
        assert (message.schema_version, message.value) == (0, "allowed")
        await producer.close()
        await consumer.close()


async def test_admin_schema_calls_are_the_tenant_admins(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, tenant: str,
) -> None:
    topic = unique_topic("t", f"{tenant}/ns")
    async with _admin(secure_standalone, pki, keys) as admin:
        await admin.create_topic(topic)
        await admin.grant_permission("app", ["produce", "consume"], topic=topic)
    async with _admin(secure_standalone, pki, keys, "app") as app:
        # The topic's producers and consumers may read its schemas and test one (nothing is stored),
        # as over REST; only tenant admins change them.
        with pytest.raises(NotFoundError):
            await app.get_schema(topic)
        assert await app.schema_versions(topic) == []
        assert await app.test_schema_compatibility(topic, SchemaInfo("AVRO", ORDER)) is None
        for call in (app.delete_schema(topic), app.upload_schema(topic, SchemaInfo("AVRO", ORDER))):
            with pytest.raises(AuthorizationError):
                await call
    async with _admin(secure_standalone, pki, keys, f"{tenant}-admin") as owner:
        assert await owner.upload_schema(topic, SchemaInfo("AVRO", ORDER)) == 0
        assert (await owner.get_schema(topic))[1].data == ORDER
    other = unique_name("other")
    async with _admin(secure_standalone, pki, keys) as admin:
        await admin.create_tenant(other, admin_roles=[f"{other}-admin"])
    async with _admin(secure_standalone, pki, keys, f"{other}-admin") as outsider:
        with pytest.raises(AuthorizationError):
            await outsider.delete_schema(topic)


async def test_the_cli_says_why_a_schema_call_is_refused(
    secure_standalone: StandaloneProcess, pki: Pki, keys: Keys, tenant: str,
) -> None:
    topic = unique_topic("t", f"{tenant}/ns")
    result = await asyncio.to_thread(
        subprocess.run,
        [str(VENV_BIN / "herald"), "admin", "--url", secure_standalone.service_url,
         "--auth-token-file", str(keys.token_file("nobody")), "--tls-trust-certs-file", str(pki.ca_cert),
         "schemas", "upload", topic, "--type", "AVRO", "--definition", ORDER.decode()],
        capture_output=True, text=True, env=service_env(), timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: AUTHORIZATION_ERROR: "), result.stderr
