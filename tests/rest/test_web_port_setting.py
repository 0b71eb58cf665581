"""The broker's web_port setting: -1 (no REST API) by default, 0 for any free port, a port; anything
else refused at start with a message saying what to use."""

from __future__ import annotations

import pytest
from herald.broker.settings import BrokerSettings
from herald.common.errors import InvalidArgumentError


def test_the_web_port_is_off_by_default() -> None:
    assert BrokerSettings().web_port == -1


@pytest.mark.parametrize("port", [-2, 65536])
def test_a_web_port_that_is_no_port_is_refused(port: int) -> None:
    with pytest.raises(InvalidArgumentError, match=r"web_port must be a port, 0 \(any free port\) or -1"):
        BrokerSettings(web_port=port)


@pytest.mark.parametrize("port", [-1, 0, 8080])
def test_off_any_and_a_real_port_are_taken(port: int) -> None:
    assert BrokerSettings(web_port=port).web_port == port
