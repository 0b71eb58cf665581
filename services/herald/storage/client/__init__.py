"""The broker's side of storage (a BookKeeper client): ledger metadata, ensembles and quorums,
pipelined adds to every node of a write set, replica reads, ledger recovery and fencing. Must not
know: the storage node's modules (it speaks to nodes only through the storage contract)."""
