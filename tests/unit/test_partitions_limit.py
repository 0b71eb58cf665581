"""The broker's limit on a partitioned topic's partitions (`max_partitions_per_topic`): a setting,
checked. Its refusals through real processes: tests/e2e/test_limits.py and, for a tenant admin,
tests/security/test_tenant_isolation.py."""

from __future__ import annotations

import pytest
from herald.broker.settings import BrokerSettings
from herald.common.config import load_settings
from herald.common.errors import InvalidArgumentError


def test_max_partitions_per_topic_is_a_setting_with_a_finite_default_and_zero_for_none() -> None:
    assert BrokerSettings().max_partitions_per_topic == 1000
    loaded = load_settings(BrokerSettings, "broker", environ={"HERALD_BROKER_MAX_PARTITIONS_PER_TOPIC": "0"})
    assert loaded.max_partitions_per_topic == 0
    with pytest.raises(InvalidArgumentError, match="max_partitions_per_topic must be 0 \\(no limit\\) or more, got -1"):
        BrokerSettings(max_partitions_per_topic=-1)
