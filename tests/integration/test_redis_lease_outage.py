"""Leases outlive a metadata blip (issue 21 item 7): when the Redis behind the metadata store is
away (here SIGSTOPped, as a stall or a restart looks to its clients), no lease holder can renew, so
the store gives every lease that time back instead of expiring them all the moment Redis returns.
A lease that nobody renews while the store serves still expires (the contract suite checks that)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from herald.common.errors import InvalidArgumentError
from herald.local_cluster import free_port
from herald.metadata.redis import RedisMetadataStore
from herald.metadata.store import Versioned

from tests.conftest import wait_for_port
from tests.helpers import eventually


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A redis-server of this test alone: it gets paused."""
    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server is not installed: run `make test`, which installs it"
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--save", "",
         "--appendonly", "no", "--protected-mode", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc=proc)
        yield f"redis://127.0.0.1:{port}/0", proc
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        proc.wait(10)


async def test_a_lease_survives_redis_paused_longer_than_its_ttl(
    own_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, proc = own_redis
    store = RedisMetadataStore(url, timeout=10.0)
    await store.start()
    try:
        lease = await store.grant_lease(1.0)
        await store.put("brokers/b1", b"up", lease_id=lease)
        assert await store.keepalive(lease)
        os.kill(proc.pid, signal.SIGSTOP)
        await asyncio.sleep(1.5)  # the outage: longer than the lease's TTL, nobody could renew it
        os.kill(proc.pid, signal.SIGCONT)
        # The reaper's script, queued during the pause, runs first: the lease got the outage back.
        assert await store.get("brokers/b1") == Versioned(b"up", 1, lease)
        assert await store.keepalive(lease) is True
        assert await store.get("brokers/b1") == Versioned(b"up", 1, lease)
        # ... and a lease left alone after the outage still expires.
        await eventually(lambda: store.get("brokers/b1"), "the unrenewed lease expired",
                         until=lambda found: found is None, timeout=30)
    finally:
        await store.close()


def test_a_reap_interval_too_long_to_tell_an_outage_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="reap_interval must be in"):
        RedisMetadataStore("redis://127.0.0.1:1/0", reap_interval=2.0)
