"""The storage service (a BookKeeper bookie): the journal that makes adds durable with group-commit
fsync (an add is answered then), the entry log that makes reads cheap (written afterwards), the
index from (ledger, entry) to a position, compaction, and the gRPC server. Must not know: the
storage client, the broker.

- journal: append-only journal files. One writer thread takes every add queued since the last sync,
  writes them with one writev and one fdatasync, then completes all their futures (group commit:
  an add is acknowledged only after the sync that covers it). The journal alone makes an add
  durable. The ledger store's work after the sync (the entry-log write) runs on the writer thread
  after the batch was handed to the loop to be answered, and before the next group is written, so
  it needs no queue or memory bound of its own. Its outcome goes to the loop with the next group's
  completion (one wake-up of the loop per group), at once when the journal is idle, or before a
  checkpoint, a compaction or the stop. On open, `replay` reads the files the last checkpoint does
  not cover and truncates a torn last record.
- entry_log: entries appended to rotating entry-log files, each wrapped with the node's own crc32c
  and read back with header and data checks: a mismatch is ChecksumError, never data.
- index_db: the committed index in LMDB (index.lmdb/): big-endian (ledger id, entry id) -> entry
  log location, per ledger its LAC, fencing and last entry, live entries per entry log file and the
  journal file a restart replays from, all written in one fsynced transaction per checkpoint. Reads
  are memory-mapped lookups (~2 us, done inline on the loop; a range is one cursor pass).
- index: the MISSING / UNLOGGED markers, and the index snapshot of older releases (read once, to
  migrate it into LMDB).
- ledgers: what the node knows of its ledgers, changed in two steps per batch, in journal order:
  `journaled` (the entries are held from then on: reads get the bytes of unlogged entries from
  memory, LACs and fences take effect) and `logged` (the index points at the entry log).
  Locations changed since the last checkpoint sit in a per-ledger overlay read before LMDB; a
  checkpoint commits the logged ones and empties it. Unlogged entries are left out: they are in
  the journal it does not cover. A deleted ledger's committed entries are counted off their entry
  log files' live entries on a thread, from a read of LMDB as of the delete, before the next
  checkpoint.
- usage, compaction: bytes per ledger per entry-log file, counted on append and scanned for files found at
  start. A sealed file whose live fraction is below compaction_threshold (0.5, checked every
  compaction_interval, 60 s) has its live entries copied to the current entry log on the journal's
  writer thread (crc kept) and the index repointed. The checkpoint that follows fsyncs the copies
  and commits the index before the old file is deleted, so a crash at any step loses nothing. A
  read whose file vanished under it (compacted after the lookup) looks its entries up again.
- ledger_store: ties them together. An add is refused with FENCED on a fenced ledger unless it is a
  recovery add. Then come reads, LAC, fence (journaled), delete, and checkpoints every
  checkpoint_interval (10 s): a new journal file, the entry logs fsynced, the index committed
  without the entries not logged yet, the journal files it covers deleted, and entry-log files
  with no live entry. Recovery at start opens LMDB and replays the journal written after the
  position it holds (idempotently). A failed journal write, or a failed entry-log write, fails the
  journal: the node takes no more writes (and is not ready) until a restart replays it.
- server: the thin StorageService servicer (errors: an add's in its AddResponse, the stream goes
  on; other calls abort with "<ErrorCode number>:<message>") and `StorageServer`. With
  authorization on, only the brokers' roles and super-users may call it.
- registration: with metadata_url, /storage/nodes/<address> (storage.membership) on a lease of
  registration_ttl renewed every third of it, with the disk's free bytes and the drain mark.
- gc: with metadata_url, ledgers held here whose metadata is gone (a delete that never reached this
  node) are deleted, once absent from two listings gc_grace apart (local ledgers listed first).
- metrics: the node's metrics; a scrape calls the ledger store's `reading` (metrics knows no other
  node module).
"""
