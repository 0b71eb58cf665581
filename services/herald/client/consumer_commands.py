"""Seek and Unsubscribe on a consumer's stream: each request carries an id and the broker answers it
with a CommandResult naming that id, between the deliveries. PendingCommands keeps the callers'
futures until then (within the operation timeout); `seek_request` turns what seek() takes into the
Seek request."""

from __future__ import annotations

import asyncio
import datetime
import itertools

from herald.api.v1 import broker_pb2, common_pb2
from herald.common.codec.message_id import MessageId, check_position
from herald.common.errors import HeraldError, HeraldTimeoutError, InvalidArgumentError
from herald.common.transport.rpc import error_from_proto

_EDGES = {MessageId.earliest: broker_pb2.EARLIEST, MessageId.latest: broker_pb2.LATEST}


class PendingCommands:
    """Commands sent and not answered yet, by request id."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, asyncio.Future[None]]] = {}

    def add(self, kind: str) -> tuple[int, asyncio.Future[None]]:
        """A new command of `kind` ("seek", "unsubscribe"): its request id and its answer."""
        request_id = next(self._ids)
        future: asyncio.Future[None] = self._loop.create_future()
        self._pending[request_id] = (kind, future)
        return request_id, future

    @staticmethod
    async def wait(future: asyncio.Future[None], limit: float, what: str) -> None:
        """The answer, within `limit` seconds; HeraldTimeoutError naming `what` past it (a late
        answer is still acted on)."""
        try:
            async with asyncio.timeout(limit):
                await future
        except TimeoutError:
            raise HeraldTimeoutError(f"{what} did not complete within the operation timeout of {limit:g}s") from None

    def answered(self, result: broker_pb2.CommandResult) -> str | None:
        """Settle the command `result` answers; the kind of a command that succeeded (for the
        consumer to act on), None for a refusal or an answer nobody waits for."""
        pending = self._pending.pop(result.request_id, None)
        if pending is None:
            return None
        kind, future = pending
        if result.HasField("error"):
            if not future.done():
                future.set_exception(error_from_proto(result.error))
            return None
        if not future.done():
            future.set_result(None)
        return kind

    def fail(self, error: HeraldError, keep: frozenset[int] | set[int] = frozenset()) -> None:
        """Fail every pending command but those in `keep` (not written yet: they go on the next stream)."""
        for request_id in [request_id for request_id in self._pending if request_id not in keep]:
            _, future = self._pending.pop(request_id)
            if not future.done():
                future.set_exception(error)


def seek_request(target: object) -> broker_pb2.Seek:
    """The Seek for a MessageId (its entry; the edges for MessageId.earliest / .latest), unix
    milliseconds or an aware datetime; InvalidArgumentError for anything else. request_id unset."""
    if isinstance(target, MessageId):
        edge = _EDGES.get(target)
        if edge is not None:
            return broker_pb2.Seek(edge=edge)
        check_position(target.ledger_id, target.entry_id, "seek target")  # the broker's rule, before sending
        return broker_pb2.Seek(position=common_pb2.Position(ledger_id=target.ledger_id, entry_id=target.entry_id))
    if isinstance(target, datetime.datetime):
        if target.utcoffset() is None:
            raise InvalidArgumentError(
                f"seek needs an aware datetime (one with a timezone), got {target!r}: use "
                "datetime.now(timezone.utc) or give unix milliseconds")
        return broker_pb2.Seek(publish_time=int(target.timestamp() * 1000))
    if isinstance(target, int) and not isinstance(target, bool):
        if target < 0:
            raise InvalidArgumentError(f"seek to a publish time takes unix milliseconds >= 0, got {target}")
        return broker_pb2.Seek(publish_time=target)
    raise InvalidArgumentError(
        f"seek takes a MessageId, a publish time in unix milliseconds or an aware datetime, got {target!r}")
