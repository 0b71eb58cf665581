"""The broker: the data plane producers and consumers talk to.

It owns topics (one writer each), checks and deduplicates what producers send, appends entries to
each topic's managed ledger (a list of storage ledgers), and delivers them to subscriptions through
durable cursors and dispatchers that respect consumers' flow permits.

Folders are layers (import-linter keeps them: server > grpc > core > settings): `core/` is all of
that, protocol-neutral; `grpc/` translates Herald's gRPC contracts into core calls; `server.py`
wires a broker process together. The broker talks to storage through the storage client only, and
it never parses the messages inside an entry: one entry is one producer batch.

`server.BrokerServer` wires the core (BrokerService) to the storage client (herald.storage.client),
the ownership records and their monitor, the lookup registration, Admission (with the Authorizer
when authorization is on), the gRPC servicers (BrokerService, AdminService, DeadLetterService, with
the authorization interceptor of grpc.authorization) and the metrics (BrokerMetrics, the core's
BrokerObserver, and the scrape-time collector), served at its own HTTP endpoint. `settings`:
BrokerSettings, one dataclass with every default (Pulsar's where the seeds give one); a
grpc_max_receive_message_bytes below max_message_size + 64 KiB is refused at start.
"""
