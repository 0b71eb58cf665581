"""The proxy: the one address clients outside the cluster need. It serves the client-facing gRPC
contracts (lookup, broker streams, admin) and forwards each call to the broker that owns the topic,
looking it up again when ownership moves. It keeps no state of its own.

It knows the contracts (herald.api) and common; nothing of the broker, lookup or client code. It
decodes as little as it can: BrokerService and AdminService are gRPC generic handlers on raw bytes
(every AdminService method of the contract, new ones included); LookupService is a typed servicer,
since its answers are rewritten. Users' guide: docs/proxy.md.

- server: `Gate` admits each call (refused while draining, or from a new connection past the
  limits). `ProxyLookupServicer`: LookupTopic asks lookup, then answers the proxy's own address;
  route and cluster-info addresses are replaced by it; register and heartbeat are refused.
  `BrokerHandlers`: the generic handlers. `ProxyServer(settings, registry=None)`: start() / stop();
  stop() drains first.
- forwarding: `StreamRelay`, one Produce or Consume stream. The first request gives the topic;
  `_open` looks the owner up (remembered, fresh after a failure), opens the stream there, writes the
  first request and reads the answer, retrying with backoff on NOT_OWNER, SERVICE_NOT_READY or an
  unreachable broker within operation_timeout; other refusals go to the client as they are. Then
  two tasks relay bytes (`_to_broker`, `_to_client`); only error replies are decoded, told apart by
  their first byte (the oneof field's tag). A broker failure, a non-OK end, or a NOT_OWNER /
  SERVICE_NOT_READY error reply ends the client's stream (`_end`): an Error reply, then
  UNAVAILABLE. The reply matters: grpc-python reports a client call whose write failed after the
  server's status as INTERNAL, losing the server's message. Drain (`_wind_down`): a producer's
  upstream is half-closed after the last forwarded send and its receipts are relayed until the
  broker ends; a consumer's upstream is cancelled. The client's read is never cancelled (a
  cancelled server read with the client still writing fails the client's call, receipts and all):
  requests that arrive while draining are read and dropped.
- passthrough: `CallForwarder`. Pull and GetLastMessageId go to the topic's (queue's) broker, admin
  calls to any live broker, as bytes, with the same retries; the broker's own error status passes
  through unchanged.
- lookups: `Lookups`. LookupTopic (redirects followed), queue owners from GetTopicRoute (one route
  answer remembers every queue's owner), live brokers from GetClusterInfo (for 5 s), an LRU of
  owners (100,000) forgotten per topic on NOT_OWNER and per broker when it fails.
- broker_pool: `BrokerPool`, connections_per_broker channels per address (lookup's too); a failed
  one is replaced, and closed after a grace period so that the other calls on it can finish.
- limits: `ConnectionLimiter`, herald.common.transport.connections' tracker with the proxy's
  metrics, for max_connections in all and max_connections_per_address.
- pulsar_front, pulsar_relay: Pulsar's binary protocol on pulsar_port (docs/proxy.md, Pulsar
  clients). `PulsarFront` listens and counts connections in the same ConnectionLimiter;
  `Relay` is one client connection: its CONNECT authenticated here (herald.common.pulsar.auth),
  then a connection to a broker CONNECTed as the proxy for the client's role; a lookup connection
  relays lookups and rewrites LOOKUP_RESPONSE to go through the proxy, a connection naming a broker
  (proxy_to_broker_url, checked against lookup's live brokers) is spliced as bytes.
- drain: `Drain`, the draining flag and the open streams. metrics: the herald_proxy_* metrics.
  settings: `ProxySettings`; the receive limit is 8 MiB and Produce the one method past 1 MiB per
  request, as on the broker.
"""
