"""PatternConsumer: a MultiTopicConsumer over every topic of one namespace whose name matches a
regex (Pulsar's PatternMultiTopicsConsumerImpl). The namespace is the pattern's literal prefix
(`persistent://tenant/namespace/...`; without a domain, persistent). The lookup service lists the
namespace (GetTopicsOfNamespace: partitioned topics by their base name); every
pattern_auto_discovery_period it is listed again, new matching topics are subscribed to and the
members of topics gone are closed. A member that lost its connection first checks that its topic is
still listed: the broker makes a topic a consumer subscribes to, so a member reconnecting to a
deleted topic would bring it back (Pulsar's pattern consumers subscribe without creating topics);
a member whose topic is gone closes instead, with the rest of its topic."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from herald.client.config import ClientConfig, ConsumerConfig
from herald.client.connection import ConnectionPool
from herald.client.lookup import LookupService
from herald.client.multi_topic_consumer import MultiTopicConsumer, _Member
from herald.client.schema import Schema
from herald.common.codec.names import MAX_NAME_LENGTH, TopicName
from herald.common.errors import HeraldError, InvalidArgumentError

log = logging.getLogger(__name__)

T = TypeVar("T")

_DOMAINS = ("persistent", "non-persistent")
_NAME_PART = re.compile(r"[A-Za-z0-9_.\-=:]+")
_ESCAPED = re.compile(r"\\(.)")


class TopicsPattern(NamedTuple):
    """What a pattern consumer lists and how it matches: the namespace's topics of one domain,
    each name after its `domain://` matched in full by `rest`."""

    persistent: bool
    namespace: str  # tenant/namespace
    rest: re.Pattern[str]


def parse_pattern(pattern: re.Pattern[str]) -> TopicsPattern:
    """The namespace and domain a topics pattern covers; InvalidArgumentError when it does not
    start with a literal `[domain://]tenant/namespace/` (a regex escape of a name's character,
    such as `\\.` or `\\-`, counts as that character)."""
    text = pattern.pattern
    if not isinstance(text, str):
        raise InvalidArgumentError(f"a topics pattern must be a str regex, got {pattern!r}")
    hint = ("a topics pattern must start with its namespace, literally: "
            "'persistent://<tenant>/<namespace>/<regex of the topic's name>'")
    persistent, rest = True, text
    if "://" in text:
        domain, rest = text.split("://", 1)
        if domain not in _DOMAINS:
            raise InvalidArgumentError(f"topics pattern {text!r}: the domain must be 'persistent' or "
                                       f"'non-persistent', literally; {hint}")
        persistent = domain == "persistent"
    parts = rest.split("/", 2)
    if len(parts) != 3:
        raise InvalidArgumentError(f"topics pattern {text!r} names no namespace: {hint}")
    literal = [_ESCAPED.sub(r"\1", part) for part in parts[:2]]
    for part in literal:
        if len(part) > MAX_NAME_LENGTH or not _NAME_PART.fullmatch(part):
            raise InvalidArgumentError(f"topics pattern {text!r}: the tenant and namespace must be literal names, "
                                       f"got {'/'.join(parts[:2])!r}; {hint}")
    return TopicsPattern(persistent, "/".join(literal), re.compile(rest, pattern.flags))


class _TopicGone(HeraldError):
    """A pattern member's topic is no longer listed: it must not reconnect (and so recreate it)."""


class _PatternMember(_Member[T]):
    """A member of a pattern consumer: it reconnects only to a topic still listed."""

    _parent: PatternConsumer[T]

    async def _before_reconnect(self) -> None:
        if not await self._parent._listed(self._topic):
            raise _TopicGone(f"topic {self._topic} no longer exists")

    def _connect_failed(self, error: HeraldError, first: bool) -> bool:
        if isinstance(error, _TopicGone):
            self._parent._gone(self)
            return True
        return False


class PatternConsumer(MultiTopicConsumer[T]):
    """Receives from every topic of a namespace whose name matches a pattern, as topics come and go.
    Made by `AsyncClient.subscribe` given a compiled regex."""

    _member_type = _PatternMember

    def __init__(
        self, pattern: re.Pattern[str], config: ConsumerConfig, client_config: ClientConfig, pool: ConnectionPool,
        lookup: LookupService, on_closed: Callable[[MultiTopicConsumer[Any]], None], schema: Schema[T] | None = None,
    ) -> None:
        self._pattern = pattern
        self._covers = parse_pattern(pattern)
        super().__init__([], config, client_config, pool, lookup, on_closed, schema)

    @property
    def topic(self) -> str:
        """The pattern."""
        return self._pattern.pattern

    @property
    def topics(self) -> list[str]:
        """The topics subscribed to now (partitioned ones by their base name)."""
        return list(self._partitioned)

    async def _start(self) -> None:
        found = await self._matching()
        async with self._membership:
            await self._add_topics(found)
        log.info("consumer %s: pattern %s matches %d topics of %s", self._name, self.topic, len(found),
                 self._covers.namespace)
        self._running()
        self._spawn(self._every(self._config.pattern_auto_discovery_period, self._discover, "list its namespace"))

    async def _matching(self) -> list[str]:
        """The namespace's topics the pattern matches now."""
        covers = self._covers
        listed = await self._lookup.topics_of_namespace(covers.namespace, covers.persistent)
        return [topic for topic in listed if covers.rest.fullmatch(topic.split("://", 1)[1])]

    async def _listed(self, topic: str) -> bool:
        """Whether a member's topic (a partition: its partitioned topic, that many partitions)
        still exists."""
        name = TopicName.parse(topic)
        listed = await self._lookup.topics_of_namespace(name.namespace_name, name.persistent)
        if topic in listed:
            return True
        base = str(name.base)
        if name.partition_index < 0 or base not in listed:
            return False
        return await self._lookup.partitions(base) > name.partition_index

    def _gone(self, member: _Member[T]) -> None:
        """A member's topic was deleted: close the topic's members; it is subscribed to again if
        it comes back."""
        base = str(TopicName.parse(member.topic).base)
        topic = base if self._partitioned.get(base, 0) > 0 else member.topic
        log.info("consumer %s: topic %s is gone; closing its consumers", self._name, topic)
        self._spawn(self._drop(topic))

    async def _drop(self, topic: str) -> None:
        async with self._membership:
            if topic in self._partitioned:
                await self._remove_topics([topic])

    async def _discover(self) -> None:
        """List the namespace again: subscribe to the topics that came, close the members of those
        gone. A topic that cannot be subscribed to now is tried again next time."""
        found = await self._matching()
        async with self._membership:
            current, matching = set(self._partitioned), set(found)
            gone = [topic for topic in self._partitioned if topic not in matching]
            if gone:
                await self._remove_topics(gone)
                log.info("consumer %s: topics gone from pattern %s: %s", self._name, self.topic, ", ".join(gone))
            for topic in found:
                if topic in current or self.closed:
                    continue
                try:
                    await self._add_topics([topic])
                except HeraldError as exc:
                    log.warning("consumer %s: could not subscribe to %s, which matches pattern %s: %s; trying "
                                "again in %gs", self._name, topic, self.topic, exc,
                                self._config.pattern_auto_discovery_period)
                else:
                    log.info("consumer %s: subscribed to %s, which matches pattern %s", self._name, topic, self.topic)
