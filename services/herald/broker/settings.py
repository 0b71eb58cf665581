"""The broker's settings: one dataclass with the defaults Herald runs with (Pulsar's, where the seeds
give one). Loading from config file, environment and flags happens at the edge, not here."""

from __future__ import annotations

from dataclasses import dataclass, field

from herald.common.codec.properties import DEFAULT_MAX_PROPERTIES, DEFAULT_MAX_PROPERTIES_BYTES
from herald.common.config import check_metrics_port, check_server_limits
from herald.common.errors import InvalidArgumentError
from herald.common.limits import DATA_SERVER_MAX_RECEIVE_BYTES, DEFAULT_MAX_STREAMS_PER_CONNECTION
from herald.common.security.settings import MetricsEndpointSettings, SecuritySettings

MIB = 1024 * 1024
# A producer's send carries an entry up to max_message_size plus its header and framing
# (producer.ENTRY_FRAMING_ALLOWANCE), inside a SendEntry request with its own fields.
SEND_FRAMING_ALLOWANCE = 64 * 1024


@dataclass
class BrokerSettings(SecuritySettings, MetricsEndpointSettings):
    # Where the broker listens and what it tells others to dial (empty: host:port as bound).
    host: str = "127.0.0.1"
    port: int = 0
    advertised_address: str = ""
    cluster: str = "standalone"
    # The metadata store, this broker's id in lookup (empty: its address), lookup's address, and
    # the storage nodes the storage client starts from ("host:port" each).
    metadata_url: str = "redis://127.0.0.1:6379/0"
    broker_id: str = ""
    lookup_address: str = ""
    storage_nodes: list[str] = field(default_factory=list)
    # Requests larger than this are refused by gRPC with RESOURCE_EXHAUSTED (the server keeps serving),
    # from their length prefix, before they are read: a max_message_size message and its framing
    # fit (raise both together). Requests of methods other than Produce are refused past 1 MiB.
    grpc_max_receive_message_bytes: int = DATA_SERVER_MAX_RECEIVE_BYTES
    # Streams (producers, consumers, calls in progress) one client connection holds at once
    # (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): past it a client's new stream waits in the client
    # until one ends. With grpc_max_receive_message_bytes it bounds the request bytes a connection
    # has in flight.
    max_streams_per_connection: int = DEFAULT_MAX_STREAMS_PER_CONNECTION
    # Client connections (one TCP connection each, whatever its calls) from one client address: past
    # max_connections_per_address (0: no limit) a new connection's calls are refused with
    # RESOURCE_EXHAUSTED. Only live, authenticated connections count: one with a call in progress
    # that passed authentication. While it is on, a connection with no call for
    # connection_idle_timeout seconds is closed.
    max_connections_per_address: int = 0
    connection_idle_timeout: float = 300.0
    # Pulsar's binary protocol, for the official Pulsar clients (herald.broker.pulsar): pulsar:// on
    # pulsar_port and pulsar+ssl:// on pulsar_tls_port (with the broker's TLS certificate); -1: not
    # served, 0: a free port. The URLs clients are redirected to name pulsar_advertised_host (empty:
    # the host of advertised_address, else host). An idle connection is pinged after
    # pulsar_keepalive_seconds and closed when it stays silent as long again.
    pulsar_port: int = -1
    pulsar_tls_port: int = -1
    pulsar_advertised_host: str = ""
    pulsar_keepalive_seconds: float = 30.0

    # Storage client: an add or read a node has not answered within these seconds fails over to
    # another node (a paused node keeps its connections open), and a failed node is left out of
    # new ensembles for storage_quarantine_seconds.
    storage_operation_timeout: float = 30.0
    storage_add_timeout: float = 5.0
    storage_read_timeout: float = 5.0
    storage_quarantine_seconds: float = 30.0
    # Messages of adds written to one storage node and not yet answered, at most (0: no limit):
    # adds made meanwhile leave together in the next message, one per group commit of the node.
    storage_add_batches_in_flight: int = 1

    # Producers. A producer stream that ends cleanly gets its outstanding receipts for this long.
    receipt_drain_seconds: float = 30.0
    # Sends of one producer stream without their receipt yet: at this many the broker stops reading
    # the stream until receipts go out (flow control, as Pulsar's maxPendingPublishRequestsPerConnection:
    # the client's writes wait, nothing fails).
    max_pending_sends: int = 1000
    deduplication_enabled: bool = True
    max_message_size: int = 5 * MIB
    # Entries between two dedup snapshots; recovery replays at most about this many entries.
    dedup_snapshot_interval: int = 1000
    # A producer name with nothing connected for this long is forgotten by dedup (Pulsar: 6 h).
    dedup_producer_inactivity_seconds: float = 6 * 3600.0

    # Managed ledger: when the open ledger is full it is closed and a new one created.
    max_entries_per_ledger: int = 50_000
    max_size_per_ledger: int = 2048 * MIB
    max_ledger_age_seconds: float = 4 * 3600.0
    # A ledger younger than this never rolls over (avoids many tiny ledgers under bursts); Pulsar: 10 min.
    min_ledger_rollover_seconds: float = 600.0
    # After a failed ledger creation, adds fail fast for this long instead of piling up.
    ledger_creation_retry_seconds: float = 10.0
    # Storage quorums of new ledgers: E nodes, Qw copies of each entry, acknowledged after Qa.
    # A cluster's default; standalone (one storage node) runs 1/1/1.
    ensemble_size: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2

    # Cursors: dirty cursors are persisted at least this often (and on close).
    cursor_flush_interval: float = 1.0

    # Retention (Pulsar's meaning): a ledger every subscription has consumed (with no subscription:
    # any but the open one) is kept while it closed less than retention_time_seconds ago AND lies
    # within the newest retention_size_bytes of the topic; -1 is no limit, 0 keeps nothing.
    # Herald's default keeps consumed data for 7 days (Kafka's default) rather than Pulsar's
    # 0 / 0, so that a subscription made after the fact still finds recent messages.
    retention_time_seconds: float = 7 * 24 * 3600.0
    retention_size_bytes: int = -1
    retention_check_interval: float = 60.0

    # Message TTL (Pulsar's): entries published longer than message_ttl_seconds ago are
    # acknowledged on every durable subscription, checked every message_expiry_check_interval
    # seconds. 0 = messages never expire; namespace and topic policies override it per topic.
    message_ttl_seconds: int = 0
    message_expiry_check_interval: float = 60.0

    # Backlog quota (Pulsar's default: none): the unacknowledged data of a topic's slowest durable
    # subscription, in bytes and by the age of its oldest entry (-1: no limit); over it, sends wait
    # (producer_request_hold), fail (producer_exception) or the slowest cursors move on
    # (consumer_backlog_eviction). Checked every backlog_quota_check_interval seconds and, for
    # size, on publish. Namespace and topic policies override the quota per topic.
    backlog_quota_limit_bytes: int = -1
    backlog_quota_limit_seconds: int = -1
    backlog_quota_policy: str = "producer_request_hold"
    backlog_quota_check_interval: float = 60.0

    # Per topic limits (0: unlimited), overridable by namespace and topic policies.
    max_producers_per_topic: int = 0
    max_consumers_per_topic: int = 0
    max_consumers_per_subscription: int = 0
    # Topics per namespace (0: unlimited; a partitioned topic counts its partitions), overridable
    # by the namespace's max_topics policy: creating one more, auto-creation included, is refused.
    max_topics_per_namespace: int = 0
    # Properties a producer registers with (RegisterProducer.properties) or a consumer subscribes
    # with (Subscribe.properties): the broker keeps them while it is connected, for stats. More than
    # max_properties pairs, or more than max_properties_bytes of keys and values (UTF-8), and the
    # registration or subscription is refused (InvalidArgumentError). Pulsar has no such limit.
    max_properties: int = DEFAULT_MAX_PROPERTIES
    max_properties_bytes: int = DEFAULT_MAX_PROPERTIES_BYTES
    # Partitions of one partitioned topic (CreateTopic, UpdatePartitions), overridable by the
    # namespace's max_partitions_per_topic policy (raising it past this setting is a super-user's
    # call). At least 1: there is no "unlimited", since every admin call on a partitioned topic
    # (stats, routes, unload, delete) works partition by partition.
    max_partitions_per_topic: int = 1000

    # Unloading a topic keeps lookup from giving it back to this broker for this long (when another
    # broker is live), so that an unload moves the topic.
    unload_exclusion_seconds: float = 10.0

    # Entry cache shared by all topics of this broker, in bytes.
    entry_cache_max_bytes: int = 64 * MIB

    # Stats: message rates are the growth of the counters over about this many seconds, from
    # samples taken when stats are asked for (broker.core.rates).
    stats_rate_window_seconds: float = 10.0

    # Dispatch: entries read ahead per storage read, entries per consumer per round-robin turn on
    # Shared subscriptions (1 gives the order Pulsar documents for priority levels), entries
    # buffered per consumer for the adapter to send, and the pause after a failed read before
    # trying again.
    dispatch_max_read_entries: int = 100
    dispatch_round_robin_batch: int = 1
    consumer_max_buffered_entries: int = 1000
    dispatch_retry_seconds: float = 1.0
    # Catch-up reads (broker.core.read_ahead): a cursor whose next entry is not cached reads from
    # storage past what its consumers asked for, while they are served, into a buffer of at most
    # read_ahead_max_bytes (0: no read-ahead), at most read_ahead_max_entries per storage read; all
    # cursors' buffers together hold at most read_ahead_total_max_bytes. Such reads bypass the entry
    # cache, so a catch-up reader does not evict the entries tail readers need.
    read_ahead_max_bytes: int = 4 * MIB
    read_ahead_max_entries: int = 5000
    read_ahead_total_max_bytes: int = 64 * MIB

    # Non-persistent topics: entries per topic on their way to consumers (handed to one, not yet
    # taken by its stream); a publish beyond it is dropped, answered (-1, -1) and counted (SEEDS §4).
    non_persistent_max_pending: int = 1000

    # Prometheus /metrics (herald.broker.core.metrics): 0 picks a free port, -1 serves none (an embedding
    # process serves the registry itself). metrics_topic_level: per-topic and per-subscription
    # labels; off, the same families are broker-wide sums (for clusters with very many topics).
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9102
    metrics_topic_level: bool = True

    # Pulsar's admin REST API and HTTP lookup (herald.broker.rest) on this port of `host`, HTTPS when
    # the broker has a certificate (tls_cert_file); 0 picks a free port, -1 (the default until the
    # port plan is settled: brokers of one host must not collide) serves none.
    web_port: int = -1

    def __post_init__(self) -> None:
        check_metrics_port(self.metrics_port)
        if self.web_port < -1 or self.web_port > 65535:
            raise InvalidArgumentError(
                f"web_port must be a port, 0 (any free port) or -1 (no REST API), got {self.web_port}")
        check_server_limits(self)
        if self.pulsar_tls_port >= 0 and not self.tls_cert_file:
            raise InvalidArgumentError("pulsar_tls_port needs the broker's TLS certificate: set tls_cert_file and "
                                       "tls_key_file, or leave pulsar_tls_port at -1")
        if self.storage_add_batches_in_flight < 0:
            raise InvalidArgumentError(
                f"storage_add_batches_in_flight must be 0 (no limit) or more (messages of adds unanswered per "
                f"storage node), got {self.storage_add_batches_in_flight}")
        if self.pulsar_keepalive_seconds <= 0:
            raise InvalidArgumentError(
                f"pulsar_keepalive_seconds must be positive, got {self.pulsar_keepalive_seconds}")
        if self.max_partitions_per_topic < 1:
            raise InvalidArgumentError(
                f"max_partitions_per_topic must be at least 1, got {self.max_partitions_per_topic}: "
                "there is no unlimited (every admin call on a partitioned topic works per partition)")
        if self.read_ahead_max_bytes < 0 or self.read_ahead_total_max_bytes < 0 or self.read_ahead_max_entries < 1:
            raise InvalidArgumentError(
                f"read_ahead_max_bytes and read_ahead_total_max_bytes must be 0 (no read-ahead) or more and "
                f"read_ahead_max_entries at least 1, got {self.read_ahead_max_bytes}, "
                f"{self.read_ahead_total_max_bytes} and {self.read_ahead_max_entries}")
        if self.max_pending_sends < 1:
            raise InvalidArgumentError(f"max_pending_sends must be at least 1, got {self.max_pending_sends}")
        if self.max_properties < 0 or self.max_properties_bytes < 0:
            raise InvalidArgumentError(
                f"max_properties and max_properties_bytes must be 0 (none allowed) or more, got "
                f"{self.max_properties} and {self.max_properties_bytes}")
        needed = self.max_message_size + SEND_FRAMING_ALLOWANCE
        if self.grpc_max_receive_message_bytes < needed:
            raise InvalidArgumentError(
                f"grpc_max_receive_message_bytes ({self.grpc_max_receive_message_bytes}) is too small for "
                f"max_message_size ({self.max_message_size}): a producer's send of one message that size takes "
                f"up to {needed} bytes; raise grpc_max_receive_message_bytes (and the proxy's and storage "
                "nodes' with it)")

    @property
    def address(self) -> str:
        return self.advertised_address or f"{self.host}:{self.port}"
