"""The broker's gRPC front end: servicers that translate BrokerService, AdminService and
DeadLetterService calls into calls on the core (herald.broker.core: its sessions for Produce and
Consume) and core results into replies, the per-call authorization of admin and unary calls, admin
forwarding to a topic's owner and lookup registration. Holds no broker logic of its own: a second
front end needs nothing from here. Must not know: the storage node, other front ends.

The contracts (proto/herald/v1):
- broker.proto: one bidi Produce stream per producer (RegisterProducer first, then SendEntry and
  finally CloseProducer; replies ProducerRegistered, then SendReceipt or SendError in request
  order, and Error, which ends the stream) and one bidi Consume stream per consumer (Subscribe
  first, then Flow, Ack, NegativeAck, RedeliverUnacknowledged, Seek, Unsubscribe, CloseConsumer;
  replies Subscribed, EntryBatch, CommandResult (a Seek's or an Unsubscribe's), ActiveConsumerChange,
  ReachedEndOfTopic, Error); unary Pull and GetLastMessageId.
- admin.proto: tenants, namespaces and policies, topics (create, partitions, delete, stats,
  internal stats, unload, terminate, policies), subscriptions (create, delete, reset, skip, peek,
  dead-letter policy), permissions, brokers. Served by every broker.
- deadletter.proto: the Letters stream dlq-workers take dead letters from.

- broker_servicer: a translation table. Produce reads sends, each SendEntry field read once (upb
  copies a bytes field at each access), into ProducerSession.publish, and stops reading while
  `room()` waits; a writer task writes `receipts()`. Consume reads commands into the ConsumerSession
  while a sender writes `deliveries()` and an event teller `next_event()`. Replies carrying entries
  (deliveries, Pull) are built in place (`reply.entries.entries.add(...)`: one copy of an entry's
  bytes, where nested messages made three or four). BULK_METHODS: Produce alone may carry more than
  the 1 MiB per-request limit (herald.common.transport.decoding).
- admin_servicer: a thin adapter over herald.metadata.resources (tenants, namespaces, policies) and
  BrokerService (topics, subscriptions); admin_messages converts core types to and from the
  contract. It refuses a request that sets a field its call does not use (SetPoliciesRequest serves
  two calls; a SetSubscriptionDeadLetterPolicy that removes the policy, max_redeliver_count 0, may
  name no topic, since nothing would authorize it). A call on a partitioned topic's base name that
  acts on topic state (stats, unload, subscription calls) runs on each partition wherever it is
  served, and the answers are combined (stats.sum_partitions), 16 partitions at a time
  (herald.common.bounded). Every partition's call runs to its end, failed or not, and the answer
  (the first error, if any) comes only then, never while some still run on a context gRPC has
  finished.
- admin_forwarding: a topic call reaching a broker that does not own the topic (NotOwnerError)
  asks lookup for the owner (assigned if none) and makes the same call there. It is marked
  `herald-forwarded-by` in the call's metadata, so it is forwarded at most once, and made with
  the forwarding Dialer, which names the original principal. It is also the core's `remote`, for
  deleting partitions that other brokers serve.
- authorization: `BrokerAuthorization`, the decision per admin or unary call on every tenant its
  topic, namespace or tenant fields name (tests/unit/test_admin_authorization.py audits that every
  request field is covered): tenants and brokers are the super-users', the rest also the tenant's
  admin roles'. Besides, a role with a grant on a namespace may list its topics, and one that may
  consume on a topic may create a subscription there. A dead-letter policy's topics need produce
  (at Subscribe, by the core's Admission, and in SetSubscriptionDeadLetterPolicy); Pull and
  GetLastMessageId need consume; DeadLetterService is the dlq-workers'. Only
  super-users may set a namespace's max_partitions_per_topic above the broker's. Produce and
  Consume are decided by the core's Admission from the stream's first message.
- dead_letter_servicer: each Letters stream is one worker (flow permits; moved: the entry is
  acknowledged; failed, or the stream ended: the letter is lent out again).
- registration: registers with lookup, heartbeats with the broker's load and owned topics, and,
  when told its lease expired, drops every topic and registers again.
"""
