"""Starting and closing a group of producers or consumers together: the partitions of a
partitioned producer, the topic partitions of a multi-topic consumer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

log = logging.getLogger(__name__)


class Member(Protocol):
    @property
    def topic(self) -> str: ...

    async def _start(self) -> None: ...

    async def close(self) -> None: ...

    async def _shutdown(self) -> None: ...


async def start_all(members: Sequence[Member]) -> None:
    """Start members side by side; on the first failure stop waiting for the others (they are
    cancelled) and raise it."""
    if not members:
        return
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(member._start()) for member in members]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result


async def close_all(members: Sequence[Member], what: str, graceful: bool = True) -> None:
    """Close every member (graceful: close(), telling the broker; else _shutdown()); a failure is
    logged (naming `what` and the member's topic), never raised: the others still close."""
    results = await asyncio.gather(*(member.close() if graceful else member._shutdown() for member in members),
                                   return_exceptions=True)
    for member, result in zip(members, results, strict=True):
        if isinstance(result, BaseException):
            log.warning("closing the %s of %s: %s", what, member.topic, result)
