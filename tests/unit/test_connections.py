"""Connection counting per client address (herald.common.transport.connections) and the servers' limit
settings: pure code, a clock of the test's own."""

from __future__ import annotations

import pytest
from herald.broker.settings import BrokerSettings
from herald.common.config import load_settings
from herald.common.errors import InvalidArgumentError, TooManyRequestsError
from herald.common.transport.connections import ConnectionTracker, peer_address
from herald.lookup.settings import LookupSettings
from herald.proxy.settings import ProxySettings
from herald.storage.client.node_connection import ADD_BATCH_MAX_BYTES
from herald.storage.node.settings import StorageSettings

from tests.helpers import ManualClock

MIB = 1024 * 1024


def test_a_peers_address_is_its_host_without_the_port() -> None:
    assert peer_address("ipv4:10.0.0.7:51234") == "ipv4:10.0.0.7"
    assert peer_address("ipv6:[::1]:51234") == "ipv6:[::1]"
    assert peer_address("unix:/tmp/socket") == "unix:/tmp/socket"


def test_connections_past_the_limit_of_one_address_are_refused_and_other_addresses_are_not() -> None:
    tracker = ConnectionTracker("broker", idle_timeout=10.0, max_per_address=2, clock=ManualClock())
    tracker.enter("ipv4:10.0.0.1:1000")
    tracker.enter("ipv4:10.0.0.1:1001")
    tracker.enter("ipv4:10.0.0.1:1000")  # a call multiplexed on a counted connection
    with pytest.raises(TooManyRequestsError, match=r"broker has reached its limit of 2 connections from client "
                                                   r"address ipv4:10.0.0.1 \(max_connections_per_address\)"):
        tracker.enter("ipv4:10.0.0.1:1002")
    tracker.enter("ipv4:10.0.0.2:1000")
    assert (tracker.connections_of("ipv4:10.0.0.1"), tracker.connections_of("ipv4:10.0.0.2")) == (2, 1)


def test_a_connection_stops_counting_as_soon_as_its_last_call_ends() -> None:
    tracker = ConnectionTracker("lookup", idle_timeout=10.0, max_per_address=1, clock=ManualClock())
    tracker.enter("ipv4:10.0.0.1:1")
    tracker.enter("ipv4:10.0.0.1:1")
    tracker.leave("ipv4:10.0.0.1:1")
    with pytest.raises(TooManyRequestsError):  # one call still in progress: still live
        tracker.enter("ipv4:10.0.0.1:2")
    tracker.leave("ipv4:10.0.0.1:1")
    tracker.enter("ipv4:10.0.0.1:2")  # at once: no idle timeout to wait out
    assert (tracker.connections, tracker.connections_of("ipv4:10.0.0.1")) == (1, 1)
    with pytest.raises(TooManyRequestsError):  # a new call on the first: it would be live again, one too many
        tracker.enter("ipv4:10.0.0.1:1")


def test_refused_calls_and_hung_up_peers_take_no_place() -> None:
    """An attacker's connections past the limit, refused, then gone: the address's places are free."""
    tracker = ConnectionTracker("broker", idle_timeout=300.0, max_per_address=2, clock=ManualClock())
    tracker.enter("ipv4:10.0.0.1:1")
    tracker.enter("ipv4:10.0.0.1:2")
    for port in range(3, 10):
        with pytest.raises(TooManyRequestsError):
            tracker.enter(f"ipv4:10.0.0.1:{port}")
        tracker.leave(f"ipv4:10.0.0.1:{port}")  # a refused call's end changes nothing
    tracker.leave("ipv4:10.0.0.1:1")
    tracker.leave("ipv4:10.0.0.1:2")
    assert (tracker.connections, tracker.connections_of("ipv4:10.0.0.1")) == (0, 0)
    tracker.enter("ipv4:10.0.0.1:100")
    tracker.enter("ipv4:10.0.0.1:101")
    assert tracker.connections_of("ipv4:10.0.0.1") == 2


def test_a_max_total_counts_live_connections_of_every_address() -> None:
    tracker = ConnectionTracker("proxy", idle_timeout=10.0, max_total=2, clock=ManualClock())
    tracker.enter("ipv4:10.0.0.1:1")
    tracker.enter("ipv4:10.0.0.2:1")
    with pytest.raises(TooManyRequestsError, match=r"limit of 2 client connections \(max_connections\)"):
        tracker.enter("ipv4:10.0.0.3:1")
    tracker.leave("ipv4:10.0.0.2:1")
    tracker.enter("ipv4:10.0.0.3:1")
    assert tracker.connections == 2


def test_server_limit_settings_are_checked() -> None:
    settings = load_settings(LookupSettings, "lookup", environ={"HERALD_LOOKUP_MAX_CONNECTIONS_PER_ADDRESS": "3"})
    assert settings.max_connections_per_address == 3
    with pytest.raises(InvalidArgumentError, match="max_connections_per_address must be 0"):
        LookupSettings(max_connections_per_address=-1)
    with pytest.raises(InvalidArgumentError, match="grpc_max_receive_message_bytes must be a positive"):
        LookupSettings(grpc_max_receive_message_bytes=0)
    with pytest.raises(InvalidArgumentError, match="max_streams_per_connection must be a positive number, got 0"):
        LookupSettings(max_streams_per_connection=0)
    assert load_settings(LookupSettings, "lookup", environ={
        "HERALD_LOOKUP_MAX_STREAMS_PER_CONNECTION": "8"}).max_streams_per_connection == 8


def test_servers_take_only_what_they_need_by_default() -> None:
    """Receive limits sized to each server's requests, not gRPC-wide 64 MiB; a bounded stream count."""
    assert LookupSettings().grpc_max_receive_message_bytes == 4 * MIB
    assert BrokerSettings().grpc_max_receive_message_bytes == 8 * MIB
    assert ProxySettings().grpc_max_receive_message_bytes == 8 * MIB
    assert StorageSettings().grpc_max_receive_message_bytes == 16 * MIB
    for settings in (LookupSettings(), BrokerSettings(), ProxySettings(), StorageSettings()):
        assert settings.max_streams_per_connection == 4096
    # Storage takes a broker's batched adds: at most ADD_BATCH_MAX_BYTES, or one entry alone.
    assert ADD_BATCH_MAX_BYTES + BrokerSettings().grpc_max_receive_message_bytes <= 16 * MIB


def test_a_broker_refuses_a_receive_limit_too_small_for_its_max_message_size() -> None:
    with pytest.raises(InvalidArgumentError, match=r"grpc_max_receive_message_bytes \(8388608\) is too small for "
                                                   r"max_message_size \(10485760\)"):
        BrokerSettings(max_message_size=10 * MIB)
    BrokerSettings(max_message_size=10 * MIB, grpc_max_receive_message_bytes=11 * MIB)
