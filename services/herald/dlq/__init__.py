"""The dlq-worker: takes dead letters from every broker (DeadLetterService), publishes each to its
dead-letter topic with its origin, exactly once, and reports it moved so the broker acknowledges
it; and the dead-letter topics' other side, peek and replay (`herald admin dlq`). It is a client of
Herald (herald.client, the contracts in herald.api, herald.common) and knows nothing of broker or
lookup code; no service imports it (herald.cli and standalone may). Users' guide: docs/dlq.md.

- brokers: `BrokerFleet` asks lookup (GetClusterInfo) for the live brokers every
  broker_refresh_interval and keeps a `BrokerLetters` per broker: one Letters stream, reopened with
  backoff, asking for flow_permits letters minus the moves still running (a move started on a
  stream that broke holds its place until it ends). Each letter is moved on a task of its own;
  moved is reported on the stream the letter came from if that stream is still open (otherwise the
  broker lent it again, and whoever gets it finds it published). A failed letter is parked: its
  `failed` report waits retry_delay, doubling with each failure of that letter (`FailureMemory`,
  shared by the streams, also says when a letter is a retry), and it holds no permit unless
  max_parked are parked already. So a refusing topic neither starves the rest nor ping-pongs with
  the broker, which puts a failed letter first in line.
- acting: `acting_for(role)` (a contextvar) and `ActingToken`, the worker's token, which adds
  `x-herald-original-principal: <role>` to the calls made inside it. A letter's lookups, publish and
  initial subscription act as the letter's role, so the broker authorizes the subscriber, not the
  worker (which has no right of its own).
- mover: `LetterMover` makes the initial subscription (initial_subscription, `herald-dlq-replay`,
  at the earliest) on a dead-letter topic once per process and role, before its first letter (for a
  role that may not consume there it is skipped, and logged); then it publishes and counts, all
  acting as the letter's role.
- letters: a letter as published: its entry unpacked (decompressed), each message with its key,
  properties, event time and the origin properties, under the producer name
  `dlq-<blake2b-96 of (topic, subscription, ledger, entry)>`. An entry that cannot be unpacked (a
  chunk, encrypted, malformed, or decompressing past max_message_size or its claim: a bomb is never
  inflated) goes `opaque`: the entry as it is, under the new name, with a warning.
- publication: a `Publication` (messages with sequence ids 0..n-1, or explicit ones) cut into
  SendEntry requests after the name's last sequence id, each within the topic's max message size.
- publisher: `IdempotentPublisher`, one Produce stream per publication: register under the name
  (the broker answers the name's last persisted sequence id), send what is above it, read the
  receipts ((-1, -1): a duplicate), close. Owners are cached until a publish fails (NotOwner, or
  unavailable: looked up again once, at once), partition counts for broker_refresh_interval. A
  partitioned topic gets each publication on partition crc32(name) mod n, the same at every
  attempt. Measured: about 1,050 publications a second in one process against a standalone,
  against about 590 for a client producer per letter (which looks the topic up twice per letter);
  resends that dedup recognises run at about 2,300 a second.
- peek, replay: `herald admin dlq peek / replay` (herald.cli.admin.dlq). Peek leaves out, with a
  warning, an entry it cannot show (a chunk, encrypted, a bomb). Replay reads the dead-letter topic
  through the Exclusive durable subscription `herald-dlq-replay` in windows of 500 messages, groups
  them by dead-letter entry and target topic, and publishes each group with the same publisher
  under `producer_name("replay", dlq topic, ledger, entry, target)`, with batch indexes as sequence
  ids (an entry cut short by --limit comes back whole; the part published is recognised). Then it
  acknowledges.
- metrics: the herald_dlq_* metrics. worker: `DlqWorker(settings, registry=None)`, start() /
  stop() (idempotent); it serves /metrics itself unless metrics_port is -1 (standalone passes its
  shared registry and -1).

A cost to know: every dead letter registers a producer name with its dead-letter topic's dedup,
which keeps it (in memory and in every dedup snapshot of that topic) until
dedup_producer_inactivity_seconds (6 h) after it disconnected. Many dead letters in a few hours (a
consumer bug nacking everything) make that map and its snapshots large.
"""
