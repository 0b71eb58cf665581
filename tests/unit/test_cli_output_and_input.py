"""The pure parts of `herald produce` and `herald consume`, without a server: how stdin is split
into messages a chunk at a time (cli/produce.py), how a message is printed (cli/output_format.py:
kcat-style format strings, JSON lines with base64 for values that are not UTF-8), and how times
and properties are read."""

from __future__ import annotations

import argparse
import io
import json

import pytest
from herald.cli.client_command import time_ms
from herald.cli.output_format import as_json, format_string
from herald.cli.produce import property_pair, separator, split_stream
from herald.client.message import DetailedMessage, EntryInfo
from herald.common.errors import InvalidArgumentError
from hypothesis import given
from hypothesis import strategies as st


def message(data: bytes, key: str | None = "k", properties: dict[str, str] | None = None) -> DetailedMessage[bytes]:
    entry = EntryInfo("persistent://public/default/t", 3, 4, 2, "p", 1700000000123, 1, 1)
    return DetailedMessage(data, key, properties or {}, 0, 0, -1, entry)


@given(st.lists(st.binary(max_size=40).filter(lambda m: b";;" not in m and not m.endswith(b";")), max_size=20),
       st.integers(min_value=1, max_value=16))
def test_split_stream_yields_each_message_whatever_the_chunk_boundaries(messages: list[bytes], chunk: int) -> None:
    """A two-byte separator split across reads still separates; a separator at the end makes no
    empty last message (an empty line in the middle is an empty message)."""
    data = b"".join(m + b";;" for m in messages)
    assert list(split_stream(io.BytesIO(data), b";;", chunk)) == messages
    assert list(split_stream(io.BytesIO(data.removesuffix(b";;")), b";;", chunk)) == [
        m for index, m in enumerate(messages) if m or index < len(messages) - 1]  # no separator at the end


def test_split_stream_reads_a_chunk_at_a_time() -> None:
    """The stream is consumed as messages are taken, never read whole first."""
    stream = io.BytesIO(b"a\n" * 1000)
    messages = split_stream(stream, b"\n", 10)
    assert next(messages) == b"a"
    assert stream.tell() == 10


def test_format_string_fields_escapes_and_percent() -> None:
    render = format_string(r"%t %p %i %k=%s %T [%h] 100%%\t\n")
    out = render(message(b"v", properties={"a": "1", "b": "2"}))
    assert out == "persistent://public/default/t 2 3:4:2:-1 k=v 1700000000123 [a=1,b=2] 100%\t\n"


def test_format_string_refuses_an_unknown_directive() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown %z"):
        format_string("%z")
    with pytest.raises(InvalidArgumentError, match="unknown %"):
        format_string("trailing %")


def test_json_lines_carry_base64_for_values_that_are_not_utf8() -> None:
    text = json.loads(as_json(message(b"h\xc3\xa9")))
    assert text["value"] == "hé" and text["value_encoding"] == "utf-8"
    binary = json.loads(as_json(message(b"\xff\x00", key=None)))
    assert binary["value"] == "/wA=" and binary["value_encoding"] == "base64" and binary["key"] is None
    assert binary["id"] == "3:4:2:-1" and binary["publish_time"] == 1700000000123 and binary["redelivery_count"] == 1


def test_times_are_unix_milliseconds_or_iso_8601() -> None:
    assert time_ms("1700000000000") == 1700000000000
    assert time_ms("2023-11-14T22:13:20Z") == 1700000000000
    assert time_ms("2023-11-14T22:13:20") == 1700000000000  # no zone: UTC
    assert time_ms("2023-11-15T00:13:20+02:00") == 1700000000000
    with pytest.raises(argparse.ArgumentTypeError, match=r"unix milliseconds .* or ISO 8601"):
        time_ms("yesterday")


def test_properties_and_separators() -> None:
    assert property_pair("a=b=c") == ("a", "b=c")
    assert property_pair("a=") == ("a", "")
    with pytest.raises(argparse.ArgumentTypeError, match="KEY=VALUE"):
        property_pair("novalue")
    assert separator(r"\t") == b"\t" and separator(r"\0") == b"\0" and separator("--") == b"--"
    with pytest.raises(argparse.ArgumentTypeError, match="empty"):
        separator("")
