"""The proxy's gRPC front end: the client-facing contracts (lookup, broker, admin) on one port, each
call admitted (connection limit, drain) and handed to what does the work: lookups.py (discovery,
answered with the proxy's own address), forwarding.py (Produce / Consume streams), passthrough.py
(Pull, GetLastMessageId, GetSchema, admin calls). ProxyServer wires them and owns their life cycle."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import DecodeError
from prometheus_client import CollectorRegistry

from herald.api.v1 import admin_pb2, broker_pb2, lookup_pb2, lookup_pb2_grpc
from herald.common import errors
from herald.common.bounded import Pacer
from herald.common.http.endpoint import HttpEndpoint
from herald.common.security.service import ServiceSecurity
from herald.common.tasks import cancel_and_wait
from herald.common.transport.decoding import DecodingInterceptor
from herald.common.transport.health import ServiceHealth, unreachable
from herald.common.transport.rpc import abort, server_options
from herald.common.transport.tls import add_port
from herald.proxy.broker_pool import BrokerPool
from herald.proxy.drain import Drain
from herald.proxy.forwarding import CONSUME, PRODUCE, StreamKind, StreamRelay
from herald.proxy.limits import ConnectionLimiter
from herald.proxy.lookups import Lookups
from herald.proxy.metrics import ProxyMetrics
from herald.proxy.passthrough import CallForwarder
from herald.proxy.pulsar_front import PulsarFront
from herald.proxy.settings import ProxySettings

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[Any, Any]
BROKER_SERVICE = "herald.v1.BrokerService"
ADMIN_SERVICE = "herald.v1.AdminService"


class Gate:
    """Admits calls (inside the handlers: after authentication): none while draining, none that
    would make a connection live past max_connections or max_connections_per_address."""

    def __init__(self, limiter: ConnectionLimiter, drain: Drain) -> None:
        self.limiter = limiter
        self.drain = drain

    @contextlib.asynccontextmanager
    async def call(self, context: Context) -> AsyncIterator[None]:
        peer = context.peer()
        try:
            self.drain.check()
            self.limiter.enter(peer)
        except errors.HeraldError as error:
            await abort(context, error)
        try:
            yield
        finally:
            self.limiter.leave(peer)


class ProxyLookupServicer(lookup_pb2_grpc.LookupServiceServicer):
    """Discovery through the proxy: lookup's answers, with every broker address replaced by the
    proxy's own (a client of the proxy reaches brokers only through it). Brokers do not register
    through a proxy."""

    def __init__(self, settings: ProxySettings, lookups: Lookups, gate: Gate, own_address: str,
                 metrics: ProxyMetrics) -> None:
        self.settings = settings
        self.lookups = lookups
        self.gate = gate
        self.own_address = own_address
        self._calls = metrics.forwarded_calls.labels("lookup")

    def _timeout(self, context: Context) -> float:
        left = context.time_remaining()
        return self.settings.operation_timeout if left is None else min(left, self.settings.operation_timeout)

    async def _refuse_broker_call(self, context: Context) -> Any:
        async with self.gate.call(context):
            await abort(context, errors.NotAllowedError(
                "brokers register with the lookup service directly, never through a proxy: set the broker's "
                f"lookup_address to lookup's address ({self.settings.lookup_address})"))

    async def RegisterBroker(self, request: Any, context: Context) -> lookup_pb2.RegisterBrokerResponse:
        return await self._refuse_broker_call(context)  # type: ignore[no-any-return]

    async def Heartbeat(self, request: Any, context: Context) -> lookup_pb2.HeartbeatResponse:
        return await self._refuse_broker_call(context)  # type: ignore[no-any-return]

    async def UnregisterBroker(self, request: Any, context: Context) -> lookup_pb2.UnregisterBrokerResponse:
        return await self._refuse_broker_call(context)  # type: ignore[no-any-return]

    async def LookupTopic(
        self, request: lookup_pb2.LookupTopicRequest, context: Context,
    ) -> lookup_pb2.LookupTopicResponse:
        async with self.gate.call(context):
            self._calls.inc()
            try:
                # Asked afresh: a client looks up when it (re)connects, after something moved.
                _, broker_id = await self.lookups.owner(request.topic, self._timeout(context), fresh=True)
            except errors.HeraldError as error:
                await abort(context, error)
            return lookup_pb2.LookupTopicResponse(broker_address=self.own_address, broker_id=broker_id)

    async def GetPartitionedTopicMetadata(
        self, request: lookup_pb2.PartitionedTopicMetadataRequest, context: Context,
    ) -> lookup_pb2.PartitionedTopicMetadataResponse:
        return await self._forward(  # type: ignore[no-any-return]
            context, f"partition metadata of {request.topic!r}",
            lambda stub, timeout: stub.GetPartitionedTopicMetadata(request, timeout=timeout))

    async def GetTopicsOfNamespace(
        self, request: lookup_pb2.TopicsOfNamespaceRequest, context: Context,
    ) -> lookup_pb2.TopicsOfNamespaceResponse:
        return await self._forward(  # type: ignore[no-any-return]
            context, f"topics of namespace {request.namespace!r}",
            lambda stub, timeout: stub.GetTopicsOfNamespace(request, timeout=timeout))

    async def GetTopicRoute(
        self, request: lookup_pb2.TopicRouteRequest, context: Context,
    ) -> lookup_pb2.TopicRouteResponse:
        reply: lookup_pb2.TopicRouteResponse = await self._forward(
            context, f"route of topic {request.topic!r}",
            lambda stub, timeout: stub.GetTopicRoute(request, timeout=timeout))
        pacer = Pacer()  # one route per partition: a topic may have thousands
        for route in reply.routes:
            route.broker_address = self.own_address
            await pacer.pace()
        return reply

    async def GetClusterInfo(
        self, request: lookup_pb2.ClusterInfoRequest, context: Context,
    ) -> lookup_pb2.ClusterInfoResponse:
        reply: lookup_pb2.ClusterInfoResponse = await self._forward(
            context, "listing live brokers", lambda stub, timeout: stub.GetClusterInfo(request, timeout=timeout))
        for broker in reply.brokers:
            broker.address = self.own_address
        return reply

    async def _forward(self, context: Context, what: str,
                       call: Callable[[lookup_pb2_grpc.LookupServiceAsyncStub, float], Awaitable[Any]]) -> Any:
        async with self.gate.call(context):
            self._calls.inc()
            try:
                return await call(self.lookups.stub(), self._timeout(context))
            except grpc.aio.AioRpcError as exc:
                await abort(context, self.lookups.failed(exc, what))


class BrokerHandlers:
    """BrokerService and AdminService as generic handlers on bytes: nothing is parsed but what
    routing needs."""

    def __init__(self, settings: ProxySettings, gate: Gate, lookups: Lookups, pool: BrokerPool,
                 forwarder: CallForwarder, metrics: ProxyMetrics) -> None:
        self.settings = settings
        self.gate = gate
        self.lookups = lookups
        self.pool = pool
        self.forwarder = forwarder
        self.metrics = metrics

    def generic_handlers(self) -> list[grpc.GenericRpcHandler[Any, Any]]:
        broker = grpc.method_handlers_generic_handler(BROKER_SERVICE, {
            "Produce": grpc.stream_stream_rpc_method_handler(self._stream_handler(PRODUCE)),
            "Consume": grpc.stream_stream_rpc_method_handler(self._stream_handler(CONSUME)),
            "Pull": grpc.unary_unary_rpc_method_handler(self.pull),
            "GetLastMessageId": grpc.unary_unary_rpc_method_handler(self.get_last_message_id),
            # Schemas live in the metadata store: any broker answers (and authorizes) it.
            "GetSchema": grpc.unary_unary_rpc_method_handler(
                self._admin_handler(f"/{BROKER_SERVICE}/GetSchema")),
        })
        methods = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].methods
        admin = grpc.method_handlers_generic_handler(ADMIN_SERVICE, {
            method.name: grpc.unary_unary_rpc_method_handler(self._admin_handler(f"/{ADMIN_SERVICE}/{method.name}"))
            for method in methods
        })
        return [broker, admin]

    def _stream_handler(self, kind: StreamKind) -> Callable[[Any, Context], Awaitable[None]]:
        active = self.metrics.active_streams.labels(kind.name)
        opened = self.metrics.streams.labels(kind.name)

        async def handle(request_iterator: Any, context: Context) -> None:
            async with self.gate.call(context):
                opened.inc()
                active.inc()
                try:
                    await StreamRelay(kind, context, self.settings, self.lookups, self.pool, self.metrics,
                                      self.gate.drain).run()
                finally:
                    active.dec()

        return handle

    async def pull(self, request: bytes, context: Context) -> bytes:
        async with self.gate.call(context):
            parsed = await _parse(broker_pb2.PullRequest, request, context)
            return await self.forwarder.to_owner(
                f"/{BROKER_SERVICE}/Pull", request, context, parsed.topic, parsed.partition,
                wait=max(0, parsed.timeout_ms) / 1000)

    async def get_last_message_id(self, request: bytes, context: Context) -> bytes:
        async with self.gate.call(context):
            parsed = await _parse(broker_pb2.GetLastMessageIdRequest, request, context)
            return await self.forwarder.to_owner(f"/{BROKER_SERVICE}/GetLastMessageId", request, context,
                                                 parsed.topic)

    def _admin_handler(self, method: str) -> Callable[[bytes, Context], Awaitable[bytes]]:
        async def handle(request: bytes, context: Context) -> bytes:
            async with self.gate.call(context):
                return await self.forwarder.to_any_broker(method, request, context)

        return handle


async def _parse(message_type: Any, raw: bytes, context: Context) -> Any:
    try:
        return message_type.FromString(raw)
    except DecodeError as exc:
        await abort(context, errors.InvalidArgumentError(f"malformed {message_type.DESCRIPTOR.name}: {exc}"))


class ProxyServer:
    """A proxy: its gRPC server, channels to lookup and brokers, and its HTTP endpoint (/metrics,
    /healthz, /readyz; ready while lookup answers and the proxy is not draining).
    start() / stop() are symmetrical; stop() drains first and is idempotent (a stopped proxy is
    not started again: make a new one).

    To embed it (standalone), give it the process's registry and metrics_port=-1 in its settings
    when that process serves /metrics itself (and watches `.health`)."""

    def __init__(self, settings: ProxySettings, registry: CollectorRegistry | None = None) -> None:
        if not settings.lookup_address:
            raise errors.InvalidArgumentError(
                "the proxy needs lookup_address: the host:port of the lookup service (--lookup-address, "
                "HERALD_PROXY_LOOKUP_ADDRESS)")
        self.settings = settings
        # Clients are authenticated here; the brokers and lookup get the proxy's own token and the
        # client's role (x-herald-original-principal), and authorize that role.
        self.security = ServiceSecurity(settings)
        self.metrics = ProxyMetrics(registry)
        self.http_endpoint: HttpEndpoint | None = None
        self.drain = Drain(self.metrics)
        # NOT_SERVING from the moment it drains (stop() tells the health service first).
        self.health = ServiceHealth("proxy", [
            lookup_pb2.DESCRIPTOR.services_by_name["LookupService"].full_name, BROKER_SERVICE, ADMIN_SERVICE])
        self.health.add_check("lookup", self._lookup_answers)
        self.limiter: ConnectionLimiter | None = None
        self.pool: BrokerPool | None = None
        self.pulsar: PulsarFront | None = None  # the Pulsar listener, when pulsar_port is not -1
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        """What clients dial: the advertised address, else host:port as bound."""
        return self.settings.advertised_address or f"{self.settings.host}:{self.port}"

    async def start(self) -> None:
        if self._server is not None:
            return
        settings = self.settings
        idle_ms = int(settings.connection_idle_timeout * 1000)
        # Authentication first: nothing of a call is read before it is authenticated; the Gate
        # counts connections inside the handlers, after it.
        server = grpc.aio.server(
            options=[*server_options(settings.grpc_max_receive_message_bytes, settings.max_streams_per_connection),
                     ("grpc.max_connection_idle_ms", idle_ms)],
            interceptors=[*self.security.interceptors, DecodingInterceptor((f"/{BROKER_SERVICE}/Produce",))])
        self.port = add_port(server, f"{settings.host}:{settings.port}", self.security.server_credentials)
        if settings.host in ("0.0.0.0", "::", "[::]") and not settings.advertised_address:
            log.warning("proxy bound to %s with no advertised_address: clients are told to dial %s",
                        settings.host, self.address)
        self.pool = pool = BrokerPool(settings.connections_per_broker, settings.broker_keepalive,
                                      close_grace=settings.operation_timeout, dialer=self.security.forwarding_dialer)
        lookups = Lookups(settings.lookup_address, pool, self.metrics)
        self.limiter = ConnectionLimiter(settings.max_connections, settings.connection_idle_timeout, self.metrics,
                                         self.address, max_per_address=settings.max_connections_per_address)
        gate = Gate(self.limiter, self.drain)
        forwarder = CallForwarder(settings, lookups, pool, self.metrics)
        lookup_pb2_grpc.add_LookupServiceServicer_to_server(
            ProxyLookupServicer(settings, lookups, gate, self.address, self.metrics), server)
        server.add_generic_rpc_handlers(
            tuple(BrokerHandlers(settings, gate, lookups, pool, forwarder, self.metrics).generic_handlers()))
        await self.health.add_to_server(server)
        if settings.metrics_port >= 0:
            self.http_endpoint = HttpEndpoint(self.metrics.registry, settings.metrics_host, settings.metrics_port,
                                              access=settings)
            self.http_endpoint.watch(self.health)
            self.http_endpoint.start()
        if settings.pulsar_port >= 0:
            self.pulsar = PulsarFront(settings, lookups, self.limiter, self.drain, self.security.token)
            await self.pulsar.start()
        await server.start()
        self._server = server
        self._sweeper = asyncio.get_running_loop().create_task(self._expire_idle_connections())
        await self.health.start()
        log.info("proxy listening on %s (lookup %s%s)", self.address, settings.lookup_address,
                 f"; Pulsar protocol on {self.pulsar.url}" if self.pulsar is not None else "")

    async def _lookup_answers(self) -> str | None:
        if self.pool is None:
            return "not started"
        address = self.settings.lookup_address
        problem = await unreachable(self.pool.get(address), f"lookup at {address}")
        if problem is not None:
            self.pool.discard(address)  # dialled afresh next time
        return problem

    async def _expire_idle_connections(self) -> None:
        assert self.limiter is not None
        interval = min(5.0, max(0.1, self.settings.connection_idle_timeout / 4))
        while True:
            await asyncio.sleep(interval)
            self.limiter.expire_idle()

    async def stop(self) -> None:
        """Drain (new calls refused, streams wound down within the drain timeout), then stop."""
        server, self._server = self._server, None
        if server is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.drain_timeout
        await self.health.stop("draining")
        log.info("proxy %s draining (up to %gs)", self.address, self.settings.drain_timeout)
        # The streams' own wind-down is bounded by the drain timeout; a moment more lets them end.
        if await self.drain.begin(self.settings.drain_timeout + 1.0):
            log.info("proxy %s drained: every stream ended", self.address)
        else:
            log.warning("proxy %s: streams still open after the drain timeout are cancelled", self.address)
        if self.pulsar is not None:
            await self.pulsar.stop()  # its clients reconnect (new connections were refused while draining)
            self.pulsar = None
        await server.stop(max(0.5, deadline - loop.time()))
        await cancel_and_wait(self._sweeper)
        self._sweeper = None
        if self.pool is not None:
            await self.pool.close()
            self.pool = None
        if self.http_endpoint is not None:
            self.http_endpoint.stop()
            self.http_endpoint = None
