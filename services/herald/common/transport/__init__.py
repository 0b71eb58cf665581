"""gRPC plumbing shared by every service and the client: channel and server options, the one mapping
between HeraldError and gRPC status, TLS credentials and dialing, connection counting and limits,
admission before a request is read, request decoding, server-side tracing, health checks. Must not
know: any service, the security decisions (herald.common.security sits above it).

Errors on the wire (rpc): a unary call fails by aborting with the HeraldError's status
(`status_for`) and details "<ErrorCode number>:<message>" (`status_details`); `error_from_rpc` turns
them back into the same HeraldError class, and gRPC's own failures into ConnectionError_,
HeraldTimeoutError, AuthenticationError... Streams carry `Error` messages instead
(`error_to_proto` / `error_from_proto`). The details are cut to MAX_ERROR_DETAILS_BYTES (2 KiB):
they travel in trailing metadata, which clients take 8 KiB of, and an error quoting a huge value was
dropped by the caller's gRPC (RESOURCE_EXHAUSTED, with no word of what was wrong).

Limits and malformed requests (users' guide: docs/operations.md, Limits; the table of every limit is
in docs/security.md). Each refuses with a HeraldError the client maps back, and the rest of the
service goes on. A server's interceptors come in this order: authentication
(herald.common.security), connection limits, tracing, decoding, authorization.

- admission: `admitting(handler, admit, method)`. grpc.aio reads a unary request in full before the
  handler runs, so a unary-request method is served through a request-streaming handler that enters
  `admit` (an async context manager that aborts to refuse) and only then reads its one request
  (`context.read()`, with the handler's deserializer) and runs the unary behaviour. A streaming
  handler is only wrapped. The authentication and connection-limit interceptors admit this way; the
  interceptors after them see the handlers as the servicer made them.
- connections: gRPC tells a server nothing of connections, so a connection is a peer
  (`context.peer()`: one TCP connection, whatever calls it multiplexes). `ConnectionTracker`
  counts live connections only: a peer while it has an admitted call in progress (admission
  comes after authentication), per client address (`peer_address`) and in all. A call that would
  make a peer live past a limit is refused (TooManyRequestsError: RESOURCE_EXHAUSTED, retryable).
  Peers are remembered until idle for `connection_idle_timeout`, only so that a connection's
  successive calls count as one connection opened (the proxy's connections_total); servers that
  count close connections idle that long (`idle_server_options`: grpc.max_connection_idle_ms).
  `ConnectionLimitInterceptor` admits every call of the broker and lookup but health probes
  (`max_connections_per_address`); the proxy's Gate uses the same tracker inside its handlers.
- rpc.server_options: every server's `grpc_max_receive_message_bytes`, with
  `max_streams_per_connection` (grpc.max_concurrent_streams). gRPC refuses a bigger request from its
  length prefix with RESOURCE_EXHAUSTED, which `error_from_rpc` makes a final MessageTooLargeError.
  Defaults: broker and proxy 8 MiB (herald.common.limits.DATA_SERVER_MAX_RECEIVE_BYTES: a 5 MiB
  message and its framing; BrokerSettings refuses a limit below max_message_size + 64 KiB), storage
  16 MiB (the storage client packs adds into AddBatchRequests of at most 8 MiB, ADD_BATCH_MAX_BYTES),
  lookup 4 MiB (heartbeats list the topics a broker owns).
- decoding: `DecodingInterceptor` (the last of `tracing.server_interceptors()`, and on the proxy).
  Handlers take requests as bytes and decode them here, so bytes that are no valid message get
  INVALID_ARGUMENT naming the type (unary calls, `context.read()` and streams' request iterators)
  instead of grpc's "unexpected" traceback and UNKNOWN. It also holds the per-method size limit
  gRPC lacks: every request of a method that is not one of the server's `bulk_methods` (broker and
  proxy: Produce; storage: the two add streams; lookup: Heartbeat) and is larger than
  `max_request_bytes` (1 MiB; lookup 64 KiB) is refused with MessageTooLargeError before it is
  parsed, the proxy's byte handlers included.

The rest:
- tls: server credentials and `add_port` (plaintext without a certificate), and `Dialer`, which
  every service-to-service channel comes from (broker to lookup and to storage nodes, admin
  forwarding; proxy to lookup and brokers): TLS trusting `tls_ca_file`, presenting the service's
  own certificate, whenever the service itself runs TLS. A client's `herald+ssl://` URLs are
  herald.client.tls's.
- tracing: `TracingInterceptor`, a SERVER span for every unary call whose metadata carries a
  traceparent (streams have spans per entry instead); `handshake_span` for a stream's opening.
- health: `ServiceHealth`, a server's readiness checks plus the life-cycle check `serving`, run
  on its loop and published as grpc.health.v1 on its gRPC server (refreshed every 2 s);
  `LoopHeartbeat`, the liveness the loop proves every second. herald.common.http serves both.
"""
