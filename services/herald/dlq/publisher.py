"""Publishing a Publication exactly once: one Produce stream registered under the publication's
deterministic producer name, the entries the broker does not hold yet (above the name's last
sequence id) sent in order, their receipts read, the stream closed.

Cheaper than a client producer per letter: the topic's owner and partition count are cached
(partitions for `partitions_ttl` seconds, owners until a publish there fails), and channels come
from the client's pool, so one publication costs one stream. A partitioned topic gets each
publication on one partition chosen by its producer name: the same partition at every attempt,
which dedup needs (a resend to another partition would be stored twice)."""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections import OrderedDict
from typing import NamedTuple, TypeVar

import grpc
import grpc.aio

from herald.api.v1 import broker_pb2, broker_pb2_grpc
from herald.client.connection import ConnectionPool
from herald.client.lookup import LookupService
from herald.common.codec.names import TopicName
from herald.common.errors import (
    ConnectionError_,
    HeraldError,
    HeraldTimeoutError,
    NotOwnerError,
    ServiceNotReadyError,
)
from herald.common.transport.rpc import EOF, error_from_proto, error_from_rpc
from herald.dlq.publication import Publication, entries_after

log = logging.getLogger(__name__)
V = TypeVar("V")

_CACHED_TOPICS = 10_000
# Worth one more try on a fresh lookup: the topic moved, or its broker went away.
_STALE_OWNER = (NotOwnerError, ServiceNotReadyError, ConnectionError_)
_CLOSE = broker_pb2.ProduceRequest(close=broker_pb2.CloseProducer())


class Published(NamedTuple):
    topic: str  # the topic (partition) it went to
    stored: int  # messages stored by this call
    already: int  # messages the topic held already under this name (dedup recognised them)

    @property
    def duplicate(self) -> bool:
        """The topic held all of it already: nothing was stored."""
        return self.stored == 0


class IdempotentPublisher:
    def __init__(
        self, pool: ConnectionPool, lookup: LookupService, operation_timeout: float, partitions_ttl: float,
    ) -> None:
        self._pool = pool
        self._lookup = lookup
        self._timeout = operation_timeout
        self._partitions_ttl = partitions_ttl
        self._owners: OrderedDict[str, str] = OrderedDict()
        self._partitions: OrderedDict[str, tuple[int, float]] = OrderedDict()

    async def publish(self, topic: str, producer_name: str, publication: Publication) -> Published:
        """Publish under `producer_name` what the topic does not hold yet; HeraldError when it
        cannot (nothing is reported stored then, whatever was: the next attempt finds it)."""
        try:
            async with asyncio.timeout(self._timeout):
                target = await self._target(topic, producer_name)
                try:
                    return await self._publish_once(target, producer_name, publication)
                except _STALE_OWNER as exc:
                    log.debug("publishing %s to %s: %s; looking it up again", producer_name, target, exc)
                    return await self._publish_once(target, producer_name, publication)
        except TimeoutError:
            raise HeraldTimeoutError(
                f"publishing to {topic} as {producer_name} did not complete within the operation timeout of "
                f"{self._timeout:g}s") from None

    async def _target(self, topic: str, producer_name: str) -> str:
        count = await self._partition_count(topic)
        if count <= 0:
            return topic
        return str(TopicName.parse(topic).partition(zlib.crc32(producer_name.encode()) % count))

    async def _partition_count(self, topic: str) -> int:
        cached = self._partitions.get(topic)
        now = time.monotonic()
        if cached is not None and cached[1] > now:
            self._partitions.move_to_end(topic)
            return cached[0]
        count = await self._lookup.partitions(topic)
        _remember(self._partitions, topic, (count, now + self._partitions_ttl))
        return count

    async def _owner(self, topic: str) -> str:
        address = self._owners.get(topic)
        if address is None:
            address = await self._lookup.broker_for(topic)
            _remember(self._owners, topic, address)
        else:
            self._owners.move_to_end(topic)
        return address

    async def _publish_once(self, topic: str, producer_name: str, publication: Publication) -> Published:
        address = await self._owner(topic)
        try:
            channel = await self._pool.get(address)
        except ConnectionError_:
            self._owners.pop(topic, None)
            raise
        call = broker_pb2_grpc.BrokerServiceStub(channel).Produce(None)
        try:
            return await self._exchange(call, topic, producer_name, publication)
        except grpc.aio.AioRpcError as exc:
            error: HeraldError = error_from_rpc(exc, f"publishing to {topic} at {address}")
        except HeraldError as exc:
            error = exc
        finally:
            call.cancel()
        if isinstance(error, _STALE_OWNER):
            self._owners.pop(topic, None)
            if isinstance(error, ConnectionError_):
                self._pool.discard(address)
        raise error

    async def _exchange(
        self, call: grpc.aio.StreamStreamCall[broker_pb2.ProduceRequest, broker_pb2.ProduceResponse], topic: str,
        producer_name: str, publication: Publication,
    ) -> Published:
        await call.write(broker_pb2.ProduceRequest(register=broker_pb2.RegisterProducer(
            topic=topic, producer_name=producer_name)))
        reply = await _read(call, topic)
        if reply.HasField("error"):
            raise error_from_proto(reply.error)
        registered = reply.registered
        sends = entries_after(publication, producer_name, registered.last_sequence_id, registered.max_message_size)
        for send in sends:
            await call.write(broker_pb2.ProduceRequest(send=send))
        stored = 0
        for send in sends:
            reply = await _read(call, topic)
            kind = reply.WhichOneof("reply")
            if kind == "receipt":
                if reply.receipt.ledger_id >= 0:  # -1: a duplicate dedup recognised
                    stored += send.num_messages
            elif kind == "send_error":
                raise error_from_proto(reply.send_error.error)
            else:
                raise error_from_proto(reply.error)
        await call.write(_CLOSE)
        await call.done_writing()
        return Published(topic, stored, len(publication) - stored)


async def _read(
    call: grpc.aio.StreamStreamCall[broker_pb2.ProduceRequest, broker_pb2.ProduceResponse], topic: str,
) -> broker_pb2.ProduceResponse:
    reply = await call.read()
    if reply is EOF:
        raise ConnectionError_(f"the broker ended the produce stream on {topic}")
    assert isinstance(reply, broker_pb2.ProduceResponse)
    return reply


def _remember(cache: OrderedDict[str, V], key: str, value: V) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > _CACHED_TOPICS:
        cache.popitem(last=False)
