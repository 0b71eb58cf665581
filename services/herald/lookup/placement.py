"""Choosing a broker for an unowned topic: the least loaded live broker."""

from __future__ import annotations

from herald.lookup.registry import BrokerRecord


def least_loaded(brokers: list[BrokerRecord], assigned: dict[str, int]) -> BrokerRecord:
    """Fewest assigned topics first, then lowest message rate, then broker id for stability."""
    return min(
        brokers,
        key=lambda b: (
            assigned.get(b.broker_id, 0),
            b.load.get("msg_rate_in", 0.0) + b.load.get("msg_rate_out", 0.0),
            b.broker_id,
        ),
    )
