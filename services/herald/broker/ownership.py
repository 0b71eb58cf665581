"""The broker's side of topic ownership: before serving a topic it checks that lookup assigned the
topic to it, under its current lease. An assignment left from this broker's previous lease (a
restart) is taken over by compare-and-set; anyone else's is refused with NotOwnerError."""

from __future__ import annotations

from herald.common.errors import BadVersionError, NotOwnerError
from herald.common.ownership import Owner, ownership_key
from herald.metadata.store import LeaseExpiredError, MetadataStore


class BrokerOwnership:
    def __init__(self, store: MetadataStore, broker_id: str, address: str) -> None:
        self.store = store
        self.broker_id = broker_id
        self.address = address
        self.lease_id = 0  # set by registration with lookup

    async def acquire(self, topic: str) -> None:
        key = ownership_key(topic)
        current = await self.store.get(key)
        if current is None:
            raise NotOwnerError(f"topic {topic} has no owner yet: look it up again")
        owner = Owner.from_bytes(current.value)
        if owner.broker_id != self.broker_id:
            raise NotOwnerError(f"topic {topic} is owned by broker {owner.broker_id} at {owner.address}")
        if owner.lease_id == self.lease_id:
            return
        mine = Owner(self.broker_id, self.address, self.lease_id)
        try:
            await self.store.put(key, mine.to_bytes(), expected_version=current.version, lease_id=self.lease_id)
        except (BadVersionError, LeaseExpiredError) as exc:
            raise NotOwnerError(f"topic {topic} changed owner while this broker took it over: look again") from exc
