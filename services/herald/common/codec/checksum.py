"""CRC32C (Castagnoli), the checksum of every entry, computed with google-crc32c's C code."""

from __future__ import annotations

import google_crc32c


def crc32c(data: bytes | bytearray | memoryview) -> int:
    return int(google_crc32c.value(bytes(data) if isinstance(data, memoryview) else data))
