"""The broker registry: registration, heartbeats and expiry (SEEDS §5).

A registration is an ephemeral key /brokers/<id> bound to a lease that lookup renews on every
heartbeat; a broker silent for longer than the expiry loses the lease, its registration, and
(since ownership keys share that lease) every topic it owned.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

from herald.common.errors import InvalidArgumentError
from herald.metadata.store import LeaseExpiredError, MetadataStore

BROKERS_PREFIX = "/brokers/"


@dataclass
class BrokerRecord:
    broker_id: str
    address: str
    cluster: str
    lease_id: int
    load: dict[str, float] = field(default_factory=dict)
    owned_topics: int = 0
    last_heartbeat: float = field(default_factory=time.time)
    # Where it serves the other protocols: pulsar, pulsar_tls, web, web_tls ("" or absent: not served).
    urls: dict[str, str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> BrokerRecord:
        return cls(**json.loads(raw))


class BrokerRegistry:
    def __init__(self, store: MetadataStore, expiry_seconds: float) -> None:
        self.store = store
        self.expiry_seconds = expiry_seconds

    async def register(self, broker_id: str, address: str, cluster: str, load: dict[str, float],
                       urls: dict[str, str] | None = None) -> BrokerRecord:
        if not broker_id or not address:
            raise InvalidArgumentError("a broker registers with a non-empty broker_id and address")
        previous = await self.store.get(BROKERS_PREFIX + broker_id)
        if previous is not None:
            # A restarted broker re-registers under its id: its old lease and topics go.
            await self.store.revoke_lease(BrokerRecord.from_bytes(previous.value).lease_id)
        lease_id = await self.store.grant_lease(self.expiry_seconds)
        served = {name: url for name, url in (urls or {}).items() if url}
        record = BrokerRecord(broker_id, address, cluster, lease_id, load, urls=served)
        await self.store.put(BROKERS_PREFIX + broker_id, record.to_bytes(), lease_id=lease_id)
        return record

    async def heartbeat(self, broker_id: str, lease_id: int, load: dict[str, float], owned_topics: int) -> bool:
        """Renew the broker's lease; False when it already expired (the broker must re-register)."""
        if not await self.store.keepalive(lease_id):
            return False
        current = await self.store.get(BROKERS_PREFIX + broker_id)
        if current is None:
            return False
        record = BrokerRecord.from_bytes(current.value)
        if record.lease_id != lease_id:
            return False
        record.load, record.owned_topics, record.last_heartbeat = load, owned_topics, time.time()
        try:
            await self.store.put(BROKERS_PREFIX + broker_id, record.to_bytes(), lease_id=lease_id)
        except LeaseExpiredError:
            return False
        return True

    async def unregister(self, broker_id: str, lease_id: int) -> None:
        current = await self.store.get(BROKERS_PREFIX + broker_id)
        if current is not None and BrokerRecord.from_bytes(current.value).lease_id == lease_id:
            await self.store.revoke_lease(lease_id)

    async def get(self, broker_id: str) -> BrokerRecord | None:
        found = await self.store.get(BROKERS_PREFIX + broker_id)
        return None if found is None else BrokerRecord.from_bytes(found.value)

    async def live_brokers(self) -> list[BrokerRecord]:
        found = await self.store.list(BROKERS_PREFIX)
        return [BrokerRecord.from_bytes(item.value) for item in found.values()]
