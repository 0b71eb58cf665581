"""Choosing a broker for an unowned topic: the least loaded live broker."""

from __future__ import annotations

from collections.abc import Collection

from herald.lookup.registry import BrokerRecord


def least_loaded(
    brokers: list[BrokerRecord], assigned: dict[str, int], exclude: Collection[str] = (),
) -> BrokerRecord:
    """Fewest assigned topics first, then lowest message rate, then broker id for stability.
    Brokers in `exclude` (one that just unloaded the topic) are passed over while another is live."""
    candidates = [b for b in brokers if b.broker_id not in exclude] or brokers
    return min(
        candidates,
        key=lambda b: (
            assigned.get(b.broker_id, 0),
            b.load.get("msg_rate_in", 0.0) + b.load.get("msg_rate_out", 0.0),
            b.broker_id,
        ),
    )
