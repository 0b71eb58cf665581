"""The broker's web_port setting: -1 (no REST API) by default on `herald broker` (brokers sharing a
host must not collide), Pulsar's 8080 in `herald standalone` (as Pulsar's standalone), 0 for any
free port, a port; anything else refused at start with a message saying what to use. The same
defaults for the Pulsar binary port: off on a broker, Pulsar's 6650 in standalone."""

from __future__ import annotations

import pytest
from herald.broker.settings import BrokerSettings
from herald.common.errors import InvalidArgumentError
from herald.standalone import StandaloneSettings


def test_a_broker_serves_no_web_or_pulsar_port_by_default() -> None:
    assert (BrokerSettings().web_port, BrokerSettings().pulsar_port) == (-1, -1)


def test_standalone_serves_pulsar_s_ports_by_default_and_herald_s_beside_them() -> None:
    settings = StandaloneSettings()
    assert (settings.pulsar_port, settings.web_port) == (6650, 8080)
    assert (settings.port, settings.broker_port, settings.proxy_port) == (6660, 6661, 6662)


@pytest.mark.parametrize("port", [-2, 65536])
def test_a_web_port_that_is_no_port_is_refused(port: int) -> None:
    with pytest.raises(InvalidArgumentError, match=r"web_port must be a port, 0 \(any free port\) or -1"):
        BrokerSettings(web_port=port)


@pytest.mark.parametrize("port", [-1, 0, 8080])
def test_off_any_and_a_real_port_are_taken(port: int) -> None:
    assert BrokerSettings(web_port=port).web_port == port
