"""The process's HTTP endpoint (/metrics, /healthz, /readyz) and who may read /metrics. Not gRPC:
above the transport (health checks) and security (the metrics token) it serves from."""
