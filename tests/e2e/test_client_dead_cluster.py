"""The clients against a cluster that stopped answering (issue 21, item 7): a paused (SIGSTOP) or
killed standalone. The blocking producer's send_async holds a fast caller back instead of queueing
without limit; flush() and close() return within their bounds."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from herald.client import AsyncClient, Client, HeraldError, MessageId, ProducerClosedError, ProducerQueueIsFullError
from herald.common.errors import HeraldTimeoutError

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
            try:
                producer.send_async(bytes([i % 256]) * MESSAGE_BYTES, self._callback)  # type: ignore[attr-defined]
            except ProducerClosedError:
                return  # closed under it (the close tests)
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


# ---- flush() and close() on a cluster that does not answer ----

@pytest.mark.timeout(180)
def test_async_flush_on_a_paused_cluster_raises_a_timeout_error_and_keeps_the_messages(
    standalone: StandaloneProcess,
) -> None:
    async def run() -> None:
        async with AsyncClient(standalone.service_url, operation_timeout=2) as client:
            producer = await client.create_producer(unique_topic("flush-paused"), send_timeout=0)
            await producer.send(b"connected")
            with paused(standalone):
                futures = [await producer.send_async(b"%d" % i) for i in range(3)]
                with pytest.raises(HeraldTimeoutError, match=r"flush of producer .* 3 messages not yet") as caught:
                    await producer.flush()
                assert isinstance(caught.value, TimeoutError) and isinstance(caught.value, HeraldError)
            await producer.flush()  # resumed: the same messages are stored
            assert all(future.done() and future.exception() is None for future in futures)

    asyncio.run(run())


@pytest.mark.timeout(180)
def test_sync_flush_and_close_behind_a_full_queue_on_a_paused_cluster_return(standalone: StandaloneProcess) -> None:
    with Client(standalone.service_url, operation_timeout=2) as client:
        producer = client.create_producer(unique_topic("sync-flush-paused"), block_if_queue_full=True,
                                          max_pending_messages=10, send_timeout=0)
        producer.send(b"connected")
        with paused(standalone):
            sender = _Sender(producer, 100)
            _until(lambda: _parked(sender.thread), "the sender blocks on the full queue")
            with pytest.raises(HeraldTimeoutError, match="flush of producer") as caught:
                producer.flush()
            assert isinstance(caught.value, TimeoutError)
            producer.close()  # returns, though the queue is full and nothing answers
            _until(lambda: not sender.thread.is_alive(), "the blocked sender returns once the producer closed")
        _until(lambda: len(sender.outcomes) == sender.returned, "every handed-off send's callback")
        assert {type(error) for error in sender.outcomes} == {ProducerClosedError}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fault", ["paused", "killed"])
def test_client_close_on_a_dead_cluster_returns_and_says_what_was_not_delivered(
    standalone: StandaloneProcess, fault: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="herald.client")
    assert standalone.proc is not None
    client = Client(standalone.service_url, operation_timeout=2)
    topic = unique_topic("close-dead")
    producer = client.create_producer(topic, producer_name="undelivered", send_timeout=0)
    client.subscribe(topic, "sub")
    producer.send(b"connected")
    os.kill(standalone.proc.pid, signal.SIGSTOP if fault == "paused" else signal.SIGKILL)
    try:
        for i in range(5):
            producer.send_async(b"%d" % i)
        client.close()  # returns (pytest-timeout is the bound)
    finally:
        if fault == "paused":
            os.kill(standalone.proc.pid, signal.SIGCONT)
    assert client.closed
    assert "producer 'undelivered' on persistent://public/default/close-dead" in caplog.text
    assert "had 5 messages not yet stored; they fail with ProducerClosedError" in caplog.text
