"""Route info (RocketMQ's TopicRouteData): every partition (queue) of a topic with the broker that
owns it, owners assigned through the ownership assigner for partitions that have none. A topic
that is not partitioned has one route, partition -1, under its own name."""

from __future__ import annotations

from dataclasses import dataclass

from herald.common.names import TopicName
from herald.lookup.ownership import OwnershipAssigner
from herald.metadata.resources import get_partitions


@dataclass(frozen=True, slots=True)
class PartitionRoute:
    partition: int  # -1: the topic is not partitioned
    topic: str  # the partition's own name
    broker_address: str
    broker_id: str


async def topic_route(assigner: OwnershipAssigner, topic: TopicName) -> tuple[int, list[PartitionRoute]]:
    """(partitions, one route per partition); (0, [the topic's route]) when it is not partitioned."""
    partitions = await get_partitions(assigner.store, str(topic))
    names = [(index, topic.partition(index)) for index in range(partitions)] if partitions else [(-1, topic)]
    routes = []
    for index, name in names:
        owner = await assigner.lookup(str(name))
        routes.append(PartitionRoute(index, str(name), owner.address, owner.broker_id))
    return partitions, routes
