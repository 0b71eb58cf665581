"""Who may ask lookup what: broker registration and heartbeats are the brokers' roles'; a topic's
owner, route or partitions need produce or consume on it; a namespace's topic list needs a grant on
the namespace (herald.metadata.authorization decides); the cluster's brokers, any authenticated
role (clients and dlq-workers find brokers that way)."""

from __future__ import annotations

from typing import Any

from herald.metadata.authorization import Authorizer

_BROKER_CALLS = frozenset({"RegisterBroker", "Heartbeat", "UnregisterBroker"})
_TOPIC_CALLS = frozenset({"LookupTopic", "GetPartitionedTopicMetadata", "GetTopicRoute"})


class LookupAuthorization:
    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    async def decide(self, method: str, request: Any, role: str | None) -> None:
        authorizer = self.authorizer
        if method in _BROKER_CALLS:
            authorizer.check_broker(role, "register brokers")
        elif method in _TOPIC_CALLS:
            await authorizer.check_lookup(role, request.topic)
        elif method == "GetTopicsOfNamespace":
            await authorizer.check_namespace(role, request.namespace)
        elif role is None:
            authorizer.check_superuser(role, method)
