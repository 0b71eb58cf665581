"""The broker's gRPC front end: servicers that translate BrokerService, AdminService and
DeadLetterService calls into calls on the core (herald.broker.core) and core results into replies,
the per-call authorization decisions, admin forwarding to a topic's owner and lookup registration.
Holds no broker logic of its own. Must not know: the storage node, other front ends."""
