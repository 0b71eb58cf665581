"""Compaction administration with TLS, token authentication and authorization on (a real `herald
standalone` with tests.security's flags): starting a compaction and reading its status, over
Pulsar's REST API and Herald's gRPC admin, and the compaction threshold policies, are a tenant
admin's (or a super-user's); a role with only produce and consume grants, or none, is refused
(403 / AuthorizationError) and starts nothing."""

from __future__ import annotations

import pytest
from herald.client import AuthenticationToken
from herald.client.admin import AdminClient
from herald.common.errors import AuthorizationError

from tests.conftest import StandaloneProcess
from tests.helpers import unique_name
from tests.rest.conftest import V2, Rest, new_namespace
from tests.security.conftest import ADMIN, Keys, Pki


async def test_only_a_tenant_admin_may_compact_or_read_the_status(
    secure_rest: Rest, secure_rest_standalone: StandaloneProcess, keys: Keys, pki: Pki,
) -> None:
    admin = secure_rest.as_role(keys.token(ADMIN))
    owner_role, user_role = unique_name("owner"), unique_name("user")
    namespace = await new_namespace(admin, admin_roles=(owner_role,))
    assert (await admin.post(f"{V2}/namespaces/{namespace}/permissions/{user_role}", ["produce", "consume"])
            ).status == 204
    topic = f"{V2}/persistent/{namespace}/t"
    assert (await admin.put(topic)).status == 204
    user = secure_rest.as_role(keys.token(user_role))
    stranger = secure_rest.as_role(keys.token(unique_name("stranger")))
    for role in (user, stranger):
        for method, path, body in (("PUT", f"{topic}/compaction", None), ("GET", f"{topic}/compaction", None),
                                   ("POST", f"{topic}/compactionThreshold", 1024),
                                   ("POST", f"{V2}/namespaces/{namespace}/compactionThreshold", 1024)):
            refused = await role.call(method, path, body)
            assert refused.status == 403 and refused.reason, (method, path, refused)
    assert (await admin.get(f"{topic}/compaction")).body == {"status": "NOT_RUN"}  # nothing was started
    assert (await admin.get(f"{topic}/compactionThreshold")).body is None
    owner = secure_rest.as_role(keys.token(owner_role))
    assert (await owner.put(f"{topic}/compaction")).status == 204
    assert (await owner.get(f"{topic}/compaction")).status == 200
    assert (await owner.post(f"{topic}/compactionThreshold", 1024)).status == 204
    # The same decisions over gRPC.
    grpc_topic = f"persistent://{namespace}/t"
    async with AdminClient(secure_rest_standalone.service_url, timeout=10, auth=AuthenticationToken(
            keys.token(user_role)), tls_trust_certs_file_path=str(pki.ca_cert)) as as_user:
        with pytest.raises(AuthorizationError):
            await as_user.compact_topic(grpc_topic)
        with pytest.raises(AuthorizationError):
            await as_user.compaction_status(grpc_topic)
    async with AdminClient(secure_rest_standalone.service_url, timeout=10, auth=AuthenticationToken(
            keys.token(owner_role)), tls_trust_certs_file_path=str(pki.ca_cert)) as as_owner:
        assert (await as_owner.compaction_status(grpc_topic)).status in ("RUNNING", "SUCCESS")
