"""The `herald` format's options, checked once on the driver: every error names the option and
says what it takes. Spark hands options over case-insensitively (lower-cased keys)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from herald.common.codec.names import TopicName
from herald.common.errors import InvalidArgumentError

from herald_spark.offsets import EARLIEST, LATEST, parse_spec

# Options Spark itself may add to a source's or sink's map; they mean nothing here.
_SPARK_OWN = {"path", "checkpointlocation", "queryname"}

READ_OPTIONS = {
    "service_url": "the Herald service URL, herald://host:port (the proxy from outside the cluster)",
    "topic": "one topic",
    "topics": "a comma-separated list of topics",
    "topicspattern": "a regex of full topic names, starting with its namespace literally",
    "startingoffsets": "earliest | latest | JSON of message ids per partition",
    "endingoffsets": "latest | JSON of message ids per partition (batch only)",
    "failondataloss": "true | false",
    "maxmessagespertrigger": "a positive integer (streaming only)",
    "pullmaxentries": "entries per pull, 1..10000",
    "operationtimeout": "seconds, > 0",
    "read_compacted": "true | false: the compacted view (latest message per key) up to the horizon, then the log",
}
WRITE_OPTIONS = {
    "service_url": READ_OPTIONS["service_url"],
    "topic": "the topic to write to (else each row's topic column)",
    "operationtimeout": READ_OPTIONS["operationtimeout"],
}


_SPELLED = {name.lower(): name for name in (
    "service_url", "topic", "topics", "topicsPattern", "startingOffsets", "endingOffsets", "failOnDataLoss",
    "maxMessagesPerTrigger", "pullMaxEntries", "operationTimeout", "read_compacted")}


def _check_known(options: Mapping[str, str], known: Mapping[str, str], what: str) -> None:
    for name in options:
        if name.lower() not in known and name.lower() not in _SPARK_OWN:
            close = difflib.get_close_matches(name.lower(), list(known), n=1)
            hint = f"did you mean {_SPELLED[close[0]]}? " if close else ""
            listed = ", ".join(_SPELLED[option] for option in known)
            raise InvalidArgumentError(
                f"unknown option {name!r} for {what} of format herald: {hint}the options are {listed}")


def _required(options: Mapping[str, str], name: str) -> str:
    value = options.get(name)
    if not value:
        raise InvalidArgumentError(f"option {name} is required: {READ_OPTIONS[name]}")
    return value


def _service_url(options: Mapping[str, str]) -> str:
    url = _required(options, "service_url")
    if not re.fullmatch(r"herald(\+ssl)?://[^/:]+:\d+/?", url):
        raise InvalidArgumentError(f"option service_url={url!r} is invalid: expected herald://host:port")
    return url.rstrip("/")


def _boolean(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name)
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise InvalidArgumentError(f"option {name}={text!r} is invalid: use true or false")
    return text.strip().lower() == "true"


def _number(options: Mapping[str, str], name: str, default: float, low: float, high: float,
            integer: bool = True) -> float:
    text = options.get(name)
    if text is None:
        return default
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise InvalidArgumentError(f"option {name}={text!r} is invalid: expected {READ_OPTIONS[name]}")
    return value


@dataclass(frozen=True)
class Subscription:
    """What to read: named topics, or every topic of a namespace matching a pattern."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    @property
    def namespace(self) -> str:
        assert self.pattern is not None
        rest = self.pattern.split("://", 1)[-1]
        return "/".join(rest.split("/", 2)[:2])


@dataclass(frozen=True)
class ReadOptions:
    service_url: str
    subscription: Subscription
    starting: str | dict[str, str]
    ending: str | dict[str, str]
    fail_on_data_loss: bool
    max_messages_per_trigger: int | None
    pull_max_entries: int
    operation_timeout: float
    read_compacted: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> ReadOptions:
        options = {name.lower(): value for name, value in options.items()}
        _check_known(options, READ_OPTIONS, "reading")
        service_url = _service_url(options)
        given = [name for name in ("topic", "topics", "topicspattern") if options.get(name)]
        if len(given) != 1:
            raise InvalidArgumentError(
                f"give exactly one of the options topic, topics, topicsPattern; got {', '.join(given) or 'none'}")
        (kind,) = given
        subscription = _subscription(kind, options[kind])
        starting = parse_spec("startingOffsets", options.get("startingoffsets", ""), LATEST if streaming else EARLIEST)
        ending = parse_spec("endingOffsets", options.get("endingoffsets", ""), LATEST)
        if streaming and "endingoffsets" in options:
            raise InvalidArgumentError("option endingOffsets is for batch reads: a stream has no end")
        if ending == EARLIEST:
            raise InvalidArgumentError("option endingOffsets=earliest is invalid: use latest or a JSON of message ids")
        limit = options.get("maxmessagespertrigger")
        if limit is not None and not streaming:
            raise InvalidArgumentError("option maxMessagesPerTrigger is for streaming reads")
        return cls(
            service_url=service_url, subscription=subscription, starting=starting, ending=ending,
            fail_on_data_loss=_boolean(options, "failondataloss", True),
            max_messages_per_trigger=None if limit is None else int(
                _number(options, "maxmessagespertrigger", 0, 1, 2**62)),
            pull_max_entries=int(_number(options, "pullmaxentries", 1000, 1, 10_000)),
            operation_timeout=_number(options, "operationtimeout", 30.0, 0.001, 86400.0, integer=False),
            read_compacted=_boolean(options, "read_compacted", False),
        )


def _subscription(kind: str, value: str) -> Subscription:
    option = {"topic": "topic", "topics": "topics", "topicspattern": "topicsPattern"}[kind]
    if kind == "topicspattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise InvalidArgumentError(f"option topicsPattern={value!r} is not a regex: {exc}") from None
        if not re.match(r"^((non-)?persistent://)?[\w.-]+/[\w.-]+/", value):
            raise InvalidArgumentError(
                f"option topicsPattern={value!r} is invalid: it must start with its namespace, literally: "
                "'persistent://<tenant>/<namespace>/<regex of the topic's name>'")
        return Subscription(pattern=value if "://" in value else f"persistent://{value}")
    names = [name.strip() for name in value.split(",")] if kind == "topics" else [value.strip()]
    topics = []
    for name in names:
        try:
            topics.append(str(TopicName.parse(name)))
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"option {option}: {exc}") from None
    return Subscription(topics=tuple(dict.fromkeys(topics)))


@dataclass(frozen=True)
class WriteOptions:
    service_url: str
    topic: str | None
    operation_timeout: float

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        options = {name.lower(): value for name, value in options.items()}
        _check_known(options, WRITE_OPTIONS, "writing")
        topic = options.get("topic")
        if topic:
            try:
                topic = str(TopicName.parse(topic))
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"option topic: {exc}") from None
        return cls(service_url=_service_url(options), topic=topic or None,
                   operation_timeout=_number(options, "operationtimeout", 30.0, 0.001, 86400.0, integer=False))
