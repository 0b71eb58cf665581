"""Client, producer and consumer settings: Pulsar's defaults, and bad values refused with the
option named."""

from __future__ import annotations

import pytest
from herald.client import AsyncClient, Client, ConsumerType, InitialPosition
from herald.client.config import (
    ClientConfig,
    ConsumerConfig,
    ProducerConfig,
    ServiceUrl,
)
from herald.common.errors import InvalidArgumentError


def test_client_defaults_follow_pulsar() -> None:
    config = ClientConfig("herald://localhost:6660")
    assert (config.operation_timeout, config.connection_timeout, config.keep_alive) == (30.0, 10.0, 30.0)
    assert config.connections_per_broker == 1
    assert config.url == ServiceUrl("herald", "localhost", 6660)
    assert config.url.address == "localhost:6660"
    assert not config.url.tls


def test_tls_url_is_accepted_and_remembered() -> None:
    url = ClientConfig("herald+ssl://broker.example.com:6661").url
    assert url.tls and url.address == "broker.example.com:6661"
    assert str(url) == "herald+ssl://broker.example.com:6661"


def test_ipv6_host_is_bracketed_for_grpc() -> None:
    assert ClientConfig("herald://[::1]:6660").url.address == "[::1]:6660"


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("", "empty"),
        ("localhost:6660", "scheme"),
        ("pulsar://localhost:6660", "'pulsar'"),
        ("http://localhost:6660", "'http'"),
        ("herald://:6660", "no host"),
        ("herald://localhost", "no port"),
        ("herald://localhost:notaport", "invalid"),
        ("herald://localhost:99999", "invalid"),
        ("herald://localhost:6660/path", "extra parts"),
    ],
)
def test_bad_service_url_is_refused_clearly(url: str, complaint: str) -> None:
    with pytest.raises(InvalidArgumentError, match="herald://host:port") as info:
        ClientConfig(url)
    assert complaint in str(info.value)


@pytest.mark.parametrize(
    ("option", "value"),
    [("operation_timeout", 0), ("connection_timeout", -1), ("keep_alive", float("inf")),
     ("connections_per_broker", 0), ("operation_timeout", "30")],
)
def test_bad_client_option_names_the_option(option: str, value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=option):
        ClientConfig("herald://localhost:6660", **{option: value})  # type: ignore[arg-type]


def test_producer_defaults_follow_pulsar() -> None:
    config = ProducerConfig()
    assert config.producer_name is None
    assert config.send_timeout == 30.0
    assert config.max_pending_messages == 1000
    assert config.block_if_queue_full is False
    assert config.batching_enabled is True
    assert config.batching_max_publish_delay == 0.001
    assert config.batching_max_messages == 1000
    assert config.batching_max_bytes == 128 * 1024
    assert config.initial_sequence_id is None
    assert config.max_message_size == 5 * 1024 * 1024


def test_zero_send_timeout_is_allowed_to_disable_it() -> None:
    assert ProducerConfig(send_timeout=0).send_timeout == 0


@pytest.mark.parametrize(
    ("option", "value"),
    [("send_timeout", -1), ("max_pending_messages", 0), ("batching_max_publish_delay", 0),
     ("batching_max_messages", 0), ("batching_max_bytes", -5), ("producer_name", ""),
     ("initial_sequence_id", -2), ("max_message_size", 0)],
)
def test_bad_producer_option_names_the_option(option: str, value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=option):
        ProducerConfig(**{option: value})  # type: ignore[arg-type]


def test_consumer_defaults_follow_pulsar() -> None:
    config = ConsumerConfig("sub")
    assert config.consumer_type is ConsumerType.Exclusive
    assert config.receiver_queue_size == 1000
    assert config.ack_group_time == 0.1
    assert config.initial_position is InitialPosition.Latest
    assert config.consumer_name is None
    assert config.priority_level == 0


@pytest.mark.parametrize(
    ("option", "value"),
    [("consumer_type", "Shared"), ("initial_position", "Earliest"), ("receiver_queue_size", 0),
     ("ack_group_time", -0.1), ("priority_level", -1)],
)
def test_bad_consumer_option_names_the_option(option: str, value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=option):
        ConsumerConfig("sub", **{option: value})  # type: ignore[arg-type]


def test_consumer_types_map_to_the_wire_enum() -> None:
    from herald.api.v1 import broker_pb2

    assert [t.value for t in ConsumerType] == [
        broker_pb2.EXCLUSIVE, broker_pb2.SHARED, broker_pb2.FAILOVER, broker_pb2.KEY_SHARED]
    assert InitialPosition.Earliest.value == broker_pb2.EARLIEST


def test_clients_refuse_bad_urls_and_unknown_options_at_construction() -> None:
    with pytest.raises(InvalidArgumentError, match="scheme"):
        Client("localhost:6660")
    with pytest.raises(InvalidArgumentError, match="invalid client option"):
        Client("herald://localhost:6660", no_such_option=1)


async def test_async_client_refuses_unknown_producer_options_before_any_network_call() -> None:
    client = AsyncClient("herald://127.0.0.1:1", connection_timeout=0.2, operation_timeout=0.5)
    with pytest.raises(InvalidArgumentError, match="invalid producer option"):
        await client.create_producer("t", batching=False)
    with pytest.raises(InvalidArgumentError, match="subscription name is empty"):
        await client.subscribe("t", "")
    await client.close()
