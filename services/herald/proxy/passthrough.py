"""Forwarding unary calls as bytes: Pull and GetLastMessageId to the broker serving the topic
(looking up again while it says NOT_OWNER or cannot be reached), admin calls and GetSchema to any live broker
(brokers forward topic calls to the owner themselves). The broker's answer, or its error status,
goes back to the client unchanged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from herald.common import errors
from herald.common.backoff import Backoff
from herald.common.transport.rpc import abort, error_from_rpc
from herald.proxy.broker_pool import BrokerPool
from herald.proxy.forwarding import LOOK_AGAIN
from herald.proxy.lookups import Lookups
from herald.proxy.metrics import TO_BROKER, TO_CLIENT, ProxyMetrics
from herald.proxy.settings import ProxySettings

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[Any, Any]
# Picks the broker for an attempt: (seconds left, whether to look up afresh) -> address.
Target = Callable[[float, bool], Awaitable[str]]


class CallForwarder:
    def __init__(self, settings: ProxySettings, lookups: Lookups, pool: BrokerPool, metrics: ProxyMetrics) -> None:
        self.settings = settings
        self.lookups = lookups
        self.pool = pool
        self.metrics = metrics
        self._to_broker_bytes = metrics.forwarded_bytes.labels(TO_BROKER)
        self._to_client_bytes = metrics.forwarded_bytes.labels(TO_CLIENT)

    async def to_owner(self, method: str, request: bytes, context: Context, topic: str, queue: int = -1,
                       wait: float = 0.0) -> bytes:
        """Make the broker call `method` (a path) on the broker serving queue `queue` of `topic`;
        `wait` is how long the broker may hold the call (a Pull's long polling)."""
        async def target(timeout: float, fresh: bool) -> str:  # noqa: ASYNC109 - a gRPC deadline
            return await self.lookups.queue_owner(topic, queue, timeout, fresh)

        return await self._forward(method, request, context, target, f"{method.rsplit('/', 1)[-1]} on {topic}",
                                   forget=self.lookups.queue_key(topic, queue), wait=wait)

    async def to_any_broker(self, method: str, request: bytes, context: Context) -> bytes:
        """Make the admin call `method` on a live broker."""
        async def target(timeout: float, fresh: bool) -> str:  # noqa: ASYNC109 - a gRPC deadline
            return await self.lookups.any_broker(timeout)

        return await self._forward(method, request, context, target, method.rsplit("/", 1)[-1])

    async def _forward(self, method: str, request: bytes, context: Context, target: Target, what: str,
                       forget: str | None = None, wait: float = 0.0) -> bytes:
        """Forward until the broker answers, trying again (looking up afresh) while it cannot be
        reached or, for calls about a topic (`forget`: the key its owner is remembered under),
        says NOT_OWNER / SERVICE_NOT_READY."""
        loop = asyncio.get_running_loop()
        limit = self.settings.operation_timeout + wait
        client_left = context.time_remaining()
        if client_left is not None:
            limit = min(limit, client_left)
        deadline = loop.time() + limit
        backoff = Backoff(initial=0.1, maximum=5.0, jitter=0.2)
        fresh = False
        self.metrics.forwarded_calls.labels("admin" if forget is None else "broker").inc()
        self._to_broker_bytes.inc(len(request))
        while True:
            left = max(0.001, deadline - loop.time())
            last: errors.HeraldError
            try:
                address = await target(left, fresh)
            except errors.HeraldError as refused:
                if not refused.retryable:
                    await abort(context, refused)
                last = refused
            else:
                call = self.pool.get(address).unary_unary(method, None, None)
                try:
                    reply: bytes = await call(request, timeout=max(0.001, deadline - loop.time()))
                except grpc.aio.AioRpcError as exc:
                    error = error_from_rpc(exc, f"{what} at broker {address}")
                    if isinstance(error, errors.ConnectionError_):
                        self.pool.discard(address)
                        self.lookups.forget_broker(address)
                        last = errors.ServiceNotReadyError(
                            f"broker {address} failed: {exc.code().name}: {exc.details()}")
                    elif forget is not None and error.code in LOOK_AGAIN:
                        self.lookups.forget(forget, address)
                        last = error
                    else:  # the broker's own answer: the client gets it as it was given
                        await context.abort(exc.code(), exc.details() or "")
                        raise AssertionError("context.abort returned") from None  # pragma: no cover
                else:
                    self._to_client_bytes.inc(len(reply))
                    return reply
            delay = backoff.next()
            if loop.time() + delay >= deadline:
                await abort(context, errors.HeraldTimeoutError(
                    f"proxy: {what} did not complete within {limit:g}s; last error: {last}"))
            log.debug("%s failed (%s); trying again in %.2fs", what, last, delay)
            self.metrics.upstream_reconnects.labels("admin" if forget is None else "broker").inc()
            fresh = True
            await asyncio.sleep(delay)
