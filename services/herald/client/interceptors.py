"""Interceptors: application hooks on the message path, as Pulsar's ProducerInterceptor and
ConsumerInterceptor. Subclass and override what you need (every hook does nothing by default);
pass them as `interceptors=[...]` to create_producer / subscribe. They run in the given order on
the client's event loop and must not block; an interceptor that raises is logged and skipped, it
never breaks the producer or consumer."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from herald.client.message import Message, OutgoingMessage
    from herald.common.codec.message_id import MessageId

log = logging.getLogger(__name__)
R = TypeVar("R")


class ProducerInterceptor:
    def before_send(self, producer: Any, message: OutgoingMessage) -> OutgoingMessage:
        """Called before a message is queued; returns the message to send (it may be changed)."""
        return message

    def on_send_acknowledgement(
        self, producer: Any, message: OutgoingMessage, message_id: MessageId | None, error: Exception | None,
    ) -> None:
        """Called once the message was stored (message_id) or failed (error)."""


class ConsumerInterceptor:
    def before_consume(self, consumer: Any, message: Message[Any]) -> Message[Any]:
        """Called before a message is handed to receive() or the listener; returns the message."""
        return message

    def on_acknowledge(self, consumer: Any, message_id: MessageId, error: Exception | None) -> None:
        """Called when the application acknowledges a message (individually or cumulatively)."""

    def on_negative_acks_send(self, consumer: Any, message_ids: Sequence[MessageId]) -> None:
        """Called when negative acknowledgements are sent to the broker."""

    def on_ack_timeout_send(self, consumer: Any, message_ids: Sequence[MessageId]) -> None:
        """Called when messages not acknowledged within the ack timeout are asked for again."""


def run_hook(hook: Callable[..., R], *args: Any, default: R) -> R:
    """Call one interceptor hook; a hook that raises is logged and `default` used instead."""
    try:
        return hook(*args)
    except Exception:
        log.exception("interceptor hook %r raised; ignored", hook)
        return default
