"""pulsar-admin's message reads and expiry over REST, as Pulsar's admin API serves them:
GET .../ledger/{ledger}/entry/{entry} (get-message-by-id), GET .../examinemessage
?initialPosition=earliest|latest&messagePosition=N, and POST .../subscription/{sub}/expireMessages/{seconds}
or .../all_subscription/expireMessages/{seconds}. The core calls are the gRPC admin's
(BrokerService.message_by_id, examine_message, expire_messages); a topic that does not exist is 404."""

from __future__ import annotations

from aiohttp import web

from herald.broker.core.admin_access import AdminCall
from herald.broker.core.ledger_list import Position
from herald.broker.rest.app import authorize, context_of, on_owner
from herald.broker.rest.errors import RestError
from herald.broker.rest.paths import int_of, subscription_of, topic_of
from herald.broker.rest.peek import entry_response
from herald.broker.rest.tenants import no_content
from herald.common.bounded import Pacer
from herald.common.codec.names import TopicName
from herald.common.errors import ErrorCode, InvalidArgumentError


async def _single(request: web.Request, call: str) -> TopicName:
    """The topic of a message read, authorized; 405 for a partitioned topic's base name."""
    name = topic_of(request)
    await authorize(request, AdminCall.on(call, topic=str(name)))
    if name.partition_index < 0 and await context_of(request).service.resources.get_partitions(str(name)):
        raise RestError(405, f"Reading a message of partitioned topic {name} is not allowed: read it from a "
                             f"partition, e.g. {name.partition(0)}", ErrorCode.NOT_ALLOWED)
    return name


async def get_message_by_id(request: web.Request) -> web.Response:
    name = await _single(request, "GetMessageById")
    at = Position(int_of(request.match_info["ledger"], "ledger id"), int_of(request.match_info["entry"], "entry id"))
    context = context_of(request)
    data = await on_owner(context, str(name), lambda: context.service.message_by_id(str(name), at))
    return entry_response(context, at, data)


async def examine_message(request: web.Request) -> web.Response:
    name = await _single(request, "ExamineMessage")
    edge = request.query.get("initialPosition", "latest").lower()
    if edge not in ("earliest", "latest"):
        raise InvalidArgumentError(f"initialPosition {edge!r} is invalid: use earliest or latest")
    offset = int_of(request.query.get("messagePosition", "1"), "messagePosition")
    context = context_of(request)
    at, data = await on_owner(context, str(name), lambda: context.service.examine_message(
        str(name), offset, latest=edge == "latest"))
    return entry_response(context, at, data)


async def _expire(request: web.Request, subscription: str | None) -> web.Response:
    name = topic_of(request)
    await authorize(request, AdminCall.on("ExpireMessages", topic=str(name)))
    seconds = int_of(request.match_info["seconds"], "expire time in seconds")
    context = context_of(request)
    partitions = 0 if name.partition_index >= 0 else await context.service.resources.get_partitions(str(name))
    pacer = Pacer()
    for index in range(max(partitions, 1)):
        topic = str(name.partition(index)) if partitions else str(name)
        await on_owner(context, topic, lambda: context.service.expire_messages(
            topic, subscription, seconds))  # noqa: B023 - awaited now
        await pacer.pace()
    return no_content()


async def expire_subscription(request: web.Request) -> web.Response:
    return await _expire(request, subscription_of(request))


async def expire_all(request: web.Request) -> web.Response:
    return await _expire(request, None)


def add_routes(router: web.UrlDispatcher, topic: str) -> None:
    router.add_get(f"{topic}/ledger/{{ledger}}/entry/{{entry}}", get_message_by_id)
    router.add_get(f"{topic}/examinemessage", examine_message)
    router.add_post(f"{topic}/subscription/{{subscription}}/expireMessages/{{seconds}}", expire_subscription)
    router.add_post(f"{topic}/all_subscription/expireMessages/{{seconds}}", expire_all)
