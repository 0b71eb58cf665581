"""Autorecovery (BookKeeper's AutoRecovery): keeps every entry at Qw copies when a storage node is
drained (`herald admin storage drain`) or dies (its registration expired longer than a grace ago),
by copying the entries it held to another node and recording that in the ledger's ensemble history.
Must not know: the broker, the storage node's modules (it is a client of the storage contract, like
the broker).

It runs inside every `herald storage` process given --metadata-url (as BookKeeper's
autoRecoveryDaemonEnabled runs it in each bookie: nothing more to deploy, and it scales with the
nodes), and one of them at a time is the auditor, elected by an ephemeral key on a lease
(/storage/autorecovery/auditor). It is its own package, not part of the node, because it is a
storage client: the node must not know the client (import-linter). `herald standalone` does not
run it: its one storage node does not register and has no other node to copy to.

- replicate: `FragmentReplicationOp` copies the entries of one fragment (the entries of one ensemble
  of the history) whose write set holds a lost node to a node outside that ensemble, reading each
  from a surviving replica (the node checks its crc and refuses a damaged copy: another replica
  answers), reads the copies back from the target and compares their crc32 with what was read, then
  replaces the lost node in that ensemble by compare-and-set.
- auditor: `Auditor.audit()` lists /ledgers/, CLOSED ledgers first, and replicates every fragment on
  a draining or gone node; an OPEN ledger's current ensemble is left to its writer (which moves off
  a draining node by an ensemble change, storage.client), only its earlier fragments are copied
  (the writer merges that change into its own compare-and-sets). `AutoRecovery` is the daemon:
  the election, and an audit every autorecovery_interval.
"""
