"""Authentication and credentials over the transport: JWT keys and tokens, the tokens and
certificates a client presents, the server interceptors that authenticate calls and authorize them,
each service's security settings (settings.py: plain data, no gRPC) and what it builds from them.
Must not know: any service's decisions (who may do what is herald.metadata.authorization's).

Users' guide: docs/security.md. Everything is off by default.

- settings: `SecuritySettings`, from which every server's settings class derives, so the names are
  the same everywhere (HERALD_<SERVICE>_TLS_CERT_FILE...); `MetricsEndpointSettings`, from which
  every metrics-serving one derives (who may read /metrics: herald.common.http.metrics_access).
- service: `ServiceSecurity`, what a service builds from them at start (unreadable files fail
  there): its server credentials, its authentication interceptor, and two Dialers
  (herald.common.transport.tls) for its calls to other services: `dialer` with the service's own
  token, and `forwarding_dialer`, which also names the principal of the call being handled (a
  proxy's calls to lookup and brokers, a broker's forwarded admin calls).
- tokens: JWT keys, `create_token` and `TokenVerifier` (HS256 or RS256; the audience when
  token_audience is set; verified tokens remembered). The role is the token's `sub`.
- credentials: what a caller presents. `AuthenticationToken` (a string, a file re-read when it
  changes, or a callable) and `AuthenticationTls`; `client_certificate` is the certificate a client
  of Herald (the client, the AdminClient, the dlq-worker, the operator) presents:
  AuthenticationTls's, or tls_certificate_file_path and tls_private_key_file_path given beside a
  token. The client interceptors put `authorization: Bearer <token>` (and, from a forwarding caller,
  `x-herald-original-principal`) on every call and stream of a channel; the client's ConnectionPool,
  the AdminClient and the services' Dialers use them. grpc.aio feeds an intercepted stream written
  with write() from a task of its own, which ends on done_writing() or cancel() but not when the
  server ends the call first (grpc/grpc#29518): the stream interceptors cancel that task once the
  call is done. Otherwise it would wait for ever and the garbage collector would log it destroyed
  pending (a proxy relaying a client's close did, once per stream).
- authentication: `AuthenticationInterceptor`, the first of every server's interceptors. It wraps
  every handler but grpc.health's and admits each call or stream once, before its request is read
  (herald.common.transport.admission). The call shows a token, or else, with tls_client_auth, the
  common name of its TLS client certificate. The original principal (x-herald-original-principal) is
  taken only from `proxy_roles` and `broker_roles`, and from `dlq_worker_roles` only on
  DLQ_WORKER_ACTING_METHODS (the calls that move a dead letter). A contextvar (`current_role()`)
  then carries the role to the servicer that handles the call and to the forwarding calls it makes.
  With authorization on, a storage node admits only broker_roles and super-users.
  `AuthorizationInterceptor(service, decide)`, the last interceptor, decides each unary call on its
  decoded request and each stream when it opens; the deciding functions are each service's
  (herald.broker.grpc.authorization, herald.lookup.authorization) over
  herald.metadata.authorization's rules.
"""
