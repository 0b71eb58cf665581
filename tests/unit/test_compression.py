"""Batch payload codecs: every codec round-trips any payload, and a payload that does not
decompress (unknown codec, corrupt data, wrong size) is refused with InvalidArgumentError."""

from __future__ import annotations

import os

import pytest
from herald.api.v1 import common_pb2
from herald.client.compression import compress, decompress
from herald.common.errors import InvalidArgumentError
from hypothesis import given, settings
from hypothesis import strategies as st

CODECS = [common_pb2.LZ4, common_pb2.ZLIB, common_pb2.ZSTD]


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=50)
@given(payload=st.binary(max_size=5000))
def test_every_codec_round_trips_any_payload(codec: int, payload: bytes) -> None:
    assert decompress(codec, compress(codec, payload), len(payload)) == payload


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_shrinks_a_repetitive_payload_and_takes_a_bytearray(codec: int) -> None:
    payload = bytearray(b"the same line again\n" * 1000)
    compressed = compress(codec, payload)
    assert len(compressed) < len(payload) // 10
    assert decompress(codec, memoryview(compressed), len(payload)) == payload


def test_none_leaves_the_payload_as_it_is() -> None:
    assert compress(common_pb2.NONE, bytearray(b"abc")) == b"abc"
    assert decompress(common_pb2.NONE, b"abc", 3) == b"abc"


def test_an_unknown_codec_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown codec 9"):
        decompress(9, b"abc", 3)


@pytest.mark.parametrize("codec", CODECS)
def test_corrupt_data_is_refused(codec: int) -> None:
    name = common_pb2.CompressionType.Name(codec)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=f"does not decompress with {name}"):
        decompress(codec, os.urandom(64), 1000)


@pytest.mark.parametrize("codec", CODECS)
def test_a_size_other_than_the_metadata_says_is_refused(codec: int) -> None:
    payload = b"0123456789" * 100
    with pytest.raises(InvalidArgumentError):
        decompress(codec, compress(codec, payload), len(payload) - 1)
    if codec != common_pb2.LZ4:  # LZ4 raw blocks need the exact size to decode at all
        with pytest.raises(InvalidArgumentError, match="decompressed to 1000 bytes, its metadata says 2000"):
            decompress(codec, compress(codec, payload), 2000)
