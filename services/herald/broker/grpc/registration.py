"""The broker's registration with lookup: register at start, heartbeat with its load, unregister
at stop. When lookup says the lease expired (the broker was silent too long), the broker drops
every topic at once (another broker may own them now) and registers again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import grpc
import grpc.aio

from herald.api.v1 import lookup_pb2, lookup_pb2_grpc
from herald.broker.core.ownership import BrokerOwnership
from herald.broker.core.ports import BrokerUrls
from herald.common.errors import ServiceNotReadyError
from herald.common.failure_streak import FailureStreak
from herald.common.security.authentication import ORIGINAL_PRINCIPAL
from herald.common.tasks import cancel_and_wait
from herald.common.transport.rpc import channel_options, error_from_rpc
from herald.common.transport.tls import PLAINTEXT, Dialer

log = logging.getLogger(__name__)

# After a failed heartbeat the broker tries again this soon (at most every heartbeat interval).
HEARTBEAT_RETRY_SECONDS = 0.25


class LookupRegistration:
    def __init__(
        self,
        lookup_address: str,
        ownership: BrokerOwnership,
        cluster: str,
        load: Callable[[], lookup_pb2.BrokerLoad],
        owned_topics: Callable[[], list[str]],
        on_lease_lost: Callable[[], Awaitable[None]],
        timeout: float = 10.0,
        dialer: Dialer = PLAINTEXT,
        urls: BrokerUrls = BrokerUrls(),
    ) -> None:
        self.lookup_address = lookup_address
        self.urls = urls
        self._dialer = dialer
        self.ownership = ownership
        self.cluster = cluster
        self._load = load
        self._owned_topics = owned_topics
        self._on_lease_lost = on_lease_lost
        self.timeout = timeout
        self.heartbeat_interval = 5.0
        self._channel: grpc.aio.Channel | None = None
        self._stub: lookup_pb2_grpc.LookupServiceAsyncStub | None = None
        self._task: asyncio.Task[None] | None = None
        # Why the broker is not registered with a live lookup now (None: it is), for readiness.
        self.problem: str | None = f"not registered with lookup at {lookup_address} yet"

    async def start(self) -> None:
        if self._task is not None:
            return
        self._channel = self._dialer.channel(self.lookup_address, channel_options())
        self._stub = lookup_pb2_grpc.LookupServiceStub(self._channel)
        await self._register(deadline=asyncio.get_running_loop().time() + 60.0)
        self._task = asyncio.create_task(self._heartbeats(), name="broker-heartbeat")

    async def _register(self, deadline: float) -> None:
        assert self._stub is not None
        delay = 0.1
        while True:
            try:
                response = await self._stub.RegisterBroker(
                    lookup_pb2.RegisterBrokerRequest(
                        broker_id=self.ownership.broker_id, address=self.ownership.address,
                        cluster=self.cluster, load=self._load(),
                        urls=lookup_pb2.BrokerUrls(pulsar=self.urls.pulsar, pulsar_tls=self.urls.pulsar_tls,
                                                   web=self.urls.web, web_tls=self.urls.web_tls),
                    ),
                    timeout=self.timeout,
                )
                break
            except grpc.aio.AioRpcError as exc:
                self.problem = f"registering with lookup at {self.lookup_address} failed: {exc.code().name}"
                if asyncio.get_running_loop().time() + delay > deadline:
                    raise
                log.warning("registering with lookup at %s failed (%s); retrying", self.lookup_address, exc.code())
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        self.ownership.lease_id = response.lease_id
        self.heartbeat_interval = response.heartbeat_interval_seconds or self.heartbeat_interval
        self.problem = None
        log.info("registered with lookup at %s as %s (lease %d)",
                 self.lookup_address, self.ownership.broker_id, response.lease_id)

    async def _heartbeats(self) -> None:
        assert self._stub is not None
        delay = self.heartbeat_interval
        streak = FailureStreak(f"heartbeat to lookup at {self.lookup_address}")
        while True:
            await asyncio.sleep(delay)
            delay = self.heartbeat_interval
            try:
                response = await self._stub.Heartbeat(
                    lookup_pb2.HeartbeatRequest(
                        broker_id=self.ownership.broker_id, lease_id=self.ownership.lease_id,
                        load=self._load(), owned_topics=self._owned_topics(),
                    ),
                    timeout=self.timeout,
                )
            except grpc.aio.AioRpcError as exc:
                if (line := streak.failed(exc.code().name)) is not None:
                    log.warning("%s", line)
                self.problem = f"heartbeat to lookup at {self.lookup_address} failed: {exc.code().name}"
                # Again soon, not a whole interval later: the lease keeps counting down meanwhile,
                # and a lookup or metadata blip that ends should cost none of it.
                delay = min(self.heartbeat_interval, HEARTBEAT_RETRY_SECONDS)
                continue
            if (line := streak.succeeded()) is not None:
                log.info("%s", line)
            if response.lease_valid:
                self.problem = None
            else:
                self.problem = "the broker's lease expired: registering with lookup again"
                log.error("broker lease %d expired: dropping all topics and registering again",
                          self.ownership.lease_id)
                self.ownership.lease_id = 0
                await self._on_lease_lost()
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await self._register(deadline=asyncio.get_running_loop().time() + 60.0)

    async def owner(self, topic: str, role: str | None = None) -> BrokerUrls | None:
        """TopicOwners (herald.broker.core.ports): another broker's addresses when it owns `topic`
        (lookup assigns an owner if none), None when this broker does. The broker asks as a
        forwarder for `role` (x-herald-original-principal), so lookup authorizes the client."""
        if self._stub is None:
            raise ServiceNotReadyError("the broker is not registered with lookup yet: retry")
        metadata = [(ORIGINAL_PRINCIPAL, role)] if role is not None else None
        try:
            answer = await self._stub.LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic), timeout=self.timeout,
                                                  metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, f"looking up {topic}") from None
        if answer.broker_id == self.ownership.broker_id or answer.broker_address == self.ownership.address:
            return None
        urls = answer.urls
        return BrokerUrls(urls.pulsar, urls.pulsar_tls, urls.web, urls.web_tls)

    async def stop(self) -> None:
        self.problem = "unregistering from lookup"
        task, self._task = self._task, None
        await cancel_and_wait(task)
        if self._stub is not None and self.ownership.lease_id:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self._stub.UnregisterBroker(
                    lookup_pb2.UnregisterBrokerRequest(
                        broker_id=self.ownership.broker_id, lease_id=self.ownership.lease_id
                    ),
                    timeout=self.timeout,
                )
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None
