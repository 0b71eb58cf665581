"""The gRPC path's limits hold on Pulsar's protocol too: producers and consumers per connection,
connections per client address, the properties a producer or consumer may carry, the frame size.
Each refusal says which limit, and the connection (or the broker) goes on serving."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pulsar
import pytest
from herald.api.pulsar import PulsarApi_pb2

from tests.conftest import StandaloneProcess, running_standalone
from tests.helpers import unique_topic
from tests.pulsar.conftest import QUIET
from tests.pulsar.raw import Command, RawConnection

STREAMS = 3
CONNECTIONS = 4
PROPERTIES = 4


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with running_standalone(tmp_path_factory.mktemp("pulsar-limits") / "data",
                            max_streams_per_connection=STREAMS, max_connections_per_address=CONNECTIONS,
                            max_properties=PROPERTIES, max_properties_bytes=256) as server:
        yield server


def client_of(server: StandaloneProcess) -> pulsar.Client:
    return pulsar.Client(server.pulsar_url, operation_timeout_seconds=5, logger=QUIET)


def test_producers_and_consumers_per_connection_are_capped(limited: StandaloneProcess) -> None:
    client = client_of(limited)
    try:
        topic = unique_topic("pulsar-streams")
        held = [client.create_producer(topic) for _ in range(STREAMS)]
        with pytest.raises(pulsar.TooManyLookupRequestException):  # ServerError TooManyRequests
            client.subscribe(topic, "s")
        held.pop().close()
        client.subscribe(topic, "s")  # room again
    finally:
        client.close()


def test_connections_per_address_are_capped(limited: StandaloneProcess) -> None:
    with RawConnection(limited.pulsar_port) as probe:
        assert probe.connect().type == Command.CONNECTED
    raws = [RawConnection(limited.pulsar_port) for _ in range(CONNECTIONS)]
    try:
        assert all(raw.connect().type == Command.CONNECTED for raw in raws)
        with RawConnection(limited.pulsar_port) as refused:
            answer = refused.connect()
            assert answer.type == Command.ERROR
            assert "max_connections_per_address" in answer.error.message
            assert refused.closed_by_broker()
    finally:
        for raw in raws:
            raw.sock.close()


def test_a_producer_with_too_many_properties_is_refused(limited: StandaloneProcess) -> None:
    client = client_of(limited)
    try:
        topic = unique_topic("pulsar-properties")
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic, properties={f"p{i}": "v" for i in range(PROPERTIES + 1)})
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(topic, "s", properties={"big": "x" * 300})
        client.create_producer(topic, properties={f"p{i}": "v" for i in range(PROPERTIES)})
    finally:
        client.close()


def test_a_frame_over_the_max_message_size_closes_only_its_connection(limited: StandaloneProcess) -> None:
    with RawConnection(limited.pulsar_port) as other, RawConnection(limited.pulsar_port) as raw:
        assert other.connect().type == Command.CONNECTED
        assert raw.connect().type == Command.CONNECTED
        raw.send_bytes(struct.pack(">I", 6 << 20))  # more than 5 MiB and its framing: refused from the size
        assert raw.closed_by_broker()
        other.send(Command(type=Command.PING, ping=PulsarApi_pb2.CommandPing()))
        assert other.receive().type == Command.PONG
