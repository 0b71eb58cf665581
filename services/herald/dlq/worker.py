"""DlqWorker: the dlq-worker service. It follows lookup's list of live brokers, takes each broker's
dead letters within flow permits, publishes every letter to its dead-letter topic exactly once,
acting as the role the letter moves for (dlq.acting: the subscriber's, never a right of its own), and
reports it moved (the broker then acknowledges it on its subscription); /metrics counts the work.

Several workers may run side by side: a broker lends each letter to one worker at a time, and a
letter lent again (its worker died, or a report was lost) is recognised by the dead-letter topic's
dedup under the letter's own producer name. Ready (/readyz) while lookup answers. Embeddable:
`herald standalone` may run one on its own loop with `DlqWorker(settings, registry).start()` /
`.stop()`."""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry

from herald.client.admin import AdminClient
from herald.client.config import ClientConfig
from herald.client.connection import ConnectionPool
from herald.client.lookup import LookupService
from herald.common.errors import HeraldError
from herald.common.http.endpoint import HttpEndpoint
from herald.common.transport.health import PROBE_TIMEOUT, ServiceHealth, unreachable
from herald.dlq.acting import ActingToken
from herald.dlq.brokers import BrokerFleet, BrokerLetters, FailureMemory
from herald.dlq.metrics import DlqMetrics
from herald.dlq.mover import LetterMover
from herald.dlq.publisher import IdempotentPublisher
from herald.dlq.settings import DlqWorkerSettings

log = logging.getLogger(__name__)


class DlqWorker:
    """start() / stop() are symmetrical; stop() is idempotent. `registry`: where the metrics go
    (a process running several services may share one; by default the worker's own). The worker
    serves /metrics, /healthz and /readyz itself when settings.metrics_port >= 0 (an embedding
    process serving them watches `.health`)."""

    def __init__(self, settings: DlqWorkerSettings, registry: CollectorRegistry | None = None) -> None:
        self.settings = settings
        self.registry = CollectorRegistry() if registry is None else registry
        self.metrics = DlqMetrics(self.registry)
        self._config = ClientConfig(service_url=settings.service_url, operation_timeout=settings.operation_timeout,
                                    connection_timeout=settings.connection_timeout, stats_interval=0,
                                    tls_trust_certs_file_path=settings.tls_trust_certs_file or None,
                                    tls_certificate_file_path=settings.tls_cert_file or None,
                                    tls_private_key_file_path=settings.tls_key_file or None,
                                    # Names the role each letter moves for (dlq.acting).
                                    auth=ActingToken.from_file(settings.auth_token_file)
                                    if settings.auth_token_file else None)
        self.health = ServiceHealth("dlq-worker")
        self.health.add_check("lookup", self._lookup_answers)
        self._http = (HttpEndpoint(self.registry, settings.metrics_host, settings.metrics_port, access=settings)
                      if settings.metrics_port >= 0 else None)
        if self._http is not None:
            self._http.watch(self.health)
        self._pool: ConnectionPool | None = None
        self._admin: AdminClient | None = None
        self._fleet: BrokerFleet | None = None

    @property
    def metrics_address(self) -> str | None:
        """host:port of /metrics (and /healthz, /readyz) once started (None when not served)."""
        return self._http.address if self._http is not None else None

    @property
    def metrics_url(self) -> str | None:
        """scheme://host:port of /metrics (and /healthz, /readyz) once started (None when not served)."""
        return self._http.url if self._http is not None else None

    @property
    def brokers(self) -> list[str]:
        """The brokers whose letters this worker takes."""
        return sorted(self._fleet.brokers) if self._fleet is not None else []

    async def start(self) -> None:
        if self._fleet is not None:
            return
        settings = self.settings
        if self._http is not None:
            self._http.start_or_explain("dlq-worker")
        self._pool = pool = ConnectionPool(self._config)
        lookup = LookupService(pool, self._config)
        publisher = IdempotentPublisher(pool, lookup, settings.operation_timeout,
                                        partitions_ttl=settings.broker_refresh_interval)
        if settings.initial_subscription:
            self._admin = AdminClient(settings.service_url, timeout=settings.operation_timeout, auth=self._config.auth,
                                      tls_trust_certs_file_path=self._config.tls_trust_certs_file_path,
                                      tls_certificate_file_path=self._config.tls_certificate_file_path,
                                      tls_private_key_file_path=self._config.tls_private_key_file_path)
        mover = LetterMover(publisher, self.metrics, self._admin, settings.initial_subscription,
                            settings.max_message_size)
        failures = FailureMemory(settings.retry_delay, settings.retry_delay_max)

        def broker_letters(address: str) -> BrokerLetters:
            return BrokerLetters(address, pool, mover, settings, self.metrics, failures)

        self._fleet = BrokerFleet(self._config.url.address, pool, settings, self.metrics, broker_letters)
        self._fleet.start()
        await self.health.start()
        log.info("dlq-worker %s started: brokers from %s, %d letters in flight per broker", settings.worker_name,
                 settings.service_url, settings.flow_permits)

    async def _lookup_answers(self) -> str | None:
        pool = self._pool
        if pool is None:
            return "not started"
        address = self._config.url.address
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                channel = await pool.get(address)
        except (HeraldError, TimeoutError) as exc:
            return f"lookup at {address} does not answer: {str(exc) or 'no connection within the probe timeout'}"
        problem = await unreachable(channel, f"lookup at {address}")
        if problem is not None:
            pool.discard(address)
        return problem

    async def stop(self) -> None:
        await self.health.stop()
        fleet, self._fleet = self._fleet, None
        if fleet is not None:
            await fleet.stop()
        admin, self._admin = self._admin, None
        if admin is not None:
            await admin.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close(grace=None)
        if self._http is not None:
            self._http.stop()
