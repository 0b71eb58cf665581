"""Limits on producer and consumer properties (herald.common.codec.properties): the broker's settings and
the client's early check. The broker's refusals through a real process: tests/security/test_transport_limits.py."""

from __future__ import annotations

import pytest
from herald.broker.settings import BrokerSettings
from herald.client.config import ConsumerConfig, ProducerConfig
from herald.common.codec.properties import check_properties, properties_size
from herald.common.config import load_settings
from herald.common.errors import InvalidArgumentError


def test_properties_are_counted_in_pairs_and_utf8_bytes_of_keys_and_values() -> None:
    assert properties_size({"k": "v", "é": "ü€"}) == 1 + 1 + 2 + 5
    check_properties({"a": "b"}, "a producer's", max_count=1, max_bytes=2)
    with pytest.raises(InvalidArgumentError, match=r"^a producer's properties are 2 pairs, more than the limit of 1 "
                                                   r"\(max_properties\): give fewer properties$"):
        check_properties({"a": "b", "c": "d"}, "a producer's", max_count=1, max_bytes=100)
    with pytest.raises(InvalidArgumentError, match=r"^a consumer's properties take 3 bytes, more than the limit of 2 "
                                                   r"\(max_properties_bytes\): give smaller keys and values$"):
        check_properties({"a": "é"}, "a consumer's", max_count=10, max_bytes=2)
    with pytest.raises(InvalidArgumentError, match="more than the limit of 0"):
        check_properties({"a": ""}, "a producer's", max_count=0)


def test_the_brokers_property_limits_are_settings_and_checked() -> None:
    settings = load_settings(BrokerSettings, "broker", environ={
        "HERALD_BROKER_MAX_PROPERTIES": "8", "HERALD_BROKER_MAX_PROPERTIES_BYTES": "1024"})
    assert (settings.max_properties, settings.max_properties_bytes) == (8, 1024)
    assert (BrokerSettings().max_properties, BrokerSettings().max_properties_bytes) == (64, 64 * 1024)
    with pytest.raises(InvalidArgumentError, match="max_properties and max_properties_bytes must be 0"):
        BrokerSettings(max_properties=-1)


def test_the_client_refuses_properties_past_the_default_limits_when_configured() -> None:
    with pytest.raises(InvalidArgumentError, match=r"a producer's properties are 65 pairs"):
        ProducerConfig(properties={str(i): "" for i in range(65)})
    with pytest.raises(InvalidArgumentError, match=r"a consumer's properties take 65537 bytes"):
        ConsumerConfig("s", properties={"k": "v" * 65536})
    assert len(ProducerConfig(properties={str(i): "" for i in range(64)}).properties or {}) == 64
