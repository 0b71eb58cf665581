"""The lookup service (RocketMQ NameServer + Pulsar lookup): the broker registry with heartbeats and
expiry, topic ownership assignment, and partitioned-topic metadata.

It keeps its state in the metadata store, so replicas can run side by side; it knows nothing of
the broker's internals, of storage, or of the CLI.
"""
