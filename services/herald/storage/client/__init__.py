"""The broker's side of storage (a BookKeeper client): ledger metadata, ensembles and quorums,
pipelined adds to every node of a write set, replica reads, ledger recovery and fencing. Must not
know: the storage node's modules (it speaks to nodes only through the storage contract).

- storage_client: `StorageClient(store, bootstrap_addresses, operation_timeout, add_timeout=5,
  read_timeout=5, quarantine_seconds=30)`. `create_ledger(E, Qw, Qa)` allocates a ledger id
  (/counters/ledger-id) and records the ledger OPEN on min(E, healthy nodes) nodes, never fewer than
  Qw (else ServiceNotReadyError, retryable; quarantined nodes are probed first). `open_ledger(id,
  recover=...)` opens for reading, recovering first; `delete_ledger` deletes on every node of the
  ensemble history, then the metadata. The nodes are those registered in the metadata store
  (`node_registry`), or the static bootstrap list while none registered. A node marked draining
  is left out of new ensembles, and the open ledgers this client writes move off a draining or
  no longer registered node (an ensemble change, `LedgerHandle.leave_nodes`, only as far as spare
  nodes allow: never below Qw), even while idle.
- node_registry: `NodeRegistry` lists /storage/nodes/ (storage.membership) and follows it with a
  watch (a failed watch: listed and watched again); `storage_node_usage` for the admin listing.
- ledger_metadata: /ledgers/<id> as JSON, with an ensemble history as BookKeeper keeps it
  (`ensembles`: a list of [first entry id, nodes]); `write_set(entry)` stripes round-robin over
  the ensemble in force for that entry.
- add_frame: an add serialized once for every node it goes to, BookKeeper's one buffer for every
  bookie. An `AddFrame` is its `adds` field of an AddBatchRequest, protobuf's canonical bytes, built
  around the broker's entry bytes. An add sent alone is the same bytes object on every node's
  stream; adds queued together are joined into one message.
- node_connection: per node a channel and one pipelined AddEntryBatches stream, written with
  serialized requests (its request serializer is the identity). Adds queued while a message is
  being written leave together, in messages of at most ADD_BATCH_MAX_BYTES (8 MiB). An add not
  answered within add_timeout fails the stream: a SIGSTOPped node keeps its TCP connection, so
  only the timeout notices. `NodePool`: the bootstrap list, and the quarantine (quarantine_seconds)
  of nodes that failed or timed out. They are left out of new ensembles and replacements, read
  from last, and probed before a ledger is refused for want of healthy nodes.
- local_node: adds to a node of this process (`herald standalone`, `serve_locally(address, store)`)
  go to its ledger store directly, with the entry's bytes object and the answers its stream would
  give (in order, refusals, add_timeout); known only as the `LocalStore` protocol.
- ledger_handle: `LedgerHandle.add_entry_nowait(data, callback)` gives ids in call order, sends
  each entry's one frame to its write set, and completes adds in entry order once Qa nodes of that
  write set acknowledged (`PendingAdd`). This is the one completion point of adds, a callback per
  add and no task per add; `add_entry` awaits the same. A node failing for adds (a stream error, a
  refusal, a timeout, any error but FENCED) triggers an ensemble change. Completions pause; each
  failed node is replaced in place by a healthy spare or, with none, dropped (shrinking, down to
  Qw nodes; below that the adds fail with PersistenceError and the managed ledger rolls over). The
  new ensemble is recorded by CAS from LAC + 1 (a lost CAS means a recoverer took the ledger:
  FencedError; a change autorecovery made to a fragment before the current ensemble is merged
  in and the CAS retried). The waiting adds are sent to the nodes of their new write sets that lack them, and
  only acks from those count. FENCED from any node fails every waiting add with FencedError at once.
- replica_read: a read takes each entry from any node of its write set, and the contiguous entries
  one node holds in one ReadEntries call (a striped ledger's run in parallel). It fails over on any
  error, or on a chunk not arriving within read_timeout; a ChecksumError is logged as corruption on
  that node. A read fails only when every replica of an entry failed.
- recovery: `LedgerRecoveryOp` (`open_ledger(recover=True)`). It marks the ledger IN_RECOVERY by
  CAS (a lost CAS is another recoverer: CLOSED means just open it), then fences the last ensemble
  (enough when E - Qa + 1 nodes answered). It starts at the highest LAC they report (piggybacked
  on every add) and replaces unreachable nodes by an ensemble change from LAC + 1. It reads forward
  entry by entry (a window ahead) until Qw - Qa + 1 replicas lack an entry, re-adds each entry found
  to its write set with the recovery flag (Qa must take it), and closes by CAS. The recovered length
  counts the entries before the last ensemble and those recovered after the LAC, not the last
  ensemble's entries up to the LAC: that would need the writer's length piggybacked with its LAC,
  as BookKeeper's entry header carries it.
"""
