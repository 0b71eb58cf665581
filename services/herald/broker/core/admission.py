"""Admission: the checks a stream's opening request passes before the core acts on it, whatever front
end it came through: the role's grant to produce or consume on the topic (the rules are
herald.metadata.authorization's; None as the authorizer: authorization is off), the produce grant on a
dead-letter policy's topics (its letters move on the subscriber's authority), and the limits on the
properties kept in memory while the producer or consumer is connected. The sessions
(broker.producer_session, broker.consumer_session) run them; a front end only names the role its
transport authenticated."""

from __future__ import annotations

from collections.abc import Mapping

from herald.broker.core.dead_letters import DeadLetterPolicy
from herald.broker.settings import BrokerSettings
from herald.common.codec.properties import check_properties
from herald.common.errors import AuthorizationError
from herald.metadata.authorization import CONSUME, PRODUCE, Authorizer


async def check_dead_letter_topics(authorizer: Authorizer, role: str | None, policy: DeadLetterPolicy) -> None:
    """AuthorizationError unless `role` may produce on the policy's dead-letter and retry topics:
    the dlq-worker publishes its letters there acting as that role, and the client its retries."""
    for field, topic in (("dead_letter_topic", policy.dead_letter_topic),
                         ("retry_letter_topic", policy.retry_letter_topic)):
        if not await authorizer.allowed(role, topic, (PRODUCE,)):
            raise AuthorizationError(
                f"{field} of the dead-letter policy: role {role!r} may not produce on {topic}, and its dead "
                f"letters would be published there on its authority: name a topic it may produce to, or ask an "
                f"administrator for the produce permission there (a grant on the namespace covers both topics)")


class Admission:
    def __init__(self, settings: BrokerSettings, authorizer: Authorizer | None = None) -> None:
        self._settings = settings
        self.authorizer = authorizer  # None: authorization off

    def role(self, authenticated: str | None) -> str | None:
        """The role decisions are made for (None with authorization off: nobody is checked)."""
        return authenticated if self.authorizer is not None else None

    async def admit_producer(self, role: str | None, topic: str, properties: Mapping[str, str]) -> None:
        """Once per producer, before it exists: may `role` produce on `topic`; are its properties
        within the limits."""
        if self.authorizer is not None:
            await self.authorizer.check(role, topic, PRODUCE)
        self._check_properties(properties, "a producer's")

    def dead_letter_policy(
        self, role: str | None, topic: str, subscription: str, max_redeliver_count: int,
        dead_letter_topic: str = "", retry_letter_topic: str = "",
    ) -> DeadLetterPolicy | None:
        """The subscriber's dead-letter policy (None: none asked for), its letters to move on the
        subscriber's authority ("" with authorization off). InvalidArgumentError when malformed."""
        return DeadLetterPolicy.for_subscription(topic, subscription, max_redeliver_count, dead_letter_topic,
                                                 retry_letter_topic, role or "")

    async def admit_consumer(
        self, role: str | None, topic: str, properties: Mapping[str, str], dead_letter_policy: DeadLetterPolicy | None,
    ) -> None:
        """Once per consumer, before its subscription is touched: may `role` consume on `topic`
        (and produce on its dead-letter policy's topics); are its properties within the limits."""
        if self.authorizer is not None:
            await self.authorizer.check(role, topic, CONSUME)
            if dead_letter_policy is not None:
                await check_dead_letter_topics(self.authorizer, role, dead_letter_policy)
        self._check_properties(properties, "a consumer's")

    def _check_properties(self, properties: Mapping[str, str], owner: str) -> None:
        """Kept in memory while the producer / consumer is connected: refused past the limits."""
        settings = self._settings
        check_properties(properties, owner, max_count=settings.max_properties, max_bytes=settings.max_properties_bytes)
