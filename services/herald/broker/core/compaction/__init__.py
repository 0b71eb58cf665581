"""Topic compaction (Pulsar's): the latest message of each key of a persistent topic, kept in a
compacted ledger up to a horizon, for readers with read_compacted. Part of the broker core: knows
nothing of gRPC or any front end.

- compactor: the two phases of one run (TwoPhaseCompactor), over the previous compacted view and
  the managed ledger after its horizon.
- compacted_ledger: the compacted ledger's format, its writer and `CompactedView`, the read side
  (`read_entries(start, max_entries)` by original position) that read_compacted readers use.
- state: the per-topic record in the metadata store (`/compaction/<managed ledger>`, by CAS).
- topic_compaction: `TopicCompaction`, a topic's `compaction` attribute: the published `view`,
  runs (admin trigger, threshold), status, the "__compaction" cursor, recovery on load.
"""
