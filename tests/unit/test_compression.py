"""Batch payload codecs: every codec round-trips any payload, and a payload that does not
decompress (unknown codec, corrupt data, wrong size) is refused with InvalidArgumentError.
Decompression is bounded: a declared size above the limit is refused before any work, and a bomb
(data inflating far past what its metadata, or its ZSTD frame header, declares) is refused without
being inflated."""

from __future__ import annotations

import os
import tracemalloc
import zlib
from collections.abc import Iterator

import lz4.block
import pytest
import zstandard
from herald.api.v1 import entry_pb2
from herald.common.codec.compression import compress, decompress
from herald.common.errors import InvalidArgumentError, MessageTooLargeError
from hypothesis import given, settings
from hypothesis import strategies as st

CODECS = [entry_pb2.LZ4, entry_pb2.ZLIB, entry_pb2.ZSTD]
LIMIT = 5 * 1024 * 1024 + 10 * 1024  # a consumer's default: a 5 MiB message and its framing
MIB = 1024 * 1024
NAMES = [entry_pb2.CompressionType.Name(codec) for codec in CODECS]


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=50)
@given(payload=st.binary(max_size=5000))
def test_every_codec_round_trips_any_payload(codec: int, payload: bytes) -> None:
    assert decompress(codec, compress(codec, payload), len(payload), LIMIT) == payload


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_shrinks_a_repetitive_payload_and_takes_a_bytearray(codec: int) -> None:
    payload = bytearray(b"the same line again\n" * 1000)
    compressed = compress(codec, payload)
    assert len(compressed) < len(payload) // 10
    assert decompress(codec, memoryview(compressed), len(payload), LIMIT) == payload


def test_none_leaves_the_payload_as_it_is() -> None:
    assert compress(entry_pb2.NONE, bytearray(b"abc")) == b"abc"
    assert decompress(entry_pb2.NONE, b"abc", 3, LIMIT) == b"abc"


def test_an_unknown_codec_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown codec 9"):
        decompress(9, b"abc", 3, LIMIT)


@pytest.mark.parametrize("codec", CODECS)
def test_corrupt_data_is_refused(codec: int) -> None:
    name = entry_pb2.CompressionType.Name(codec)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=f"does not decompress with {name}"):
        decompress(codec, os.urandom(64), 1000, LIMIT)


@pytest.mark.parametrize("codec", CODECS)
def test_a_size_other_than_the_metadata_says_is_refused(codec: int) -> None:
    payload = b"0123456789" * 100
    with pytest.raises(InvalidArgumentError):
        decompress(codec, compress(codec, payload), len(payload) - 1, LIMIT)
    if codec != entry_pb2.LZ4:  # LZ4 raw blocks need the exact size to decode at all
        with pytest.raises(InvalidArgumentError, match="decompressed to 1000 bytes, its metadata says 2000"):
            decompress(codec, compress(codec, payload), 2000, LIMIT)


# ---- bounds: the limit, and bombs ----

def zeros(total: int) -> Iterator[bytes]:
    """`total` zero bytes, a megabyte at a time (no test holds a bomb's inflated size)."""
    for _ in range(total // MIB):
        yield bytes(MIB)


def bomb(codec: int, inflated: int) -> bytes:
    """`inflated` zero bytes compressed: a few kilobytes (LZ4: a few megabytes) that restore to far
    more; the ZSTD frame declares its true content size in its header, as a compressor writes it."""
    if codec == entry_pb2.ZLIB:
        deflater = zlib.compressobj(9)
        return b"".join(deflater.compress(chunk) for chunk in zeros(inflated)) + deflater.flush()
    if codec == entry_pb2.ZSTD:
        zstd = zstandard.ZstdCompressor().compressobj(size=inflated)
        return b"".join(zstd.compress(chunk) for chunk in zeros(inflated)) + zstd.flush()
    return bytes(lz4.block.compress(bytes(inflated), store_size=False))


@pytest.mark.parametrize("codec", CODECS, ids=NAMES)
def test_a_payload_of_exactly_the_limit_is_restored(codec: int) -> None:
    payload = bytes(LIMIT)
    assert decompress(codec, compress(codec, payload), LIMIT, LIMIT) == payload


@pytest.mark.parametrize("codec", CODECS, ids=NAMES)
def test_a_declared_size_above_the_limit_is_refused_before_any_allocation(codec: int) -> None:
    name = entry_pb2.CompressionType.Name(codec)  # type: ignore[arg-type]
    data = compress(codec, b"small")
    tracemalloc.start()
    try:
        with pytest.raises(MessageTooLargeError, match=f"would decompress with {name} to 2147483647 bytes, "
                                                       f"more than the {LIMIT} bytes taken here"):
            decompress(codec, data, 2**31 - 1, LIMIT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MIB, f"refusing the claim took {peak} bytes"


@pytest.mark.parametrize("codec", CODECS, ids=NAMES)
def test_a_negative_declared_size_is_refused(codec: int) -> None:
    with pytest.raises(InvalidArgumentError, match="restores to -1 bytes"):
        decompress(codec, compress(codec, b"small"), -1, LIMIT)


@pytest.mark.parametrize("codec", CODECS, ids=NAMES)
def test_a_bomb_is_refused_without_inflating_it(codec: int) -> None:
    # 64 MiB of zeros under metadata claiming 1000 bytes: refused having produced at most 1001.
    data = bomb(codec, 64 * MIB)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidArgumentError) as refused:
            decompress(codec, data, 1000, LIMIT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * MIB + len(data), f"refusing the bomb took {peak} bytes"
    name = entry_pb2.CompressionType.Name(codec)  # type: ignore[arg-type]
    assert name in str(refused.value)
    if codec != entry_pb2.LZ4:  # LZ4's block decoder fails on its own: it writes into the declared size only
        assert "to more than the 1000 bytes its metadata says" in str(refused.value)


@pytest.mark.parametrize("codec", [entry_pb2.ZLIB, entry_pb2.ZSTD], ids=["ZLIB", "ZSTD"])
def test_a_bomb_declaring_the_limit_inflates_no_further(codec: int) -> None:
    data = bomb(codec, 64 * MIB)
    with pytest.raises(InvalidArgumentError, match=f"to more than the {LIMIT} bytes its metadata says"):
        decompress(codec, data, LIMIT, LIMIT)


def test_a_truncated_zlib_stream_is_refused() -> None:
    payload = b"0123456789" * 100
    with pytest.raises(InvalidArgumentError, match="ZLIB stream is truncated"):
        decompress(entry_pb2.ZLIB, compress(entry_pb2.ZLIB, payload)[:-4], len(payload), LIMIT)


def test_a_zstd_frame_needing_a_window_larger_than_the_limit_allows_is_refused() -> None:
    # A frame whose header asks for a 128 MiB window (and no content size) for 1 MiB declared.
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=27, write_content_size=False)
    compressor = zstandard.ZstdCompressor(compression_params=params).compressobj()
    data = compressor.compress(bytes(MIB)) + compressor.flush()
    assert zstandard.get_frame_parameters(data).window_size == 128 * MIB
    with pytest.raises(InvalidArgumentError, match=r"ZSTD: .*too much memory"):
        decompress(entry_pb2.ZSTD, data, MIB, LIMIT)
