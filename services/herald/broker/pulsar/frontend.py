"""What every Pulsar connection of a broker shares: the core it drives, its admission checks, its
authenticator, the addresses it advertises, and the port through which it learns a topic's owner in
a cluster (herald.broker.core.ports.TopicOwners, implemented over lookup by the process wiring)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

from herald import __version__
from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.broker.core.admission import Admission
from herald.broker.core.ports import BrokerUrls, TopicOwners
from herald.broker.core.service import BrokerService
from herald.broker.settings import BrokerSettings
from herald.common.errors import HeraldError
from herald.common.pulsar.auth import ConnectAuthenticator, Identity
from herald.common.pulsar.frames import FRAME_PADDING

SERVER_VERSION = f"Herald-{__version__}"
PROTOCOL_VERSION = 20  # what PulsarApi.proto (vendored) defines: the highest this broker speaks


@dataclass(slots=True)
class FrontEnd:
    service: BrokerService
    admission: Admission
    authenticator: ConnectAuthenticator
    settings: BrokerSettings
    urls: BrokerUrls
    owners: TopicOwners | None = None  # None: one broker serves everything (tests, an embedded core)

    @property
    def max_message_size(self) -> int:
        return self.settings.max_message_size

    @property
    def max_frame_size(self) -> int:
        return self.settings.max_message_size + FRAME_PADDING


class Connection(Protocol):
    """What a producer or consumer endpoint needs of the connection it lives on (connection.py)."""

    frontend: FrontEnd
    identity: Identity
    peer: str
    client_version: str

    def write(self, command: pulsar.BaseCommand) -> None: ...
    def write_with_payload(self, command: pulsar.BaseCommand, payload: bytes | memoryview) -> None: ...
    async def drain(self) -> None: ...
    def spawn(self, work: Awaitable[Any], name: str) -> asyncio.Task[Any]: ...
    def error(self, request_id: int, error: HeraldError) -> None: ...
    def success(self, request_id: int) -> None: ...
    def producer_closed_by_broker(self, endpoint: Any) -> None: ...
    def consumer_closed_by_broker(self, endpoint: Any) -> None: ...
    def consumer_finished(self, endpoint: Any) -> None: ...
