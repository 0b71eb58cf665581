"""Pulsar's admin REST API for tenants, namespaces and namespace policies, clusters and brokers,
through a real `herald standalone` (--web-port) and plain HTTP: Pulsar's paths, status codes
(204 for changes, 404 unknown, 409 exists, 412 invalid names and non-empty tenants, 400 bad bodies)
and JSON shapes."""

from __future__ import annotations

from tests.helpers import unique_name
from tests.rest.conftest import V2, Rest
from tests.rest.conftest import new_namespace as _namespace


async def test_tenants_are_created_read_updated_listed_and_deleted_with_pulsars_codes(rest: Rest) -> None:
    tenant = unique_name("tenant")
    created = await rest.put(f"{V2}/tenants/{tenant}", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
    assert created.status == 204, created
    assert (await rest.get(f"{V2}/tenants/{tenant}")).body == {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
    again = await rest.put(f"{V2}/tenants/{tenant}", {"adminRoles": []})
    assert again.status == 409 and "already exists" in again.reason
    assert tenant in (await rest.get(f"{V2}/tenants")).body
    assert (await rest.post(f"{V2}/tenants/{tenant}", {"adminRoles": ["ops", "dev"]})).status == 204
    assert (await rest.get(f"{V2}/tenants/{tenant}")).body["adminRoles"] == ["ops", "dev"]
    # A tenant that still has a namespace is a failed precondition.
    assert (await rest.put(f"{V2}/namespaces/{tenant}/ns")).status == 204
    busy = await rest.delete(f"{V2}/tenants/{tenant}")
    assert busy.status == 412 and "namespaces" in busy.reason
    assert (await rest.delete(f"{V2}/namespaces/{tenant}/ns")).status == 204
    assert (await rest.delete(f"{V2}/tenants/{tenant}")).status == 204
    missing = await rest.get(f"{V2}/tenants/{tenant}")
    assert missing.status == 404 and tenant in missing.reason
    assert (await rest.delete(f"{V2}/tenants/{tenant}")).status == 404


async def test_invalid_names_are_412_and_bad_bodies_400(rest: Rest) -> None:
    bad = await rest.put(f"{V2}/tenants/Bad_Tenant!")
    assert bad.status == 412 and "Tenant name is not valid" in bad.reason
    namespace = await _namespace(rest)
    tenant = namespace.split("/")[0]
    bad_namespace = await rest.put(f"{V2}/namespaces/{tenant}/Bad!NS")
    assert bad_namespace.status == 412 and "Namespace name is not valid" in bad_namespace.reason
    not_json = await rest.put(f"{V2}/tenants/{unique_name('tenant')}", raw=b"{not json")
    assert not_json.status == 400 and "not JSON" in not_json.reason
    wrong_type = await rest.put(f"{V2}/tenants/{unique_name('tenant')}", {"adminRoles": "ops"})
    assert wrong_type.status == 400 and "adminRoles must be a JSON array" in wrong_type.reason
    unknown = await rest.get(f"{V2}/no-such-resource")
    assert unknown.status == 404 and unknown.reason


async def test_namespaces_are_created_listed_and_deleted_with_pulsars_codes(rest: Rest) -> None:
    namespace = await _namespace(rest)
    tenant = namespace.split("/")[0]
    assert (await rest.get(f"{V2}/namespaces/{tenant}")).body == [namespace]
    again = await rest.put(f"{V2}/namespaces/{namespace}")
    assert again.status == 409 and "already exists" in again.reason
    no_tenant = await rest.put(f"{V2}/namespaces/{unique_name('nobody')}/ns")
    assert no_tenant.status == 404
    assert (await rest.get(f"{V2}/namespaces/{unique_name('nobody')}")).status == 404
    # A namespace with a topic is not deleted (Pulsar: 409 Conflict).
    assert (await rest.put(f"{V2}/persistent/{namespace}/t")).status == 204
    busy = await rest.delete(f"{V2}/namespaces/{namespace}")
    assert busy.status == 409 and "non empty" in busy.reason
    assert (await rest.delete(f"{V2}/persistent/{namespace}/t")).status == 204
    assert (await rest.delete(f"{V2}/namespaces/{namespace}")).status == 204
    assert (await rest.delete(f"{V2}/namespaces/{namespace}")).status == 404
    assert (await rest.get(f"{V2}/namespaces/{namespace}")).status == 404


async def test_namespace_creation_takes_pulsars_policies_body(rest: Rest) -> None:
    tenant = unique_name("tenant")
    assert (await rest.put(f"{V2}/tenants/{tenant}")).status == 204
    namespace = f"{tenant}/ns"
    body = {"retention_policies": {"retentionTimeInMinutes": 120, "retentionSizeInMB": 5},
            "message_ttl_in_seconds": 600, "deduplicationEnabled": True,
            "backlog_quota_map": {"destination_storage": {"limitSize": 2048, "policy": "producer_exception"}}}
    assert (await rest.put(f"{V2}/namespaces/{namespace}", body)).status == 204
    policies = (await rest.get(f"{V2}/namespaces/{namespace}")).body
    assert policies["retention_policies"] == {"retentionTimeInMinutes": 120, "retentionSizeInMB": 5}
    assert policies["message_ttl_in_seconds"] == 600
    assert policies["deduplicationEnabled"] is True
    assert policies["backlog_quota_map"] == {
        "destination_storage": {"limitSize": 2048, "limitTime": -1, "policy": "producer_exception"}}
    assert policies["schema_compatibility_strategy"] == "UNDEFINED"


async def test_retention_ttl_deduplication_and_schema_strategy_are_set_read_and_removed(rest: Rest) -> None:
    namespace = await _namespace(rest)
    ns = f"{V2}/namespaces/{namespace}"
    assert (await rest.get(f"{ns}/retention")).body == {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    assert (await rest.post(f"{ns}/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1})).status == 204
    assert (await rest.get(f"{ns}/retention")).body == {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    assert (await rest.delete(f"{ns}/retention")).status == 204
    assert (await rest.get(f"{ns}/retention")).body == {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}

    assert (await rest.get(f"{ns}/messageTTL")).body is None
    assert (await rest.post(f"{ns}/messageTTL", 300)).status == 204
    assert (await rest.get(f"{ns}/messageTTL")).body == 300
    assert (await rest.delete(f"{ns}/messageTTL")).status == 204
    assert (await rest.get(f"{ns}/messageTTL")).body is None

    assert (await rest.post(f"{ns}/deduplication", True)).status == 204
    assert (await rest.get(f"{ns}/deduplication")).body is True
    assert (await rest.delete(f"{ns}/deduplication")).status == 204
    assert (await rest.get(f"{ns}/deduplication")).body is None

    assert (await rest.get(f"{ns}/schemaCompatibilityStrategy")).body == "UNDEFINED"
    assert (await rest.put(f"{ns}/schemaCompatibilityStrategy", "BACKWARD")).status == 204
    assert (await rest.get(f"{ns}/schemaCompatibilityStrategy")).body == "BACKWARD"


async def test_policy_bodies_of_the_wrong_kind_are_400_and_unknown_namespaces_404(rest: Rest) -> None:
    namespace = await _namespace(rest)
    ns = f"{V2}/namespaces/{namespace}"
    ttl = await rest.post(f"{ns}/messageTTL", "soon")
    assert ttl.status == 400 and "message TTL" in ttl.reason
    dedup = await rest.post(f"{ns}/deduplication", 1)
    assert dedup.status == 400 and "deduplication" in dedup.reason
    retention = await rest.post(f"{ns}/retention", {"retentionTimeInMinutes": -5})
    assert retention.status == 400 and "retention" in retention.reason
    strategy = await rest.put(f"{ns}/schemaCompatibilityStrategy", "SOMETIMES")
    assert strategy.status == 400 and "FULL" in strategy.reason
    quota = await rest.post(f"{ns}/backlogQuota", {"limitSize": 1}, params={"backlogQuotaType": "forever"})
    assert quota.status == 400 and "destination_storage" in quota.reason
    nobody = f"{V2}/namespaces/{namespace}-gone"
    assert (await rest.get(f"{nobody}/retention")).status == 404
    assert (await rest.post(f"{nobody}/messageTTL", 5)).status == 404


async def test_backlog_quotas_of_both_types_are_set_and_removed_one_by_one(rest: Rest) -> None:
    namespace = await _namespace(rest)
    ns = f"{V2}/namespaces/{namespace}"
    assert (await rest.get(f"{ns}/backlogQuotaMap")).body == {}
    size = {"limitSize": 10 * 1024 * 1024, "limitTime": -1, "policy": "producer_request_hold"}
    assert (await rest.post(f"{ns}/backlogQuota", size)).status == 204  # destination_storage by default
    age = {"limitTime": 3600, "policy": "producer_request_hold"}
    assert (await rest.post(f"{ns}/backlogQuota", age, params={"backlogQuotaType": "message_age"})).status == 204
    assert (await rest.get(f"{ns}/backlogQuotaMap")).body == {
        "destination_storage": size, "message_age": {"limitSize": -1, "limitTime": 3600,
                                                     "policy": "producer_request_hold"}}
    assert (await rest.delete(f"{ns}/backlogQuota", params={"backlogQuotaType": "destination_storage"})).status == 204
    assert list((await rest.get(f"{ns}/backlogQuotaMap")).body) == ["message_age"]
    assert (await rest.delete(f"{ns}/backlogQuota", params={"backlogQuotaType": "message_age"})).status == 204
    assert (await rest.get(f"{ns}/backlogQuotaMap")).body == {}


async def test_namespace_permissions_are_granted_listed_and_revoked(rest: Rest) -> None:
    namespace = await _namespace(rest)
    ns = f"{V2}/namespaces/{namespace}"
    assert (await rest.get(f"{ns}/permissions")).body == {}
    assert (await rest.post(f"{ns}/permissions/reader", ["consume"])).status == 204
    assert (await rest.get(f"{ns}/permissions")).body == {"reader": ["consume"]}
    bad = await rest.post(f"{ns}/permissions/reader", ["fly"])
    assert bad.status == 400
    assert (await rest.delete(f"{ns}/permissions/reader")).status == 204
    assert (await rest.delete(f"{ns}/permissions/reader")).status == 404


async def test_clusters_and_brokers_name_the_standalone(rest: Rest) -> None:
    assert (await rest.get(f"{V2}/clusters")).body == ["standalone"]
    brokers = await rest.get(f"{V2}/brokers/standalone")
    assert brokers.status == 200 and brokers.body == [rest.base_url.split("://")[1]]


async def test_a_body_over_one_mib_is_refused_with_413(rest: Rest) -> None:
    namespace = await _namespace(rest)
    huge = await rest.post(f"{V2}/namespaces/{namespace}/messageTTL", raw=b" " * (1024 * 1024 + 1) + b"5")
    assert huge.status == 413 and huge.reason
    assert (await rest.get(f"{V2}/namespaces/{namespace}/messageTTL")).body is None
