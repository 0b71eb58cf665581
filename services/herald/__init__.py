"""Herald: durable, distributed publish/subscribe messaging with Pulsar's semantics.

The package holds the services (lookup, broker, storage), the client, and the layers beneath them
(common, api, metadata). Users start with `herald.client`.
"""

__version__ = "0.1.0"
