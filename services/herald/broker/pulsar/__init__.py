"""The broker's Pulsar front end: Apache Pulsar's binary protocol (protocol version 20, what the
official clients speak) on an asyncio TCP listener, so Pulsar applications in any language produce
and consume through Herald unchanged.

Translation only, as the gRPC front end: a connection (connection.py) authenticates CONNECT
(herald.common.pulsar.auth, shared with the proxy), answers lookups (lookups.py) and drives the
core's protocol-neutral sessions through a producer endpoint per PRODUCER (producers.py) and a
consumer endpoint per SUBSCRIBE (consumers.py).
An entry a Pulsar producer sends is stored as it came (Pulsar's own entry format); a consumer
receives stored entries as they are, Herald-format ones translated to Pulsar's on the way out
(herald.common.codec.pulsar_entry). Framing and error codes are herald.common.pulsar's (the proxy
speaks the same protocol). Must not know: the gRPC front end, the storage node.
"""
