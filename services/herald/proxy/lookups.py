"""The proxy's side of lookup: who owns a topic (following redirects, remembered until a broker
says otherwise), which broker serves a queue of a topic, and which brokers are live. Failures come
back as HeraldErrors: lookup's own (NotFound, InvalidArgument...) as it named them, an unreachable
lookup as ServiceNotReadyError."""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict

import grpc
import grpc.aio

from herald.api.v1 import lookup_pb2, lookup_pb2_grpc
from herald.common.bounded import Pacer
from herald.common.errors import ConnectionError_, HeraldError, ServiceNotReadyError
from herald.common.transport.rpc import error_from_rpc
from herald.proxy.broker_pool import BrokerPool
from herald.proxy.metrics import ProxyMetrics

MAX_REDIRECTS = 20
OWNER_CACHE_SIZE = 100_000  # topics whose owner is remembered; the least recently used go first
BROKER_LIST_SECONDS = 5.0  # how long a list of live brokers (for admin calls) is used


class Lookups:
    """Calls to the lookup service at `address`, on a channel of `pool`."""

    def __init__(self, address: str, pool: BrokerPool, metrics: ProxyMetrics) -> None:
        self.address = address
        self._pool = pool
        self._metrics = metrics
        self._owners: OrderedDict[str, tuple[str, str]] = OrderedDict()  # topic -> (address, broker id)
        self._brokers: list[str] = []
        self._brokers_until = 0.0
        self._pulsar: list[str] = []  # host:port of every live broker's pulsar:// listener
        self._pulsar_until = 0.0
        self._turn = itertools.count()

    def stub(self) -> lookup_pb2_grpc.LookupServiceAsyncStub:
        return lookup_pb2_grpc.LookupServiceStub(self._pool.get(self.address))  # type: ignore[return-value]

    def failed(self, exc: grpc.aio.AioRpcError, what: str) -> HeraldError:
        """The HeraldError a failed call to lookup stands for: lookup's own as it named it; an
        unreachable lookup is ServiceNotReadyError (retryable), and its channel is dialled afresh."""
        error = error_from_rpc(exc, f"{what} at lookup {self.address}")
        if isinstance(error, ConnectionError_):
            self._pool.discard(self.address)
            return ServiceNotReadyError(
                f"lookup at {self.address} is unreachable ({what}): {exc.code().name}: {exc.details()}")
        return error

    # ---- topic owners ----

    async def owner(self, topic: str, timeout: float, fresh: bool = False) -> tuple[str, str]:  # noqa: ASYNC109
        """(address, broker id) of the broker that owns `topic` (lookup assigns one when it has
        none); remembered, unless `fresh`, from an earlier answer."""
        if not fresh:
            known = self._owners.get(topic)
            if known is not None:
                self._owners.move_to_end(topic)
                return known
        address = self.address
        request = lookup_pb2.LookupTopicRequest(topic=topic)
        for _ in range(MAX_REDIRECTS + 1):
            stub = lookup_pb2_grpc.LookupServiceStub(self._pool.get(address))
            try:
                reply = await stub.LookupTopic(request, timeout=timeout)
            except grpc.aio.AioRpcError as exc:
                self._metrics.lookups.labels("error").inc()
                raise self.failed(exc, f"lookup of topic {topic!r}") from None
            if not reply.broker_address:
                self._metrics.lookups.labels("error").inc()
                raise ServiceNotReadyError(f"lookup of topic {topic!r} at {address} named no broker: retry")
            if not reply.redirect:
                self._metrics.lookups.labels("ok").inc()
                owner = (str(reply.broker_address), str(reply.broker_id))
                self._remember(topic, owner)
                return owner
            address = reply.broker_address
        self._metrics.lookups.labels("error").inc()
        raise HeraldError(f"lookup of topic {topic!r} was redirected more than {MAX_REDIRECTS} times")

    def forget(self, key: str, address: str | None = None) -> None:
        """The owner remembered for `key` (a topic, or a queue_key) is wrong, if it is `address`
        when given: ask again."""
        known = self._owners.get(key)
        if known is not None and (address is None or known[0] == address):
            del self._owners[key]

    def forget_broker(self, address: str) -> None:
        """The broker at `address` failed: forget every topic remembered there."""
        for key in [key for key, owner in self._owners.items() if owner[0] == address]:
            del self._owners[key]
        if address in self._brokers:
            self._brokers_until = 0.0

    async def queue_owner(self, topic: str, queue: int, timeout: float, fresh: bool) -> str:  # noqa: ASYNC109
        """The address of the broker serving queue `queue` of `topic` (a Pull's partition: -1 is
        the topic as named); remembered like owners. A queue the topic does not have goes to the
        broker of its first queue, which answers the error."""
        if queue < 0:
            return (await self.owner(topic, timeout, fresh))[0]
        key = self.queue_key(topic, queue)
        if not fresh and (known := self._owners.get(key)) is not None:
            self._owners.move_to_end(key)
            return known[0]
        try:
            route = await self.stub().GetTopicRoute(lookup_pb2.TopicRouteRequest(topic=topic), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            self._metrics.lookups.labels("error").inc()
            raise self.failed(exc, f"route of topic {topic!r}") from None
        if not route.routes:
            self._metrics.lookups.labels("error").inc()
            raise ServiceNotReadyError(f"lookup at {self.address} gave no route for topic {topic!r}: retry")
        self._metrics.lookups.labels("ok").inc()
        chosen = route.routes[queue] if route.partitions > 0 and queue < len(route.routes) else route.routes[0]
        if route.partitions > 0:
            # Every queue's owner from this one answer: pulls of the other partitions need no route
            # of their own (each would make lookup walk every partition again).
            pacer = Pacer()
            for partition in route.routes:
                if partition.partition != queue:
                    self._remember(self.queue_key(topic, partition.partition),
                                   (str(partition.broker_address), str(partition.broker_id)))
                await pacer.pace()
        self._remember(key, (str(chosen.broker_address), str(chosen.broker_id)))
        return str(chosen.broker_address)

    @staticmethod
    def queue_key(topic: str, queue: int) -> str:
        """The name a queue's owner is remembered under ('#' is never part of a topic name)."""
        return topic if queue < 0 else f"{topic}#{queue}"

    def _remember(self, key: str, owner: tuple[str, str]) -> None:
        self._owners[key] = owner
        self._owners.move_to_end(key)
        while len(self._owners) > OWNER_CACHE_SIZE:
            self._owners.popitem(last=False)

    # ---- live brokers (admin calls) ----

    async def any_broker(self, timeout: float) -> str:  # noqa: ASYNC109
        """A live broker's address, in turn over the brokers lookup knows."""
        loop = asyncio.get_running_loop()
        if not self._brokers or loop.time() >= self._brokers_until:
            try:
                info = await self.stub().GetClusterInfo(lookup_pb2.ClusterInfoRequest(), timeout=timeout)
            except grpc.aio.AioRpcError as exc:
                raise self.failed(exc, "listing live brokers") from None
            self._brokers = sorted(str(broker.address) for broker in info.brokers)
            self._brokers_until = loop.time() + BROKER_LIST_SECONDS
        if not self._brokers:
            raise ServiceNotReadyError(f"lookup at {self.address} knows no live broker: retry later")
        return self._brokers[next(self._turn) % len(self._brokers)]

    # ---- brokers' Pulsar listeners (the proxy's Pulsar front end) ----

    async def pulsar_brokers(self, timeout: float, fresh: bool = False) -> list[str]:  # noqa: ASYNC109
        """host:port of every live broker's pulsar:// listener, as lookup lists them (for
        BROKER_LIST_SECONDS; `fresh` asks again unless the list is under a second old, so clients
        naming unknown addresses cannot make the proxy hammer lookup)."""
        loop = asyncio.get_running_loop()
        age = loop.time() - (self._pulsar_until - BROKER_LIST_SECONDS)
        if loop.time() >= self._pulsar_until or (fresh and age >= 1.0):
            try:
                info = await self.stub().GetClusterInfo(lookup_pb2.ClusterInfoRequest(), timeout=timeout)
            except grpc.aio.AioRpcError as exc:
                raise self.failed(exc, "listing live brokers") from None
            self._pulsar = sorted(host_port(broker.urls.pulsar) for broker in info.brokers if broker.urls.pulsar)
            self._pulsar_until = loop.time() + BROKER_LIST_SECONDS
        return self._pulsar

    async def any_pulsar_broker(self, timeout: float) -> str:  # noqa: ASYNC109
        """host:port of a live broker's pulsar:// listener, in turn over those lookup knows."""
        brokers = await self.pulsar_brokers(timeout)
        if not brokers:
            brokers = await self.pulsar_brokers(timeout, fresh=True)
        if not brokers:
            raise ServiceNotReadyError(
                f"lookup at {self.address} knows no live broker serving Pulsar's protocol (brokers need "
                "pulsar_port): retry later")
        return brokers[next(self._turn) % len(brokers)]


def host_port(url: str) -> str:
    """"pulsar://Host:6650" (or "host:6650", as a CONNECT's proxy_to_broker_url names it) -> "host:6650"."""
    return url.split("://", 1)[-1].rstrip("/").lower()
