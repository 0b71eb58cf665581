"""The dlq-worker: takes dead letters from every broker (DeadLetterService), publishes each to its
dead-letter topic with its origin, exactly once, and reports it moved so the broker acknowledges
it. It is a client of Herald (herald.client); no service imports it."""
