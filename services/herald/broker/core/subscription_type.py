"""Subscription types (Exclusive, Shared, Failover, Key_Shared) and the checks every subscription,
stored or not, makes of a consumer joining it: a valid type and priority level, the subscription's
current type, Exclusive's single consumer."""

from __future__ import annotations

import enum

from herald.common.errors import ConsumerBusyError, InvalidArgumentError


class SubscriptionType(enum.IntEnum):
    """Values as in Herald's wire contract (and Pulsar's): front ends pass their numbers through
    `parse`."""

    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3

    @property
    def label(self) -> str:
        return _LABELS[self]

    @classmethod
    def parse(cls, number: int) -> SubscriptionType:
        """The type numbered `number`; InvalidArgumentError naming the valid ones otherwise."""
        try:
            return cls(number)
        except ValueError:
            raise InvalidArgumentError(
                f"subscription type {number} is invalid: use EXCLUSIVE, SHARED, FAILOVER or KEY_SHARED") from None


_LABELS = {
    SubscriptionType.EXCLUSIVE: "Exclusive",
    SubscriptionType.SHARED: "Shared",
    SubscriptionType.FAILOVER: "Failover",
    SubscriptionType.KEY_SHARED: "Key_Shared",
}


def validate_priority_level(priority_level: int) -> int:
    """Topics check it before making a subscription, so a refused consumer leaves nothing behind."""
    if priority_level < 0:
        raise InvalidArgumentError(f"priority level must be 0 (the highest) or more, got {priority_level}")
    return priority_level


def check_can_join(name: str, current: SubscriptionType, has_consumers: bool, joining: SubscriptionType) -> None:
    """ConsumerBusyError when a consumer of type `joining` may not join subscription `name`, now of
    type `current`: a subscription with consumers keeps its type, and Exclusive takes one consumer."""
    if not has_consumers:
        return
    if joining is not current:
        raise ConsumerBusyError(
            f"Subscription is of a different type: {name} is {current.label} and has "
            f"consumers; close them or subscribe as {current.label}")
    if joining is SubscriptionType.EXCLUSIVE:
        raise ConsumerBusyError("Exclusive consumer is already connected")
