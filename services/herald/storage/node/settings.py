"""Settings of a storage node: one plain dataclass with defaults (loading from env/flags is the CLI's)."""

from __future__ import annotations

from dataclasses import dataclass

from herald.common.config import check_metrics_port, check_server_limits
from herald.common.errors import InvalidArgumentError
from herald.common.limits import DEFAULT_MAX_STREAMS_PER_CONNECTION
from herald.common.security.settings import MetricsEndpointSettings, SecuritySettings

MIB = 1024 * 1024


@dataclass
class StorageSettings(SecuritySettings, MetricsEndpointSettings):
    # Where the journal, entry logs and index (LMDB) live (the node's PVC).
    data_dir: str = "data/storage"
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port; the server reports the one it bound
    # Seconds between checkpoints (entry log fsync + index commit + old journal files deleted).
    checkpoint_interval: float = 10.0
    # A journal file is closed and a new one started once it grows past this size.
    journal_file_max_size: int = 256 * MIB
    # At most this many bytes are written by one group commit (one fsync); the rest wait for the next.
    journal_max_group_bytes: int = 8 * MIB
    # Adds waiting for the journal beyond this many bytes make new adds wait (backpressure).
    journal_max_queued_bytes: int = 128 * MIB
    # An entry log file is closed and a new one started once it grows past this size.
    entry_log_max_size: int = 512 * MIB
    # Entry log compaction: every compaction_interval seconds, a sealed entry log file whose live
    # bytes (entries of ledgers not deleted) are below this fraction of it has them copied to the
    # current file and is deleted (BookKeeper's minor/major compaction in one). 0 disables it.
    compaction_threshold: float = 0.5
    compaction_interval: float = 60.0
    # The most bytes the index (LMDB, index.lmdb/ in data_dir) may grow to. LMDB reserves this much
    # address space but the file only takes the pages written (about 40 bytes per entry held); when
    # full, checkpoints fail with a PersistenceError (the journal keeps everything) until the node
    # restarts with a larger value.
    index_map_size: int = 64 * 1024 * MIB
    # Index locations changed since the last checkpoint are kept in memory (about 150 bytes each)
    # until it commits them to LMDB: past this many, a checkpoint starts at once.
    index_overlay_max_entries: int = 1_000_000
    # Default upper bound of the entry bytes in one ReadEntries response chunk.
    read_chunk_max_bytes: int = 1 * MIB
    # Adds of one AddEntries stream that may wait for their journal fsync at the same time.
    max_pending_adds_per_stream: int = 10_000
    # Entry ids of a ledger are dense: an add this far beyond the last entry held is refused.
    max_entry_id_gap: int = 1_000_000
    # Seconds that stop() lets running RPCs finish before cancelling them.
    stop_grace: float = 5.0
    # Requests larger than this are refused by gRPC with RESOURCE_EXHAUSTED (the server keeps serving),
    # from their length prefix, before they are read. A broker packs adds into messages of at most
    # 8 MiB (one bigger entry goes alone: keep this above the brokers' max_message_size plus
    # framing); requests of methods other than the add streams are refused past 1 MiB.
    grpc_max_receive_message_bytes: int = 16 * MIB
    # Streams (producers, consumers, calls in progress) one client connection holds at once
    # (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): past it a client's new stream waits in the client
    # until one ends. With grpc_max_receive_message_bytes it bounds the request bytes a connection
    # has in flight.
    max_streams_per_connection: int = DEFAULT_MAX_STREAMS_PER_CONNECTION
    # Prometheus /metrics (herald.storage.node.metrics): 0 picks a free port, -1 serves none (an
    # embedding process serves the registry itself).
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9103
    # Disk full (storage.node.space): adds are refused with StorageFullError (the writer moves the
    # ledger to other nodes; reads, fencing and deletes go on) while the data directory's files
    # (journal, entry logs, index) take max_data_bytes or more (0: no cap), or the file system has
    # less than min_free_bytes free, which keeps room for what an acknowledged add still writes (its
    # entry log copy), for fences, deletes and checkpoints. Adds are taken again once space returns.
    max_data_bytes: int = 0
    min_free_bytes: int = 64 * MIB
    # Fault injection, for tests only: the journal's writer sleeps this long before each fsync
    # (a slow disk). 0 (the default) injects nothing.
    fault_fsync_delay_ms: int = 0
    # Registration (storage.membership): with a metadata store URL the node registers
    # /storage/nodes/<advertised_address> on a lease of registration_ttl seconds (renewed every
    # third of it), so brokers find it without a restart. "" registers nothing (brokers' static list).
    metadata_url: str = ""
    advertised_address: str = ""  # host:port brokers dial (default: host:port as bound)
    registration_ttl: float = 10.0
    # Autorecovery (herald.autorecovery) runs in the storage process when it registers: every
    # autorecovery_interval seconds the elected auditor re-replicates the entries of draining nodes,
    # and of nodes unregistered for longer than autorecovery_grace seconds (0: autorecovery off).
    autorecovery_interval: float = 30.0
    autorecovery_grace: float = 60.0
    # Ledger garbage collection (with metadata_url): every gc_interval seconds, ledgers held here
    # whose metadata is gone (their delete never reached this node) and stayed gone for gc_grace
    # seconds are deleted (0: off).
    gc_interval: float = 300.0
    gc_grace: float = 600.0

    def __post_init__(self) -> None:
        if not self.registration_ttl > 0:
            raise InvalidArgumentError(f"storage registration_ttl {self.registration_ttl} must be > 0 seconds")
        for name in ("autorecovery_interval", "autorecovery_grace", "gc_interval", "gc_grace"):
            if getattr(self, name) < 0:
                raise InvalidArgumentError(f"storage {name} {getattr(self, name)} must be >= 0 seconds")
        check_metrics_port(self.metrics_port)
        check_server_limits(self)
        for name in ("max_data_bytes", "min_free_bytes", "fault_fsync_delay_ms"):
            if getattr(self, name) < 0:
                raise InvalidArgumentError(f"storage setting {name} is {getattr(self, name)}: it must be 0 or more")
