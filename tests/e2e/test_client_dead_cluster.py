"""The clients against a cluster that stopped answering (issue 21, item 7): a paused (SIGSTOP) or
killed standalone. The blocking producer's send_async holds a fast caller back instead of queueing
without limit; flush() and close() return within their bounds."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from herald.client import Client, HeraldError, MessageId, ProducerQueueIsFullError

from tests.conftest import StandaloneProcess
from tests.helpers import unique_topic

MAX_PENDING = 100
MESSAGE_BYTES = 64 * 1024


@contextmanager
def paused(server: StandaloneProcess) -> Iterator[None]:
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def _parked(thread: threading.Thread) -> bool:
    """The thread waits on a threading primitive (a Condition or Event), not running."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == "wait" and frame.f_code.co_filename.endswith("threading.py"):
            return True
        frame = frame.f_back
    return False


def _until(check: Callable[[], bool], what: str, timeout: float = 60.0, tick: Callable[[], None] = lambda: None,
           ) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        tick()
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.02)


class _Sender:
    """A thread calling send_async in a loop: how many calls returned, and every outcome."""

    def __init__(self, producer: object, total: int) -> None:
        self.total = total
        self.returned = 0
        self.outcomes: list[HeraldError | None] = []
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, args=(producer,), daemon=True)
        self.thread.start()

    def _callback(self, error: HeraldError | None, message_id: MessageId | None) -> None:
        with self._lock:
            self.outcomes.append(error)

    def _run(self, producer: object) -> None:
        for i in range(self.total):
            producer.send_async(bytes([i % 256]) * MESSAGE_BYTES, self._callback)  # type: ignore[attr-defined]
            self.returned = i + 1


def test_sync_send_async_blocks_when_the_queue_is_full_and_memory_stays_bounded(
    standalone: StandaloneProcess,
) -> None:
    total = 3000  # 190 MiB of values: held without limit, the hand-off would grow by all of it
    with Client(standalone.service_url) as client:
        producer = client.create_producer(unique_topic("sync-blocks"), block_if_queue_full=True,
                                          max_pending_messages=MAX_PENDING, send_timeout=0)
        producer.send(b"connected")
        baseline = peak = _rss_mib()

        def sample() -> None:
            nonlocal peak
            peak = max(peak, _rss_mib())

        with paused(standalone):
            sender = _Sender(producer, total)
            _until(lambda: _parked(sender.thread) or not sender.thread.is_alive(), "the sender blocks",
                   tick=sample)
            returned_while_paused = sender.returned
            assert sender.thread.is_alive(), f"all {total} sends returned while no receipt could come"
            sample()
        # Resumed: receipts come, the blocked call returns, and every message is stored.
        _until(lambda: not sender.thread.is_alive(), "the sender finishes after SIGCONT", tick=sample)
        producer.flush()
        _until(lambda: len(sender.outcomes) == total, "every callback")
        assert sender.outcomes == [None] * total
    # The blocked caller had at most max_pending_messages queued by the producer and as many handed off.
    assert returned_while_paused <= 2 * MAX_PENDING, returned_while_paused
    print(f"sends returned while paused: {returned_while_paused}; peak RSS growth {peak - baseline:.1f} MiB")
    assert peak - baseline < 64, f"RSS grew by {peak - baseline:.0f} MiB"


def test_sync_send_async_without_blocking_fails_fast_when_the_queue_is_full(standalone: StandaloneProcess) -> None:
    total = 1000
    with Client(standalone.service_url) as client:
        producer = client.create_producer(unique_topic("sync-fails-fast"), max_pending_messages=MAX_PENDING,
                                          send_timeout=0)
        producer.send(b"connected")
        with paused(standalone):
            sender = _Sender(producer, total)
            _until(lambda: not sender.thread.is_alive(), "every send_async returns while the cluster is paused")
            _until(lambda: len(sender.outcomes) >= total - MAX_PENDING, "the refused sends' callbacks")
            refused = [error for error in sender.outcomes if error is not None]
            assert len(refused) >= total - MAX_PENDING
            assert all(isinstance(error, ProducerQueueIsFullError) for error in refused)
            assert "max_pending_messages=100" in str(refused[0])
        producer.flush()
