"""HTTP lookup (GET /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}), as the Pulsar clients
built with an http:// service URL ask it: lookup names the topic's owner (assigning one when it has
none) and the answer gives the owner's URLs as it registered them (pulsar://, pulsar+ssl://, its web
service); a topic this broker owns is loaded here first. Partitioned topics are looked up partition
by partition, after the partitioned-metadata path (/admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions,
topics.py)."""

from __future__ import annotations

from aiohttp import web

from herald.broker.rest.app import ROLE, context_of
from herald.broker.rest.paths import topic_of
from herald.broker.rest.tenants import json_response
from herald.common.errors import ServiceNotReadyError


async def lookup_topic(request: web.Request) -> web.Response:
    name = topic_of(request)
    context = context_of(request)
    if context.access is not None:
        await context.access.authorizer.check_lookup(request.get(ROLE), str(name))
    owner = await context.owner(str(name))
    if owner is None:
        await context.service.get_topic(str(name))
    urls = owner or context.urls
    if not urls.pulsar and not urls.pulsar_tls:
        raise ServiceNotReadyError(f"the broker that serves {name} serves no Pulsar protocol: ask it over Herald's")
    return json_response({
        "brokerUrl": urls.pulsar, "brokerUrlTls": urls.pulsar_tls, "httpUrl": urls.web, "httpUrlTls": urls.web_tls,
        "nativeUrl": urls.pulsar or urls.pulsar_tls,
    })


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/lookup/v2/topic/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}", lookup_topic)
