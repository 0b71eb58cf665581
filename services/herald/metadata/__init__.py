"""The metadata store: one async interface (store.MetadataStore) over two backends, Redis for
clusters and an embedded SQLite file for standalone.

This layer knows nothing of the services that keep their metadata in it.
"""

from herald.metadata.backends import open_store
from herald.metadata.store import LeaseExpiredError, MetadataStore, Versioned, WatchEvent

__all__ = ["LeaseExpiredError", "MetadataStore", "Versioned", "WatchEvent", "open_store"]
