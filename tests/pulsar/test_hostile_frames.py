"""Bytes the official clients never send: the broker closes a connection whose framing is lost or
that skips CONNECT, answers a command it does not implement with an error, and serves everyone
else meanwhile."""

from __future__ import annotations

import struct

import pulsar
import pytest
from herald.api.pulsar import PulsarApi_pb2

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic
from tests.pulsar.raw import Command, RawConnection


def still_serves(client: pulsar.Client) -> None:
    topic = unique_topic("pulsar-still")
    consumer = client.subscribe(topic, "s")
    consumer.close()


@pytest.mark.parametrize("data", [
    struct.pack(">I", 1 << 30) + b"x" * 16,  # a frame claiming 1 GiB: refused from its size
    struct.pack(">I", 2),  # shorter than any frame
    struct.pack(">II", 12, 400) + b"\x00" * 8,  # a command claiming more than its frame
    struct.pack(">II", 8, 4) + b"\xff\xff\xff\xff",  # a command that does not decode
])
def test_a_connection_whose_framing_is_lost_is_closed(
    server: StandaloneProcess, client: pulsar.Client, data: bytes,
) -> None:
    with RawConnection(server.pulsar_port) as raw:
        assert raw.connect().type == Command.CONNECTED
        raw.send_bytes(data)
        assert raw.closed_by_broker()
    still_serves(client)


def test_a_command_before_connect_closes_the_connection(server: StandaloneProcess) -> None:
    with RawConnection(server.pulsar_port) as raw:
        raw.send(Command(type=Command.PING, ping=PulsarApi_pb2.CommandPing()))
        assert raw.closed_by_broker()


def test_an_unimplemented_command_gets_an_error_naming_it(server: StandaloneProcess) -> None:
    with RawConnection(server.pulsar_port) as raw:
        assert raw.connect().type == Command.CONNECTED
        raw.send(Command(type=Command.NEW_TXN, newTxn=PulsarApi_pb2.CommandNewTxn(request_id=7)))
        answer = raw.receive()
        assert answer.type == Command.ERROR
        assert (answer.error.request_id, answer.error.error) == (7, PulsarApi_pb2.NotAllowedError)
        assert "NEW_TXN is not supported" in answer.error.message
        raw.send(Command(type=Command.PING, ping=PulsarApi_pb2.CommandPing()))
        assert raw.receive().type == Command.PONG  # the connection goes on


# read_compacted is honoured now (on Exclusive / Failover): its refusal on Shared is test_read_compacted.py's.
@pytest.mark.parametrize("option", ["replicate_subscription_state", "subscription_properties"])
def test_a_subscribe_option_the_broker_cannot_honour_is_refused_not_ignored(
    server: StandaloneProcess, option: str,
) -> None:
    subscribe = PulsarApi_pb2.CommandSubscribe(
        topic=unique_topic("pulsar-options"), subscription="s", subType=PulsarApi_pb2.CommandSubscribe.Shared,
        consumer_id=1, request_id=9)
    if option == "subscription_properties":
        subscribe.subscription_properties.add(key="team", value="billing")
    else:
        setattr(subscribe, option, True)
    with RawConnection(server.pulsar_port) as raw:
        assert raw.connect().type == Command.CONNECTED
        raw.send(Command(type=Command.SUBSCRIBE, subscribe=subscribe))
        answer = raw.receive()
        assert answer.type == Command.ERROR
        assert (answer.error.request_id, answer.error.error) == (9, PulsarApi_pb2.NotAllowedError)
        assert "not supported" in answer.error.message or "not kept" in answer.error.message
