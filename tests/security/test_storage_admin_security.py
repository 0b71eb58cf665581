"""`herald admin storage` calls are the super-users' alone, through a real secure standalone (TLS,
token authentication, authorization)."""

from __future__ import annotations

import asyncio

from herald.client import AuthorizationError

from tests.conftest import StandaloneProcess
from tests.security.conftest import ADMIN, Keys, Pki
from tests.security.test_standalone_security import _admin


def test_only_super_users_list_and_drain_storage_nodes(secure_standalone: StandaloneProcess, pki: Pki,
                                                       keys: Keys) -> None:
    async def run() -> None:
        async with _admin(secure_standalone, pki, keys, role="tenant-admin") as admin:
            for call in (admin.list_storage_nodes(), admin.drain_storage_node("127.0.0.1:1")):
                try:
                    await call
                except AuthorizationError as exc:
                    assert "only super-users may" in str(exc)
                else:
                    raise AssertionError("a role that is no super-user used a storage node admin call")
        async with _admin(secure_standalone, pki, keys, role=ADMIN) as admin:
            nodes = await admin.list_storage_nodes()  # standalone's node does not register
            assert all(node.state == "unregistered" for node in nodes)

    asyncio.run(run())
