"""gRPC plumbing shared by every service and the client: channel and server options, the one mapping
between HeraldError and gRPC status, TLS credentials and dialing, connection counting and limits,
admission before a request is read, request decoding, server-side tracing, health checks. Must not
know: any service, the security decisions (herald.common.security sits above it)."""
