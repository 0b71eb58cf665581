"""Tenants, namespaces and their policies, clusters and brokers, as Pulsar's admin REST API serves
them (/admin/v2/tenants, /admin/v2/namespaces, /admin/v2/clusters, /admin/v2/brokers)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from herald.broker.core.admin_access import AdminCall
from herald.broker.rest.app import authorize, context_of
from herald.broker.rest.errors import RestError
from herald.broker.rest.paths import ADMIN_V2, json_body, namespace_of, tenant_of, typed
from herald.broker.rest.shapes import (
    backlog_quota_map,
    policies_from_json,
    policies_to_json,
    remove_backlog_quota,
    retention_from_json,
    retention_to_json,
    set_backlog_quota,
)
from herald.common.errors import ErrorCode
from herald.metadata.policies import Policies
from herald.metadata.resources import Tenant

NO_CONTENT = 204


def json_response(value: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(value), content_type="application/json")


def no_content() -> web.Response:
    return web.Response(status=NO_CONTENT)


# ---- clusters and brokers ----

async def list_clusters(request: web.Request) -> web.Response:
    return json_response([context_of(request).cluster])


async def list_brokers(request: web.Request) -> web.Response:
    """The active brokers of the cluster, as host:port of their web service: this one (Herald's
    brokers are listed with their gRPC addresses by `herald admin brokers`)."""
    await authorize(request, AdminCall("ListBrokers"))
    context = context_of(request)
    return json_response([context.http_url.split("://", 1)[-1]])


# ---- tenants ----

def _tenant_json(tenant: Tenant) -> dict[str, Any]:
    return {"adminRoles": list(tenant.admin_roles), "allowedClusters": list(tenant.allowed_clusters)}


def _tenant_from(name: str, doc: Any) -> Tenant:
    doc = typed(doc if doc is not None else {}, dict, "the tenant info")
    roles = [typed(r, str, "adminRoles[]") for r in typed(doc.get("adminRoles", []), list, "adminRoles")]
    clusters = [typed(c, str, "allowedClusters[]") for c in typed(doc.get("allowedClusters", []), list,
                                                                   "allowedClusters")]
    return Tenant(name, roles, clusters)


async def list_tenants(request: web.Request) -> web.Response:
    await authorize(request, AdminCall("ListTenants"))
    return json_response(await context_of(request).service.resources.list_tenants())


async def get_tenant(request: web.Request) -> web.Response:
    name = tenant_of(request)
    await authorize(request, AdminCall.on("GetTenant", tenant=name))
    return json_response(_tenant_json(await context_of(request).service.resources.get_tenant(name)))


async def create_tenant(request: web.Request) -> web.Response:
    name = tenant_of(request)
    await authorize(request, AdminCall.on("CreateTenant", tenant=name))
    await context_of(request).service.resources.create_tenant(_tenant_from(name, await json_body(request)))
    return no_content()


async def update_tenant(request: web.Request) -> web.Response:
    name = tenant_of(request)
    await authorize(request, AdminCall.on("UpdateTenant", tenant=name))
    await context_of(request).service.resources.update_tenant(_tenant_from(name, await json_body(request)))
    return no_content()


async def delete_tenant(request: web.Request) -> web.Response:
    name = tenant_of(request)
    await authorize(request, AdminCall.on("DeleteTenant", tenant=name))
    await context_of(request).service.resources.delete_tenant(name)
    return no_content()


# ---- namespaces ----

async def list_namespaces(request: web.Request) -> web.Response:
    tenant = tenant_of(request)
    await authorize(request, AdminCall.on("ListNamespaces", tenant=tenant))
    return json_response(await context_of(request).service.resources.list_namespaces(tenant))


async def create_namespace(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    policies = policies_from_json(await json_body(request))
    await authorize(request, AdminCall.on("CreateNamespace", namespace=namespace))
    await context_of(request).service.resources.create_namespace(namespace, policies)
    return no_content()


async def delete_namespace(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    await authorize(request, AdminCall.on("DeleteNamespace", namespace=namespace))
    resources = context_of(request).service.resources
    await resources.check_namespace(namespace)  # 404 before 409
    if await resources.list_topics(namespace):
        # Pulsar answers a namespace that still has topics with 409 Conflict.
        topics = await resources.list_topics(namespace)
        raise RestError(409, f"Cannot delete non empty namespace {namespace}: it has {len(topics)} topics "
                             f"({', '.join(topics[:5])}); delete them first", ErrorCode.PRECONDITION_FAILED)
    await resources.delete_namespace(namespace)
    return no_content()


async def get_policies(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    await authorize(request, AdminCall.on("GetNamespacePolicies", namespace=namespace))
    policies = await context_of(request).service.resources.get_namespace_policies(namespace)
    return json_response(policies_to_json(policies))


async def _policies(request: web.Request, method: str) -> tuple[str, Policies]:
    namespace = namespace_of(request)
    await authorize(request, AdminCall.on(method, namespace=namespace))
    return namespace, await context_of(request).service.resources.get_namespace_policies(namespace)


async def _set(request: web.Request, namespace: str, field: str, value: Any) -> web.Response:
    """Set (or, with None, clear) one namespace policy: 204."""
    resources = context_of(request).service.resources
    if value is None:
        await resources.set_namespace_policies(namespace, Policies(), [field])
    else:
        await resources.set_namespace_policies(namespace, Policies(**{field: value}))
    return no_content()


def _policy_getter(field: str, to_json: Any = None) -> Any:
    async def get(request: web.Request) -> web.Response:
        _, policies = await _policies(request, "GetNamespacePolicies")
        value = getattr(policies, field)
        return json_response(to_json(value) if to_json is not None else value)
    return get


def _policy_setter(field: str, from_json: Any) -> Any:
    async def post(request: web.Request) -> web.Response:
        namespace, _ = await _policies(request, "SetNamespacePolicies")
        return await _set(request, namespace, field, from_json(await json_body(request)))
    return post


def _policy_remover(field: str) -> Any:
    async def delete(request: web.Request) -> web.Response:
        namespace, _ = await _policies(request, "SetNamespacePolicies")
        return await _set(request, namespace, field, None)
    return delete


def _ttl(doc: Any) -> int:
    seconds: int = typed(doc, int, "the message TTL in seconds")
    return seconds


def _dedup(doc: Any) -> bool:
    enabled: bool = typed(doc, bool, "deduplication (true or false)")
    return enabled


def _threshold(doc: Any) -> int:
    threshold: int = typed(doc, int, "the compaction threshold in bytes")
    return threshold


def _strategy(doc: Any) -> str:
    strategy: str = typed(doc, str, "the schema compatibility strategy")
    return strategy


def _flag(what: str) -> Any:
    def parse(doc: Any) -> bool:
        value: bool = typed(doc, bool, f"{what} (true or false)")
        return value
    return parse


async def get_backlog_quota_map(request: web.Request) -> web.Response:
    _, policies = await _policies(request, "GetNamespacePolicies")
    return json_response(backlog_quota_map(policies.backlog_quota))


async def set_quota(request: web.Request) -> web.Response:
    namespace, policies = await _policies(request, "SetNamespacePolicies")
    quota = set_backlog_quota(policies.backlog_quota, request.query.get("backlogQuotaType"), await json_body(request))
    return await _set(request, namespace, "backlog_quota", quota)


async def remove_quota(request: web.Request) -> web.Response:
    namespace, policies = await _policies(request, "SetNamespacePolicies")
    left = remove_backlog_quota(policies.backlog_quota, request.query.get("backlogQuotaType"))
    return await _set(request, namespace, "backlog_quota", left)


# ---- permissions ----

async def get_permissions(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    await authorize(request, AdminCall.on("GetPermissions", namespace=namespace))
    await context_of(request).service.resources.check_namespace(namespace)
    grants = await context_of(request).permissions.get(namespace=namespace)
    return json_response({role: sorted(actions) for role, actions in sorted(grants.items())})


async def grant_permission(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    await authorize(request, AdminCall.on("GrantPermission", namespace=namespace))
    actions = [typed(a, str, "actions[]") for a in typed(await json_body(request), list, "the actions")]
    await context_of(request).service.resources.check_namespace(namespace)
    await context_of(request).permissions.grant(request.match_info["role"], actions, namespace=namespace)
    return no_content()


async def revoke_permission(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    await authorize(request, AdminCall.on("RevokePermission", namespace=namespace))
    await context_of(request).permissions.revoke(request.match_info["role"], namespace=namespace)
    return no_content()


def add_routes(router: web.UrlDispatcher) -> None:
    ns = f"{ADMIN_V2}/namespaces/{{tenant}}/{{namespace}}"
    router.add_get(f"{ADMIN_V2}/clusters", list_clusters)
    router.add_get(f"{ADMIN_V2}/brokers", list_brokers)
    router.add_get(f"{ADMIN_V2}/brokers/{{cluster}}", list_brokers)
    router.add_get(f"{ADMIN_V2}/tenants", list_tenants)
    router.add_get(f"{ADMIN_V2}/tenants/{{tenant}}", get_tenant)
    router.add_put(f"{ADMIN_V2}/tenants/{{tenant}}", create_tenant)
    router.add_post(f"{ADMIN_V2}/tenants/{{tenant}}", update_tenant)
    router.add_delete(f"{ADMIN_V2}/tenants/{{tenant}}", delete_tenant)
    router.add_get(f"{ADMIN_V2}/namespaces/{{tenant}}", list_namespaces)
    router.add_get(ns, get_policies)
    router.add_put(ns, create_namespace)
    router.add_delete(ns, delete_namespace)
    for path, field, to_json, from_json in (
        ("retention", "retention", retention_to_json, retention_from_json),
        ("messageTTL", "message_ttl_seconds", None, _ttl),
        ("deduplication", "deduplication_enabled", None, _dedup),
        ("compactionThreshold", "compaction_threshold", None, _threshold),
        ("schemaCompatibilityStrategy", "schema_compatibility_strategy",
         lambda value: value or "UNDEFINED", _strategy),
        # Unset, they are the broker's defaults (Pulsar's: not enforced, auto update allowed).
        ("schemaValidationEnforced", "schema_validation_enforced", lambda value: bool(value),
         _flag("schemaValidationEnforced")),
        ("isAllowAutoUpdateSchema", "is_allow_auto_update_schema", lambda value: value is not False,
         _flag("isAllowAutoUpdateSchema")),
    ):
        router.add_get(f"{ns}/{path}", _policy_getter(field, to_json))
        router.add_post(f"{ns}/{path}", _policy_setter(field, from_json))
        router.add_delete(f"{ns}/{path}", _policy_remover(field))
    router.add_put(f"{ns}/schemaCompatibilityStrategy", _policy_setter("schema_compatibility_strategy", _strategy))
    router.add_get(f"{ns}/backlogQuotaMap", get_backlog_quota_map)
    router.add_post(f"{ns}/backlogQuota", set_quota)
    router.add_delete(f"{ns}/backlogQuota", remove_quota)
    router.add_get(f"{ns}/permissions", get_permissions)
    router.add_post(f"{ns}/permissions/{{role}}", grant_permission)
    router.add_delete(f"{ns}/permissions/{{role}}", revoke_permission)
