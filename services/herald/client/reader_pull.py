"""Reading by offset without a subscription: Pull (the entries of one topic or partition from a
position on, and where to continue) and GetLastMessageId (which consumers and readers ask too). The
caller keeps its own offsets, as RocketMQ's pull consumers and Spark's sources do; the entries come
back as stored (one producer batch each) for the caller to unpack with herald.common.codec.entry, so
nothing is decoded twice."""

from __future__ import annotations

from typing import NamedTuple

import grpc.aio

from herald.api.v1 import broker_pb2, broker_pb2_grpc, common_pb2
from herald.client.config import ClientConfig
from herald.client.connection import ConnectionPool, remaining, retrying
from herald.client.lookup import LookupService
from herald.common import tracing
from herald.common.codec.message_id import MessageId, check_position
from herald.common.errors import InvalidArgumentError
from herald.common.transport.rpc import error_from_rpc


class PullResult(NamedTuple):
    entries: list[broker_pb2.DeliveredEntry]  # in order; each `data` decodes with herald.common.codec.entry
    next: MessageId  # (ledger, entry) where the next pull starts
    end_of_topic: bool  # the topic is terminated and nothing follows `next`


async def pull(
    pool: ConnectionPool, lookup: LookupService, config: ClientConfig, topic: str, start: MessageId | None,
    max_entries: int, max_bytes: int, timeout: float,  # noqa: ASYNC109 - the broker's long polling
    read_compacted: bool = False,
) -> PullResult:
    """Up to max_entries entries (0: 100; the broker serves at most 10,000) and, past the first,
    max_bytes (0: 4 MiB) of `topic` (a partition by its own name) from the first entry at or after
    `start`'s (ledger, entry) (None or MessageId.earliest: the earliest kept), waiting up to
    `timeout` seconds for one when there is none yet. A start whose ledger retention deleted
    begins at the first entry kept: compare the first entry with `start` to notice. read_compacted:
    the topic's compacted view up to its horizon (the latest entry per key: positions skip what
    compaction removed), then the log."""
    if max_entries < 0 or max_bytes < 0 or timeout < 0:
        raise InvalidArgumentError(
            f"pull limits must not be negative (max_entries={max_entries}, max_bytes={max_bytes}, "
            f"timeout={timeout}s): use 0 for the defaults")
    request = broker_pb2.PullRequest(topic=topic, partition=-1, max_entries=max_entries, max_bytes=max_bytes,
                                     timeout_ms=int(timeout * 1000), read_compacted=read_compacted)
    if start is not None and start != MessageId.earliest:
        check_position(start.ledger_id, start.entry_id, "pull start")  # the broker's rule, before sending
        request.start.CopyFrom(common_pb2.Position(ledger_id=start.ledger_id, entry_id=max(start.entry_id, 0)))
    what = f"pulling from {topic}"

    async def attempt(deadline: float) -> PullResult:
        address = await lookup.broker_for(topic)
        stub = broker_pb2_grpc.BrokerServiceStub(await pool.get(address))
        try:
            reply: broker_pb2.PullResponse = await stub.Pull(
                request, timeout=remaining(deadline) + timeout, metadata=tracing.grpc_metadata())
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"{what} at {address}") from None
        return PullResult(list(reply.entries), MessageId(reply.next.ledger_id, reply.next.entry_id),
                          reply.end_of_topic)

    return await retrying(what, config.operation_timeout, attempt)


async def last_message_id(pool: ConnectionPool, lookup: LookupService, config: ClientConfig, topic: str) -> MessageId:
    """The id of the last message stored on `topic` (a partition by its own name); its batch index
    is the entry's last message's (-1 unbatched). MessageId(-1, -1, ...) when it has none."""
    last = (await last_message_id_reply(pool, lookup, config, topic)).last
    return MessageId(last.ledger_id, last.entry_id, last.partition, last.batch_index)


async def last_message_id_reply(
    pool: ConnectionPool, lookup: LookupService, config: ClientConfig, topic: str, subscription: str = "",
) -> broker_pb2.GetLastMessageIdResponse:
    """The broker's GetLastMessageId answer; with a subscription named, its mark-delete position
    too (a reader's has_message_available compares the two)."""
    what = f"getting the last message id of {topic}"
    request = broker_pb2.GetLastMessageIdRequest(topic=topic, subscription=subscription)

    async def attempt(deadline: float) -> broker_pb2.GetLastMessageIdResponse:
        address = await lookup.broker_for(topic)
        stub = broker_pb2_grpc.BrokerServiceStub(await pool.get(address))
        try:
            reply: broker_pb2.GetLastMessageIdResponse = await stub.GetLastMessageId(
                request, timeout=remaining(deadline), metadata=tracing.grpc_metadata())
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"{what} at {address}") from None
        return reply

    return await retrying(what, config.operation_timeout, attempt)
