"""The topic schemas a client reads from the brokers (BrokerService.GetSchema): a version's
SchemaInfo, kept once fetched (a version never changes: versions are never reused), concurrent
fetches of one version sharing one call; and a topic's latest schema (asked afresh each time: an
AUTO_PRODUCE_BYTES producer binds to it). One fetcher per client (per connection pool): consumers
decode messages written with other versions than theirs with what it fetched (schema_decoders.py).
"""

from __future__ import annotations

import asyncio
import weakref

import grpc.aio

from herald.api.v1 import broker_pb2, broker_pb2_grpc
from herald.client.config import ClientConfig
from herald.client.connection import ConnectionPool, remaining, retrying
from herald.client.lookup import LookupService
from herald.common import tracing
from herald.common.codec.names import TopicName
from herald.common.codec.schema_info import SchemaInfo
from herald.common.codec.schema_proto import schema_from_proto
from herald.common.errors import NotFoundError
from herald.common.transport.rpc import error_from_rpc

_FETCHERS: weakref.WeakKeyDictionary[ConnectionPool, SchemaFetcher] = weakref.WeakKeyDictionary()


class SchemaFetcher:
    def __init__(self, pool: ConnectionPool, lookup: LookupService, config: ClientConfig) -> None:
        self._pool = pool
        self._lookup = lookup
        self._config = config
        self._versions: dict[tuple[str, int], SchemaInfo] = {}
        self._fetching: dict[tuple[str, int], asyncio.Future[SchemaInfo]] = {}

    async def latest(self, topic: str) -> tuple[int, SchemaInfo] | None:
        """The topic's latest schema and its version; None when it has none."""
        try:
            reply = await self._get_schema(topic, None)
        except NotFoundError:
            return None
        info = schema_from_proto(reply.schema)
        self._versions[(_base(topic), reply.version)] = info
        return reply.version, info

    async def version(self, topic: str, version: int) -> SchemaInfo:
        """The topic's schema at `version` (NotFoundError when it has no such version)."""
        key = (_base(topic), version)
        known = self._versions.get(key)
        if known is not None:
            return known
        fetching = self._fetching.get(key)
        if fetching is None:
            fetching = self._fetching[key] = asyncio.ensure_future(self._fetch(topic, version))
            fetching.add_done_callback(lambda _: self._fetching.pop(key, None))
        return await asyncio.shield(fetching)  # one caller giving up must not cancel the others' fetch

    async def _fetch(self, topic: str, version: int) -> SchemaInfo:
        reply = await self._get_schema(topic, version)
        info = schema_from_proto(reply.schema)
        self._versions[(_base(topic), version)] = info
        return info

    async def _get_schema(self, topic: str, version: int | None) -> broker_pb2.GetSchemaResponse:
        which = "the latest schema" if version is None else f"schema version {version}"
        what = f"getting {which} of {topic}"
        request = broker_pb2.GetSchemaRequest(topic=topic, version=version)

        async def attempt(deadline: float) -> broker_pb2.GetSchemaResponse:
            address = await self._lookup.broker_for(topic)
            stub = broker_pb2_grpc.BrokerServiceStub(await self._pool.get(address))
            try:
                reply: broker_pb2.GetSchemaResponse = await stub.GetSchema(
                    request, timeout=remaining(deadline), metadata=tracing.grpc_metadata())
            except grpc.aio.AioRpcError as exc:
                raise error_from_rpc(exc, f"{what} at {address}") from None
            return reply

        return await retrying(what, self._config.operation_timeout, attempt)


def schema_fetcher(pool: ConnectionPool, lookup: LookupService, config: ClientConfig) -> SchemaFetcher:
    """The client's fetcher (one per connection pool, so one per client)."""
    fetcher = _FETCHERS.get(pool)
    if fetcher is None:
        fetcher = _FETCHERS[pool] = SchemaFetcher(pool, lookup, config)
    return fetcher


def _base(topic: str) -> str:
    """Partitions share their partitioned topic's schemas."""
    return str(TopicName.parse(topic).base)
