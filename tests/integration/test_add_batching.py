"""How the storage client's add stream to one node packs adds into messages: while
`add_batches_in_flight` messages are unanswered, new adds wait and then leave together (one message
per group commit of the node, instead of one per add), and the setting's bounds."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from herald.broker.settings import BrokerSettings
from herald.common import errors
from herald.storage.client import node_connection
from herald.storage.client.add_frame import AddFrame
from herald.storage.client.storage_client import StorageClient

from tests.integration import storage_cluster
from tests.integration.storage_cluster import DEADLINE, Cluster, ProcessNode, payload, until

cluster = storage_cluster.cluster  # the fixture: storage nodes, a metadata store, storage clients


@pytest.mark.parametrize(("in_flight", "expected"), [
    (1, [[0], [1], [2, 3, 4, 5, 6]]),  # held while [1] is unanswered, then together
    (2, [[0], [1], [2], [3, 4, 5, 6]]),
    (0, [[0], [1], [2], [3], [4], [5], [6]]),  # no limit: each leaves as soon as it is made
])
async def test_adds_made_while_messages_are_unanswered_leave_together_once_one_is_answered(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch, in_flight: int, expected: list[list[int]]) -> None:
    (node,) = await cluster.add_nodes(1, processes=True)
    assert isinstance(node, ProcessNode)
    client = StorageClient(cluster.store, [node.address], add_timeout=DEADLINE, read_timeout=DEADLINE,
                           add_batches_in_flight=in_flight)
    cluster.clients.append(client)
    handle = await client.create_ledger(1, 1, 1)
    messages: list[list[int]] = []  # the entry ids of each message written to the node, in order
    pack = node_connection.batch_message

    def recording(frames: Sequence[AddFrame]) -> bytes:
        messages.append([frame.entry_id for frame in frames])
        return pack(frames)

    monkeypatch.setattr(node_connection, "batch_message", recording)
    datas = [payload(i, size=200) for i in range(7)]
    assert await handle.add_entry(datas[0]) == 0  # the stream is up (a paused node would not set it up)
    completed: list[tuple[int, errors.HeraldError | None]] = []
    node.pause()  # nothing is answered until it resumes
    for entry_id in range(1, 7):
        handle.add_entry_nowait(datas[entry_id], lambda i, error: completed.append((i, error)))
        # Each add is made in a loop turn of its own, after the stream's writer had its turns.
        for _ in range(10):
            await asyncio.sleep(0)
        if entry_id <= in_flight or in_flight == 0:
            await until(lambda n=entry_id: len(messages) == n + 1, f"add {entry_id} was written at once")
    node.resume()
    await until(lambda: len(completed) == 6, "every add completed")
    assert completed == [(i, None) for i in range(1, 7)]
    assert messages == expected
    assert await handle.read_entries(0, 6) == list(enumerate(datas))


def test_a_negative_add_batches_in_flight_is_refused_with_what_to_set(cluster: Cluster) -> None:
    with pytest.raises(errors.InvalidArgumentError, match=r"add_batches_in_flight -1 must be 0 \(no limit\) or more"):
        StorageClient(cluster.store, ["127.0.0.1:1"], add_batches_in_flight=-1)
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"storage_add_batches_in_flight must be 0 \(no limit\) or more"):
        BrokerSettings(storage_add_batches_in_flight=-1)
