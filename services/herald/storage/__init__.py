"""The storage node (a BookKeeper bookie): durable entry storage for ledgers on the node's own disk.

A journal makes each add durable (group commit: many adds share one fsync), an entry log keeps the
entries for cheap reads, an index maps (ledger, entry) to a place in the entry log, and fencing
stops a stale writer. `server` exposes it over gRPC; `client` is the broker's side of the contract.

The node knows ledgers and entries only: nothing of topics, brokers, ensembles or quorums. Entry
bytes are opaque to it; it guards them with a checksum of its own.
"""
