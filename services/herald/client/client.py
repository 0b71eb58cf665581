"""AsyncClient: the entry point of the asyncio API. It owns the connection pool, the lookups and
every producer and consumer it made, and closes them with itself (Open -> Closing -> Closed)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, TypeVar

from herald.client.config import (
    ClientConfig,
    ConsumerConfig,
    ConsumerType,
    InitialPosition,
    ProducerConfig,
)
from herald.client.connection import ConnectionPool
from herald.client.lookup import LookupService
from herald.client.topic_consumer import TopicConsumer
from herald.client.topic_producer import TopicProducer
from herald.common.errors import AlreadyClosedError, InvalidArgumentError, NotAllowedError
from herald.common.names import TopicName, validate_subscription_name

log = logging.getLogger(__name__)

_OPEN, _CLOSING, _CLOSED = "open", "closing", "closed"
C = TypeVar("C")


class AsyncClient:
    """A client of one Herald cluster, named by its service URL (`herald://host:port`).

    Options: operation_timeout (30 s), connection_timeout (10 s), keep_alive (30 s),
    connections_per_broker (1). Make it inside a running event loop; use it from that loop only.
    """

    def __init__(self, service_url: str, **options: Any) -> None:
        self._config = _build(ClientConfig, "client", service_url=service_url, **options)
        self._pool = ConnectionPool(self._config)
        self._lookup = LookupService(self._pool, self._config)
        self._producers: set[TopicProducer] = set()
        self._consumers: set[TopicConsumer] = set()
        self._state = _OPEN

    @property
    def config(self) -> ClientConfig:
        return self._config

    async def create_producer(self, topic: str, **options: Any) -> TopicProducer:
        """A producer on `topic`, registered with its broker. Options: see ProducerConfig."""
        self._check_open()
        name = str(TopicName.parse(topic))
        config = _build(ProducerConfig, "producer", **options)
        await self._refuse_partitioned(name)
        producer = TopicProducer(name, config, self._config, self._pool, self._lookup, self._producers.discard)
        self._producers.add(producer)
        try:
            await producer._start()
        except BaseException:
            await producer._shutdown()
            raise
        return producer

    async def subscribe(
        self, topic: str, subscription_name: str, consumer_type: ConsumerType = ConsumerType.Exclusive,
        initial_position: InitialPosition = InitialPosition.Latest, **options: Any,
    ) -> TopicConsumer:
        """A consumer of `topic` through the subscription `subscription_name` (made if new).
        Options: see ConsumerConfig."""
        # Validation in Pulsar's order (SEEDS §3): client closed, then empty subscription name.
        self._check_open()
        if not subscription_name:
            raise InvalidArgumentError("subscription name is empty: give the subscription a name")
        validate_subscription_name(subscription_name)
        name = str(TopicName.parse(topic))
        config = _build(ConsumerConfig, "consumer", subscription_name=subscription_name,
                        consumer_type=consumer_type, initial_position=initial_position, **options)
        await self._refuse_partitioned(name)
        consumer = TopicConsumer(name, config, self._config, self._pool, self._lookup, self._consumers.discard)
        self._consumers.add(consumer)
        try:
            await consumer._start()
        except BaseException:
            await consumer._shutdown()
            raise
        return consumer

    async def get_partitions_for_topic(self, topic: str) -> list[str]:
        """The topic's partitions' names, or the topic itself when it is not partitioned."""
        self._check_open()
        name = TopicName.parse(topic)
        count = await self._lookup.partitions(str(name))
        if count <= 1:
            return [str(name)]
        return [str(name.partition(index)) for index in range(count)]

    async def close(self) -> None:
        """Close every producer and consumer (sending what they owe the brokers), then the
        connections. A second close raises AlreadyClosedError."""
        if self._state is not _OPEN:
            raise AlreadyClosedError("client already closed")
        self._state = _CLOSING
        closing = [p.close() for p in list(self._producers)] + [c.close() for c in list(self._consumers)]
        results = await asyncio.gather(*closing, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.warning("closing the client: %s", result)
        await self._pool.close(grace=None)
        self._state = _CLOSED

    async def shutdown(self) -> None:
        """Stop at once: fail what is pending, cancel the streams, close the connections."""
        if self._state is _CLOSED:
            return
        self._state = _CLOSING
        await asyncio.gather(*(p._shutdown() for p in list(self._producers)),
                             *(c._shutdown() for c in list(self._consumers)), return_exceptions=True)
        await self._pool.close(grace=None)
        self._state = _CLOSED

    @property
    def closed(self) -> bool:
        return self._state is not _OPEN

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._state is _OPEN:
            await self.close()

    def _check_open(self) -> None:
        if self._state is not _OPEN:
            raise AlreadyClosedError("client already closed")

    async def _refuse_partitioned(self, topic: str) -> None:
        count = await self._lookup.partitions(topic)
        if count > 1:
            raise NotAllowedError(
                f"topic {topic} has {count} partitions: partitioned producers and consumers are not "
                "supported by this client version yet; use a topic without partitions"
            )


def _build(cls: type[C], what: str, **options: Any) -> C:
    try:
        return cls(**options)
    except TypeError as exc:
        raise InvalidArgumentError(f"invalid {what} option: {exc}") from None
