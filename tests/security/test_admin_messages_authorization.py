"""Issue 22, item 5, authorization: the new admin calls (LookupTopic, GetMessageById, ExamineMessage,
ExpireMessages) need what their neighbours (topic stats, peek) need, the topic's tenant admin role or
a super-user, through gRPC, the CLI and the admin REST API, against a standalone with TLS, token
authentication and authorization on. A tenant's admin never reads another tenant's message, nor
learns whether one of its topics exists."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import pytest
from herald.client import AsyncClient, AuthenticationToken, AuthorizationError, InitialPosition
from herald.client.admin import AdminClient

from tests.conftest import VENV_BIN, StandaloneProcess, service_env
from tests.helpers import unique_name
from tests.security.conftest import ADMIN, Keys, Pki


def _admin(server: StandaloneProcess, pki: Pki, keys: Keys, role: str) -> AdminClient:
    return AdminClient(server.service_url, timeout=10, auth=AuthenticationToken(keys.token(role)),
                       tls_trust_certs_file_path=str(pki.ca_cert))


@pytest.fixture
async def superuser(secure_standalone: StandaloneProcess, pki: Pki, keys: Keys) -> AsyncIterator[AdminClient]:
    async with _admin(secure_standalone, pki, keys, ADMIN) as made:
        yield made


async def _tenant_with_message(superuser: AdminClient, server: StandaloneProcess, pki: Pki, keys: Keys,
                               prefix: str) -> tuple[str, str, tuple[int, int]]:
    """A tenant (its admin role `<tenant>-admin`), a topic of it holding one message, and its id."""
    tenant = unique_name(prefix)
    await superuser.create_tenant(tenant, admin_roles=[f"{tenant}-admin"], allowed_clusters=["standalone"])
    await superuser.create_namespace(f"{tenant}/ns")
    topic = f"persistent://{tenant}/ns/secret"
    async with AsyncClient(server.service_url, auth=AuthenticationToken(keys.token(ADMIN)),
                           tls_trust_certs_file_path=str(pki.ca_cert), stats_interval=0) as client:
        producer = await client.create_producer(topic)
        sent = await producer.send(b"bob's secret")
        await producer.close()
    await superuser.create_subscription(topic, "sub", InitialPosition.Earliest)
    return tenant, topic, (sent.ledger_id, sent.entry_id)


async def test_a_tenant_admin_reads_its_own_messages_and_never_another_tenants(
        superuser: AdminClient, secure_standalone: StandaloneProcess, pki: Pki, keys: Keys) -> None:
    alice, alice_topic, alice_id = await _tenant_with_message(superuser, secure_standalone, pki, keys, "alice")
    bob, bob_topic, bob_id = await _tenant_with_message(superuser, secure_standalone, pki, keys, "bob")
    async with _admin(secure_standalone, pki, keys, f"{alice}-admin") as admin:
        assert (await admin.get_message_by_id(alice_topic, alice_id)).entry_id == alice_id[1]
        assert (await admin.examine_message(alice_topic)).entry_id == alice_id[1]
        assert list(await admin.lookup_topic(alice_topic)) == [alice_topic]
        assert await admin.expire_messages(alice_topic, "sub", 3600) == 0

        refused = f"role '{alice}-admin' may not administer tenant '{bob}'"
        for call in (admin.get_message_by_id(bob_topic, bob_id), admin.examine_message(bob_topic),
                     admin.lookup_topic(bob_topic), admin.expire_messages(bob_topic, "sub", 0),
                     admin.expire_messages(bob_topic, None, 0),
                     # Refused before existence is looked at: nothing says whether bob has this topic.
                     admin.get_message_by_id(f"persistent://{bob}/ns/no-such-topic", (0, 0))):
            with pytest.raises(AuthorizationError, match=refused):
                await call
    # Nothing of bob's moved.
    assert [s.msg_backlog for s in (await superuser.topic_stats(bob_topic)).subscriptions] == [1]


async def test_the_cli_and_the_rest_api_refuse_another_tenants_message(
        superuser: AdminClient, secure_standalone: StandaloneProcess, pki: Pki, keys: Keys) -> None:
    alice, _, _ = await _tenant_with_message(superuser, secure_standalone, pki, keys, "alice")
    _, bob_topic, bob_id = await _tenant_with_message(superuser, secure_standalone, pki, keys, "bob")
    token_file = keys.token_file(f"{alice}-admin")
    message_id = f"{bob_id[0]}:{bob_id[1]}"
    result = await asyncio.to_thread(
        subprocess.run, [str(VENV_BIN / "herald"), "admin", "--url", secure_standalone.service_url, "--auth-token-file",
         str(token_file), "--tls-trust-certs-file", str(pki.ca_cert), "topics", "get-message-by-id", bob_topic,
         "--id", message_id], capture_output=True, text=True, env=service_env(), timeout=60)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("error: AUTHORIZATION_ERROR: "), result.stderr
    assert "secret" not in result.stderr.replace(bob_topic, "")

    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    base = f"https://127.0.0.1:{secure_standalone.web_port}/admin/v2/{bob_topic.replace('://', '/')}"

    def refused(path: str, method: str) -> tuple[int, bytes]:
        request = urllib.request.Request(base + path, method=method,
                                         headers={"Authorization": f"Bearer {keys.token(f'{alice}-admin')}"})
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=30, context=context)
        return error.value.code, error.value.read()

    for path, method in ((f"/ledger/{bob_id[0]}/entry/{bob_id[1]}", "GET"), ("/examinemessage", "GET"),
                         ("/subscription/sub/expireMessages/0", "POST")):
        status, body = await asyncio.to_thread(refused, path, method)
        assert status == 403, path
        assert b"secret" not in body
    assert [s.msg_backlog for s in (await superuser.topic_stats(bob_topic)).subscriptions] == [1]
