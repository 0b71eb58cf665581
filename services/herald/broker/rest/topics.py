"""Topics and subscriptions, as Pulsar's admin REST API serves them under
/admin/v2/{domain}/{tenant}/{namespace}[/{topic}]. A call on a partitioned topic's base name that
acts on topic state (stats, unload, subscriptions) is made on each partition in turn and the answers
combined (stats summed by the core's sum_partitions, skipped counts added)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web

from herald.broker.core.admin_access import AdminCall
from herald.broker.core.cursor import InitialPosition, PublishTime, ResetTarget
from herald.broker.core.ledger_list import Position
from herald.broker.core.stats import sum_partitions
from herald.broker.rest.app import RestContext, authorize, context_of, on_owner
from herald.broker.rest.errors import RestError
from herald.broker.rest.paths import ADMIN_V2, flag, int_of, json_body, namespace_of, subscription_of, topic_of, typed
from herald.broker.rest.shapes import internal_stats, message_id_json, position_from_json, topic_stats
from herald.broker.rest.tenants import json_response, no_content
from herald.common.bounded import Pacer
from herald.common.codec.names import TopicName
from herald.common.errors import ErrorCode, InvalidArgumentError

T = TypeVar("T")
# Pulsar's MessageId.latest is (Long.MAX_VALUE, Long.MAX_VALUE), MessageId.earliest (-1, -1).
LONG_MAX = 2**63 - 1
DOMAIN = "{domain:persistent|non-persistent}"
TOPIC = f"/{DOMAIN}/{{tenant}}/{{namespace}}/{{topic}}"


async def _partitions(context: RestContext, name: TopicName) -> int:
    if name.partition_index >= 0:
        return 0
    return await context.service.resources.get_partitions(str(name))


async def _each(context: RestContext, name: TopicName, call: Callable[[str], Awaitable[T]]) -> list[T]:
    """`call` on the topic, or on each partition of a partitioned topic (in order, one at a time,
    giving the loop back in between), each on its owner (app.on_owner)."""
    partitions = await _partitions(context, name)
    if not partitions:
        return [await on_owner(context, str(name), lambda: call(str(name)))]
    answers = []
    pacer = Pacer()
    for index in range(partitions):
        partition = str(name.partition(index))
        answers.append(await on_owner(context, partition, lambda: call(partition)))  # noqa: B023 - awaited now
        await pacer.pace()
    return answers


def _not_on_partitioned(name: TopicName, what: str) -> RestError:
    return RestError(405, f"{what} is not allowed on partitioned topic {name}: make it on each partition, "
                          f"e.g. {name.partition(0)}", ErrorCode.NOT_ALLOWED)


# ---- listing ----

async def list_topics(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    await authorize(request, AdminCall.on("ListTopics", namespace=namespace))
    context = context_of(request)
    await context.service.resources.check_namespace(namespace)
    domain = request.match_info["domain"]
    names: list[str] = []
    for topic in await context.service.list_topics(namespace):
        name = TopicName.parse(topic)
        if name.domain != domain:
            continue
        partitions = await context.service.get_partitions(topic)
        # Pulsar lists a partitioned topic by its partitions here, its base name under /partitioned.
        names.extend([str(name.partition(i)) for i in range(partitions)] if partitions else [str(name)])
    return json_response(names)


async def list_namespace_topics(request: web.Request) -> web.Response:
    """GET /admin/v2/namespaces/{tenant}/{namespace}/topics?mode=PERSISTENT|NON_PERSISTENT|ALL (the
    C++ client's HTTP lookup asks it for regex and multi-topic consumers): partitions by their names."""
    namespace = namespace_of(request)
    await authorize(request, AdminCall.on("ListTopics", namespace=namespace))
    mode = request.query.get("mode", "PERSISTENT").upper()
    domains = {"PERSISTENT": ("persistent",), "NON_PERSISTENT": ("non-persistent",),
               "ALL": ("persistent", "non-persistent")}.get(mode)
    if domains is None:
        raise InvalidArgumentError(f"mode {mode!r} is invalid: use PERSISTENT, NON_PERSISTENT or ALL")
    context = context_of(request)
    await context.service.resources.check_namespace(namespace)
    names: list[str] = []
    for topic in await context.service.list_topics(namespace):
        name = TopicName.parse(topic)
        if name.domain in domains:
            partitions = await context.service.get_partitions(topic)
            names.extend([str(name.partition(i)) for i in range(partitions)] if partitions else [str(name)])
    return json_response(names)


async def list_partitioned(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    await authorize(request, AdminCall.on("ListTopics", namespace=namespace))
    context = context_of(request)
    await context.service.resources.check_namespace(namespace)
    domain = request.match_info["domain"]
    names = [topic for topic in await context.service.list_topics(namespace)
             if TopicName.parse(topic).domain == domain and await context.service.get_partitions(topic) > 0]
    return json_response(names)


# ---- creating, changing and deleting topics ----

async def create_topic(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("CreateTopic", topic=str(name)))
    context = context_of(request)
    await on_owner(context, str(name), lambda: context.service.create_topic(str(name), 0))
    return no_content()


def _partition_count(body: object) -> int:
    count: int = typed(body, int, "the number of partitions")
    if count < 1:
        raise RestError(406, f"The number of partitions should be more than 0, got {count}", ErrorCode.INVALID_ARGUMENT)
    return count


async def create_partitioned(request: web.Request) -> web.Response:
    name = topic_of(request)
    count = _partition_count(await json_body(request))
    await authorize(request, AdminCall.on("CreateTopic", topic=str(name)))
    await context_of(request).service.create_topic(str(name), count)
    return no_content()


async def update_partitions(request: web.Request) -> web.Response:
    name = topic_of(request)
    count = _partition_count(await json_body(request))
    await authorize(request, AdminCall.on("UpdatePartitions", topic=str(name)))
    service = context_of(request).service
    current = await service.get_partitions(str(name))
    if current == 0:
        raise RestError(404, f"Partitioned topic {name} does not exist", ErrorCode.TOPIC_NOT_FOUND)
    if count < current:
        # Pulsar answers a shrink with 422: partitions can only be added.
        raise RestError(422, f"Desired partitions {count} less than current partitions {current} of {name}: "
                             "partitions can only be added", ErrorCode.INVALID_ARGUMENT)
    await service.update_partitions(str(name), count)
    return no_content()


async def get_partitions(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("GetPartitions", topic=str(name)))
    return json_response({"partitions": await context_of(request).service.get_partitions(str(name))})


async def delete_topic(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("DeleteTopic", topic=str(name)))
    context = context_of(request)
    if await context.service.get_partitions(str(name)):
        raise _not_on_partitioned(name, "Deleting by the topic path (use DELETE .../partitions)")
    force = flag(request, "force")
    # Pulsar's deleteSchema: Herald deletes the schema history with the topic unless told false.
    delete_schema = flag(request, "deleteSchema", default=True)
    await on_owner(context, str(name), lambda: context.service.delete_topic(str(name), force,
                                                                             delete_schema=delete_schema))
    return no_content()


async def delete_partitioned(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("DeleteTopic", topic=str(name)))
    service = context_of(request).service
    if not await service.get_partitions(str(name)):
        raise RestError(404, f"Partitioned topic {name} does not exist", ErrorCode.TOPIC_NOT_FOUND)
    await service.delete_topic(str(name), flag(request, "force"), delete_schema=flag(request, "deleteSchema", True))
    return no_content()


# ---- stats, unload, terminate ----

async def _stats(request: web.Request, partitioned: bool) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("GetTopicStats", topic=str(name)))
    context = context_of(request)
    partitions = await _partitions(context, name)
    if partitioned != bool(partitions):
        if partitioned:
            raise RestError(404, f"Partitioned topic {name} does not exist", ErrorCode.TOPIC_NOT_FOUND)
        raise RestError(404, f"Topic {name} is partitioned: ask .../partitioned-stats", ErrorCode.TOPIC_NOT_FOUND)
    if not partitions:
        return json_response(topic_stats(
            await on_owner(context, str(name), lambda: context.service.topic_stats(str(name)))))
    each = await _each(context, name, context.service.topic_stats)
    total = await sum_partitions(str(name), each)
    if not flag(request, "perPartition", True):
        total.partition_stats = []
    return json_response(topic_stats(total))


async def stats(request: web.Request) -> web.Response:
    return await _stats(request, partitioned=False)


async def partitioned_stats(request: web.Request) -> web.Response:
    return await _stats(request, partitioned=True)


async def get_internal_stats(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("GetInternalStats", topic=str(name)))
    context = context_of(request)
    if await _partitions(context, name):
        raise _not_on_partitioned(name, "Internal stats")
    return json_response(internal_stats(
        await on_owner(context, str(name), lambda: context.service.internal_stats(str(name)))))


async def unload(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("UnloadTopic", topic=str(name)))
    context = context_of(request)
    await _each(context, name, context.service.unload_topic)
    return no_content()


async def terminate(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("TerminateTopic", topic=str(name)))
    context = context_of(request)
    if await _partitions(context, name):
        raise _not_on_partitioned(name, "Terminating")
    last = await on_owner(context, str(name), lambda: context.service.terminate(str(name)))
    return json_response(message_id_json(last, name.partition_index))


# ---- subscriptions ----

async def list_subscriptions(request: web.Request) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("ListSubscriptions", topic=str(name)))
    context = context_of(request)
    names: set[str] = set()
    for found in await _each(context, name, context.service.list_subscriptions):
        names.update(found)
    return json_response(sorted(names))


def _start(body: object) -> Position | InitialPosition:
    """Where a subscription starts or a cursor goes, from Pulsar's MessageId JSON (latest when absent)."""
    if body is None:
        return InitialPosition.LATEST
    position = position_from_json(body)
    if position.ledger_id == LONG_MAX and position.entry_id == LONG_MAX:
        return InitialPosition.LATEST
    if position.ledger_id < 0 and position.entry_id < 0:
        return InitialPosition.EARLIEST
    if position.ledger_id < 0 or position.entry_id < 0:
        raise InvalidArgumentError(f"message id {position} is invalid: ledgerId and entryId are 0 or more")
    return position


async def create_subscription(request: web.Request) -> web.Response:
    name = topic_of(request)
    subscription = subscription_of(request)
    start = _start(await json_body(request))
    await authorize(request, AdminCall.on("CreateSubscription", topic=str(name)))
    context = context_of(request)
    await _each(context, name, lambda topic: context.service.create_subscription(topic, subscription, start))
    return no_content()


async def delete_subscription(request: web.Request) -> web.Response:
    name = topic_of(request)
    subscription = subscription_of(request)
    await authorize(request, AdminCall.on("DeleteSubscription", topic=str(name)))
    context = context_of(request)
    force = flag(request, "force")
    await _each(context, name, lambda topic: context.service.unsubscribe(topic, subscription, force))
    await context.service.resources.set_dead_letter_policy(str(name), subscription, None)
    return no_content()


async def _reset(request: web.Request, target: ResetTarget) -> web.Response:
    name = topic_of(request)
    subscription = subscription_of(request)
    await authorize(request, AdminCall.on("ResetCursor", topic=str(name)))
    context = context_of(request)
    await _each(context, name, lambda topic: context.service.reset_cursor(topic, subscription, target))
    return no_content()


async def reset_by_time(request: web.Request) -> web.Response:
    ms = int_of(request.match_info["timestamp"], "the timestamp (unix milliseconds)")
    return await _reset(request, PublishTime(ms))


async def reset_by_id(request: web.Request) -> web.Response:
    body = await json_body(request)
    if body is None:
        raise InvalidArgumentError("reset cursor needs a message id body: {\"ledgerId\": .., \"entryId\": ..}")
    return await _reset(request, _start(body))


async def _skip(request: web.Request, count: int | None) -> web.Response:
    name = topic_of(request)
    subscription = subscription_of(request)
    await authorize(request, AdminCall.on("SkipMessages", topic=str(name)))
    context = context_of(request)
    await _each(context, name, lambda topic: context.service.skip_messages(topic, subscription, count))
    return no_content()


async def skip(request: web.Request) -> web.Response:
    count = int_of(request.match_info["count"], "the number of messages to skip")
    if count < 1:
        raise InvalidArgumentError(f"skip count {count} is invalid: give 1 or more (or use skip_all)")
    return await _skip(request, count)


async def skip_all(request: web.Request) -> web.Response:
    return await _skip(request, None)


def add_routes(router: web.UrlDispatcher) -> None:
    from herald.broker.rest import messages
    from herald.broker.rest.peek import peek

    ns = f"{ADMIN_V2}/{DOMAIN}/{{tenant}}/{{namespace}}"
    topic = f"{ADMIN_V2}{TOPIC}"
    sub = f"{topic}/subscription/{{subscription}}"
    router.add_get(f"{ADMIN_V2}/namespaces/{{tenant}}/{{namespace}}/topics", list_namespace_topics)
    router.add_get(ns, list_topics)
    router.add_get(f"{ns}/partitioned", list_partitioned)
    router.add_put(topic, create_topic)
    router.add_delete(topic, delete_topic)
    router.add_put(f"{topic}/partitions", create_partitioned)
    router.add_post(f"{topic}/partitions", update_partitions)
    router.add_get(f"{topic}/partitions", get_partitions)
    router.add_delete(f"{topic}/partitions", delete_partitioned)
    router.add_get(f"{topic}/stats", stats)
    router.add_get(f"{topic}/partitioned-stats", partitioned_stats)
    router.add_get(f"{topic}/internalStats", get_internal_stats)
    router.add_put(f"{topic}/unload", unload)
    router.add_post(f"{topic}/terminate", terminate)
    router.add_get(f"{topic}/subscriptions", list_subscriptions)
    router.add_put(sub, create_subscription)
    router.add_delete(sub, delete_subscription)
    router.add_post(f"{sub}/resetcursor/{{timestamp}}", reset_by_time)
    router.add_post(f"{sub}/resetcursor", reset_by_id)
    router.add_post(f"{sub}/skip/{{count}}", skip)
    router.add_post(f"{sub}/skip_all", skip_all)
    router.add_get(f"{sub}/position/{{position}}", peek)
    messages.add_routes(router, topic)
