"""Route info (RocketMQ's TopicRouteData): every partition (queue) of a topic with the broker that
owns it, owners assigned through the ownership assigner for partitions that have none. A topic
that is not partitioned has one route, partition -1, under its own name."""

from __future__ import annotations

from dataclasses import dataclass

from herald.common.bounded import map_bounded
from herald.common.codec.names import TopicName
from herald.lookup.ownership import OwnershipAssigner
from herald.metadata.resources import get_partitions


@dataclass(frozen=True, slots=True)
class PartitionRoute:
    partition: int  # -1: the topic is not partitioned
    topic: str  # the partition's own name
    broker_address: str
    broker_id: str


async def topic_route(assigner: OwnershipAssigner, topic: TopicName) -> tuple[int, list[PartitionRoute]]:
    """(partitions, one route per partition); (0, [the topic's route]) when it is not partitioned.
    Partitions are looked up IN_FLIGHT at a time from one placement snapshot (reading and parsing
    the cluster's ownership records once per route, not once per partition)."""
    partitions = await get_partitions(assigner.store, str(topic))
    if not partitions:
        owner = await assigner.lookup(str(topic))
        return 0, [PartitionRoute(-1, str(topic), owner.address, owner.broker_id)]
    placement = await assigner.placement()

    async def route(index: int) -> PartitionRoute:
        name = str(topic.partition(index))
        owner = await assigner.lookup(name, placement)
        return PartitionRoute(index, name, owner.address, owner.broker_id)

    return partitions, await map_bounded(route, range(partitions))
