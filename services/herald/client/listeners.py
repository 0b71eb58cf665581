"""Callbacks a consumer makes to the application besides messages."""

from __future__ import annotations

from typing import Any


class ConsumerEventListener:
    """Told when a Failover consumer becomes the active one of its subscription (on one partition)
    or stops being it. `partition` is the partition index, -1 for a topic without partitions."""

    def became_active(self, consumer: Any, partition: int) -> None:
        """This consumer now receives the subscription's messages on that partition."""

    def became_inactive(self, consumer: Any, partition: int) -> None:
        """Another consumer took over that partition."""
