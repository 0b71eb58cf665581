"""The storage service (a BookKeeper bookie): the journal that makes adds durable with group-commit
fsync (an add is answered then), the entry log that makes reads cheap (written afterwards), the
index from (ledger, entry) to a position, compaction, and the gRPC server. Must not know: the
storage client, the broker."""
