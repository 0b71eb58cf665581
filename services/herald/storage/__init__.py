"""Durable, replicated entry storage (BookKeeper's design): `node/` is the storage service (a
bookie) on its own disk; `client/` is the broker's side (ledgers, ensembles, quorums, recovery). The
two share only the storage contract (proto/herald/v1/storage.proto) and know nothing of each other.

Entry bytes are opaque to storage; a node guards them with a checksum of its own.
"""
