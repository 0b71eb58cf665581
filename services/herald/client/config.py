"""Client, producer, consumer and reader settings: dataclasses with Pulsar's defaults (SEEDS §1-3),
checked when built so that a bad option fails at the call that passed it, with the option named.
Times are seconds, sizes bytes."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from herald.api.v1 import broker_pb2, entry_pb2
from herald.common.codec.message_id import MessageId, check_position
from herald.common.codec.properties import check_properties
from herald.common.errors import InvalidArgumentError
from herald.common.security.credentials import AuthenticationTls, check_authentication, client_certificate

if TYPE_CHECKING:
    from herald.client.interceptors import ConsumerInterceptor, ProducerInterceptor

SCHEMES = ("herald", "herald+ssl")
KIB = 1024
MIB = 1024 * 1024
DEFAULT_MAX_MESSAGE_SIZE = 5 * MIB
# The largest chunked message a consumer puts back together unless told otherwise (a producer may
# send up to 2 GiB - 1).
DEFAULT_MAX_CHUNKED_MESSAGE_SIZE = 128 * MIB
MIN_ACK_TIMEOUT = 10.0  # seconds (Pulsar: an ack timeout, when on, is at least 10 s)


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


class CompressionType(enum.Enum):
    """How the producer compresses each batch's payload (the consumer decompresses it)."""

    NONE = entry_pb2.NONE
    LZ4 = entry_pb2.LZ4
    ZLIB = entry_pb2.ZLIB
    ZSTD = entry_pb2.ZSTD


class PartitionsRoutingMode(enum.Enum):
    """Which partition a message without a key goes to (a keyed message goes to hash(key) mod n,
    except with CustomPartition, where the router decides every message)."""

    RoundRobinDistribution = "round_robin"  # batching on: one partition per batching window
    UseSinglePartition = "single"  # one partition, chosen at random when the producer starts
    CustomPartition = "custom"  # message_router(message, num_partitions) -> partition


class HashingScheme(enum.Enum):
    """How a message key is hashed to choose its partition."""

    JavaStringHash = "java_string"  # Pulsar's default: String.hashCode() of the key
    Murmur3_32Hash = "murmur3_32"


class BatchingType(enum.Enum):
    """Default: one batch takes messages of any key. KeyBased: one batch per key, so that every
    entry holds a single key (what Key_Shared subscriptions need to route each message right)."""

    Default = "default"
    KeyBased = "key_based"


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    """A subscription's dead letters: a message redelivered max_redeliver_count times is moved to
    dead_letter_topic (default `<topic>-<subscription>-DLQ`) by the dlq-worker; with retries on,
    `reconsume_later` sends messages to retry_letter_topic (default `<topic>-<subscription>-RETRY`)."""

    max_redeliver_count: int
    dead_letter_topic: str | None = None
    retry_letter_topic: str | None = None

    def __post_init__(self) -> None:
        _positive_int("dead_letter_policy.max_redeliver_count", self.max_redeliver_count)
        for name in ("dead_letter_topic", "retry_letter_topic"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidArgumentError(f"dead_letter_policy.{name} must be a topic name, got {value!r}")


@dataclass(frozen=True, slots=True)
class BatchReceivePolicy:
    """What one `batch_receive()` returns: up to max_num_messages or max_num_bytes (-1: no limit;
    at least one of them is set), or what arrived within timeout once something did."""

    max_num_messages: int = 100
    max_num_bytes: int = 10 * MIB
    timeout: float = 0.1

    def __post_init__(self) -> None:
        for name in ("max_num_messages", "max_num_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value == 0 or value < -1:
                raise InvalidArgumentError(
                    f"batch_receive_policy.{name} must be a positive integer or -1 (no limit), got {value!r}")
        if self.max_num_messages == -1 and self.max_num_bytes == -1:
            raise InvalidArgumentError("batch_receive_policy needs max_num_messages or max_num_bytes set")
        _positive("batch_receive_policy.timeout", self.timeout)


def _positive(name: str, value: float) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0 or math.isinf(value):
        raise InvalidArgumentError(f"{name} must be a positive number, got {value!r}")


def _non_negative(name: str, value: float) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0 or math.isinf(value):
        raise InvalidArgumentError(f"{name} must be zero or a positive number, got {value!r}")


def _positive_int(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")


def _non_negative_int(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgumentError(f"{name} must be zero or a positive integer, got {value!r}")


def _enum(name: str, value: object, kind: type[enum.Enum]) -> None:
    if not isinstance(value, kind):
        choices = ", ".join(member.name for member in kind)
        raise InvalidArgumentError(f"{name} must be a {kind.__name__} ({choices}), got {value!r}")


def _properties(name: str, value: Mapping[str, str] | None, owner: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in value.items()):
        raise InvalidArgumentError(f"{name} must map strings to strings, got {value!r}")
    # The broker keeps them in memory and refuses too many (its default limits, checked here first).
    check_properties(value, owner)
    return dict(value)


def _callable(name: str, value: object) -> None:
    if value is not None and not callable(value):
        raise InvalidArgumentError(f"{name} must be callable, got {value!r}")


def _sequence(name: str, value: object) -> tuple[Any, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise InvalidArgumentError(f"{name} must be a list, got {value!r}")
    return tuple(value)


def _bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")


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
    """Client-wide settings.

    TLS (a `herald+ssl://` URL): tls_trust_certs_file_path is the CA bundle that signs the
    services' certificates (None: the system's); tls_allow_insecure_connection accepts any
    certificate; tls_validate_hostname checks that the certificate names the host dialled.
    tls_certificate_file_path and tls_private_key_file_path: a client certificate presented beside
    a token, for clusters that require one of every client (tls_require_client_cert); with
    AuthenticationTls the certificate is the credential itself and these stay None.
    stats_interval: producers and consumers log their stats this often (0: never).
    """

    service_url: str
    operation_timeout: float = 30.0
    connection_timeout: float = 10.0
    keep_alive: float = 30.0
    connections_per_broker: int = 1
    stats_interval: float = 60.0
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure_connection: bool = False
    tls_validate_hostname: bool = False
    tls_certificate_file_path: str | None = None
    tls_private_key_file_path: str | None = None
    # AuthenticationToken / AuthenticationTls (herald.common.security.credentials); None: no credentials.
    auth: Any = None
    url: ServiceUrl = field(init=False, repr=False, compare=False)
    # (certificate file, key file) presented in TLS handshakes, from auth or the two paths above.
    client_certificate: tuple[str, str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", ServiceUrl.parse(self.service_url))
        _positive("operation_timeout", self.operation_timeout)
        _positive("connection_timeout", self.connection_timeout)
        _positive("keep_alive", self.keep_alive)
        _positive_int("connections_per_broker", self.connections_per_broker)
        _non_negative("stats_interval", self.stats_interval)
        path = self.tls_trust_certs_file_path
        if path is not None and (not isinstance(path, str) or not path):
            raise InvalidArgumentError(f"tls_trust_certs_file_path must be a file path, got {path!r}")
        _bool("tls_allow_insecure_connection", self.tls_allow_insecure_connection)
        _bool("tls_validate_hostname", self.tls_validate_hostname)
        check_authentication(self.auth)
        if isinstance(self.auth, AuthenticationTls) and not self.url.tls:
            raise InvalidArgumentError(
                "AuthenticationTls needs a herald+ssl:// service URL: certificates travel in TLS")
        certificate = client_certificate(self.auth, self.tls_certificate_file_path, self.tls_private_key_file_path)
        if certificate is not None and not self.url.tls:
            raise InvalidArgumentError(
                "tls_certificate_file_path needs a herald+ssl:// service URL: certificates travel in TLS")
        object.__setattr__(self, "client_certificate", certificate)


# message_router(message, num_partitions) -> partition index; message is an OutgoingMessage.
MessageRouter = Callable[[Any, int], int]


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """One producer's settings (SEEDS §2).

    max_pending_messages bounds the messages waiting for receipts; on a partitioned topic each
    partition takes min(max_pending_messages, max_pending_messages_across_partitions / n). A full
    queue fails the send with ProducerQueueIsFullError, or with block_if_queue_full waits.
    Batching closes a batch at batching_max_messages (at most half of max_pending_messages, so that
    one batch fills while the one before it is stored), batching_max_bytes or
    batching_max_publish_delay after its first message, or sooner when the application awaits its
    sends and nothing earlier is in flight (client/linger.py). Chunking (which excludes batching) splits
    a message larger than the topic's max message size into chunks the consumer reassembles.
    """

    producer_name: str | None = None
    send_timeout: float = 30.0
    max_pending_messages: int = 1000
    max_pending_messages_across_partitions: int = 50_000
    block_if_queue_full: bool = False
    batching_enabled: bool = True
    batching_max_publish_delay: float = 0.001
    batching_max_messages: int = 1000
    batching_max_bytes: int = 128 * KIB
    batching_type: BatchingType = BatchingType.Default
    chunking_enabled: bool = False
    compression_type: CompressionType = CompressionType.NONE
    initial_sequence_id: int | None = None
    message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution
    message_router: MessageRouter | None = None
    hashing_scheme: HashingScheme = HashingScheme.JavaStringHash
    properties: Mapping[str, str] | None = None
    interceptors: Sequence[ProducerInterceptor] = ()
    auto_update_partitions: bool = True
    auto_update_partitions_interval: float = 60.0
    # The broker's limit replaces this when the producer registers.
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE

    def __post_init__(self) -> None:
        if self.producer_name is not None and (not isinstance(self.producer_name, str) or not self.producer_name):
            raise InvalidArgumentError(f"producer_name must be a non-empty string, got {self.producer_name!r}")
        _non_negative("send_timeout", self.send_timeout)
        _positive_int("max_pending_messages", self.max_pending_messages)
        _positive_int("max_pending_messages_across_partitions", self.max_pending_messages_across_partitions)
        _bool("block_if_queue_full", self.block_if_queue_full)
        _bool("batching_enabled", self.batching_enabled)
        _positive("batching_max_publish_delay", self.batching_max_publish_delay)
        _positive_int("batching_max_messages", self.batching_max_messages)
        _positive_int("batching_max_bytes", self.batching_max_bytes)
        _enum("batching_type", self.batching_type, BatchingType)
        _bool("chunking_enabled", self.chunking_enabled)
        if self.chunking_enabled and self.batching_enabled:
            raise InvalidArgumentError(
                "chunking_enabled and batching_enabled cannot both be on: set batching_enabled=False to chunk "
                "large messages")
        _enum("compression_type", self.compression_type, CompressionType)
        _positive_int("max_message_size", self.max_message_size)
        seq = self.initial_sequence_id
        if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool) or seq < -1):
            raise InvalidArgumentError(f"initial_sequence_id must be an integer >= -1, got {seq!r}")
        _enum("message_routing_mode", self.message_routing_mode, PartitionsRoutingMode)
        _callable("message_router", self.message_router)
        if self.message_router is not None:
            object.__setattr__(self, "message_routing_mode", PartitionsRoutingMode.CustomPartition)
        elif self.message_routing_mode is PartitionsRoutingMode.CustomPartition:
            raise InvalidArgumentError("message_routing_mode CustomPartition needs a message_router")
        _enum("hashing_scheme", self.hashing_scheme, HashingScheme)
        object.__setattr__(self, "properties", _properties("properties", self.properties, "a producer's"))
        object.__setattr__(self, "interceptors", _sequence("interceptors", self.interceptors))
        _bool("auto_update_partitions", self.auto_update_partitions)
        _positive("auto_update_partitions_interval", self.auto_update_partitions_interval)


# message_listener(consumer, message); consumer_event_listener: see herald.client.listeners.
MessageListener = Callable[[Any, Any], Any]


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """One consumer's settings (SEEDS §3).

    receiver_queue_size messages are prefetched (flow permits); a consumer of several topics or
    partitions keeps at most max_total_receiver_queue_size_across_partitions in all. ack_timeout
    (0: off, else at least 10 s) redelivers messages not acknowledged in time, checked every
    ack_timeout_tick; acks are grouped for ack_group_time (0: sent at once) or ack_group_max_size
    acks. A negatively acknowledged message comes back after negative_ack_redelivery_delay.
    A consumer of a partitioned topic picks up partitions added to it every
    auto_update_partitions_interval; a pattern consumer lists its namespace again every
    pattern_auto_discovery_period. retry_enable (Shared and Key_Shared subscriptions) makes the
    consumer read the retry letter topic too, for reconsume_later.

    max_message_size bounds what an entry may decompress to (plus framing: keys, properties), and
    max_chunked_message_size the whole of a chunked message: an entry claiming more, or inflating
    past what it claims (a decompression bomb), is dropped with an error, never inflated. Raise
    them to the topic's max_message_size (and the largest chunked message sent) when larger.
    """

    subscription_name: str
    consumer_type: ConsumerType = ConsumerType.Exclusive
    initial_position: InitialPosition = InitialPosition.Latest
    consumer_name: str | None = None
    priority_level: int = 0
    receiver_queue_size: int = 1000
    max_total_receiver_queue_size_across_partitions: int = 50_000
    ack_timeout: float = 0.0
    ack_timeout_tick: float = 1.0
    ack_group_time: float = 0.1
    ack_group_max_size: int = 1000
    negative_ack_redelivery_delay: float = 60.0
    dead_letter_policy: DeadLetterPolicy | None = None
    retry_enable: bool = False
    read_compacted: bool = False
    message_listener: MessageListener | None = None
    consumer_event_listener: Any = None  # a herald.client.listeners.ConsumerEventListener
    properties: Mapping[str, str] | None = None
    interceptors: Sequence[ConsumerInterceptor] = ()
    pattern_auto_discovery_period: float = 60.0
    auto_update_partitions: bool = True
    auto_update_partitions_interval: float = 60.0
    batch_receive_policy: BatchReceivePolicy = field(default_factory=BatchReceivePolicy)
    max_pending_chunked_message: int = 10
    auto_ack_oldest_chunked_message_on_queue_full: bool = False
    expire_time_of_incomplete_chunked_message: float = 60.0
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_chunked_message_size: int = DEFAULT_MAX_CHUNKED_MESSAGE_SIZE

    def __post_init__(self) -> None:
        _enum("consumer_type", self.consumer_type, ConsumerType)
        _enum("initial_position", self.initial_position, InitialPosition)
        if self.consumer_name is not None and not isinstance(self.consumer_name, str):
            raise InvalidArgumentError(f"consumer_name must be a string, got {self.consumer_name!r}")
        _non_negative_int("priority_level", self.priority_level)
        _positive_int("receiver_queue_size", self.receiver_queue_size)
        _positive_int("max_total_receiver_queue_size_across_partitions",
                      self.max_total_receiver_queue_size_across_partitions)
        _non_negative("ack_timeout", self.ack_timeout)
        if 0 < self.ack_timeout < MIN_ACK_TIMEOUT:
            raise InvalidArgumentError(
                f"ack_timeout must be 0 (off) or at least {MIN_ACK_TIMEOUT:g} seconds, got {self.ack_timeout!r}")
        _positive("ack_timeout_tick", self.ack_timeout_tick)
        _non_negative("ack_group_time", self.ack_group_time)
        _positive_int("ack_group_max_size", self.ack_group_max_size)
        _non_negative("negative_ack_redelivery_delay", self.negative_ack_redelivery_delay)
        if self.dead_letter_policy is not None and not isinstance(self.dead_letter_policy, DeadLetterPolicy):
            raise InvalidArgumentError(
                f"dead_letter_policy must be a DeadLetterPolicy, got {self.dead_letter_policy!r}")
        _bool("retry_enable", self.retry_enable)
        _bool("read_compacted", self.read_compacted)
        _callable("message_listener", self.message_listener)
        object.__setattr__(self, "properties", _properties("properties", self.properties, "a consumer's"))
        object.__setattr__(self, "interceptors", _sequence("interceptors", self.interceptors))
        _positive("pattern_auto_discovery_period", self.pattern_auto_discovery_period)
        _bool("auto_update_partitions", self.auto_update_partitions)
        _positive("auto_update_partitions_interval", self.auto_update_partitions_interval)
        if not isinstance(self.batch_receive_policy, BatchReceivePolicy):
            raise InvalidArgumentError(
                f"batch_receive_policy must be a BatchReceivePolicy, got {self.batch_receive_policy!r}")
        _positive_int("max_pending_chunked_message", self.max_pending_chunked_message)
        _bool("auto_ack_oldest_chunked_message_on_queue_full", self.auto_ack_oldest_chunked_message_on_queue_full)
        _positive("expire_time_of_incomplete_chunked_message", self.expire_time_of_incomplete_chunked_message)
        _positive_int("max_message_size", self.max_message_size)
        _positive_int("max_chunked_message_size", self.max_chunked_message_size)


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    """One reader's settings: where it starts (a MessageId, MessageId.earliest or .latest) and
    whether that message itself is read; max_message_size and max_chunked_message_size as a
    consumer's."""

    start_message_id: MessageId
    start_message_id_inclusive: bool = False
    reader_name: str | None = None
    receiver_queue_size: int = 1000
    reader_listener: MessageListener | None = None
    read_compacted: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_chunked_message_size: int = DEFAULT_MAX_CHUNKED_MESSAGE_SIZE

    def __post_init__(self) -> None:
        if not isinstance(self.start_message_id, MessageId):
            raise InvalidArgumentError(
                "start_message_id must be a MessageId (MessageId.earliest, MessageId.latest or a message's id), "
                f"got {self.start_message_id!r}")
        check_position(self.start_message_id.ledger_id, self.start_message_id.entry_id, "start_message_id")
        _bool("start_message_id_inclusive", self.start_message_id_inclusive)
        if self.reader_name is not None and (not isinstance(self.reader_name, str) or not self.reader_name):
            raise InvalidArgumentError(f"reader_name must be a non-empty string, got {self.reader_name!r}")
        _positive_int("receiver_queue_size", self.receiver_queue_size)
        _callable("reader_listener", self.reader_listener)
        _bool("read_compacted", self.read_compacted)
        _positive_int("max_message_size", self.max_message_size)
        _positive_int("max_chunked_message_size", self.max_chunked_message_size)
