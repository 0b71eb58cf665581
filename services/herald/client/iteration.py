"""Iterating over a consumer or a reader (`async for` / `for`): each message as it comes, until the
consumer or reader is closed, by another task or thread or by closing its client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

from herald.client.message import Message
from herald.common.errors import ConsumerClosedError

T = TypeVar("T")


async def next_until_closed(receive: Callable[[], Awaitable[Message[T] | None]],
                            closed: Callable[[], bool]) -> Message[T]:
    """One step of `async for`: the next message (`receive` waits without a timeout), or
    StopAsyncIteration once the consumer or reader is closed."""
    try:
        message = await receive()
    except ConsumerClosedError:
        if closed():
            raise StopAsyncIteration from None
        raise
    assert message is not None  # no timeout: a message, or ConsumerClosedError
    return message


def iterate_until_closed(receive: Callable[[], Message[T] | None], closed: Callable[[], bool]) -> Iterator[Message[T]]:
    """`for`: every message (`receive` waits without a timeout) until the consumer or reader is closed."""
    while True:
        try:
            message = receive()
        except ConsumerClosedError:
            if closed():
                return
            raise
        if message is not None:
            yield message
