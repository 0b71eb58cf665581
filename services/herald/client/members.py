"""Starting and closing a group of producers or consumers together: the partitions of a
partitioned producer, the topic partitions of a multi-topic consumer."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from herald.common.bounded import map_bounded

log = logging.getLogger(__name__)


class Member(Protocol):
    @property
    def topic(self) -> str: ...

    async def _start(self) -> None: ...

    async def close(self) -> None: ...

    async def _shutdown(self) -> None: ...


async def start_all(members: Sequence[Member]) -> None:
    """Start members side by side, IN_FLIGHT at a time (a topic may have a thousand partitions:
    their lookups and handshakes must not all land on the application's loop, and on lookup, at
    once); on the first failure the ones starting are cancelled, and it is raised."""
    await map_bounded(_start, members)


async def _start(member: Member) -> None:
    await member._start()


async def close_all(members: Sequence[Member], what: str, graceful: bool = True) -> None:
    """Close every member (graceful: close(), telling the broker; else _shutdown()), IN_FLIGHT at
    a time; a failure is logged (naming `what` and the member's topic), never raised: the others
    still close."""
    async def close(member: Member) -> None:
        try:
            await (member.close() if graceful else member._shutdown())
        except Exception as exc:
            log.warning("closing the %s of %s: %s", what, member.topic, exc)

    await map_bounded(close, members)
