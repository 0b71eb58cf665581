"""The broker: the data plane producers and consumers talk to.

It owns topics (one writer each), checks and deduplicates what producers send, appends entries to
each topic's managed ledger (a list of storage ledgers), and delivers them to subscriptions through
durable cursors and dispatchers that respect consumers' flow permits.

Folders are layers (import-linter keeps them): `core/` is all of that, protocol-neutral; `grpc/`
translates Herald's gRPC contracts into core calls; `server.py` wires a broker process together.
The broker talks to storage through the storage client only, and it never parses the messages
inside an entry: one entry is one producer batch.
"""
