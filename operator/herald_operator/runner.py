"""Running the operator: kopf's operator loop with Herald's handlers (herald_operator.handlers),
watching the configured Kubernetes namespaces (all of them when none is given). `herald operator`
calls `run`; tests call `run` in a task with a stop flag."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import kopf
from herald.common.config import describe

from herald_operator.handlers import register
from herald_operator.settings import OperatorSettings

log = logging.getLogger(__name__)
Flag = asyncio.Event | asyncio.Future[Any] | threading.Event


async def run(
    settings: OperatorSettings, *, registry: kopf.OperatorRegistry | None = None, standalone: bool = False,
    stop_flag: Flag | None = None, ready_flag: Flag | None = None,
) -> None:
    """Run until `stop_flag` is set (or a signal stops kopf). `registry` may hold extra handlers
    (a login handler, say); Herald's are added to it. Without `standalone`, replicas elect one
    active operator through kopf's peering (when its peering resource is installed)."""
    log.info("herald operator starting with settings:\n%s", describe(settings))
    registry = register(settings, registry)
    await kopf.operator(
        registry=registry, standalone=standalone, clusterwide=not settings.namespaces,
        namespaces=list(settings.namespaces), stop_flag=stop_flag, ready_flag=ready_flag,
    )
