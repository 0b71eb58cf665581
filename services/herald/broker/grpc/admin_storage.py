"""AdminService's storage node calls (super-users'): the registered nodes with the ledgers each must
keep, and draining one (storage.membership; autorecovery then copies its entries elsewhere)."""

from __future__ import annotations

from herald.api.v1 import admin_pb2
from herald.common.errors import InvalidArgumentError
from herald.metadata.store import MetadataStore
from herald.storage.client.node_registry import StorageNodeUsage, storage_node_usage
from herald.storage.membership import check_address, mark_draining


def _to_proto(node: StorageNodeUsage) -> admin_pb2.StorageNodeInfo:
    return admin_pb2.StorageNodeInfo(address=node.address, state=node.state, free_bytes=node.free_bytes,
                                     ledgers=node.ledgers, registered=node.registered)


async def list_storage_nodes(store: MetadataStore) -> list[admin_pb2.StorageNodeInfo]:
    return [_to_proto(node) for node in await storage_node_usage(store)]


async def drain_storage_node(store: MetadataStore, address: str, *, undo: bool) -> admin_pb2.StorageNodeInfo:
    check_address(address)
    known = {node.address: node for node in await storage_node_usage(store)}
    if address not in known and not undo:
        raise InvalidArgumentError(
            f"storage node {address} is neither registered nor named by any ledger: check the address "
            "(`herald admin storage list`)")
    await mark_draining(store, address, draining=not undo)
    node = {node.address: node for node in await storage_node_usage(store)}.get(address)
    return _to_proto(node) if node is not None else admin_pb2.StorageNodeInfo(address=address, state="gone")
