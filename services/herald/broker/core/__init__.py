"""The broker core: topics, producers and their checks, dedup, managed ledgers and cursors,
subscriptions and dispatchers, policies, stats. Protocol-neutral: front ends (gRPC, Pulsar) drive it
with plain calls and awaitables, through the sessions (producer_session, consumer_session) and the
administration calls of service.BrokerService. Must not know: grpc, the generated contracts
(herald.api), any front end, the storage node.

Its modules import each other without cycles (import-linter's acyclic_siblings), bottom up:
the log (ledger_list, entry_cache, pending_add, ledger_reader, managed_ledger, cursor, dedup,
retention, seek); a consumer and who gets what (consumer, selection, dispatcher, replay,
single_active, shared, key_shared, subscription); topics (topic_base, topic, nonpersistent_topic);
the registry, administration and service (topic_loader, topic_registry, topic_admin, service); the
sessions a front end drives (admission, producer_session, consumer_session). What a part needs of
the one above it is a Protocol it is built on (ports, ConsumerHost, DispatchSource, ProducerHost...),
never an import of its parent."""
