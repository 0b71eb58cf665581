"""The broker core: topics, producers and their checks, dedup, managed ledgers and cursors,
subscriptions and dispatchers, policies, stats. Protocol-neutral: front ends (gRPC, Pulsar) drive it
with plain calls and awaitables. Must not know: grpc, the generated contracts (herald.api), any front
end, the storage node."""
