"""The broker's admin authorization decides on every resource a request names (issue 16): an audit
of every AdminService request's fields, so that a field naming a resource cannot be added without
being authorized, and BrokerAuthorization.decide_admin on a real metadata store (the embedded one)
refusing each request that names another tenant's resource beside one of the caller's own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from herald.api.v1 import admin_pb2, broker_pb2
from herald.broker.grpc.authorization import (
    NAMESPACE_FIELDS,
    TENANT_FIELDS,
    TOPIC_FIELDS,
    BrokerAuthorization,
    tenants_named,
)
from herald.common.errors import AuthorizationError
from herald.metadata.authorization import Authorizer, Permissions
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.metadata.resources import Resources, Tenant

ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["AdminService"]
RESOURCE_FIELDS = {*TENANT_FIELDS, *NAMESPACE_FIELDS, *TOPIC_FIELDS}
# A request's `name` is a tenant's: GetTenant is authorized on it, the other calls taking one are
# the super-users' alone.
TENANT_NAME_MESSAGES = {"herald.v1.TenantRequest", "herald.v1.Tenant", "herald.v1.DeleteTenantRequest"}
# The dead-letter policy's topics need produce (broker.authorization.check_dead_letter_topics).
DEAD_LETTER_TOPIC_FIELDS = {"dead_letter_topic", "retry_letter_topic"}
# Fields that name nothing to authorize: a subscription (inside the topic named beside it), a
# role being granted, settings, positions and counts.
OTHER_FIELDS = {
    "subscription", "role", "actions", "clear", "partitions", "force", "count", "all", "publish_time", "edge",
    "position", "ledger_id", "entry_id", "policies", "policy", "max_redeliver_count", "admin_roles",
    "allowed_clusters", "keep_schema", "version", "schema",
    "undo", "latest", "offset", "expire_time_seconds", "all_subscriptions",
}
# A storage node's address: the calls naming one are the super-users' alone.
STORAGE_NODE_MESSAGES = {"herald.v1.DrainStorageNodeRequest"}
# Settings only: their fields name no resource (a schema's type, definition and properties).
POLICY_MESSAGES = {"herald.v1.Policies", "herald.v1.SchemaDefinition"}


def _fields(message: Descriptor, seen: set[str]) -> list[tuple[str, FieldDescriptor]]:
    """Every field of `message` and of the messages inside it (policies' settings excepted)."""
    if message.full_name in seen or message.full_name in POLICY_MESSAGES:
        return []
    seen.add(message.full_name)
    found = []
    for field in message.fields:
        found.append((message.full_name, field))
        if field.message_type is not None:
            found.extend(_fields(field.message_type, seen))
    return found


def test_every_field_of_every_admin_request_is_authorized_or_names_nothing() -> None:
    unclassified = []
    for method in ADMIN_SERVICE.methods:
        for message, field in _fields(method.input_type, set()):
            if field.name in RESOURCE_FIELDS | OTHER_FIELDS:
                continue
            if field.name == "name" and message in TENANT_NAME_MESSAGES:
                continue
            if field.name in DEAD_LETTER_TOPIC_FIELDS and message == "herald.v1.DeadLetterPolicy":
                continue
            if field.name == "address" and message in STORAGE_NODE_MESSAGES:
                continue
            unclassified.append(f"{method.name}: {message}.{field.name}")
    assert unclassified == [], ("admin request fields that may name a resource: authorize them in "
                                "broker/authorization.py, or list them here as naming nothing")


@pytest.mark.parametrize("method", ["ListTopics", "CreateSubscription"])
def test_the_calls_decided_on_one_resource_name_only_one(method: str) -> None:
    request = ADMIN_SERVICE.methods_by_name[method].input_type
    assert [field.name for field in request.fields if field.name in RESOURCE_FIELDS] in (["namespace"], ["topic"])


def test_tenants_named_takes_every_resource_field() -> None:
    request = admin_pb2.SetPoliciesRequest(namespace="bob/ns", topic="persistent://alice/ns/t")
    assert tenants_named("SetNamespacePolicies", request) == {"alice", "bob"}
    assert tenants_named("GetTenant", admin_pb2.TenantRequest(name="carol")) == {"carol"}
    assert tenants_named("ListNamespaces", admin_pb2.ListNamespacesRequest(tenant="dave")) == {"dave"}
    assert tenants_named("ListTenants", admin_pb2.ListTenantsRequest()) == set()


@pytest.fixture
async def decide(tmp_path: Path) -> AsyncIterator[BrokerAuthorization]:
    store = EmbeddedMetadataStore(str(tmp_path / "metadata.db"))
    await store.start()
    resources = Resources(store)
    for tenant in ("alice", "bob"):
        await resources.create_tenant(Tenant(tenant, [f"{tenant}-admin"], []))
        await resources.create_namespace(f"{tenant}/ns")
    await Permissions(store).grant("alice-reader", ["consume"], namespace="alice/ns")
    yield BrokerAuthorization(Authorizer(store, superuser_roles=["root"], dlq_worker_roles=["worker"]),
                              max_partitions_per_topic=1000)
    await store.close()


ALICE_TOPIC, BOB_TOPIC = "persistent://alice/ns/t", "persistent://bob/ns/t"


def _dead_letters(dlq: str = "", retry: str = "") -> admin_pb2.SetSubscriptionDeadLetterPolicyRequest:
    return admin_pb2.SetSubscriptionDeadLetterPolicyRequest(topic=ALICE_TOPIC, subscription="s", policy=(
        broker_pb2.DeadLetterPolicy(max_redeliver_count=1, dead_letter_topic=dlq, retry_letter_topic=retry)))


CROSS_TENANT: list[tuple[str, Any]] = [
    ("SetNamespacePolicies", admin_pb2.SetPoliciesRequest(namespace="bob/ns", topic=ALICE_TOPIC)),
    ("SetTopicPolicies", admin_pb2.SetPoliciesRequest(namespace="bob/ns", topic=ALICE_TOPIC)),
    ("SetTopicPolicies", admin_pb2.SetPoliciesRequest(namespace="alice/ns", topic=BOB_TOPIC)),
    ("GrantPermission", admin_pb2.GrantPermissionRequest(namespace="bob/ns", topic=ALICE_TOPIC, role="x")),
    ("RevokePermission", admin_pb2.RevokePermissionRequest(namespace="alice/ns", topic=BOB_TOPIC, role="x")),
    ("GetPermissions", admin_pb2.PermissionsRequest(namespace="bob/ns", topic=ALICE_TOPIC)),
    ("SetSubscriptionDeadLetterPolicy", _dead_letters(dlq=BOB_TOPIC)),
    ("SetSubscriptionDeadLetterPolicy", _dead_letters(retry=BOB_TOPIC)),
]


@pytest.mark.parametrize(("method", "request_"), CROSS_TENANT)
async def test_a_request_naming_another_tenants_resource_is_refused(
    decide: BrokerAuthorization, method: str, request_: Any,
) -> None:
    with pytest.raises(AuthorizationError, match=r"'bob'|bob/ns"):
        await decide.decide_admin(method, request_, "alice-admin")
    await decide.decide_admin(method, request_, "root")  # a super-user may


async def test_dead_letter_topics_of_the_callers_own_tenant_pass(decide: BrokerAuthorization) -> None:
    await decide.decide_admin("SetSubscriptionDeadLetterPolicy", _dead_letters(), "alice-admin")
    await decide.decide_admin("SetSubscriptionDeadLetterPolicy", _dead_letters("persistent://alice/ns/dlq"),
                              "alice-admin")


async def test_create_subscription_needs_consume_and_a_dlq_worker_has_no_right_of_its_own(
    decide: BrokerAuthorization,
) -> None:
    create = admin_pb2.CreateSubscriptionRequest(topic=ALICE_TOPIC, subscription="s")
    await decide.decide_admin("CreateSubscription", create, "alice-reader")
    with pytest.raises(AuthorizationError):
        await decide.decide_admin("CreateSubscription", create, "worker")
    assert not await decide.authorizer.allowed("worker", BOB_TOPIC, ("produce",))


@pytest.mark.parametrize(("method", "request_"), [
    ("ListStorageNodes", admin_pb2.ListStorageNodesRequest()),
    ("DrainStorageNode", admin_pb2.DrainStorageNodeRequest(address="127.0.0.1:3181")),
])
async def test_storage_node_calls_are_the_super_users_alone(
    decide: BrokerAuthorization, method: str, request_: Any,
) -> None:
    for role in ("alice-admin", "alice-reader", None):
        with pytest.raises(AuthorizationError, match=r"may not (list|drain) storage nodes|not authenticated"):
            await decide.decide_admin(method, request_, role)
    await decide.decide_admin(method, request_, "root")
