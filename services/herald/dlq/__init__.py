"""The dlq-worker: takes dead letters from every broker (DeadLetterService), publishes each to its
dead-letter topic with its origin, exactly once, and reports it moved so the broker acknowledges
it; and the dead-letter topics' other side, peek and replay (`herald admin dlq`). It is a client of
Herald (herald.client, the contracts in herald.api, herald.common) and knows nothing of broker or
lookup code; no service imports it (herald.cli and standalone may)."""
