"""Ports: what the core's parts report to the broker above them, as Protocols the parts are built on,
so that a topic or a session never imports whoever implements them (the broker's metrics,
herald.broker.core.metrics, implements BrokerObserver; None observes nothing)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class BrokerObserver(Protocol):
    """Events of the hot paths the broker counts (the broker-level metrics read everything else
    from the topics at scrape time)."""

    def entry_stored(self, latency_seconds: float, size: int) -> None:
        """A persistent topic stored an entry of `size` bytes, `latency_seconds` after it arrived."""

    def sends_throttled(self) -> None:
        """A producer reached max_pending_sends sends without receipts: its front end stops reading."""

    def compaction_finished(self, result: str, seconds: float, messages_read: int, keys_kept: int,
                            keys_removed: int, entries_written: int, bytes_written: int) -> None:
        """A topic compaction ended: result "success" or "error", its duration and figures."""


@dataclass(frozen=True, slots=True)
class BrokerUrls:
    """Where a broker serves the protocols beside Herald's gRPC ("" when not served): Pulsar's binary
    protocol (pulsar://host:port, pulsar+ssl://host:port) and Pulsar's admin REST API (http://,
    https://). Brokers register them with lookup; a front end redirects clients to an owner's."""

    pulsar: str = ""
    pulsar_tls: str = ""
    web: str = ""
    web_tls: str = ""


class TopicOwners(Protocol):
    """Who serves a topic in a cluster (the process wiring implements it over lookup)."""

    async def owner(self, topic: str, role: str | None = None) -> BrokerUrls | None:
        """The owner's addresses when another broker owns `topic` (lookup assigns one if none does);
        None when it is this broker. Asked on behalf of `role` (a client's: lookup authorizes it,
        not the broker). HeraldError when it cannot be told (lookup unreachable, not authorized...)."""
