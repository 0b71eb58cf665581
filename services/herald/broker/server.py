"""A broker process: the gRPC-free core (herald.broker.core) wired to its storage client, ownership,
lookup registration, metrics endpoint and the gRPC front end (herald.broker.grpc)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import grpc.aio
from prometheus_client import CollectorRegistry

from herald.api.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    broker_pb2,
    broker_pb2_grpc,
    deadletter_pb2,
    deadletter_pb2_grpc,
    lookup_pb2,
)
from herald.broker.core.admission import Admission
from herald.broker.core.metrics import BrokerMetrics
from herald.broker.core.ownership import BrokerOwnership, OwnershipMonitor
from herald.broker.core.ports import BrokerUrls
from herald.broker.core.service import BrokerService
from herald.broker.grpc.admin_servicer import AdminServicer
from herald.broker.grpc.authorization import BrokerAuthorization
from herald.broker.grpc.broker_servicer import BULK_METHODS, BrokerServicer
from herald.broker.grpc.dead_letter_servicer import DeadLetterServicer
from herald.broker.grpc.registration import LookupRegistration
from herald.broker.pulsar.frontend import FrontEnd
from herald.broker.pulsar.server import PulsarServer
from herald.broker.rest.app import RestContext
from herald.broker.rest.server import RestServer, server_ssl_context
from herald.broker.settings import BrokerSettings
from herald.common.http.endpoint import HttpEndpoint, serve_endpoint
from herald.common.pulsar.auth import ConnectAuthenticator
from herald.common.security.authentication import AuthorizationInterceptor
from herald.common.security.service import ServiceSecurity
from herald.common.transport.connections import connection_limits
from herald.common.transport.health import ServiceHealth
from herald.common.transport.rpc import server_options
from herald.common.transport.tls import add_port
from herald.common.transport.tracing import server_interceptors
from herald.metadata.authorization import Authorizer
from herald.metadata.store import MetadataStore
from herald.storage.client.storage_client import StorageClient

log = logging.getLogger(__name__)


class BrokerServer:
    """A broker: the core service plus its gRPC server, storage client and lookup registration, and
    its HTTP endpoint (/metrics) unless settings.metrics_port is -1. `registry`: where its metrics
    go (None: a registry of its own); an embedding process (standalone) passes its own."""

    def __init__(self, settings: BrokerSettings, store: MetadataStore, registry: CollectorRegistry | None = None,
                 ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = BrokerMetrics(registry, settings.metrics_topic_level)
        self.http_endpoint: HttpEndpoint | None = None
        # TLS, authentication and the broker's own credentials (files are read and checked here).
        self.security = ServiceSecurity(settings)
        self.authorization = BrokerAuthorization(Authorizer(
            store, superuser_roles=settings.superuser_roles, broker_roles=settings.broker_roles,
            dlq_worker_roles=settings.dlq_worker_roles), settings.max_partitions_per_topic,
        ) if settings.authorization_enabled else None
        self.storage = StorageClient(
            store, list(settings.storage_nodes), settings.storage_operation_timeout,
            add_timeout=settings.storage_add_timeout, read_timeout=settings.storage_read_timeout,
            quarantine_seconds=settings.storage_quarantine_seconds, dialer=self.security.dialer,
            add_batches_in_flight=settings.storage_add_batches_in_flight,
        )
        self._server: grpc.aio.Server | None = None
        self.port = 0
        self.service: BrokerService | None = None
        self.registration: LookupRegistration | None = None
        self.monitor: OwnershipMonitor | None = None
        self.admin: AdminServicer | None = None
        self.pulsar: PulsarServer | None = None  # Pulsar's binary protocol, when served
        self.urls = BrokerUrls()  # where it serves the protocols beside gRPC (registered with lookup)
        self.web: RestServer | None = None  # Pulsar's admin REST API (settings.web_port; -1: none)
        # Ready while registered with a live lookup and the metadata store answers.
        self.health = ServiceHealth("broker", [
            module.DESCRIPTOR.services_by_name[name].full_name for module, name in (
                (broker_pb2, "BrokerService"), (admin_pb2, "AdminService"), (deadletter_pb2, "DeadLetterService"))
        ])
        self.health.add_check("lookup-registration", self._registered)
        self.health.add_check("metadata-store", self._metadata_store_answers)

    async def _registered(self) -> str | None:
        return "not started" if self.registration is None else self.registration.problem

    async def _metadata_store_answers(self) -> None:
        await self.store.ping()

    @property
    def address(self) -> str:
        return self.settings.advertised_address or f"{self.settings.host}:{self.port}"

    async def start(self) -> None:
        if self._server is not None:
            return
        limits, idle_options = connection_limits(
            "broker", self.settings.max_connections_per_address, self.settings.connection_idle_timeout)
        # Authentication first: nothing of a call is read, and it takes no place among its address's
        # connections, before it is authenticated (herald.common.security.authentication, .connections).
        server = grpc.aio.server(
            options=[*server_options(self.settings.grpc_max_receive_message_bytes,
                                     self.settings.max_streams_per_connection), *idle_options],
            interceptors=[*self.security.interceptors, *limits, *server_interceptors(BULK_METHODS),
                          *self._authorizing()])
        self.port = add_port(server, f"{self.settings.host}:{self.settings.port}", self.security.server_credentials)
        broker_id = self.settings.broker_id or self.address
        ownership = BrokerOwnership(self.store, broker_id, self.address, self.settings.unload_exclusion_seconds)
        await self.storage.start()
        service = BrokerService(self.settings, self.store, self.storage, ownership, self.metrics)
        await service.start()
        self.service = service
        self.metrics.watch(service, asyncio.get_running_loop())
        self._serve_metrics()
        admission = Admission(self.settings, self.authorization.authorizer if self.authorization else None)
        broker_pb2_grpc.add_BrokerServiceServicer_to_server(BrokerServicer(service, admission), server)
        self.admin = AdminServicer(service, self.address, self.security.forwarding_dialer)
        service.remote = self.admin.forwarder  # partitions other brokers own, for the core
        admin_pb2_grpc.add_AdminServiceServicer_to_server(self.admin, server)
        deadletter_pb2_grpc.add_DeadLetterServiceServicer_to_server(DeadLetterServicer(service.dead_letters), server)
        await self.health.add_to_server(server)
        await server.start()
        self._server = server
        await self._start_pulsar(service, admission)
        await self._serve_web(service)
        self.registration = LookupRegistration(
            self.settings.lookup_address, ownership, self.settings.cluster,
            load=self._load, owned_topics=service.topic_names, on_lease_lost=service.close_all,
            dialer=self.security.dialer, urls=self.urls,
        )
        if self.pulsar is not None:
            self.pulsar.frontend.owners = self.registration  # who serves a topic, for LOOKUP
        if self.web is not None:
            self.web.context.owners = self.registration
        await self.registration.start()
        self.monitor = OwnershipMonitor(self.store, ownership, service.served_topics, service.ownership_lost)
        self.monitor.start()
        await self.health.start()
        log.info("broker %s listening on %s", broker_id, self.address)

    async def _start_pulsar(self, service: BrokerService, admission: Admission) -> None:
        """Pulsar's binary protocol beside gRPC (herald.broker.pulsar), when a port is set."""
        settings = self.settings
        if settings.pulsar_port < 0 and settings.pulsar_tls_port < 0:
            return
        frontend = FrontEnd(service, admission, ConnectAuthenticator(settings), settings, BrokerUrls())
        self.pulsar = PulsarServer(frontend, settings.host, settings.pulsar_port, settings.pulsar_tls_port,
                                   settings.pulsar_keepalive_seconds)
        await self.pulsar.start()
        host = self._advertised_host()
        self.urls = BrokerUrls(
            pulsar=f"pulsar://{host}:{self.pulsar.port}" if self.pulsar.port >= 0 else "",
            pulsar_tls=f"pulsar+ssl://{host}:{self.pulsar.tls_port}" if self.pulsar.tls_port >= 0 else "",
            web=self.urls.web, web_tls=self.urls.web_tls)
        frontend.urls = self.urls
    async def _serve_web(self, service: BrokerService) -> None:
        """Pulsar's admin REST API and HTTP lookup on the web port, with the gRPC admin's
        authentication and authorization decisions (herald.broker.rest)."""
        settings = self.settings
        if settings.web_port < 0:
            return
        tls = bool(settings.tls_cert_file)
        context = RestContext(
            service, self.authorization.access if self.authorization else None, self.security.authenticator,
            cluster=settings.cluster, tls=tls)
        web = RestServer(context, settings.host, settings.web_port,
                         server_ssl_context(settings.tls_cert_file, settings.tls_key_file))
        await web.start()
        self.web = web
        web_url = f"{'https' if tls else 'http'}://{self._advertised_host()}:{web.port}"
        self.urls = BrokerUrls(self.urls.pulsar, self.urls.pulsar_tls, "" if tls else web_url, web_url if tls else "")
        context.urls = self.urls
        if self.pulsar is not None:
            self.pulsar.frontend.urls = self.urls
        log.info("broker web service (Pulsar admin REST API) on %s", web_url)

    def _advertised_host(self) -> str:
        """The host the URLs of the protocols beside gRPC name (registered with lookup)."""
        settings = self.settings
        return settings.pulsar_advertised_host or (settings.advertised_address.rsplit(":", 1)[0]
                                                   if settings.advertised_address else settings.host)

    @property
    def web_url(self) -> str:
        """Where the REST API answers ("" when it is off)."""
        return self.urls.web_tls or self.urls.web

    def _authorizing(self) -> list[Any]:
        """The interceptors that authorize each call, when authorization is on: innermost, after
        authentication (which names the role) and the decoding interceptor (requests arrive decoded)."""
        authorization = self.authorization
        if authorization is None:
            return []
        return [
            AuthorizationInterceptor(broker_pb2.DESCRIPTOR.services_by_name["BrokerService"].full_name,
                                     authorization.decide_data),
            AuthorizationInterceptor(admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
                                     authorization.decide_admin),
            AuthorizationInterceptor(deadletter_pb2.DESCRIPTOR.services_by_name["DeadLetterService"].full_name,
                                     authorization.decide_dead_letters),
        ]

    def _load(self) -> lookup_pb2.BrokerLoad:
        if self.service is None:
            return lookup_pb2.BrokerLoad()
        load = self.service.load()
        return lookup_pb2.BrokerLoad(
            topics=load.topics, producers=load.producers, consumers=load.consumers,
            msg_rate_in=load.msg_rate_in, msg_rate_out=load.msg_rate_out,
        )

    async def stop(self, grace: float = 2.0) -> None:
        await self.health.stop()
        if self.monitor is not None:
            await self.monitor.stop()
            self.monitor = None
        if self.registration is not None:
            await self.registration.stop()
            self.registration = None
        pulsar, self.pulsar = self.pulsar, None
        if pulsar is not None:
            await pulsar.stop()
        web, self.web = self.web, None
        if web is not None:
            await web.stop()
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
        if self.admin is not None:
            await self.admin.close()
            self.admin = None
        if self.service is not None:
            await self.service.close_all()
            self.service = None
        await self.storage.close()
        if self.http_endpoint is not None:
            self.http_endpoint.stop()
            self.http_endpoint = None
        self.metrics.unwatch()

    def _serve_metrics(self) -> None:
        settings = self.settings
        self.http_endpoint = serve_endpoint("broker", self.metrics.registry, settings.metrics_host,
                                            settings.metrics_port, self.health, access=settings)


