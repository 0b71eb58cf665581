"""The settings of one `herald perf` run, checked where they are made (the CLI builds them from its
flags): a bad combination is a usage error (InvalidArgumentError, exit status 2) naming the flag."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from herald.common.codec.names import TopicName, validate_subscription_name
from herald.common.errors import InvalidArgumentError

PROTOCOLS = ("herald", "pulsar")
COMPRESSIONS = ("none", "lz4", "zlib", "zstd", "snappy")
SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")
E2E_HEADER = 8  # end-to-end payloads start with the send time, 8 bytes


@dataclass(frozen=True, slots=True)
class ProduceOptions:
    partitions: int = 0
    producers_per_topic: int = 1
    size: int = 1024
    payload_file: str | None = None
    payload_delimiter: str = "\n"
    rate: float = 0.0
    max_pending: int = 1000
    batching: bool = True
    batch_max_messages: int = 1000
    batch_max_delay_ms: float = 1.0
    compression: str = "none"
    keys: int = 0
    key_order: str = "round-robin"

    def check(self, protocol: str) -> None:
        if self.partitions < 0:
            raise InvalidArgumentError(f"--partitions must be 0 (not partitioned) or more, got {self.partitions}")
        _at_least_one("--producers-per-topic", self.producers_per_topic)
        _at_least_one("--max-pending", self.max_pending)
        _at_least_one("--batch-max-messages", self.batch_max_messages)
        if not self.rate >= 0:
            raise InvalidArgumentError(f"--rate must be 0 (unlimited) or a positive number of msg/s, got {self.rate}")
        if not self.batch_max_delay_ms > 0:
            raise InvalidArgumentError(f"--batch-max-delay-ms must be positive, got {self.batch_max_delay_ms}")
        if self.compression == "snappy" and protocol == "herald":
            raise InvalidArgumentError(
                "--compression snappy is only available with --protocol pulsar (Herald's producer offers "
                "none, lz4, zlib and zstd)")


@dataclass(frozen=True, slots=True)
class ConsumeOptions:
    subscription: str = "perf-sub"
    subscription_type: str = "Exclusive"
    consumers_per_topic: int = 1
    receiver_queue_size: int = 1000
    initial_position: str = "latest"

    def check(self) -> None:
        _at_least_one("--consumers-per-topic", self.consumers_per_topic)
        _at_least_one("--receiver-queue-size", self.receiver_queue_size)
        if not self.subscription:
            raise InvalidArgumentError("--subscription must not be empty")
        validate_subscription_name(self.subscription)
        if self.subscription_type == "Exclusive" and self.consumers_per_topic > 1:
            raise InvalidArgumentError(
                "an Exclusive subscription takes one consumer per topic: use --subscription-type Shared, "
                "Failover or Key_Shared for --consumers-per-topic > 1")


@dataclass(frozen=True, slots=True)
class PerfOptions:
    """Everything a run needs beyond its limits (runner.RunLimits)."""

    topics: tuple[str, ...]
    protocol: str = "herald"
    url: str = "herald://127.0.0.1:6660"
    pulsar_url: str = "pulsar://127.0.0.1:6650"
    security: dict[str, Any] = field(default_factory=dict)  # client options: auth, TLS files
    produce: ProduceOptions = ProduceOptions()
    consume: ConsumeOptions = ConsumeOptions()

    def check(self) -> None:
        if not self.topics:
            raise InvalidArgumentError("give at least one topic")
        for topic in self.topics:
            TopicName.parse(topic)  # the name's error, before anything is dialled
        if self.protocol not in PROTOCOLS:
            raise InvalidArgumentError(f"--protocol must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if self.protocol == "pulsar" and self.security:
            raise InvalidArgumentError(
                "--protocol pulsar does not take Herald's TLS or token flags: the Pulsar front end is "
                "reached with a plain pulsar:// URL")
        self.produce.check(self.protocol)
        self.consume.check()


def _at_least_one(flag: str, value: int) -> None:
    if value < 1:
        raise InvalidArgumentError(f"{flag} must be at least 1, got {value}")
