"""Before a run: fail fast when the service does not answer (the clients would retry until their
operation timeout, 30 s, before saying so), and create the topics partitioned when asked."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

from herald.client.admin import AdminClient
from herald.common.errors import AlreadyExistsError, ConnectionError_, InvalidArgumentError

CONNECT_TIMEOUT = 5.0


async def check_reachable(url: str, flag: str) -> None:
    """Open (and close) a TCP connection to `url`'s host and port; ConnectionError_ at once when
    it is refused, or after CONNECT_TIMEOUT when nothing answers."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or not port:
        raise InvalidArgumentError(f"{flag} {url!r} is invalid: expected scheme://host:port")
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT)
    except TimeoutError:
        raise ConnectionError_(
            f"{url} did not answer within {CONNECT_TIMEOUT:g}s: is the address right ({flag})?") from None
    except OSError as error:
        reason = "connection refused" if isinstance(error, ConnectionRefusedError) else error.strerror or str(error)
        raise ConnectionError_(
            f"cannot connect to {url}: {reason}: is the service running and the address right ({flag})?") from None
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass


async def ensure_partitions(url: str, security: dict[str, Any], topics: tuple[str, ...], partitions: int) -> None:
    """Create each topic with `partitions` partitions unless it exists (through Herald's admin
    API at `url`, also for --protocol pulsar: the same broker serves both). An existing topic is
    used as it is."""
    async with AdminClient(url, **security) as admin:
        for topic in topics:
            if await admin.get_partitions(topic) > 0:
                continue
            try:
                await admin.create_topic(topic, partitions)
            except AlreadyExistsError:
                continue  # made by another producer meanwhile, or it exists unpartitioned: used as it is
