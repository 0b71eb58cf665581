"""Connection counting per client address (herald.common.connections): pure code, a clock of the
test's own."""

from __future__ import annotations

import pytest
from herald.common.config import load_settings
from herald.common.connections import ConnectionTracker, peer_address
from herald.common.errors import InvalidArgumentError, TooManyRequestsError
from herald.lookup.settings import LookupSettings


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_peers_address_is_its_host_without_the_port() -> None:
    assert peer_address("ipv4:10.0.0.7:51234") == "ipv4:10.0.0.7"
    assert peer_address("ipv6:[::1]:51234") == "ipv6:[::1]"
    assert peer_address("unix:/tmp/socket") == "unix:/tmp/socket"


def test_connections_past_the_limit_of_one_address_are_refused_and_other_addresses_are_not() -> None:
    tracker = ConnectionTracker("broker", idle_timeout=10.0, max_per_address=2, clock=Clock())
    tracker.enter("ipv4:10.0.0.1:1000")
    tracker.enter("ipv4:10.0.0.1:1001")
    tracker.enter("ipv4:10.0.0.1:1000")  # a call multiplexed on a counted connection
    with pytest.raises(TooManyRequestsError, match=r"broker has reached its limit of 2 connections from client "
                                                   r"address ipv4:10.0.0.1 \(max_connections_per_address\)"):
        tracker.enter("ipv4:10.0.0.1:1002")
    tracker.enter("ipv4:10.0.0.2:1000")
    assert (tracker.connections_of("ipv4:10.0.0.1"), tracker.connections_of("ipv4:10.0.0.2")) == (2, 1)


def test_a_connection_idle_for_the_timeout_frees_its_place() -> None:
    clock = Clock()
    tracker = ConnectionTracker("lookup", idle_timeout=10.0, max_per_address=1, clock=clock)
    tracker.enter("ipv4:10.0.0.1:1")
    tracker.leave("ipv4:10.0.0.1:1")
    clock.now += 9.9
    with pytest.raises(TooManyRequestsError):
        tracker.enter("ipv4:10.0.0.1:2")
    clock.now += 0.1
    tracker.enter("ipv4:10.0.0.1:2")
    assert tracker.connections == 1


def test_server_limit_settings_are_checked() -> None:
    settings = load_settings(LookupSettings, "lookup", environ={"HERALD_LOOKUP_MAX_CONNECTIONS_PER_ADDRESS": "3"})
    assert settings.max_connections_per_address == 3
    with pytest.raises(InvalidArgumentError, match="max_connections_per_address must be 0"):
        LookupSettings(max_connections_per_address=-1)
    with pytest.raises(InvalidArgumentError, match="grpc_max_receive_message_bytes must be a positive"):
        LookupSettings(grpc_max_receive_message_bytes=0)
