"""The REST API with TLS, token authentication and authorization on (a real `herald standalone`
with tests.security's flags): HTTPS on the web port, 401 without a valid `Authorization: Bearer`
token, and the gRPC admin's decisions (herald.broker.core.admin_access) for each role: 403 when
refused."""

from __future__ import annotations

from tests.helpers import unique_name
from tests.rest.conftest import V2, Rest, new_namespace
from tests.security.conftest import ADMIN, Keys


async def test_calls_without_a_valid_bearer_token_are_401(secure_rest: Rest, keys: Keys) -> None:
    none = await secure_rest.get(f"{V2}/tenants")
    assert none.status == 401 and none.reason
    garbage = await secure_rest.as_role("not-a-jwt").get(f"{V2}/tenants")
    assert garbage.status == 401
    expired = await secure_rest.as_role(keys.token(ADMIN, expiry_seconds=-60)).get(f"{V2}/tenants")
    assert expired.status == 401
    not_bearer = secure_rest.as_role(None)
    reply = await not_bearer.session.get(f"{secure_rest.base_url}{V2}/tenants",
                                         headers={"Authorization": f"Basic {keys.token(ADMIN)}"})
    assert reply.status == 401 and "Bearer" in (await reply.json())["reason"]
    assert (await secure_rest.as_role(keys.token(ADMIN)).get(f"{V2}/tenants")).status == 200


async def test_tenants_are_the_super_users_and_a_tenants_inside_its_admins(secure_rest: Rest, keys: Keys) -> None:
    admin = secure_rest.as_role(keys.token(ADMIN))
    owner_role = unique_name("owner")
    owner = secure_rest.as_role(keys.token(owner_role))
    stranger = secure_rest.as_role(keys.token(unique_name("stranger")))
    namespace = await new_namespace(admin, admin_roles=(owner_role,))
    tenant = namespace.split("/")[0]
    listing = await owner.get(f"{V2}/tenants")
    assert listing.status == 403 and "list tenants" in listing.reason
    assert (await owner.put(f"{V2}/tenants/{unique_name('tenant')}")).status == 403
    # Inside its tenant, the admin role may do what Pulsar lets tenant admins do.
    assert (await owner.put(f"{V2}/namespaces/{tenant}/more")).status == 204
    assert (await owner.post(f"{V2}/namespaces/{namespace}/messageTTL", 60)).status == 204
    assert (await owner.put(f"{V2}/persistent/{namespace}/t/partitions", 2)).status == 204
    assert (await owner.get(f"{V2}/persistent/{namespace}/t/partitioned-stats")).status == 200
    # Nobody else may.
    for method, path in (("PUT", f"{V2}/namespaces/{tenant}/theirs"), ("GET", f"{V2}/namespaces/{namespace}"),
                         ("POST", f"{V2}/namespaces/{namespace}/deduplication"),
                         ("GET", f"{V2}/persistent/{namespace}/t/partitioned-stats"),
                         ("DELETE", f"{V2}/persistent/{namespace}/t/partitions"),
                         ("GET", f"/lookup/v2/topic/persistent/{namespace}/t-partition-0")):
        refused = await stranger.call(method, path, True if method == "POST" else None)
        assert refused.status == 403, (method, path, refused)
        assert refused.reason


async def test_a_consume_grant_lets_a_role_look_up_and_subscribe_but_not_administer(
    secure_rest: Rest, keys: Keys,
) -> None:
    admin = secure_rest.as_role(keys.token(ADMIN))
    namespace = await new_namespace(admin)
    topic = f"{V2}/persistent/{namespace}/t"
    assert (await admin.put(topic)).status == 204
    role = unique_name("reader")
    assert (await admin.post(f"{V2}/namespaces/{namespace}/permissions/{role}", ["consume"])).status == 204
    reader = secure_rest.as_role(keys.token(role))
    found = await reader.get(f"/lookup/v2/topic/persistent/{namespace}/t")
    assert found.status == 200
    assert found.body["brokerUrl"].startswith("pulsar://") and found.body["httpUrlTls"].startswith("https://")
    assert (await reader.put(f"{topic}/subscription/mine")).status == 204  # Pulsar's SUBSCRIBE operation
    assert (await reader.get(f"{V2}/persistent/{namespace}")).status == 200  # a grant on the namespace lists it
    assert (await reader.delete(f"{topic}/subscription/mine")).status == 403
    assert (await reader.delete(topic)).status == 403
    assert (await reader.get(f"{topic}/stats")).status == 403
