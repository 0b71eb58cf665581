"""Limits on the properties an application gives its producers and consumers (RegisterProducer and
Subscribe `properties`): the broker keeps them in memory while the producer or consumer is
connected, for stats, so their number and size are capped. The broker checks them with its
settings (max_properties, max_properties_bytes); the client checks the same defaults before it asks."""

from __future__ import annotations

from collections.abc import Mapping

from herald.common.errors import InvalidArgumentError

DEFAULT_MAX_PROPERTIES = 64
DEFAULT_MAX_PROPERTIES_BYTES = 64 * 1024


def properties_size(properties: Mapping[str, str]) -> int:
    """The bytes of the keys and values, UTF-8 encoded."""
    return sum(len(key.encode()) + len(value.encode()) for key, value in properties.items())


def check_properties(properties: Mapping[str, str], owner: str, *, max_count: int = DEFAULT_MAX_PROPERTIES,
                     max_bytes: int = DEFAULT_MAX_PROPERTIES_BYTES) -> None:
    """InvalidArgumentError naming the limit when `owner`'s ("a producer's", "a consumer's")
    properties are more than `max_count` pairs or `max_bytes` bytes."""
    if len(properties) > max_count:
        raise InvalidArgumentError(
            f"{owner} properties are {len(properties)} pairs, more than the limit of {max_count} "
            "(max_properties): give fewer properties")
    size = properties_size(properties)
    if size > max_bytes:
        raise InvalidArgumentError(
            f"{owner} properties take {size} bytes, more than the limit of {max_bytes} (max_properties_bytes): "
            "give smaller keys and values")
