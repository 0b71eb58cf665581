"""The Herald Python client: producers and consumers for Herald topics, in two APIs of equal
standing. `AsyncClient` is the asyncio core; `Client` is a blocking facade that runs that core on
one background thread.

    from herald.client import Client

    with Client("herald://localhost:6660") as client:
        producer = client.create_producer("my-topic")
        producer.send(b"hello")
        consumer = client.subscribe("my-topic", "my-subscription")
        message = consumer.receive(timeout=5)
        consumer.acknowledge(message)

This package talks to the services only through the gRPC contracts in herald.api and the shared
types in herald.common; it knows nothing of the services' code. Users' guide: docs/client.md.

The asyncio core has a blocking facade of equal standing (`sync/`). `client.AsyncClient` picks the
implementation a topic needs behind two interfaces, `producer.AsyncProducer` and
`consumer.AsyncConsumer`, and checks subscribe's options in Pulsar's order; `config` holds every
option (SEEDS §1-3) and checks each where it is given. `schemas` (`schema` re-exports it): bytes,
str, JSON, Avro, protobuf, key/value and auto schemas (`Message.value` decodes through its entry's
schema; `data()` is the bytes). `interceptors`,
`listeners`: the application's hooks. `members`: starting and closing the partitions of a
partitioned producer or a multi-topic consumer together, 16 at a time.

Producing. The producer of one topic or partition is three objects (aiokafka's split, nats.py's
protocol apart from its transport):
- topic_producer: `TopicProducer`, the AsyncProducer. Schema, the immediate checks and the
  interceptors in front (nothing per message when there are none), the accumulator, max pending
  with block-or-fail. It holds no stream.
- sender: `Sender`. It takes each entry the accumulator closes, keeps the send timeout's timer,
  and runs the Produce stream.
- producer_protocol: `ProducerProtocol`, with no I/O (unit-tested by feeding it replies). It
  holds the pending queue and matches receipts to its head (equal completes, behind is ignored,
  ahead forces a reconnect). After each registration it writes every pending entry again, in order,
  with the producer's properties and under the same name. It handles send errors (an error about
  the head entry fails it and its chunks; a checksum error, which fails the head only if its bytes
  were damaged in memory, and any other error reconnect), topic termination and the send
  timeout's bookkeeping. Each entry's request is built once, in place (`PendingOp.request`:
  the entry's bytes copied once, into it).
- accumulator: packs messages into one bytearray per batch (no protobuf per message) and closes a
  batch at batching_max_messages (1000), batching_max_bytes (128 KiB) or batching_max_publish_delay
  (1 ms), never past the max message size the broker reported at registration (a topic's policy may
  set it lower). It gives sequence ids in the order entries will be sent, since dedup takes an
  entry only above the previous one. Closing a batch compresses its payload once
  (herald.common.codec.compression) and sets the entry's partition and ordering key when all its
  messages share them. `KeyBasedAccumulator` keeps one open batch per key (the ordering key, else
  the key), each closing by the same rules, with sequence ids given at closing (contiguous per
  entry). A message with an explicit sequence id or a deliver-at time goes as an unbatched entry of
  its own after every open batch (deliver-at is per entry).
- chunking: with chunking on (batching off), a message whose entry would pass the max message size
  goes as consecutive unbatched entries, one sequence id each (dedup per chunk: a resend stores no
  chunk twice), sharing a uuid. The payload, compressed first, is cut into slices that fit with
  the header and metadata. The send completes with the last chunk's id.
- stats: counters and a log-linear latency histogram fed per receipt, logged every stats_interval.
- partitioned_producer + routing: `create_producer` on a topic with n >= 1 partitions (as in Pulsar
  since 2.4, one partition is still partitioned) makes a `PartitionedProducer`: one TopicProducer
  per `<topic>-partition-<i>`, each allowed min(max pending, across partitions / n) pending
  messages, all under the name the broker gave partition 0 (started first; the rest start side by
  side). It is ready when all are; if one fails, the started ones are closed and its error raised.
  It holds no connection of its own. Each message is routed, then handed to its partition's
  producer (a message refused for want of room keeps its partition when offered again). Routing
  follows Pulsar's routers, so that Java and Python producers agree on a key's partition: a key
  goes to hash(key) mod n (JavaStringHash: Java's String.hashCode() & Integer.MAX_VALUE over UTF-16
  units, cached per key; Murmur3_32Hash: mmh3 with seed 0 of the UTF-8 key, same mask). Without a
  key a message goes round robin, per message without batching and per batching window with it
  (`monotonic_ns // max publish delay`, from a random start) so that a window fills one batch.
  UseSinglePartition picks one partition at random; a custom router decides every message (out of
  range: InvalidArgumentError; its own error fails that send). Every
  auto_update_partitions_interval a task asks GetPartitionedTopicMetadata; new partitions get
  producers and are routed to once all of them registered (a failure closes them, and the next
  round tries again); a lower count is logged and ignored. stats() adds the partitions' counters
  up; the latency percentiles are the highest partition's (an upper bound).

Consuming:
- topic_consumer: `TopicConsumer`, the AsyncConsumer of one topic or partition (the ABC in
  `consumer` is the contract, with consumer_type, check_cumulative_allowed and
  has_reached_end_of_topic). It composes `consumer_protocol.ConsumerProtocol` (no I/O, unit-tested by
  feeding it replies) with a Consume stream. `receive_queue.ReceiveQueue`, its first base (and the
  multi-topic consumer's), holds the local queue, receive / receive_many / batch_receive
  (batch_receive: Pulsar's limits) and their waiters. receive() takes without suspending when there
  is no listener, interceptor or ack timeout (one flag), and counts what it takes in the protocol's
  permits.
- consumer_protocol: a FLOW at half the queue size, none while paused (resume sends what is owed),
  a full one first on each stream. Entries are read out of the reply once (each read of a bytes
  field of a upb message copies it), decompressed once and read where they are, within
  max_message_size (and max_chunked_message_size for a chunked message, whose chunks are each
  refused when it announces more). The ack bitmap and the entry's message count are its decoded
  records, and the permits the broker took beyond what was queued (claimed but absent, already
  acked, a chunk, a dropped entry) go back at once. Asking for everything again drops the local
  queue (it comes again); on Exclusive and Failover an entry at or before the last one received
  means the broker rewound, and what is queued from there on is dropped, so that a nack or a
  redelivery brings each message back once. The protocol tells its owner what it must act on
  through callbacks (delivered, dropped, answered, lost, active change, acks queued, chunk expiry).
- chunk_assembly (pure) and chunked_messages (the consumer's side, without timers: the owner arms
  the expiry it asks for): chunks are put back together in order, each chunk's permit returned at
  once. Past max_pending_chunked_message the oldest is dropped (acked or left for redelivery); one
  incomplete past the expiry is dropped and acked. The message carries the last chunk's id, and
  acking it acks every chunk.
- acks: batch ack tracking (an entry is acked on the broker once all its messages are). ack_group:
  acks and negative acks (NegativeAck, carrying the nack delay) grouped by ack_group_time (100 ms) /
  ack_group_max_size (1000), and the ack timeout (unacked_tracker: time buckets). Shared and
  Key_Shared ask again for just the expired positions (1000 per request), the other types for
  everything.
- consumer_commands: Seek and Unsubscribe, answered by a CommandResult per request id within the
  operation timeout. After a seek, what is held and what the old stream still brings are dropped
  until the broker's disconnect, and `epoch` moves so that the sync facade drops its buffer.
- message_listener: the listener task (one message at a time, in order; a listener that raises is
  logged and its message stays unacked). Failover's ActiveConsumerChange goes to the
  consumer_event_listener. Stats count per call or per delivery, logged every stats_interval.
- multi_topic_consumer: `MultiTopicConsumer`. `subscribe` with a list of topics (any namespaces),
  a partitioned topic (n >= 1) or retry_enable makes one TopicConsumer subclass (`_Member`, which
  overrides what the protocol's `delivered` and `dropped` mean) per topic partition, each with
  min(receiver queue, max total / n), and one shared ReceiveQueue. A member's deliveries move to
  the shared queue while it has room; when it is full the member keeps the rest (so its permits
  stop coming back) until half the shared queue was taken. Whatever makes a member drop what it
  holds (a reconnect, a seek, a redelivery, an Exclusive rewind) drops its messages from the shared
  queue too. Acks, nacks and reconsume_later go to the member named by the message's topic (a bare
  MessageId: by its ledger id, unique in the cluster). A seek by time or to an end goes to every
  member; one by message id is refused. `epoch` moves on seeks only (the sync facade's buffer
  holds other members' messages, which would not come again). Every
  auto_update_partitions_interval new partitions get members. Interceptors and the ack timeout run
  in the members (they are told the partition's consumer, as in Pulsar); stats are added up and
  logged by the parent.
- pattern_consumer: `PatternConsumer`. The namespace is the pattern's literal prefix;
  GetTopicsOfNamespace every pattern_auto_discovery_period, fullmatch on the name after
  `domain://`; topics gone lose their members. The broker creates a topic on subscribe, so a
  pattern member checks that its topic is still listed before reconnecting, and closes if not.
- retry_letters: reconsume_later publishes to `<topic>-<subscription>-RETRY` (deliver_after = the
  delay; Shared and Key_Shared only, the dispatchers that delay) with Pulsar's RECONSUMETIMES,
  DELAY_TIME, REAL_TOPIC and ORIGIN_MESSAGE_ID; past max_redeliver_count it goes to the DLQ topic;
  then it acks. One producer per target topic, made on first use and closed with the consumer.
- reader (+ sync.reader): `AsyncReader`, one TopicConsumer whose Subscribe the reader adjusts
  (`adjust_subscribe`): non-durable, with the reader's start (edges as initial positions; a start
  inside a batch is subscribed at its entry and the earlier messages of the batch skipped here). On
  reconnect it starts after the last message returned. has_message_available compares
  GetLastMessageId with the last message returned or, before any, with the subscription's
  mark-delete position (answered in the same call), which also covers seeks by time. A
  partitioned topic is refused. reader_pull: Pull and GetLastMessageId without a subscription
  (the Spark source's reads; read_compacted pulls read the compacted view first).
- table_view (+ sync.table_view): `AsyncTableView`, Pulsar's TableView: a read_compacted reader
  per partition from the earliest position fills a dict of key -> latest value (an empty value
  removes the key) and follows the tail; creation returns once each partition was read up to its
  last message as of creation (a one-entry read_compacted pull tells whether anything is left up
  to it). Listeners get every later update; one that raises is logged.

Transport:
- stream: `BrokerStream`, the transport producers and consumers share (Pulsar's ConnectionHandler),
  composed, never inherited, over the port in stream_protocol (`StreamProtocol`, `Reconnect`). It
  looks up the owner, opens the stream, makes the handshake under a deadline, serves the stream
  with a writer task (what the protocol object's `next_request` gives) and a read loop (every reply
  to its `on_reply`), and on failure reconnects until its owner ends it, as reconnect's
  `ReconnectPolicy` decides (no I/O): lookup asked again at once and then at most 0.5 s apart while
  the topic is moving, a broker other than the failed one tried at once, backoff only against the
  same answer. The owner's
  policy comes as two hooks: `connect_failed` (a busy producer name fails the first connect at
  once; a terminated topic, or a pattern member's topic gone, stops reconnecting) and
  `before_reconnect` (a pattern member checks that its topic is still listed).
- connection, lookup: the channel pool (channels handed out once connected), lookups with
  redirects and retries. tls: a `herald+ssl://` URL's credentials (a trust file; insecure
  connections and no hostname check fetch the server's certificate first, on a worker thread).
- admin: `AdminClient` (one async method per admin call; a `herald://` URL asks lookup for a live
  broker, a `host:port` is a broker) and `SyncAdminClient`; `herald admin` (herald.cli.admin) is
  the command line over it. metrics: `ClientMetrics`, a Prometheus collector over a client's
  stats. tracing: the client's spans.
"""

from herald.client.client import AsyncClient
from herald.client.config import (
    BatchingType,
    BatchReceivePolicy,
    ClientConfig,
    CompressionType,
    ConsumerConfig,
    ConsumerType,
    DeadLetterPolicy,
    HashingScheme,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerConfig,
    ReaderConfig,
)
from herald.client.consumer import AsyncConsumer
from herald.client.interceptors import ConsumerInterceptor, ProducerInterceptor
from herald.client.listeners import ConsumerEventListener
from herald.client.message import Message, OutgoingMessage
from herald.client.producer import AsyncProducer
from herald.client.reader import AsyncReader
from herald.client.schemas import (
    AutoConsumeSchema,
    AutoProduceBytesSchema,
    AvroSchema,
    BytesSchema,
    GenericRecord,
    JsonSchema,
    KeyValue,
    KeyValueSchema,
    ProtobufSchema,
    Record,
    Schema,
    StringSchema,
)
from herald.client.sync import Client, Consumer, Producer, Reader, TableView
from herald.client.table_view import AsyncTableView
from herald.common.codec.message_id import MessageId
from herald.common.errors import (
    AlreadyClosedError,
    AuthenticationError,
    AuthorizationError,
    ChecksumError,
    ConnectionError_,
    ConsumerBusyError,
    ConsumerClosedError,
    HeraldError,
    HeraldTimeoutError,
    InvalidArgumentError,
    InvalidTopicNameError,
    MessageTooLargeError,
    NotAllowedError,
    ProducerBusyError,
    ProducerClosedError,
    ProducerQueueIsFullError,
    SchemaError,
    SendTimeoutError,
    TopicNotFoundError,
    TopicTerminatedError,
)
from herald.common.security.credentials import AuthenticationTls, AuthenticationToken

__all__ = [
    "AlreadyClosedError",
    "AsyncClient",
    "AsyncConsumer",
    "AsyncProducer",
    "AsyncReader",
    "AsyncTableView",
    "AuthenticationError",
    "AuthenticationTls",
    "AuthenticationToken",
    "AuthorizationError",
    "AutoConsumeSchema",
    "AutoProduceBytesSchema",
    "AvroSchema",
    "BatchReceivePolicy",
    "BatchingType",
    "BytesSchema",
    "ChecksumError",
    "Client",
    "ClientConfig",
    "CompressionType",
    "ConnectionError_",
    "Consumer",
    "ConsumerBusyError",
    "ConsumerClosedError",
    "ConsumerConfig",
    "ConsumerEventListener",
    "ConsumerInterceptor",
    "ConsumerType",
    "DeadLetterPolicy",
    "GenericRecord",
    "HashingScheme",
    "HeraldError",
    "HeraldTimeoutError",
    "InitialPosition",
    "InvalidArgumentError",
    "InvalidTopicNameError",
    "JsonSchema",
    "KeyValue",
    "KeyValueSchema",
    "Message",
    "MessageId",
    "MessageTooLargeError",
    "NotAllowedError",
    "OutgoingMessage",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerBusyError",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerInterceptor",
    "ProducerQueueIsFullError",
    "ProtobufSchema",
    "Reader",
    "ReaderConfig",
    "Record",
    "Schema",
    "SchemaError",
    "SendTimeoutError",
    "StringSchema",
    "TableView",
    "TopicNotFoundError",
    "TopicTerminatedError",
]
