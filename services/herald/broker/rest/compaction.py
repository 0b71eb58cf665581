"""Topic compaction in Pulsar's admin REST API: PUT .../{topic}/compaction starts one (on each
partition of a partitioned topic; 409 while one runs), GET .../{topic}/compaction answers
{"status": "NOT_RUN|RUNNING|SUCCESS|ERROR", "lastError": ...}; the topic-level
.../{topic}/compactionThreshold policy (GET, POST, DELETE; the namespace's is in tenants.py)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from herald.broker.core.admin_access import AdminCall
from herald.broker.rest.app import authorize, context_of, on_owner
from herald.broker.rest.errors import RestError
from herald.broker.rest.paths import ADMIN_V2, json_body, topic_of, typed
from herald.broker.rest.tenants import json_response, no_content
from herald.broker.rest.topics import TOPIC, _each, _partitions
from herald.common.errors import ErrorCode
from herald.metadata.policies import Policies


async def trigger(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("CompactTopic", topic=str(name)))
    context = context_of(request)
    await _each(context, name, context.service.compact)
    return no_content()


async def status(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("GetCompactionStatus", topic=str(name)))
    context = context_of(request)
    if await _partitions(context, name):
        raise RestError(405, f"compaction status is per partition: ask {name.partition(0)} and the others",
                        ErrorCode.NOT_ALLOWED)
    info = await on_owner(context, str(name), lambda: context.service.compaction_status(str(name)))
    body: dict[str, Any] = {"status": info.status.value}
    if info.error:
        body["lastError"] = info.error
    return json_response(body)


def threshold_of(doc: Any) -> int:
    value: int = typed(doc, int, "the compaction threshold in bytes")
    return value


async def get_threshold(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("GetTopicPolicies", topic=str(name)))
    policies = await context_of(request).service.resources.get_topic_policies(str(name))
    return json_response(policies.compaction_threshold)


async def set_threshold(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("SetTopicPolicies", topic=str(name)))
    threshold = threshold_of(await json_body(request))
    await context_of(request).service.resources.set_topic_policies(str(name), Policies(compaction_threshold=threshold))
    return no_content()


async def remove_threshold(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("SetTopicPolicies", topic=str(name)))
    await context_of(request).service.resources.set_topic_policies(str(name), Policies(), ["compaction_threshold"])
    return no_content()


def add_routes(router: web.UrlDispatcher) -> None:
    topic = f"{ADMIN_V2}{TOPIC}"
    router.add_put(f"{topic}/compaction", trigger)
    router.add_get(f"{topic}/compaction", status)
    router.add_get(f"{topic}/compactionThreshold", get_threshold)
    router.add_post(f"{topic}/compactionThreshold", set_threshold)
    router.add_delete(f"{topic}/compactionThreshold", remove_threshold)
