"""Settings of the lookup service."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LookupSettings:
    metadata_url: str = "redis://127.0.0.1:6379/0"
    host: str = "127.0.0.1"
    port: int = 6650
    cluster: str = "standalone"
    # Brokers heartbeat this often (RocketMQ: 30 s); one silent for expiry_heartbeats of them expires.
    heartbeat_interval: float = 5.0
    expiry_heartbeats: int = 3
