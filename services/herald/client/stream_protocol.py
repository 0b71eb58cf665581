"""The port between a stream (stream.py: the gRPC transport) and the protocol object it carries
(producer_protocol.py, consumer_protocol.py): what the stream asks of the protocol, and how the
protocol asks for a new stream. Nothing here, nor in the protocol objects, does any I/O."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from herald.api.v1 import common_pb2
from herald.common.errors import HeraldError, error_for_code

AcceptedT = TypeVar("AcceptedT")  # what the broker's answer to the handshake carries
RequestT_co = TypeVar("RequestT_co", covariant=True)
ReplyT_contra = TypeVar("ReplyT_contra", contravariant=True)


class Reconnect(Exception):
    """Raised by a protocol object's reply handler to drop the stream and start over on a new one."""


def reply_error(error: common_pb2.Error) -> HeraldError:
    """The HeraldError an Error in a reply stands for."""
    return error_for_code(error.code, error.message)


class StreamProtocol(Protocol[RequestT_co, ReplyT_contra, AcceptedT]):
    """What a BrokerStream asks of the protocol object it carries (all of it synchronous)."""

    topic: str
    name: str  # the producer's or consumer's name, in log messages
    role: str  # "producer" or "consumer", in log messages
    stream_name: str  # in errors: "the produce stream"
    wake: Callable[[], None]  # set by the stream: `next_request` may have something new

    def handshake_what(self, address: str) -> str:
        """The handshake as named in its errors: "subscribing 's' to <topic> at <address>"."""

    def handshake_request(self) -> RequestT_co:
        """The first request on a new stream."""

    def handshake_reply(self, reply: ReplyT_contra) -> AcceptedT:
        """What the broker's first reply says; raise a HeraldError if it refuses."""

    def on_connected(self, accepted: AcceptedT, first: bool) -> None:
        """A handshake succeeded and the stream serves from now on."""

    def on_disconnected(self) -> None:
        """The stream failed and will be replaced: drop what the next one must not see."""

    def on_reply(self, reply: ReplyT_contra) -> None:
        """Handle one reply; raise `Reconnect` or a HeraldError to drop the stream."""

    def next_request(self) -> RequestT_co | None:
        """The next request to write, or None when there is none for now."""

    def request_written(self) -> None:
        """The request `next_request` gave was written."""

    def close_request(self) -> RequestT_co:
        """Written last when the owner closes gracefully, before half-closing."""
