"""Durable, replicated entry storage (BookKeeper's design): `node/` is the storage service (a
bookie) on its own disk; `client/` is the broker's side (ledgers, ensembles, quorums, recovery). The
two share only the storage contract (proto/herald/v1/storage.proto) and know nothing of each other
(import-linter: an independence contract; the broker imports the client only).

Entry bytes are opaque to storage; a node guards them with a checksum of its own.

The contract: AddEntryBatches, pipelined, many adds per gRPC message: a grpc.aio stream moves only
about 5,000 messages a second, so batching adds into messages is what makes small entries fast. It
is the one the client uses; AddEntries is the same with one add per message. Then ReadEntries
(streamed in chunks), ReadLastAddConfirmed, Fence and DeleteLedger. A ledger is an append-only
sequence of entries with one writer, its metadata (/ledgers/<id>: ensembles, Qw, Qa, state) in the
metadata store, changed by compare-and-set.
"""
