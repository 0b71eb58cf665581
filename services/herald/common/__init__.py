"""What every service and the client share, by role: `codec/` (the bytes: entries, ids, names,
checksums, compression), `transport/` (gRPC plumbing), `security/` (authentication, credentials),
`http/` (the metrics and health endpoint), and protocol-neutral modules at the top (errors,
configuration, limits, tracing, logs, tasks).

This layer knows nothing of the services, the client or the metadata store.
"""
