"""The messages `herald perf` sends: payloads of a size (random capital letters, as pulsar-perf
makes them: compressible like text, not like zeros) or read from a file, and message keys."""

from __future__ import annotations

import random
from pathlib import Path

from herald.common.errors import InvalidArgumentError

MAX_PAYLOAD_FILE = 64 * 1024 * 1024  # read whole into memory: refuse what would not fit comfortably
MAX_KEYS = 1_000_000
MAX_SIZE = 64 * 1024 * 1024
_LETTERS = bytes(65 + value % 26 for value in range(256))


def sized_payload(size: int) -> bytes:
    if not 0 <= size <= MAX_SIZE:
        raise InvalidArgumentError(f"--size must be between 0 and {MAX_SIZE} bytes, got {size}")
    # Random bytes mapped onto A-Z in C (translate), so that a large size costs no Python loop.
    return random.Random(size).randbytes(size).translate(_LETTERS)


def file_payloads(path: str, delimiter: str) -> list[bytes]:
    """The messages in `path`: split at `delimiter` (empty parts dropped), or the whole file as one
    message when the delimiter is empty."""
    file = Path(path)
    try:
        length = file.stat().st_size
    except OSError as error:
        raise InvalidArgumentError(f"--payload-file {path!r} cannot be read: {error.strerror}") from None
    if length > MAX_PAYLOAD_FILE:
        raise InvalidArgumentError(
            f"--payload-file {path!r} is {length} bytes; at most {MAX_PAYLOAD_FILE} are read: use a smaller file")
    data = file.read_bytes()
    parts = [data] if not delimiter else [part for part in data.split(delimiter.encode()) if part]
    if not parts or not parts[0]:
        raise InvalidArgumentError(f"--payload-file {path!r} holds no message: give a file with some content")
    return parts


class Keys:
    """`count` distinct keys (key-0, key-1, ...), handed out round-robin or at random; None for
    every message when count is 0."""

    __slots__ = ("_index", "_keys", "_random")

    def __init__(self, count: int, order: str) -> None:
        if not 0 <= count <= MAX_KEYS:
            raise InvalidArgumentError(f"--keys must be between 0 and {MAX_KEYS}, got {count}")
        self._keys = [f"key-{i}" for i in range(count)]
        self._index = 0
        self._random = random.Random() if order == "random" else None

    def next(self) -> str | None:
        keys = self._keys
        if not keys:
            return None
        if self._random is not None:
            return keys[self._random.randrange(len(keys))]
        key = keys[self._index]
        self._index = (self._index + 1) % len(keys)
        return key
