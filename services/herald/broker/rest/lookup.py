"""HTTP lookup (GET /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}), as the Pulsar clients
built with an http:// service URL ask it: lookup names the topic's owner (assigning one when it has
none) and the answer names its URL; a topic this broker owns is loaded here first. Partitioned
topics are looked up partition by partition, after the partitioned-metadata path
(/admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions, topics.py).

brokerUrl is the owner's Herald address (herald://host:port, herald+ssl:// with TLS) until the Pulsar
binary protocol front end publishes its pulsar:// URLs; httpUrl is this broker's web service when
it is the owner (the other brokers' web URLs are not published yet: "")."""

from __future__ import annotations

from aiohttp import web

from herald.broker.rest.app import OWNER_LOOKUP_TIMEOUT, ROLE, context_of
from herald.broker.rest.paths import topic_of
from herald.broker.rest.tenants import json_response


async def lookup_topic(request: web.Request) -> web.Response:
    name = topic_of(request)
    context = context_of(request)
    if context.access is not None:
        await context.access.authorizer.check_lookup(request.get(ROLE), str(name))
    owner = await context.owner_of(str(name), OWNER_LOOKUP_TIMEOUT)
    http_url = ""
    if owner == context.own_address:
        await context.service.get_topic(str(name))
        http_url = context.http_url
    broker_url = f"{context.broker_scheme}://{owner}"
    tls = context.tls
    return json_response({
        "brokerUrl": "" if tls else broker_url, "brokerUrlTls": broker_url if tls else "",
        "httpUrl": "" if tls else http_url, "httpUrlTls": http_url if tls else "",
        "nativeUrl": broker_url,
    })


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/lookup/v2/topic/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}", lookup_topic)
