"""The topics of a namespace, as pattern consumers list them: partitioned topics by their base
name (partitions left out), non-partitioned ones as they are, optionally of one domain only."""

from __future__ import annotations

from herald.metadata.resources import Resources


async def topics_of_namespace(resources: Resources, namespace: str, domain: str | None = None) -> list[str]:
    """Sorted full names; domain "persistent" or "non-persistent" keeps that domain only (None:
    both). NotFoundError for an unknown tenant or namespace."""
    topics = await resources.list_topics(namespace)
    if domain is None:
        return topics
    return [topic for topic in topics if topic.startswith(f"{domain}://")]
