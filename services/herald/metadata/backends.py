"""Picking a metadata store backend by URL: etcd for production clusters, Redis for development
clusters, the embedded SQLite store for standalone."""

from __future__ import annotations

from herald.common.errors import InvalidArgumentError
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.metadata.etcd import EtcdMetadataStore
from herald.metadata.redis import RedisMetadataStore
from herald.metadata.store import MetadataStore


def open_store(url: str) -> MetadataStore:
    """A store for a URL: `etcd://host:port[,host:port...]`, `redis://host:port[/db]`, or
    `sqlite:///path/to/file.db` (embedded)."""
    if url.startswith("etcd://"):
        return EtcdMetadataStore(url)
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisMetadataStore(url)
    if url.startswith("sqlite://"):
        return EmbeddedMetadataStore(url.removeprefix("sqlite://"))
    raise InvalidArgumentError(
        f"metadata store URL {url!r} is not supported: use etcd://host:port[,host:port...], "
        "redis://host:port or sqlite:///path/to/file.db"
    )
