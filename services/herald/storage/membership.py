"""Which storage nodes exist: each running node registers /storage/nodes/<address> in the metadata
store, an ephemeral key on its own lease (it vanishes when the node stops renewing it), and brokers
watch that prefix to choose ensembles. Shared by the node (which writes it) and the client (which
reads it), the one thing besides the storage contract they both know.

A drain is an operator's decision that must outlive the node's lease (a drained node that restarts
stays drained): it is a persistent key /storage/draining/<address>, which the node copies into its
record's state on every renewal and `mark_draining` copies at once.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from herald.common.errors import BadVersionError, InvalidArgumentError
from herald.metadata.store import MetadataStore

STORAGE_NODES_PREFIX = "/storage/nodes/"
DRAINING_PREFIX = "/storage/draining/"
NodeState = Literal["available", "draining"]


def node_key(address: str) -> str:
    return STORAGE_NODES_PREFIX + address


def draining_key(address: str) -> str:
    return DRAINING_PREFIX + address


@dataclass
class StorageNodeRecord:
    """A registered storage node: where it serves, the free bytes of its data disk, its state."""

    address: str
    free_bytes: int = 0
    state: NodeState = "available"
    registered_at: float = field(default_factory=time.time)

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> StorageNodeRecord:
        doc: dict[str, Any] = json.loads(raw)
        known = {name: doc[name] for name in ("address", "free_bytes", "state", "registered_at") if name in doc}
        return cls(**known)


def check_address(address: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "/" in address:
        raise InvalidArgumentError(f"storage node address {address!r} is invalid: use host:port")


async def registered_nodes(store: MetadataStore) -> dict[str, StorageNodeRecord]:
    """The registered storage nodes by address."""
    found = await store.list(STORAGE_NODES_PREFIX)
    return {key.removeprefix(STORAGE_NODES_PREFIX): StorageNodeRecord.from_bytes(item.value)
            for key, item in found.items()}


async def draining_addresses(store: MetadataStore) -> set[str]:
    """The nodes marked draining, registered or not."""
    return {key.removeprefix(DRAINING_PREFIX) for key in await store.list(DRAINING_PREFIX)}


async def mark_draining(store: MetadataStore, address: str, draining: bool = True) -> StorageNodeRecord | None:
    """Mark a node draining (no new ensemble chooses it), or available again; returns its record
    as now registered (None when it is not registered: the mark waits for it)."""
    check_address(address)
    if draining:
        await store.put(draining_key(address), str(time.time()).encode())
    else:
        await store.delete(draining_key(address))
    while True:  # the node renews its record meanwhile: compare-and-set until ours lands
        current = await store.get(node_key(address))
        if current is None:
            return None
        record = StorageNodeRecord.from_bytes(current.value)
        record.state = "draining" if draining else "available"
        try:
            await store.put(node_key(address), record.to_bytes(), expected_version=current.version,
                            lease_id=current.lease_id)
        except BadVersionError:
            continue
        return record
