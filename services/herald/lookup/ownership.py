"""Topic ownership: /ownership/<topic> names the broker serving a topic. The key is ephemeral on
that broker's lease, so a broker that expires drops all its topics at once and the next lookup
assigns them again; assignment is a compare-and-set, so concurrent lookups agree on one owner.
A broker that unloads a topic deletes its key and leaves /unloading/<topic> naming itself for a few
seconds: the next assignment passes it over while another broker is live, so the topic moves."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from herald.common.bounded import Pacer
from herald.common.errors import BadVersionError, ServiceNotReadyError
from herald.common.ownership import OWNERSHIP_PREFIX, Owner, ownership_key, unloading_key
from herald.lookup.placement import least_loaded
from herald.lookup.registry import BrokerRecord, BrokerRegistry
from herald.metadata.store import NOT_EXISTS, LeaseExpiredError, MetadataStore

if TYPE_CHECKING:
    from herald.lookup.metrics import LookupMetrics

# Topics whose assignment this lookup remembers, to count a later one as a reassignment.
REMEMBERED_ASSIGNMENTS = 100_000
# How long the topics-per-broker counts read from the ownership records serve assignments. Reading
# and parsing every record of the cluster for each new topic made assigning n topics cost O(n²)
# (10,000 topics: 50 million records parsed); between reads, each assignment counts itself.
COUNTS_MAX_AGE_SECONDS = 1.0


def _is_live(owner: Owner, brokers: list[BrokerRecord]) -> bool:
    return any(b.broker_id == owner.broker_id and b.lease_id == owner.lease_id for b in brokers)


@dataclass(slots=True)
class Placement:
    """The live brokers and their assigned topic counts, read once for many assignments (the
    partitions of one route): each assignment counts itself here, so the partitions still spread,
    and the cluster's ownership records are not read and parsed again for every partition."""

    brokers: list[BrokerRecord]
    counts: dict[str, int]


class OwnershipAssigner:
    def __init__(self, store: MetadataStore, registry: BrokerRegistry, metrics: LookupMetrics | None = None,
                 counts_max_age: float = COUNTS_MAX_AGE_SECONDS) -> None:
        self.store = store
        self.registry = registry
        self.assignments = 0
        self.metrics = metrics
        # Topics assigned here lately, oldest first: an owner's lease expiring deletes its ownership
        # keys, so this is how a topic whose broker died is told from a new one.
        self._assigned: OrderedDict[str, None] = OrderedDict()
        self._counts_max_age = counts_max_age
        self._counts: dict[str, int] = {}
        self._counts_read_at = -float("inf")
        self._counts_lock = asyncio.Lock()  # concurrent lookups share one read of the records

    async def placement(self) -> Placement:
        return Placement(await self.registry.live_brokers(), dict(await self._assigned_counts()))

    async def lookup(self, topic: str, placement: Placement | None = None) -> Owner:
        """The topic's owner, assigning the least-loaded live broker when it has none (by
        `placement` when given: a snapshot shared by the lookups of one route)."""
        for _ in range(10):
            current = await self.store.get(ownership_key(topic))
            brokers = placement.brokers if placement is not None else await self.registry.live_brokers()
            if current is not None:
                owner = Owner.from_bytes(current.value)
                if placement is not None and not _is_live(owner, brokers):
                    brokers = await self.registry.live_brokers()  # the snapshot may predate its registration
                if _is_live(owner, brokers):
                    return owner
            if not brokers:
                raise ServiceNotReadyError("no broker is available: none has registered with lookup")
            unloaded_by = await self._unloaded_by(topic)
            counts = placement.counts if placement is not None else await self._assigned_counts()
            chosen = least_loaded(brokers, counts, unloaded_by)
            if placement is not None:  # counted at once: the route's other lookups choose meanwhile
                placement.counts[chosen.broker_id] = placement.counts.get(chosen.broker_id, 0) + 1
            try:
                owner = await self._assign(topic, chosen, current.version if current else NOT_EXISTS)
            except (BadVersionError, LeaseExpiredError):
                if placement is not None:
                    placement.counts[chosen.broker_id] -= 1
                placement = None  # another lookup assigned it, or the chosen broker expired: look afresh
                continue
            # Counted in the cached counts too, so that assignments before their next read spread.
            self._counts[chosen.broker_id] = self._counts.get(chosen.broker_id, 0) + 1
            self._count(topic, had_owner=current is not None or bool(unloaded_by))
            return owner
        raise ServiceNotReadyError(f"could not assign an owner to {topic}: too much contention")

    async def _assign(self, topic: str, broker: BrokerRecord, expected_version: int) -> Owner:
        owner = Owner(broker.broker_id, broker.address, broker.lease_id)
        await self.store.put(
            ownership_key(topic), owner.to_bytes(), expected_version=expected_version, lease_id=broker.lease_id
        )
        self.assignments += 1
        return owner

    def _count(self, topic: str, had_owner: bool) -> None:
        assigned = self._assigned
        reassigned = had_owner or topic in assigned
        assigned[topic] = None
        assigned.move_to_end(topic)
        if len(assigned) > REMEMBERED_ASSIGNMENTS:
            assigned.popitem(last=False)
        if self.metrics is not None:
            self.metrics.assignments.inc()
            if reassigned:
                self.metrics.reassignments.inc()

    async def _unloaded_by(self, topic: str) -> set[str]:
        """The broker that unloaded the topic moments ago, if any: not to be given it back."""
        marker = await self.store.get(unloading_key(topic))
        return {marker.value.decode()} if marker is not None else set()

    async def _assigned_counts(self) -> dict[str, int]:
        """Topics assigned per broker, as read at most `counts_max_age` seconds ago (plus the
        assignments made here since): placement needs a fair spread, not an exact count."""
        async with self._counts_lock:
            if time.monotonic() - self._counts_read_at >= self._counts_max_age:
                self._counts = await self._read_counts()
                self._counts_read_at = time.monotonic()
        return self._counts

    async def _read_counts(self) -> dict[str, int]:
        """Every ownership record of the cluster parsed, giving the event loop back as it goes (a
        cluster may own a great many partitions)."""
        counts: dict[str, int] = {}
        pacer = Pacer()
        for item in (await self.store.list(OWNERSHIP_PREFIX)).values():
            broker_id = Owner.from_bytes(item.value).broker_id
            counts[broker_id] = counts.get(broker_id, 0) + 1
            await pacer.pace()
        return counts
