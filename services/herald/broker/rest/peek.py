"""Peek (GET .../subscription/{sub}/position/{n}): the n-th unacknowledged message of a
subscription as Pulsar's admin API answers it: the entry's payload (after its metadata; a batch's
whole payload, which Pulsar's tools split with X-Pulsar-num-batch-message) as the body, and its
metadata in X-Pulsar-* headers. A Herald-format entry is shown as the Pulsar entry a Pulsar consumer
would receive (herald.common.codec.pulsar_entry.from_herald_entry)."""

from __future__ import annotations

from aiohttp import web

from herald.broker.core.admin_access import AdminCall
from herald.broker.core.ledger_list import Position
from herald.broker.rest.app import RestContext, authorize, context_of, on_owner
from herald.broker.rest.errors import RestError
from herald.broker.rest.paths import int_of, subscription_of, topic_of
from herald.common.codec import pulsar_entry
from herald.common.errors import ErrorCode, InvalidArgumentError


async def peek(request: web.Request) -> web.Response:
    name = topic_of(request)
    subscription = subscription_of(request)
    position = int_of(request.match_info["position"], "the message position")
    if position < 1:
        raise InvalidArgumentError(f"message position {position} is invalid: positions start at 1")
    await authorize(request, AdminCall.on("PeekMessages", topic=str(name)))
    context = context_of(request)
    if name.partition_index < 0 and await context.service.resources.get_partitions(str(name)):
        raise RestError(405, f"Peek messages on partitioned topic {name} is not allowed: peek each partition",
                        ErrorCode.NOT_ALLOWED)
    found = await on_owner(context, str(name), lambda: context.service.peek_messages(
        str(name), subscription, 1, skip=position - 1))
    if not found:
        raise RestError(404, f"No message at position {position} of subscription {subscription} on {name}",
                        ErrorCode.NOT_FOUND)
    at, data, redeliveries = found[0]
    return entry_response(context, at, data, redeliveries)


def entry_response(context: RestContext, at: Position, data: bytes, redeliveries: int = 0) -> web.Response:
    """One stored entry as Pulsar's admin API answers a peek, get-message-by-id or examine-message."""
    entry = data if pulsar_entry.is_pulsar_entry(data) else pulsar_entry.from_herald_entry(
        data, context.service.settings.max_message_size)
    metadata, payload = pulsar_entry.split(entry)
    headers = {
        "X-Pulsar-Message-ID": f"{at.ledger_id}:{at.entry_id}",
        "X-Pulsar-publish-time": str(metadata.publish_time),
        "X-Pulsar-producer-name": metadata.producer_name,
        "X-Pulsar-sequence-id": str(metadata.sequence_id),
        "X-Pulsar-redelivery-count": str(redeliveries),
    }
    for prop in metadata.properties:
        headers[f"X-Pulsar-PROPERTY-{prop.key}"] = prop.value
    if metadata.HasField("partition_key"):
        headers["X-Pulsar-partition-key"] = metadata.partition_key
    if metadata.HasField("event_time"):
        headers["X-Pulsar-event-time"] = str(metadata.event_time)
    if metadata.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(metadata.num_messages_in_batch)
        headers["X-Pulsar-batch-size"] = str(len(payload))
    if metadata.compression:
        headers["X-Pulsar-compression"] = str(metadata.compression)
    return web.Response(status=200, body=bytes(payload), headers=headers, content_type="application/octet-stream")
