"""Fixtures of the unit tests: one part of Herald at a time, in this process, with no server and no
network. `store` is the embedded metadata store (SQLite in the test's directory) that the broker
core's cursors and deduplication keep their state in; a module testing another store (the storage
node's ledger store) defines a `store` of its own, which takes precedence there."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from herald.metadata.embedded import EmbeddedMetadataStore
from herald.metadata.store import MetadataStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MetadataStore]:
    made = EmbeddedMetadataStore(str(tmp_path / "meta.db"))
    await made.start()
    try:
        yield made
    finally:
        await made.close()
