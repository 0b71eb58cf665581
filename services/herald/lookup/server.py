"""The lookup gRPC server: a thin servicer over the registry and ownership assigner."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar, cast

import grpc
import grpc.aio
from prometheus_client import CollectorRegistry

from herald.api.v1 import lookup_pb2, lookup_pb2_grpc
from herald.common.bounded import Pacer
from herald.common.codec.names import TopicName
from herald.common.errors import HeraldError, HeraldTimeoutError, InvalidArgumentError, MetadataError
from herald.common.http.endpoint import HttpEndpoint, serve_endpoint
from herald.common.security.authentication import AuthorizationInterceptor
from herald.common.security.service import ServiceSecurity
from herald.common.transport.connections import connection_limits
from herald.common.transport.health import ServiceHealth
from herald.common.transport.rpc import abort, server_options, status_details
from herald.common.transport.tls import add_port
from herald.common.transport.tracing import server_interceptors
from herald.lookup.authorization import LookupAuthorization
from herald.lookup.metrics import ERROR, OK, LookupMetrics
from herald.lookup.ownership import OwnershipAssigner
from herald.lookup.registry import BrokerRegistry
from herald.lookup.routes import topic_route
from herald.lookup.settings import LookupSettings
from herald.lookup.topics import topics_of_namespace
from herald.metadata.authorization import Authorizer
from herald.metadata.resources import Resources, get_partitions
from herald.metadata.store import MetadataStore

log = logging.getLogger(__name__)
# A broker's heartbeat names every topic it owns: limited by grpc_max_receive_message_bytes only.
# Every other request of lookup's is a name or two, refused past 64 KiB.
BULK_METHODS = ("/herald.v1.LookupService/Heartbeat",)
LOOKUP_REQUEST_MAX_BYTES = 64 * 1024
_DOMAINS = {
    lookup_pb2.ALL_DOMAINS: None, lookup_pb2.PERSISTENT: "persistent", lookup_pb2.NON_PERSISTENT: "non-persistent",
}


def _load(load: lookup_pb2.BrokerLoad) -> dict[str, float]:
    return {
        "topics": load.topics, "producers": load.producers, "consumers": load.consumers,
        "msg_rate_in": load.msg_rate_in, "msg_rate_out": load.msg_rate_out,
    }


_URL_FIELDS = ("pulsar", "pulsar_tls", "web", "web_tls")


def _urls(urls: lookup_pb2.BrokerUrls) -> dict[str, str]:
    return {field: getattr(urls, field) for field in _URL_FIELDS if getattr(urls, field)}


def _urls_proto(urls: dict[str, str]) -> lookup_pb2.BrokerUrls:
    return lookup_pb2.BrokerUrls(**{field: urls.get(field, "") for field in _URL_FIELDS})


# What the metadata store raises when it cannot answer (redis down, paused or closed): every lookup
# call reads or writes it, so such a call is answered UNAVAILABLE (the caller retries, as after any
# outage) with the store's own one-line reason, and logged in one line, never as a traceback.
_STORE_OUTAGE = (MetadataError, HeraldTimeoutError)
_Handler = TypeVar("_Handler", bound=Callable[..., Awaitable[Any]])


async def _abort(context: grpc.aio.ServicerContext, error: HeraldError) -> NoReturn:  # type: ignore[type-arg]
    """Fail the call with `error`: UNAVAILABLE when the metadata store could not answer."""
    if isinstance(error, _STORE_OUTAGE):
        log.warning("lookup call failed: the metadata store did not answer: %s", error)
        await context.abort(grpc.StatusCode.UNAVAILABLE, status_details(error))
    await abort(context, error)


def _store_outage_unavailable(handler: _Handler) -> _Handler:
    """A handler whose metadata store errors become UNAVAILABLE with one log line (gRPC would log
    an escaping error with its whole traceback and answer UNKNOWN)."""

    @functools.wraps(handler)
    async def guarded(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:  # type: ignore[type-arg]
        try:
            return await handler(self, request, context)
        except _STORE_OUTAGE as error:
            await _abort(context, error)

    return cast(_Handler, guarded)


class LookupServicer(lookup_pb2_grpc.LookupServiceServicer):
    def __init__(self, settings: LookupSettings, store: MetadataStore, metrics: LookupMetrics | None = None) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics if metrics is not None else LookupMetrics()
        self.registry = BrokerRegistry(store, settings.heartbeat_interval * settings.expiry_heartbeats)
        self.ownership = OwnershipAssigner(store, self.registry, self.metrics)
        self.resources = Resources(store)

    def _counted(self, method: str, result: str) -> None:
        self.metrics.lookups.labels(method, result).inc()

    async def _existing_namespace_topic(self, topic: str) -> TopicName:
        """The topic's name, once its tenant and namespace exist (NotFoundError naming the missing
        one) and it is not a partition past its topic's count: as Pulsar's broker, lookup assigns
        no owner to a topic that cannot exist."""
        name = TopicName.parse(topic)
        await self.resources.check_namespace(name.namespace_name)
        await self.resources.check_partition(str(name))
        return name

    @_store_outage_unavailable
    async def RegisterBroker(
        self, request: lookup_pb2.RegisterBrokerRequest, context: grpc.aio.ServicerContext  # type: ignore[type-arg]
    ) -> lookup_pb2.RegisterBrokerResponse:
        try:
            record = await self.registry.register(
                request.broker_id, request.address, request.cluster or self.settings.cluster, _load(request.load),
                _urls(request.urls),
            )
        except HeraldError as error:
            await _abort(context, error)
        self.metrics.registrations.inc()
        log.info("broker %s registered at %s (lease %d)", record.broker_id, record.address, record.lease_id)
        return lookup_pb2.RegisterBrokerResponse(
            lease_id=record.lease_id,
            heartbeat_interval_seconds=self.settings.heartbeat_interval,
            expiry_seconds=self.registry.expiry_seconds,
        )

    @_store_outage_unavailable
    async def Heartbeat(
        self, request: lookup_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext  # type: ignore[type-arg]
    ) -> lookup_pb2.HeartbeatResponse:
        valid = await self.registry.heartbeat(
            request.broker_id, request.lease_id, _load(request.load), len(request.owned_topics)
        )
        self.metrics.heartbeats.labels(OK if valid else "expired").inc()
        if not valid:
            log.warning("heartbeat from expired broker %s (lease %d)", request.broker_id, request.lease_id)
        return lookup_pb2.HeartbeatResponse(lease_valid=valid)

    @_store_outage_unavailable
    async def UnregisterBroker(
        self, request: lookup_pb2.UnregisterBrokerRequest, context: grpc.aio.ServicerContext  # type: ignore[type-arg]
    ) -> lookup_pb2.UnregisterBrokerResponse:
        await self.registry.unregister(request.broker_id, request.lease_id)
        log.info("broker %s unregistered", request.broker_id)
        return lookup_pb2.UnregisterBrokerResponse()

    @_store_outage_unavailable
    async def LookupTopic(
        self, request: lookup_pb2.LookupTopicRequest, context: grpc.aio.ServicerContext  # type: ignore[type-arg]
    ) -> lookup_pb2.LookupTopicResponse:
        try:
            topic = str(await self._existing_namespace_topic(request.topic))
            owner = await self.ownership.lookup(topic)
        except HeraldError as error:
            self._counted("LookupTopic", ERROR)
            await _abort(context, error)
        self._counted("LookupTopic", OK)
        record = await self.registry.get(owner.broker_id)  # its other protocols' addresses
        return lookup_pb2.LookupTopicResponse(broker_address=owner.address, broker_id=owner.broker_id,
                                              urls=_urls_proto(record.urls if record is not None else {}))

    @_store_outage_unavailable
    async def GetPartitionedTopicMetadata(
        self, request: lookup_pb2.PartitionedTopicMetadataRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> lookup_pb2.PartitionedTopicMetadataResponse:
        try:
            name = TopicName.parse(request.topic)
            await self.resources.check_namespace(name.namespace_name)
            topic = str(name)
        except HeraldError as error:
            self._counted("GetPartitionedTopicMetadata", ERROR)
            await _abort(context, error)
        partitions = await get_partitions(self.store, topic)
        self._counted("GetPartitionedTopicMetadata", OK)
        return lookup_pb2.PartitionedTopicMetadataResponse(partitions=partitions)

    @_store_outage_unavailable
    async def GetClusterInfo(
        self, request: lookup_pb2.ClusterInfoRequest, context: grpc.aio.ServicerContext  # type: ignore[type-arg]
    ) -> lookup_pb2.ClusterInfoResponse:
        brokers = await self.registry.live_brokers()
        return lookup_pb2.ClusterInfoResponse(
            brokers=[
                lookup_pb2.BrokerInfo(
                    broker_id=b.broker_id, address=b.address, cluster=b.cluster,
                    load=lookup_pb2.BrokerLoad(
                        topics=int(b.load.get("topics", 0)), producers=int(b.load.get("producers", 0)),
                        consumers=int(b.load.get("consumers", 0)), msg_rate_in=b.load.get("msg_rate_in", 0.0),
                        msg_rate_out=b.load.get("msg_rate_out", 0.0),
                    ),
                    last_heartbeat=b.last_heartbeat, owned_topics=b.owned_topics, urls=_urls_proto(b.urls),
                )
                for b in brokers
            ]
        )


    @_store_outage_unavailable
    async def GetTopicRoute(
        self, request: lookup_pb2.TopicRouteRequest, context: grpc.aio.ServicerContext  # type: ignore[type-arg]
    ) -> lookup_pb2.TopicRouteResponse:
        try:
            topic = await self._existing_namespace_topic(request.topic)
            partitions, routes = await topic_route(self.ownership, topic)
        except HeraldError as error:
            self._counted("GetTopicRoute", ERROR)
            await _abort(context, error)
        self._counted("GetTopicRoute", OK)
        reply = lookup_pb2.TopicRouteResponse(partitions=partitions)
        pacer = Pacer()
        for r in routes:
            reply.routes.add(partition=r.partition, topic=r.topic, broker_address=r.broker_address,
                             broker_id=r.broker_id)
            await pacer.pace()
        return reply

    @_store_outage_unavailable
    async def GetTopicsOfNamespace(
        self, request: lookup_pb2.TopicsOfNamespaceRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> lookup_pb2.TopicsOfNamespaceResponse:
        try:
            if request.domain not in _DOMAINS:
                raise InvalidArgumentError(f"topic domain {request.domain} is unknown: use ALL_DOMAINS, "
                                           "PERSISTENT or NON_PERSISTENT")
            topics = await topics_of_namespace(self.resources, request.namespace, _DOMAINS[request.domain])
        except HeraldError as error:
            await _abort(context, error)
        return lookup_pb2.TopicsOfNamespaceResponse(topics=topics)


class LookupServer:
    """Runs the lookup service on its own gRPC server, and its HTTP endpoint (/metrics) unless
    settings.metrics_port is -1; the metadata store is owned by the caller. `registry`: where its
    metrics go (None: a registry of its own); an embedding process (standalone) passes its own."""

    def __init__(self, settings: LookupSettings, store: MetadataStore, registry: CollectorRegistry | None = None,
                 ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = LookupMetrics(registry)
        self.http_endpoint: HttpEndpoint | None = None
        self.security = ServiceSecurity(settings)
        self.authorization = LookupAuthorization(Authorizer(
            store, superuser_roles=settings.superuser_roles, broker_roles=settings.broker_roles,
            dlq_worker_roles=settings.dlq_worker_roles)) if settings.authorization_enabled else None
        self.servicer = LookupServicer(settings, store, self.metrics)
        self._server: grpc.aio.Server | None = None
        self.port = 0
        # Ready while the metadata store answers: every lookup reads it.
        self.health = ServiceHealth("lookup", [lookup_pb2.DESCRIPTOR.services_by_name["LookupService"].full_name])
        self.health.add_check("metadata-store", self._metadata_store_answers)

    async def _metadata_store_answers(self) -> None:
        await self.store.ping()

    def _authorizing(self) -> list[AuthorizationInterceptor]:
        if self.authorization is None:
            return []
        return [AuthorizationInterceptor(lookup_pb2.DESCRIPTOR.services_by_name["LookupService"].full_name,
                                         self.authorization.decide)]

    @property
    def address(self) -> str:
        return f"{self.settings.host}:{self.port}"

    async def start(self) -> None:
        if self._server is not None:
            return
        await self.servicer.resources.ensure_default_namespace()
        limits, idle_options = connection_limits(
            "lookup", self.settings.max_connections_per_address, self.settings.connection_idle_timeout)
        # Authentication first: nothing of a call is read, and it takes no place among its address's
        # connections, before it is authenticated (herald.common.security.authentication, .connections).
        server = grpc.aio.server(
            options=[*server_options(self.settings.grpc_max_receive_message_bytes,
                                     self.settings.max_streams_per_connection), *idle_options],
            interceptors=[*self.security.interceptors, *limits,
                          *server_interceptors(BULK_METHODS, LOOKUP_REQUEST_MAX_BYTES), *self._authorizing()])
        lookup_pb2_grpc.add_LookupServiceServicer_to_server(self.servicer, server)
        await self.health.add_to_server(server)
        self.port = add_port(server, f"{self.settings.host}:{self.settings.port}", self.security.server_credentials)
        self.metrics.watch(self.servicer.registry, asyncio.get_running_loop())
        self._serve_metrics()
        await server.start()
        self._server = server
        await self.health.start()
        log.info("lookup listening on %s", self.address)

    async def stop(self, grace: float = 2.0) -> None:
        await self.health.stop()
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
        if self.http_endpoint is not None:
            self.http_endpoint.stop()
            self.http_endpoint = None
        self.metrics.unwatch()

    def _serve_metrics(self) -> None:
        settings = self.settings
        self.http_endpoint = serve_endpoint("lookup", self.metrics.registry, settings.metrics_host,
                                            settings.metrics_port, self.health, access=settings)
