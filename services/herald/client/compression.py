"""Batch payload codecs: the producer compresses a closed batch's payload once, the consumer
decompresses an entry's payload once; EntryMetadata says which codec and the uncompressed size.
LZ4 (raw blocks, as Pulsar writes them), ZLIB and ZSTD come from their well-kept libraries."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import lz4.block
import zstandard

from herald.api.v1 import common_pb2
from herald.common.errors import InvalidArgumentError

# codec -> (compress(payload) -> bytes, decompress(data, uncompressed_size) -> bytes)
_Compress = Callable[[bytes], bytes]
_Decompress = Callable[[bytes, int], bytes]

_zstd_compressor = zstandard.ZstdCompressor()
_zstd_decompressor = zstandard.ZstdDecompressor()


def _lz4_compress(payload: bytes) -> bytes:
    return bytes(lz4.block.compress(payload, store_size=False))


def _lz4_decompress(data: bytes, size: int) -> bytes:
    return bytes(lz4.block.decompress(data, uncompressed_size=size))


def _zlib_decompress(data: bytes, size: int) -> bytes:
    return zlib.decompress(data, bufsize=max(size, 1))


def _zstd_decompress(data: bytes, size: int) -> bytes:
    return bytes(_zstd_decompressor.decompress(data, max_output_size=size))


_CODECS: dict[int, tuple[_Compress, _Decompress]] = {
    common_pb2.LZ4: (_lz4_compress, _lz4_decompress),
    common_pb2.ZLIB: (zlib.compress, _zlib_decompress),
    common_pb2.ZSTD: (_zstd_compressor.compress, _zstd_decompress),
}


def compress(codec: int, payload: bytes | bytearray) -> bytes:
    """The payload compressed with `codec` (a common_pb2.CompressionType); NONE returns it as is."""
    if codec == common_pb2.NONE:
        return bytes(payload)
    return _CODECS[codec][0](bytes(payload))


def decompress(codec: int, data: bytes | memoryview, uncompressed_size: int) -> bytes:
    """An entry's payload restored; InvalidArgumentError for an unknown codec or corrupt data (the
    consumer drops such an entry with an error rather than handing out garbage)."""
    if codec == common_pb2.NONE:
        return bytes(data)
    try:
        decompress_with = _CODECS[codec][1]
    except KeyError:
        raise InvalidArgumentError(f"entry compressed with unknown codec {codec}") from None
    try:
        restored = decompress_with(bytes(data), uncompressed_size)
    except Exception as exc:  # each library raises its own kind
        name = common_pb2.CompressionType.Name(codec)  # type: ignore[arg-type]
        raise InvalidArgumentError(f"entry payload does not decompress with {name}: {exc}") from None
    if len(restored) != uncompressed_size:
        raise InvalidArgumentError(
            f"entry payload decompressed to {len(restored)} bytes, its metadata says {uncompressed_size}")
    return restored
