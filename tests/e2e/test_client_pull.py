"""The client's offset reads: get_last_message_id and pull (no subscription), direct and through
the proxy, against a real `herald standalone`."""

from __future__ import annotations

from herald.client import AsyncClient, Client, MessageId
from herald.common.codec.entry import decode_entry

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic


async def test_pull_reads_stored_entries_from_a_position_and_says_where_to_go_on(
    shared_standalone: StandaloneProcess,
) -> None:
    topic = unique_topic("pulled")
    async with AsyncClient(shared_standalone.proxy_url) as client:
        assert (await client.get_last_message_id(topic)).ledger_id == -1
        producer = await client.create_producer(topic, batching_enabled=False)
        ids = [await producer.send(f"m{i}".encode()) for i in range(5)]
        assert await client.get_last_message_id(topic) == ids[-1]

        everything = await client.pull(topic)
        assert [(entry.ledger_id, entry.entry_id) for entry in everything.entries] == [
            (message_id.ledger_id, message_id.entry_id) for message_id in ids]
        assert decode_entry(everything.entries[0].data)[0].num_messages == 1
        assert everything.next == MessageId(ids[-1].ledger_id, ids[-1].entry_id + 1)

        from_third = await client.pull(topic, ids[2], max_entries=2)
        assert [entry.entry_id for entry in from_third.entries] == [ids[2].entry_id, ids[3].entry_id]
        assert from_third.next == MessageId(ids[4].ledger_id, ids[4].entry_id)
        assert (await client.pull(topic, everything.next)).entries == []


def test_the_blocking_client_pulls_and_gets_the_last_message_id_too(shared_standalone: StandaloneProcess) -> None:
    topic = unique_topic("pulled")
    with Client(shared_standalone.service_url) as client:
        last = client.create_producer(topic).send(b"only")
        assert client.get_last_message_id(topic) == last
        (entry,) = client.pull(topic, MessageId.earliest).entries
        assert (entry.ledger_id, entry.entry_id) == (last.ledger_id, last.entry_id)
