"""Ports: what the core's parts report to the broker above them, as Protocols the parts are built on,
so that a topic or a session never imports whoever implements them (the broker's metrics,
herald.broker.core.metrics, implements BrokerObserver; None observes nothing)."""

from __future__ import annotations

from typing import Protocol


class BrokerObserver(Protocol):
    """Events of the hot paths the broker counts (the broker-level metrics read everything else
    from the topics at scrape time)."""

    def entry_stored(self, latency_seconds: float, size: int) -> None:
        """A persistent topic stored an entry of `size` bytes, `latency_seconds` after it arrived."""

    def sends_throttled(self) -> None:
        """A producer reached max_pending_sends sends without receipts: its front end stops reading."""
