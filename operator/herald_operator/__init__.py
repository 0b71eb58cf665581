"""The Herald Kubernetes operator: reconciles Topic and Subscription custom resources (group
herald.io, CRDs in operator/crds/) into Herald through the admin API, kopf running the handlers.

It is a client of Herald: it may import herald.client, herald.common and herald.api, and knows
nothing of the brokers', lookup's or storage's code (an import-linter contract keeps it so).
Users' guide: docs/operator.md.

Modules, by concept:
- settings: `OperatorSettings` (admin URL, resync interval, retry delay, the namespaces to watch,
  scanning), loaded like a service's: the [operator] table of a TOML file < HERALD_OPERATOR_* (and
  HERALD_ADMIN_URL) < flags.
- desired: a resource's spec as the Herald state it asks for, a pure mapping to `DesiredTopic` /
  `DesiredSubscription` (the full topic name, partitions, the topic-level admin_pb2.Policies it
  owns: MANAGED_POLICIES); `SpecError` for what the schema cannot refuse.
- reconcile: one pass compares with Herald and changes what differs (nothing differs: no write).
  Partitions only grow; a spec below Herald's count gives a `Problem` (PartitionsShrinkRefused when
  the spec was lowered, PartitionsDrifted when Herald's count was raised outside), and the policies
  are applied anyway.
- status: the Ready and Synced conditions (lastTransitionTime kept while the status holds) and the
  phase.
- ownership: which resource owns a Herald object several name (the first created); the others are
  ResourceConflict and never applied.
- observability: reconcile counts, errors and durations per kind (prometheus_client) and their
  /metrics server.
- handlers: `register(settings, registry, metrics)`. A resource annotated herald.io/paused: "true"
  is left alone (status ReconciliationPaused); a spec renaming the object it manages is refused.
  Create, update, resume and a timer every resync_interval reconcile and refresh the status from
  the stats; delete runs behind the `herald.io/finalizer` finalizer; an index maps Topic resources to Herald names for
  Subscriptions. Retryable HeraldErrors become kopf TemporaryErrors (retry_delay), refusals
  PermanentErrors.
- runner: `run(settings, registry=..., stop_flag=...)` around kopf's operator, with its liveness
  endpoint, the /metrics server and peering (the oldest replica is the active one).

A Subscription's dead-letter policy is set through the admin API
(SetSubscriptionDeadLetterPolicy) and kept in the metadata store, where it wins over the policy a
subscriber sends (herald.broker.core: dead_letters).
"""
