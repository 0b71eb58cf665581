"""The broker: the data plane producers and consumers talk to.

It owns topics (one writer each), checks and deduplicates what producers send, appends entries to
each topic's managed ledger (a list of storage ledgers), and delivers them to subscriptions through
durable cursors and dispatchers that respect consumers' flow permits.

The core (topic, managed_ledger, cursor, dedup, subscription, dispatcher) knows nothing of gRPC or
the generated api: `server.py` is the only adapter between the wire and these objects. The broker
talks to storage through the storage client only, never to the storage server's internals, and it
never parses the messages inside an entry: one entry is one producer batch.
"""
