"""A storage node's registration (storage.node.registration) and the client's view of it
(storage.client.node_registry), on the embedded metadata store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from herald.common.errors import InvalidArgumentError
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.storage.client.node_registry import NodeRegistry
from herald.storage.membership import mark_draining, registered_nodes
from herald.storage.node.registration import NodeRegistration
from herald.storage.node.settings import StorageSettings


async def until(check: object, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


def test_a_registration_ttl_that_is_not_positive_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="registration_ttl 0 must be > 0 seconds"):
        StorageSettings(registration_ttl=0)


async def test_registered_nodes_are_followed_and_a_draining_one_is_not_available(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(str(tmp_path / "metadata.db"))
    await store.start()
    registry = NodeRegistry(store, lambda _: None)
    await registry.start()
    first = NodeRegistration(store, "127.0.0.1:4001", str(tmp_path), ttl=5.0)
    second = NodeRegistration(store, "127.0.0.1:4002", str(tmp_path), ttl=5.0)
    try:
        await first.start()
        await second.start()
        await until(lambda: registry.available() == ["127.0.0.1:4001", "127.0.0.1:4002"], "both registered")
        assert (await registered_nodes(store))["127.0.0.1:4001"].free_bytes > 0

        marked = await mark_draining(store, "127.0.0.1:4002")
        assert marked is not None and marked.state == "draining"
        await until(lambda: registry.available() == ["127.0.0.1:4001"], "the draining node left out")
        # The mark outlives the lease: registering again keeps the node draining.
        await second.stop()
        await until(lambda: "127.0.0.1:4002" not in registry.records, "the stopped node unregistered")
        await second.start()
        await until(lambda: "127.0.0.1:4002" in registry.records, "registered again")
        assert registry.records["127.0.0.1:4002"].state == "draining"
        assert registry.available() == ["127.0.0.1:4001"]
    finally:
        await first.stop()
        await second.stop()
        await registry.close()
        await store.close()


async def test_an_invalid_address_cannot_be_drained(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(str(tmp_path / "metadata.db"))
    await store.start()
    try:
        with pytest.raises(InvalidArgumentError, match="use host:port"):
            await mark_draining(store, "no-port")
    finally:
        await store.close()
