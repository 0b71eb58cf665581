"""The proxy: the one address clients outside the cluster need. It serves the client-facing gRPC
contracts (lookup, broker streams, admin) and forwards each call to the broker that owns the topic,
looking it up again when ownership moves. It keeps no state of its own.

It knows the contracts (herald.api) and common; nothing of the broker, lookup or client code."""
