"""The broker's spans (docs/tracing.md), for entries whose producer traced them (the rest get none):

- `publish <topic>` (SERVER), child of the client's send span (SendEntry.traceparent), from the
  entry's arrival to its receipt; current while the publish is queued, so the storage client's add
  span is its child.
- `deliver <topic>` (PRODUCER), child of the send span recorded in the entry's metadata, one per
  delivery of an entry to a consumer, from dispatch until the adapter has written it; its context
  goes to the consumer in DeliveredEntry.traceparent.

No gRPC here: the dispatcher makes deliver spans, the producer session publish spans; a front end
only carries the contexts (a send's traceparent in, a delivery's out).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from herald.common import tracing

if TYPE_CHECKING:
    from herald.broker.core.ledger_list import Position

_COMPONENT = "herald.broker"


def start_publish(topic: str, producer_name: str, traceparent: str, sequence_id: int,
                  num_messages: int, size: int) -> tracing.Span | None:
    """The publish span of an entry sent with a trace context (None without one)."""
    parent = tracing.parse(traceparent)
    if parent is None:
        return None
    return tracing.tracer(_COMPONENT).start_span(
        f"publish {topic}", context=tracing.parent(parent), kind=trace.SpanKind.SERVER,
        attributes=tracing.messaging_attributes("publish", topic, more={
            tracing.CLIENT_ID: producer_name, tracing.SEQUENCE_ID: sequence_id,
            tracing.MESSAGE_COUNT: num_messages, "messaging.message.envelope.size": size,
        }))


def end_publish(span: tracing.Span, ledger_id: int, entry_id: int, error: BaseException | None) -> None:
    """End a publish span with its outcome: the position stored, a duplicate (-1, -1), or the error."""
    if error is None:
        span.set_attribute(tracing.LEDGER_ID, ledger_id)
        span.set_attribute(tracing.ENTRY_ID, entry_id)
        if ledger_id < 0:
            span.set_attribute("messaging.herald.duplicate", True)
    tracing.end(span, error)


def cancel_publish(span: tracing.Span) -> None:
    """End the publish span of a send abandoned before its outcome (its stream went away)."""
    span.set_attribute(tracing.ERROR_TYPE, "cancelled")
    span.end()


def start_deliver(topic: str, subscription: str, consumer_name: str, position: Position, traceparent: str,
                  num_messages: int, redelivery_count: int) -> tracing.Span | None:
    """The deliver span of an entry going to a consumer (None when its producer did not trace it)."""
    parent = tracing.parse(traceparent)
    if parent is None:
        return None
    return tracing.tracer(_COMPONENT).start_span(
        f"deliver {topic}", context=tracing.parent(parent), kind=trace.SpanKind.PRODUCER,
        attributes=tracing.messaging_attributes("deliver", topic, more={
            tracing.SUBSCRIPTION: subscription, tracing.CONSUMER_GROUP: subscription,
            "messaging.herald.consumer_name": consumer_name, tracing.LEDGER_ID: position.ledger_id,
            tracing.ENTRY_ID: position.entry_id, tracing.MESSAGE_COUNT: num_messages,
            tracing.REDELIVERY_COUNT: redelivery_count,
        }))


def end_deliver(span: Any, written: bool = True) -> None:
    """The delivery was written to the consumer's stream, or (written False) taken back before."""
    if not written:
        span.set_attribute("messaging.herald.taken_back", True)
    span.end()
