"""The broker core: topics, producers and their checks, dedup, managed ledgers and cursors,
subscriptions and dispatchers, policies, stats. Protocol-neutral: front ends (gRPC, Pulsar) drive it
with plain calls and awaitables, through the sessions (producer_session, consumer_session) and the
administration calls of service.BrokerService. Must not know: grpc, the generated contracts
(herald.api), any front end, the storage node.

Its modules import each other without cycles (import-linter's acyclic_siblings), bottom up:
the log (ledger_list, entry_cache, pending_add, ledger_reader, managed_ledger, cursor, dedup,
retention, seek); a consumer and who gets what (consumer, selection, dispatcher, replay,
single_active, shared, key_shared, subscription); topics (topic_base, topic, nonpersistent_topic);
the registry, administration and service (topic_loader, topic_registry, topic_admin, service); the
sessions a front end drives (admission, producer_session, consumer_session). What a part needs of
the one above it is a Protocol it is built on (ports, ConsumerHost, DispatchSource, ProducerHost...),
never an import of its parent.

Sessions (what a front end drives):
- producer_session: `ProducerSession.register` (admission, then the producer: its name, the last
  sequence id persisted under it, the topic's max message size); `publish(sequence_id,
  highest_sequence_id, num_messages, entry, traceparent)`, which never raises (the publish span is
  made here); `room()` / `has_room`, the flow control (at max_pending_sends, 1000, sends whose
  receipts were not taken the front end stops reading, as Pulsar stops reading a connection, and
  HTTP/2 makes the client's writes wait; BrokerObserver.sends_throttled counts it);
  `receipts()`, the next receipts in request order from one completion point (`Receipts`, each send
  a `Receipt` the topic completes, the head of the line released as soon as it is done);
  `wait_closed()`; `close(drain=...)` (drained receipts still come, otherwise they are abandoned).
- consumer_session: `ConsumerSession.subscribe(SubscribeRequest)` (admission, then the consumer;
  type and initial position arrive as numbers and are checked here), `flow`, `ack`, `redeliver`,
  `negative_ack`, `seek` / `unsubscribe` (which answer an error or None), `deliveries()` (an
  awaitable batch; `delivered(batch)` ends its deliver spans once written), `next_event()`
  (ActiveConsumerChanged, EndOfTopic), `wait_closed()`, `close()`.
- admission: `Admission`, the checks of a stream's first request for every front end: produce and
  consume grants (herald.metadata.authorization.Authorizer; None when authorization is off),
  produce on a dead-letter policy's topics (`check_dead_letter_topics`, also used by the admin
  decisions), the properties limits (max_properties, max_properties_bytes). outcome.as_herald_error:
  sessions answer HeraldErrors only.

Topics, registry and administration:
- service: `BrokerService`, the front door. It is the topic administration (a TopicAdmin), holds
  the registry (`topics`) and does `create_producer` / `subscribe`. On a stored topic the
  dead-letter policy in force is the one an admin set (read from the metadata store at every
  subscribe), else the subscriber's. The broker-wide entry cache and dead-letter queue are made here.
- topic_registry: `TopicRegistry`, topics by name. Each is loaded once, concurrent callers sharing
  the load, after `ownership.acquire`. The tenant and namespace must exist (NotFoundError), and
  neither a partition past its topic's count nor a partitioned topic's base name is loaded (its data
  lives in its partitions): a client may dial a broker directly, past lookup's checks. Policies are
  applied at load and live (PoliciesWatcher). Unload closes the topic (refused meanwhile with
  ServiceNotReadyError, "look it up again"; producers and consumers are told to reconnect; cursors,
  the dedup snapshot and the managed ledger are persisted) and then releases its ownership. A topic
  is closed locally, writing nothing, when fenced or when its ownership record moved. Also
  `close_all` and the load report. `served_topics()` is a live view, not a copy per ownership event.
- topic_loader: makes a topic of the kind its name says; a persistent one opens its managed ledger
  (`<tenant>/<namespace>/persistent/<name>`) and recovers dedup first.
- topic_admin: `TopicAdmin`, create / delete topics and partitioned topics, partitions,
  subscriptions an admin makes and moves, dead-letter policies (a Set is stored, then applied at
  once on each partition's owner), stats, the last message id, terminate, pull. What only a stored
  topic can do goes through `topic.persistent_ops(operation)`.
- topic_base: `Topic`, the interface of both kinds, with what they share written once: producers
  (name allocation, busy and limit checks), in-counters, subscribe checks and consumer limits,
  unsubscribing, the limits policies set (`apply_policies`), stats with rates, the no-clients guard
  before a delete, and the capabilities (`persistent`, `persistent_ops`, `dedup_rejections`).
  Nothing in the broker asks a topic for its class.
- topic: `PersistentTopic`. `submit` runs the producer checks and the backlog quota, dedup and the
  managed-ledger add, queued synchronously so that the order of calls is the order of the log.
  On completion it marks the sequence id persisted, counts, wakes dispatchers and pulls, and
  completes the send's Publication; `publish` wraps it in a future. A failed write closes the
  producer (unless fenced or terminated), so its client reconnects and resends in order. Dirty
  cursors are persisted every cursor_flush_interval (1 s) and on close.
- producer: the publish checks in Pulsar's order (closed, checksum, encryption, size), then the
  metadata's (producer name, num_messages, declared uncompressed size: herald.common.codec), the
  metadata parsed once.
- nonpersistent_topic: nothing stored; entries go to the consumers connected with permits, or are
  counted dropped. Past non_persistent_max_pending sends get (-1, -1) and count as dropped.
- policies: effective policies (topic overrides > namespace > broker settings), applied at load
  and live when an admin changes them (PoliciesWatcher follows /admin/), and the limit checks worded
  alike for both kinds. Namespace policy max_partitions_per_topic (broker default 1000, at least 1):
  `PolicyResolver.check_partitions` refuses CreateTopic / UpdatePartitions past it
  (NotAllowedError naming the limit and who set it) before any per-partition work; a topic made
  before a lower limit keeps its partitions. Namespace policy max_topics (broker default
  max_topics_per_namespace): TopicRegistry.check_room_for_topics counts Resources.count_topics (a
  partitioned topic counts its partitions) when a load would create a topic (no record yet, not a
  partition of a partitioned topic), on CreateTopic and on growing partitions (NotAllowedError,
  final). Brokers creating topics of one namespace at the same moment may overshoot it, as Pulsar's.
- backlog_quota: size checked on publish by an upper-bound estimate, age every check interval;
  producer_exception (sends fail, and no new producer is taken, as in Pulsar),
  producer_request_hold (sends wait in order) and consumer_backlog_eviction.
- topic_deletion: a topic's cursors, dedup snapshot and ledger list, then its ledgers (refused
  while clients are connected unless forced). ownership: the broker's side of topic ownership
  (below).

The log:
- managed_ledger: the state machine, rollover by entries / size / age (never before
  min_ledger_rollover_seconds), adds pipelined to the open ledger and completed in order
  (pending_add: one object per add), metadata writes one at a time by CAS (a lost CAS fences the
  ledger), `trim_ledgers`. ledger_reader: what the broker needs of storage (LedgerStorage,
  LedgerHandle) and reads across ledgers through entry_cache (one byte budget,
  entry_cache_max_bytes, shared by all topics; entries held by reference). read_ahead: a cursor's
  reads, the cache at the tail, a bounded read-ahead buffer (kept out of the cache) for a backlog.
  ledger_list: the ledger list and position arithmetic (a position in a deleted ledger means
  "before the first kept entry").
- dedup: highest pushed and persisted per producer; a snapshot every dedup_snapshot_interval
  entries, on close and before retention deletes ledgers after it; recovery replays the ledger from
  the snapshot's position. Names idle for dedup_producer_inactivity_seconds are forgotten.
- retention: per topic, every retention_check_interval (60 s) and after each rollover, the head
  ledgers (never the last) that every durable subscription's mark-delete position covers (any,
  with no subscription) and that retention does not keep are deleted. As in Pulsar, a consumed
  ledger is kept while it is within both limits: closed less than retention_time_seconds ago and
  within the newest retention_size_bytes (-1 = no limit, 0 keeps nothing; Herald's default is 7 days
  with unlimited size, so a subscription made later still finds recent messages). Deletion is from
  the list by CAS, then from storage; a dedup snapshot older than them is refreshed first.
- cursor: mark-delete position plus individually acked ranges, persisted by CAS at
  `/cursors/<managed ledger>/<subscription>` (a lost CAS unloads the topic); a reader's is in memory.
- seek: a seek, reset or reader start (a position, a publish time by binary search, an edge) to the
  first entry to read. Every start position (seek, reset, a reader's start, a pull's start) passes
  herald.common.codec.message_id.check_position, which the client runs before sending too.
- pull: reads by offset with long polling (the topic wakes waiting pulls on add).

Consumers and dispatch:
- subscription, dispatcher, consumer: a subscription owns its cursor, its consumers and one
  dispatcher for its type, all within flow permits counted in messages (`permits_of` each entry, so
  a stored entry whose num_messages lies cannot drive permits far negative). Redelivery counts are
  per entry per subscription and sent with each delivery; negative acks put entries back after
  their delay. Readers are non-durable subscriptions that never hold back retention.
- subscription_type: the types and the checks of a joining consumer. selection: who gets an entry,
  shared by stored and non-persistent subscriptions (Shared's round robin within the highest
  priority level that has permits; Failover's active consumer by priority level then name, on a
  partition rotated by the partition index so that actives spread; consumers hear active_change).
- single_active: Exclusive and Failover (redelivery rewinds the cursor). shared: Shared (a leaving
  consumer's unacked entries go to the replay set, `replay`, served first). key_shared: Key_Shared
  over hash_ranges (auto-split ranges of 0..65535, one contiguous slice per consumer). An entry
  whose key's earlier entries are still in replay waits for them, which keeps per-key order across
  reconnects; a consumer joining while entries are outstanding gets only older entries until those
  are acknowledged (delayed entries and dead letters do not count: no consumer holds them).
  Consumer stats show each Key_Shared consumer's hash ranges.
- delayed_delivery: deliver-at entries (Shared, Key_Shared) are held by position until due;
  Exclusive and Failover deliver them at once, as Pulsar does. expiry: message TTL acknowledges
  entries older than the TTL on durable subscriptions every check interval.
- dead_letters: an entry whose redelivery count reached the subscription's dead-letter policy is
  no longer dispatched but queued broker-wide as a letter, lent to dlq-workers
  (herald.broker.grpc.dead_letter_servicer: flow permits; moved, and the entry is acknowledged;
  failed or stream ended, and it is lent out again). Until it is moved a letter stays
  unacknowledged and counted; one acknowledged some other way (cumulative ack, skip, TTL, a reset
  past it) is withdrawn. A policy's default topics are named after the partitioned topic, not the
  partition (`<topic>-<subscription>-DLQ`, as Pulsar's client names them). A policy carries the
  role on whose authority its letters move (the subscriber's from its Subscribe, the admin's stored
  with an admin policy; "" with authorization off), and each letter carries it to the worker.
  Subscription.set_dead_letter_policies keeps both the admin's and the latest subscriber's; the
  admin's wins.

Ownership (broker side; lookup assigns, herald.lookup): the broker serves a topic only when
/ownership/<topic> names it under its current lease; an assignment left from its previous lease (a
restart) is taken over by CAS. Unloading writes /unloading/<topic> (a lease of
unload_exclusion_seconds) and deletes /ownership/<topic> by CAS if it still names this broker; the
next lookup assigns the topic elsewhere, and a late request here gets NotOwner. `OwnershipMonitor`
watches /ownership/ and checks everything again every 30 s: a served topic whose key vanished or
names another broker is closed here without writing anything.

Compaction (the `compaction` package): `TopicCompaction`, each persistent topic's `compaction`:
its published `CompactedView` (the latest message of each key up to a horizon, in a compacted
ledger, read by original position), runs by admin trigger or past the compaction_threshold policy
(checked on retention's periodic pass), their status in the metadata store by CAS, the
"__compaction" cursor that holds retention at the horizon, and recovery on load (a pending ledger
left by a killed run is deleted and the run started again). The two-phase compactor rewrites
entries with herald.common.codec.compaction.

Stats and metrics:
- stats: the stats dataclasses (TopicStats and the rest, InternalStats, LastMessageId);
  `sum_partitions` adds a partitioned topic's up. A persistent topic adds backlogs in entries, in
  messages (entries times the topic's messages per entry since load) and in bytes (size after the
  mark-delete position, less the individually acked entries at the average entry size).
- rates: rates are sampled on demand, at each stats call, over a sliding window
  (stats_rate_window_seconds, 10 s): the growth since the newest sample at least a window old;
  something first seen in a pass counts from the previous pass.
- metrics: `BrokerMetrics` (the BrokerObserver port's implementation: histograms per stored entry)
  and `BrokerCollector`, which reads the topics at scrape time on the broker's loop. tracing: the
  publish and deliver spans.
"""
