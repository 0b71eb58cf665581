"""The official client connects, looks topics up and reads what Herald's own client wrote."""

from __future__ import annotations

import pulsar
from herald.client import Client

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic


def test_a_pulsar_consumer_receives_what_a_herald_producer_sent(server: StandaloneProcess,
                                                                client: pulsar.Client) -> None:
    topic = unique_topic("herald-to-pulsar")
    with Client(server.service_url) as herald:
        producer = herald.create_producer(topic)
        sent = [producer.send(f"m{i}".encode(), key=f"k{i}", properties={"i": str(i)}) for i in range(5)]
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    received = [consumer.receive(timeout_millis=10_000) for _ in sent]
    assert [m.data() for m in received] == [f"m{i}".encode() for i in range(5)]
    assert [m.partition_key() for m in received] == [f"k{i}" for i in range(5)]
    assert [m.properties() for m in received] == [{"i": str(i)} for i in range(5)]
    assert [(m.message_id().ledger_id(), m.message_id().entry_id()) for m in received] == [
        (s.ledger_id, s.entry_id) for s in sent]
