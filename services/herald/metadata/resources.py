"""What Herald keeps in the metadata store besides ledgers and cursors, and where: tenants,
namespaces with their policies, per-topic policy overrides and partitioned-topic metadata. Lookup and
brokers both read these, so the key layout lives here, in one place.

    /admin/tenants/<tenant>                     tenant (JSON)
    /admin/policies/<tenant>/<namespace>        namespace policies (JSON)
    /admin/topic-policies/<topic>               a topic's policy overrides (JSON)
    /partitioned-topics/<topic>                 {"partitions": n} for a partitioned topic
"""

from __future__ import annotations

import json

from herald.metadata.store import MetadataStore

PARTITIONED_PREFIX = "/partitioned-topics/"


def partitioned_key(topic: str) -> str:
    """The metadata key of a partitioned topic (`topic` is its full name, without partition)."""
    return PARTITIONED_PREFIX + topic


async def get_partitions(store: MetadataStore, topic: str) -> int:
    """How many partitions a topic has (its full name); 0 when it is not partitioned."""
    found = await store.get(partitioned_key(topic))
    return int(json.loads(found.value)["partitions"]) if found is not None else 0
