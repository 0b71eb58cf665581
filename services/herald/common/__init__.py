"""What every service and the client share, by role: `codec/` (the bytes: entries, ids, names,
checksums, compression), `transport/` (gRPC plumbing and limits), `security/` (authentication,
credentials), `http/` (the metrics and health endpoint), `pulsar/` (Pulsar's framing, for the
front ends that will speak it), and protocol-neutral modules at the top. This layer knows nothing
of the services, the client or the metadata store; codec/ and the neutral modules know no gRPC
either (import-linter: "common's layers").

The neutral modules:

- errors: one HeraldError hierarchy for client and services. Each error has a `code` (ErrorCode,
  an enum of its own, not the generated one) and says whether a retry may help (`retryable`).
  Each transport maps codes to its wire in one place (gRPC: herald.common.transport.rpc).
- config: `load_settings(cls, section, ...)`, the same for every service: dataclass defaults < the
  section's table of a TOML file < HERALD_<SERVICE>_<FIELD> < flags; `describe` prints settings
  with secrets masked.
- limits: default limits several settings share. DATA_SERVER_MAX_RECEIVE_BYTES (8 MiB: a 5 MiB
  message with its framing) is the broker's and the proxy's gRPC receive limit;
  DEFAULT_MAX_STREAMS_PER_CONNECTION (4096) is HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS of every
  server.
- bounded: per-partition work never holds an event loop. `map_bounded` runs a call per item, at
  most IN_FLIGHT (16) at a time, reading the items lazily (a range, never a list of names), and
  `Pacer` gives the loop back every 2 ms in loops whose body need not suspend. The users: the admin
  servicer's per-partition calls and their combining (stats, subscriptions, peeks), deleting a
  partitioned topic, lookup's routes, ownership counting and route replies, the proxy's route
  rewriting and caching, Resources.list_topics / count_topics, the broker's
  OwnershipMonitor.check_all, PoliciesWatcher and TopicRegistry.close_all (a lost lease closes
  every topic), and the client's making, starting and closing of partitions (client.members).
  bench/admin_loop_stall.py measures the worst stall a client sees.
- ownership: the records lookup writes and brokers honour: /ownership/<topic> (the owner and the
  lease the key is bound to) and /unloading/<topic> (the broker that just unloaded it).
- backoff (100 ms doubling to 60 s, Pulsar's client defaults), tasks (`cancel_and_wait`,
  `wait_event`: every task has an owner that cancels and awaits it).

Observability (users' guides: docs/metrics.md, docs/tracing.md, docs/operations.md):

- Metrics: each service defines its families in its own metrics module (broker.core.metrics,
  storage.node.metrics, lookup.metrics, proxy.metrics, dlq.metrics) on a CollectorRegistry of its
  own; standalone passes one registry to all. What an event loop owns (topics, subscriptions,
  ledgers) is read at scrape time by a `collectors.LoopCollector` on that loop, so the hot path
  only bumps plain ints; per-entry latencies go to `collectors.HotHistogram`. The endpoint adds
  the standard process_* / python_* collectors once per registry. herald.client.metrics.ClientMetrics
  is a collector an application registers over its own client.
- tracing: sets up the provider (HERALD_TRACING_EXPORTER none | console | otlp; off by default)
  and owns the `ENABLED` flag every hot path tests first, plus W3C propagation. A message's
  creation context travels in its properties (`traceparent`) and in the entry's
  EntryMetadata.traceparent; SendEntry, DeliveredEntry and the storage AddRequest carry the
  context of the span that sent them; unary calls carry it in gRPC metadata
  (herald.common.transport.tracing makes their server spans). Spans: client create / send /
  receive / process (herald.client.tracing), broker publish / deliver (herald.broker.core.tracing),
  storage add (the storage client's, and each node's).
- logs: one line per record on stderr; HERALD_LOG_FORMAT=json makes JSON lines carrying the trace
  and span ids of the span recording when the record was made.
"""
