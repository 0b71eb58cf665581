"""Running the operator: kopf's operator loop with Herald's handlers (herald_operator.handlers),
watching the configured Kubernetes namespaces (all of them when none is given). `herald operator`
calls `run`; tests call `run` in a task with a stop flag.

Around kopf: the /metrics server (herald_operator.observability), kopf's liveness endpoint for the
pod's probes, and peering. Replicas share one peering object and kopf pauses every replica but the
one of highest priority; the priority is the process's start time, earliest highest, so the oldest
replica stays active and a restarted one waits (same priorities would pause them all)."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import threading
import time
from typing import Any, cast

import kopf
from herald.common.config import describe

from herald_operator.handlers import register
from herald_operator.observability import MetricsServer, OperatorMetrics
from herald_operator.settings import OperatorSettings

log = logging.getLogger(__name__)
Flag = asyncio.Event | asyncio.Future[Any] | threading.Event

# Milliseconds since the epoch stay below 2**42 until the year 2109; the low 10 bits break ties
# between replicas started in the same millisecond. The result stays within JSON's exact integers.
_EPOCH_BITS, _TIE_BITS = 42, 10


def peering_priority(started: float) -> int:
    """kopf priority of a replica started at `started` (time.time()): earlier is higher."""
    return ((1 << _EPOCH_BITS) - int(started * 1000)) << _TIE_BITS | random.getrandbits(_TIE_BITS)


def identity() -> str:
    """This process's name among peers: kopf's own (host@pid) is shared by operators of one process."""
    return f"{socket.gethostname()}@{os.getpid()}/{random.getrandbits(32):08x}"


async def run(
    settings: OperatorSettings, *, registry: kopf.OperatorRegistry | None = None, standalone: bool = False,
    stop_flag: Flag | None = None, ready_flag: Flag | None = None, metrics: OperatorMetrics | None = None,
) -> None:
    """Run until `stop_flag` is set (or a signal stops kopf). `registry` may hold extra handlers
    (a login handler, say); Herald's are added to it. Without `standalone`, replicas elect one
    active operator through kopf's peering (settings.peering_name, or kopf's detection)."""
    log.info("herald operator starting with settings:\n%s", describe(settings))
    metrics = metrics if metrics is not None else OperatorMetrics()
    registry = register(settings, registry, metrics)
    server = MetricsServer(metrics, settings.metrics_host, settings.metrics_port) \
        if settings.metrics_port >= 0 else None
    if server is not None:
        log.info("operator metrics on http://%s:%d/metrics", settings.metrics_host, server.port)
    liveness = f"http://{settings.health_host}:{settings.health_port}/healthz" if settings.health_port > 0 else None
    try:
        await kopf.operator(
            registry=registry, standalone=standalone, clusterwide=not settings.namespaces,
            namespaces=list(settings.namespaces), stop_flag=stop_flag, ready_flag=ready_flag,
            liveness_endpoint=liveness, peering_name=settings.peering_name or None,
            priority=peering_priority(time.time()), identity=cast(Any, identity()),  # kopf's Identity: a NewType of str
        )
    finally:
        if server is not None:
            server.close()
