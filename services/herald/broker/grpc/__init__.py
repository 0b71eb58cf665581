"""The broker's gRPC front end: servicers that translate BrokerService, AdminService and
DeadLetterService calls into calls on the core (herald.broker.core: its sessions for Produce and
Consume) and core results into replies, the per-call authorization of admin and unary calls, admin
forwarding to a topic's owner and lookup registration. Holds no broker logic of its own: a second
front end needs nothing from here. Must not know: the storage node, other front ends."""
