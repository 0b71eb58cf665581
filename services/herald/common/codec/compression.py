"""Batch payload codecs: the producer compresses a closed batch's payload once, the consumer
decompresses an entry's payload once; EntryMetadata says which codec and the uncompressed size.
LZ4 (raw blocks, as Pulsar writes them), ZLIB, ZSTD and SNAPPY (the raw block format, as Pulsar's
clients write it: snappy::Compress) come from their well-kept libraries (cramjam for SNAPPY). The
codec numbers are Herald's entry.proto CompressionType and Pulsar's alike (tests/unit/test_compression.py
keeps them equal), so this module needs neither contract.

Whoever decompresses may be handed a bomb: a few kilobytes that inflate to gigabytes, under
metadata (or a ZSTD frame header) that claims anything. So every codec is bounded: a declared size
above the caller's limit is refused before any work, and no codec produces, nor allocates room
for, more than the declared size (plus one byte, to tell that the data holds more)."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable

import cramjam
import lz4.block
import zstandard

from herald.common.errors import InvalidArgumentError, MessageTooLargeError

# The codecs, numbered as entry.proto's CompressionType and Pulsar's MessageMetadata.compression.
NONE, LZ4, ZLIB, ZSTD, SNAPPY = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "NONE", LZ4: "LZ4", ZLIB: "ZLIB", ZSTD: "ZSTD", SNAPPY: "SNAPPY"}

# codec -> (compress(payload) -> bytes, decompress(data, uncompressed_size) -> bytes); a decompress
# returns at most uncompressed_size + 1 bytes, whatever the data holds.
_Compress = Callable[[bytes], bytes]
_Decompress = Callable[[bytes, int], bytes]

_zstd_compressor = zstandard.ZstdCompressor()
# The least ZSTD window a decompressor allows: what the producer's compressor (level 3) uses on
# batches of any size is at most 2 MiB.
_MIN_ZSTD_WINDOW_LOG = 23


def _lz4_compress(payload: bytes) -> bytes:
    return bytes(lz4.block.compress(payload, store_size=False))


def _lz4_decompress(data: bytes, size: int) -> bytes:
    # The block format has no end marker of its own: the library writes into a buffer of `size`
    # bytes and fails on data that needs more, so `size` (checked against the limit) bounds it.
    return bytes(lz4.block.decompress(data, uncompressed_size=size))


def _zlib_decompress(data: bytes, size: int) -> bytes:
    # zlib.decompress(bufsize=...) only sizes its first buffer and grows without end: ask for at
    # most one byte more than declared, and make sure the stream ended there.
    inflater = zlib.decompressobj()
    restored = inflater.decompress(data, size + 1)
    if len(restored) <= size and not inflater.eof:
        raise InvalidArgumentError("the ZLIB stream is truncated")
    return restored


@functools.cache
def _zstd_decompressor(window_log: int) -> zstandard.ZstdDecompressor:
    return zstandard.ZstdDecompressor(max_window_size=1 << window_log)


def _zstd_decompress(data: bytes, size: int) -> bytes:
    # ZstdDecompressor.decompress trusts the frame header's content size and allocates it (its
    # max_output_size only counts for frames without one): read the frame as a stream instead,
    # at most one byte more than declared, with no bigger window than a frame of `size` needs.
    window_log = max(_MIN_ZSTD_WINDOW_LOG, size.bit_length())
    reader = _zstd_decompressor(window_log).stream_reader(data, read_across_frames=True)
    return bytes(reader.read(size + 1))


def _snappy_compress(payload: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(payload))


def _snappy_decompress(data: bytes, size: int) -> bytes:
    # A raw block starts with its own claim of the restored size (a varint), which the library
    # would allocate: it must be the declared size (checked against the limit), else it is refused
    # before any work.
    claimed = cramjam.snappy.decompress_raw_len(data)
    if claimed != size:
        raise InvalidArgumentError(f"the SNAPPY block says it restores to {claimed} bytes, not {size}")
    return bytes(cramjam.snappy.decompress_raw(data))


_CODECS: dict[int, tuple[_Compress, _Decompress]] = {
    LZ4: (_lz4_compress, _lz4_decompress),
    ZLIB: (zlib.compress, _zlib_decompress),
    ZSTD: (_zstd_compressor.compress, _zstd_decompress),
    SNAPPY: (_snappy_compress, _snappy_decompress),
}


def compress(codec: int, payload: bytes | bytearray) -> bytes:
    """The payload compressed with `codec` (a CompressionType number); NONE returns it as is."""
    if codec == NONE:
        return bytes(payload)
    return _CODECS[codec][0](bytes(payload))


def decompress(codec: int, data: bytes | memoryview, uncompressed_size: int, limit: int) -> bytes:
    """An entry's payload restored, exactly `uncompressed_size` bytes. MessageTooLargeError when
    that size is above `limit` (the largest payload the caller takes); InvalidArgumentError for an
    unknown codec or data that is corrupt or restores to another size than declared (never more
    than the declared size is produced). The consumer drops such an entry with an error rather
    than handing out garbage."""
    if codec == NONE:
        return bytes(data)
    try:
        decompress_with = _CODECS[codec][1]
    except KeyError:
        raise InvalidArgumentError(f"entry compressed with unknown codec {codec}") from None
    name = CODEC_NAMES[codec]
    if uncompressed_size < 0:
        raise InvalidArgumentError(f"entry metadata says its {name} payload restores to {uncompressed_size} bytes")
    if uncompressed_size > limit:
        raise MessageTooLargeError(
            f"entry payload would decompress with {name} to {uncompressed_size} bytes, more than the "
            f"{limit} bytes taken here: raise the consumer's max_message_size (or max_chunked_message_size) "
            "if the topic's messages are that large")
    try:
        restored = decompress_with(bytes(data), uncompressed_size)
    except Exception as exc:  # each library raises its own kind
        raise InvalidArgumentError(f"entry payload does not decompress with {name}: {exc}") from None
    if len(restored) > uncompressed_size:
        raise InvalidArgumentError(
            f"entry payload decompresses with {name} to more than the {uncompressed_size} bytes its metadata "
            "says (a decompression bomb, or corrupt metadata): refused")
    if len(restored) != uncompressed_size:
        raise InvalidArgumentError(
            f"entry payload decompressed to {len(restored)} bytes, its metadata says {uncompressed_size}")
    return restored
