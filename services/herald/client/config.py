"""Client, producer and consumer settings: dataclasses with Pulsar's defaults (SEEDS §1-3), checked
when built so that a bad option fails at the call that passed it, with the option named."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from herald.api.v1 import broker_pb2
from herald.common.errors import InvalidArgumentError

SCHEMES = ("herald", "herald+ssl")
KIB = 1024
MIB = 1024 * 1024
DEFAULT_MAX_MESSAGE_SIZE = 5 * MIB


class ConsumerType(enum.Enum):
    """How a subscription shares its messages among its consumers."""

    Exclusive = broker_pb2.EXCLUSIVE
    Shared = broker_pb2.SHARED
    Failover = broker_pb2.FAILOVER
    KeyShared = broker_pb2.KEY_SHARED


class InitialPosition(enum.Enum):
    """Where a new subscription starts: after the last message, or at the first one kept."""

    Latest = broker_pb2.LATEST
    Earliest = broker_pb2.EARLIEST


def _positive(name: str, value: float) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0 or math.isinf(value):
        raise InvalidArgumentError(f"{name} must be a positive number, got {value!r}")


def _non_negative(name: str, value: float) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0 or math.isinf(value):
        raise InvalidArgumentError(f"{name} must be zero or a positive number, got {value!r}")


def _positive_int(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True, slots=True)
class ServiceUrl:
    """A parsed `herald://host:port` or `herald+ssl://host:port`."""

    scheme: str
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> ServiceUrl:
        hint = "expected herald://host:port or herald+ssl://host:port"
        if not isinstance(url, str) or not url:
            raise InvalidArgumentError(f"service URL is empty: {hint}")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise InvalidArgumentError(f"service URL {url!r} is invalid ({exc}): {hint}") from None
        if parts.scheme not in SCHEMES:
            raise InvalidArgumentError(
                f"service URL {url!r} has scheme {parts.scheme or '(none)'!r}: {hint}"
            )
        if not parts.hostname:
            raise InvalidArgumentError(f"service URL {url!r} has no host: {hint}")
        if port is None or port == 0:
            raise InvalidArgumentError(f"service URL {url!r} has no port: {hint}")
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
            raise InvalidArgumentError(f"service URL {url!r} has extra parts: {hint}")
        return cls(parts.scheme, parts.hostname, port)

    @property
    def tls(self) -> bool:
        return self.scheme == "herald+ssl"

    @property
    def address(self) -> str:
        """`host:port` as gRPC wants it (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.address}"


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Client-wide settings; times are seconds."""

    service_url: str
    operation_timeout: float = 30.0
    connection_timeout: float = 10.0
    keep_alive: float = 30.0
    connections_per_broker: int = 1
    url: ServiceUrl = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", ServiceUrl.parse(self.service_url))
        _positive("operation_timeout", self.operation_timeout)
        _positive("connection_timeout", self.connection_timeout)
        _positive("keep_alive", self.keep_alive)
        _positive_int("connections_per_broker", self.connections_per_broker)


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """One producer's settings; times are seconds, sizes bytes."""

    producer_name: str | None = None
    send_timeout: float = 30.0
    max_pending_messages: int = 1000
    block_if_queue_full: bool = False
    batching_enabled: bool = True
    batching_max_publish_delay: float = 0.001
    batching_max_messages: int = 1000
    batching_max_bytes: int = 128 * KIB
    initial_sequence_id: int | None = None
    # The broker's limit replaces this when the producer registers.
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE

    def __post_init__(self) -> None:
        if self.producer_name is not None and (not isinstance(self.producer_name, str) or not self.producer_name):
            raise InvalidArgumentError(f"producer_name must be a non-empty string, got {self.producer_name!r}")
        _non_negative("send_timeout", self.send_timeout)
        _positive_int("max_pending_messages", self.max_pending_messages)
        _positive("batching_max_publish_delay", self.batching_max_publish_delay)
        _positive_int("batching_max_messages", self.batching_max_messages)
        _positive_int("batching_max_bytes", self.batching_max_bytes)
        _positive_int("max_message_size", self.max_message_size)
        seq = self.initial_sequence_id
        if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool) or seq < -1):
            raise InvalidArgumentError(f"initial_sequence_id must be an integer >= -1, got {seq!r}")


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """One consumer's settings; times are seconds."""

    subscription_name: str
    consumer_type: ConsumerType = ConsumerType.Exclusive
    receiver_queue_size: int = 1000
    ack_group_time: float = 0.1
    initial_position: InitialPosition = InitialPosition.Latest
    consumer_name: str | None = None
    priority_level: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.consumer_type, ConsumerType):
            raise InvalidArgumentError(
                f"consumer_type must be a ConsumerType (Exclusive, Shared, Failover, KeyShared), "
                f"got {self.consumer_type!r}"
            )
        if not isinstance(self.initial_position, InitialPosition):
            raise InvalidArgumentError(
                f"initial_position must be InitialPosition.Latest or .Earliest, got {self.initial_position!r}"
            )
        _positive_int("receiver_queue_size", self.receiver_queue_size)
        _non_negative("ack_group_time", self.ack_group_time)
        if self.consumer_name is not None and not isinstance(self.consumer_name, str):
            raise InvalidArgumentError(f"consumer_name must be a string, got {self.consumer_name!r}")
        if not isinstance(self.priority_level, int) or isinstance(self.priority_level, bool) \
                or self.priority_level < 0:
            raise InvalidArgumentError(f"priority_level must be an integer >= 0, got {self.priority_level!r}")
