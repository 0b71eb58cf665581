"""Small file helpers shared by the journal, entry log and index: full writes, fsyncs, atomic replace.

All of them block: call them from the journal's writer thread or through asyncio.to_thread.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

# Linux's IOV_MAX: writev takes at most this many buffers per call.
_IOV_MAX = 1024

Buffer = bytes | bytearray | memoryview


def write_all(fd: int, buffers: Sequence[Buffer]) -> int:
    """Write every buffer to fd, in order, retrying short writes; return the number of bytes."""
    total = 0
    pending = [memoryview(b).cast("B") for b in buffers if len(b)]
    while pending:
        chunk = pending[:_IOV_MAX]
        written = os.writev(fd, chunk)
        total += written
        # A short write (rare on regular files) leaves the tail of some buffer to write again.
        consumed = 0
        for view in chunk:
            if written >= len(view):
                written -= len(view)
                consumed += 1
            else:
                pending[consumed] = view[written:]
                break
        del pending[:consumed]
    return total


def fsync_dir(directory: Path) -> None:
    """Make the creation, rename or removal of files in directory durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, buffers: Sequence[Buffer]) -> None:
    """Replace path with buffers so that a crash leaves either the old or the new content."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, buffers)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def numbered_files(directory: Path, suffix: str) -> dict[int, Path]:
    """Files named `<decimal id><suffix>` in directory, by id."""
    found: dict[int, Path] = {}
    for path in directory.iterdir():
        stem = path.name[: -len(suffix)] if path.name.endswith(suffix) else ""
        if stem.isdigit():
            found[int(stem)] = path
    return found
