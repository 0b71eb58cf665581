"""Malformed bytes on the raw gRPC ports (lookup, broker, proxy, storage) over plain sockets: TCP
garbage, the HTTP/2 client preface followed by garbage, frames cut short or with lengths and
types that lie, a HEADERS frame whose HPACK block is garbage. Whatever arrives, the server may
close the connection or answer GOAWAY, and must go on serving everyone else (checked after the
property with a health check, a fresh producer and consumer and the checking traffic)."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.target import FuzzTarget, send_raw

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SERVERS = ("lookup", "broker", "proxy", "storage")


def frame(kind: int, flags: int, stream: int, payload: bytes, length: int | None = None) -> bytes:
    """An HTTP/2 frame: 24-bit length (the payload's unless told), type, flags, 31-bit stream id."""
    size = len(payload) if length is None else length
    return struct.pack(">I", size)[1:] + bytes([kind & 0xFF, flags & 0xFF]) + struct.pack(">I", stream & 0x7FFFFFFF) \
        + payload


EMPTY_SETTINGS = frame(4, 0, 0, b"")


def frames() -> st.SearchStrategy[bytes]:
    return st.builds(
        frame, st.integers(0, 12) | st.integers(0, 255), st.integers(0, 255),
        st.sampled_from([0, 1, 3, 2**31 - 1]) | st.integers(0, 2**31 - 1), st.binary(max_size=64),
        st.none() | st.integers(0, 2**24 - 1))


def headers_with_garbage() -> st.SearchStrategy[bytes]:
    return st.builds(lambda block, flags: frame(1, flags, 1, block), st.binary(min_size=1, max_size=64),
                     st.sampled_from([0x4, 0x5, 0x0, 0x24]))


@st.composite
def payloads(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["garbage", "preface+garbage", "frames", "truncated", "headers"]))
    if kind == "garbage":
        return draw(st.binary(min_size=1, max_size=4096))
    if kind == "preface+garbage":
        return PREFACE + draw(st.binary(min_size=1, max_size=1024))
    if kind == "frames":
        return PREFACE + EMPTY_SETTINGS + b"".join(draw(st.lists(frames(), min_size=1, max_size=6)))
    if kind == "truncated":
        whole = PREFACE + EMPTY_SETTINGS + draw(frames())
        return whole[:draw(st.integers(1, len(whole) - 1))]
    return PREFACE + EMPTY_SETTINGS + draw(headers_with_garbage())


@given(server=st.sampled_from(SERVERS), data=payloads(), read_reply=st.booleans())
def test_malformed_bytes_on_the_grpc_ports_never_take_a_service_down(
    target: FuzzTarget, server: str, data: bytes, read_reply: bool,
) -> None:
    send_raw(target.ports[server], data, read_reply)
