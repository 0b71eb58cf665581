"""Topic and subscription names."""

from __future__ import annotations

import pytest
from herald.common.codec.names import TopicName, validate_subscription_name
from herald.common.errors import InvalidTopicNameError


def test_short_name_means_public_default_persistent() -> None:
    name = TopicName.parse("orders")
    assert str(name) == "persistent://public/default/orders"
    assert name.namespace_name == "public/default"


def test_full_names_round_trip() -> None:
    for text in ("persistent://acme/eu/orders", "non-persistent://acme/eu/ticks"):
        assert str(TopicName.parse(text)) == text
    assert not TopicName.parse("non-persistent://acme/eu/ticks").persistent


def test_tenant_namespace_name_form() -> None:
    assert str(TopicName.parse("acme/eu/orders")) == "persistent://acme/eu/orders"


def test_partition_names() -> None:
    name = TopicName.parse("orders")
    assert str(name.partition(3)) == "persistent://public/default/orders-partition-3"
    assert name.partition(3).partition_index == 3
    assert name.partition_index == -1


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("a b", "invalid"),
        ("ftp://a/b/c", "domain"),
        ("persistent://a/b", "expected"),
        ("a/b", "expected"),
        ("x" * 600, "longer"),
        ("persistent://a/b/c/d", "expected"),
        ("persistent://a//c", "invalid"),
    ],
)
def test_invalid_topic_names_get_a_clear_error(text: str, reason: str) -> None:
    with pytest.raises(InvalidTopicNameError, match=reason):
        TopicName.parse(text)


def test_subscription_names() -> None:
    assert validate_subscription_name("sub-1") == "sub-1"
    with pytest.raises(InvalidTopicNameError, match="empty"):
        validate_subscription_name("")
    with pytest.raises(InvalidTopicNameError, match="invalid"):
        validate_subscription_name("a/b")
