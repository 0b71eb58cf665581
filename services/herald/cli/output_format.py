r"""How `herald consume` prints a message: `value` (the payload alone, one per line), `json` (one JSON
object per line: id, topic, key, properties, times, redelivery count, value), `text` (id, key and
value, for people), or a kcat-style format string (-F: %t topic, %k key, %s value, %i id, %T publish
time ms, %h properties, %p partition, %% a percent sign; \n \t \\ escapes)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from herald.client.message import Message
from herald.common.errors import InvalidArgumentError

OUTPUTS = ("text", "value", "json")
Formatter = Callable[[Message[Any]], str]


def _text(data: bytes) -> str:
    return data.decode(errors="replace")


def _value_fields(data: bytes) -> dict[str, str]:
    """The value as text when it is UTF-8, else base64 (value_encoding says which)."""
    try:
        return {"value": data.decode(), "value_encoding": "utf-8"}
    except UnicodeDecodeError:
        return {"value": base64.b64encode(data).decode(), "value_encoding": "base64"}


def as_json(message: Message[Any]) -> str:
    record = {
        "id": str(message.message_id),
        "topic": message.topic,
        "key": message.key,
        "properties": message.properties,
        "publish_time": message.publish_time,
        "event_time": message.event_time,
        "redelivery_count": message.redelivery_count,
        **_value_fields(message.data()),
    }
    return json.dumps(record, ensure_ascii=False)


def as_text(message: Message[Any]) -> str:
    key = f" key={message.key}" if message.key is not None else ""
    return f"{message.message_id}{key}: {_text(message.data())}"


def as_value(message: Message[Any]) -> str:
    return _text(message.data())


_FIELDS: dict[str, Formatter] = {
    "t": lambda m: m.topic,
    "k": lambda m: m.key or "",
    "s": lambda m: _text(m.data()),
    "i": lambda m: str(m.message_id),
    "T": lambda m: str(m.publish_time),
    "h": lambda m: ",".join(f"{k}={v}" for k, v in m.properties.items()),
    "p": lambda m: str(m.message_id.partition),
}
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}


def format_string(spec: str) -> Formatter:
    """A formatter for a kcat -f style string; InvalidArgumentError names an unknown % or \\."""
    parts: list[str | Formatter] = []
    literal: list[str] = []
    index = 0
    while index < len(spec):
        char = spec[index]
        nxt = spec[index + 1] if index + 1 < len(spec) else ""
        if char == "%" and nxt == "%":
            literal.append("%")
        elif char == "%":
            if nxt not in _FIELDS:
                raise InvalidArgumentError(
                    f"format {spec!r}: unknown %{nxt}; use %t %k %s %i %T %h %p or %% for a percent sign")
            parts.append("".join(literal))
            literal = []
            parts.append(_FIELDS[nxt])
        elif char == "\\" and nxt in _ESCAPES:
            literal.append(_ESCAPES[nxt])
        else:
            literal.append(char)
            index += 1
            continue
        index += 2
    parts.append("".join(literal))

    def render(message: Message[Any]) -> str:
        return "".join(part if isinstance(part, str) else part(message) for part in parts)
    return render


def formatter(output: str, spec: str | None) -> tuple[Formatter, str]:
    """The formatter and the line end: a format string ends lines only where it says \\n, as kcat's."""
    if spec is not None:
        return format_string(spec), ""
    return {"text": as_text, "value": as_value, "json": as_json}[output], "\n"
