"""The process's HTTP endpoint (/metrics, /healthz, /readyz) and who may read /metrics. Not gRPC:
above the transport (health checks) and security (the metrics token) it serves from.

Users' guides: docs/operations.md (health), docs/metrics.md, docs/security.md (who may read them).

- endpoint: `HttpEndpoint`, served by threads of its own on a port of its own. /metrics is its
  registry; the standard process_* / python_* collectors are added once per registry. /healthz is
  a `LoopHeartbeat` the event loop updates (herald.common.transport.health). /readyz runs the checks
  of every `ServiceHealth` the endpoint watches, each on its own loop, from the HTTP thread. A
  service process makes its own endpoint with `serve_endpoint` (port -1: none); standalone makes
  one for all of its services. A request thread waits 30 s at most for a peer that sends nothing.
- metrics_access: `MetricsAccess`, built from a service's MetricsEndpointSettings
  (herald.common.security.settings), checks the bearer token of each /metrics request in constant
  time and makes the HTTPS context; the TLS handshake runs on the request's own thread, so a peer
  that never finishes it stalls no other scrape or probe. The probes answer anyone: kubelets send
  no credentials.
"""
