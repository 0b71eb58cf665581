"""The client's spans (docs/tracing.md), made only while herald.common.tracing is on:

- `create <topic>` (PRODUCER), one per message sent, its context put in the message's properties
  (traceparent, tracestate): the message's creation context. A message that already carries a
  traceparent (the application's own, or one the sync facade made on the caller's thread) keeps
  it and gets no create span, as the messaging conventions ask.
- `send <topic>` (CLIENT), one per entry (batch), from the batch's closing to its receipt; child of
  its first message's creation context, linked to every message's. Its context travels in the
  entry's metadata and in SendEntry.traceparent: the broker's spans follow from it.
- `receive <topic>` (CLIENT) per receive() call that returns messages (receive_many and
  batch_receive: one span for all), linked to each message's creation context; its parent is the
  caller's current span, or else the broker's deliver span of the (first) message.
- `process <topic>` (CONSUMER) around each message_listener call, child of the message's deliver
  span and linked to its creation context.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from herald.common import tracing
from herald.common.codec.entry import iter_records

if TYPE_CHECKING:
    from herald.client.message import Message

_COMPONENT = "herald.client"


def _tracer() -> tracing.Tracer:
    return tracing.tracer(_COMPONENT)


def with_creation_context(topic: str, properties: dict[str, str] | None,
                          client_id: str | None = None) -> dict[str, str]:
    """The message's properties with its creation context: those given when they hold one already,
    else a copy (the caller's dict is never changed) with a fresh create span's."""
    if properties and tracing.TRACEPARENT in properties:
        return properties
    span = _tracer().start_span(
        f"create {topic}", kind=trace.SpanKind.PRODUCER,
        attributes=tracing.messaging_attributes("create", topic, "create", more={tracing.CLIENT_ID: client_id or None}))
    carried = dict(properties) if properties else {}
    tracing.inject(span, carried)
    span.end()
    return carried


class SendTracing:
    """A producer's send spans: started by the accumulator when it closes a batch, ended by the
    PendingOp's receipt or failure."""

    __slots__ = ("address", "topic")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.address = ""  # the broker of the current stream (server.address / server.port)

    def start(self, producer_name: str, payload: bytes | bytearray, count: int, sequence_id: int) -> tracing.Span:
        """The send span of a batch being closed, linked to its messages' creation contexts."""
        contexts = _creation_contexts(payload)
        first = contexts[0] if contexts else None
        attributes = tracing.messaging_attributes(
            "send", self.topic, "send", more={tracing.MESSAGE_COUNT: count, tracing.CLIENT_ID: producer_name or None,
                                              tracing.SEQUENCE_ID: sequence_id})
        attributes.update(tracing.server_attributes(self.address))
        return _tracer().start_span(
            f"send {self.topic}", context=tracing.parent(first), kind=trace.SpanKind.CLIENT, attributes=attributes,
            links=[tracing.Link(context) for context in contexts])


def sent(span: tracing.Span, ledger_id: int, entry_id: int) -> None:
    """The broker stored the entry ((-1, -1): a duplicate it dropped)."""
    span.set_attribute(tracing.LEDGER_ID, ledger_id)
    span.set_attribute(tracing.ENTRY_ID, entry_id)
    span.end()


def _creation_contexts(payload: bytes | bytearray) -> list[tracing.SpanContext]:
    contexts = []
    for record in iter_records(memoryview(payload)):
        properties = record[4]
        if properties:
            context = tracing.span_context(properties)
            if context is not None:
                contexts.append(context)
    return contexts


# ---- consuming --------------------------------------------------------------------------------


def received(consumer: Any, messages: Sequence[Message[Any]], started: int) -> None:
    """The receive span of one receive call that returned `messages` (started: tracing.now())."""
    if not messages or tracing.suppressed():
        return
    first = messages[0]
    delivered = tracing.parse(first._entry.traceparent)
    ambient = tracing.current_span_context()
    links = []
    for message in messages:
        links += tracing.link(tracing.span_context(message.properties),
                              {tracing.MESSAGE_ID: str(message.message_id)})
        if ambient is not None and message._entry.traceparent:
            links += tracing.link(tracing.parse(message._entry.traceparent))
    attributes = _consumer_attributes(consumer, "receive", first.topic)
    if len(messages) == 1:
        attributes[tracing.MESSAGE_ID] = str(first.message_id)
    else:
        attributes[tracing.MESSAGE_COUNT] = len(messages)
    span = _tracer().start_span(
        f"receive {first.topic}", context=None if ambient is not None else tracing.parent(delivered),
        kind=trace.SpanKind.CLIENT, attributes=attributes, links=links, start_time=started or None)
    span.end()


def start_process(consumer: Any, message: Message[Any]) -> tracing.Span:
    """The process span of one message_listener call (to be made current while it runs)."""
    delivered = tracing.parse(message._entry.traceparent)
    attributes = _consumer_attributes(consumer, "process", message.topic)
    attributes[tracing.MESSAGE_ID] = str(message.message_id)
    ambient = tracing.current_span_context()
    return _tracer().start_span(
        f"process {message.topic}", context=tracing.parent(delivered) if delivered is not None else None,
        kind=trace.SpanKind.CONSUMER, attributes=attributes,
        links=[*tracing.link(tracing.span_context(message.properties)), *tracing.link(ambient)])


def _consumer_attributes(consumer: Any, operation: str, topic: str) -> dict[str, Any]:
    subscription = getattr(consumer, "subscription", None)
    return tracing.messaging_attributes(operation, topic, operation, more={
        tracing.SUBSCRIPTION: subscription, tracing.CONSUMER_GROUP: subscription,
        tracing.CLIENT_ID: getattr(consumer, "consumer_name", None) or None,
    })
