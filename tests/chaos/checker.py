"""The chaos tests' producer and checker, Jepsen-style: a producer records every acknowledged
message while processes die around it; afterwards a consumer reads everything and the checker
compares what was acknowledged with what is stored."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import dataclass, field

from herald.client import AsyncClient, InitialPosition
from herald.common.codec.message_id import MessageId

# CI runs the short version; HERALD_SOAK=1 (make test-soak) runs each scenario longer.
SOAK = os.environ.get("HERALD_SOAK") == "1"
PHASE_SECONDS = 20.0 if SOAK else 3.0
# Fast failure detection for clients of a cluster whose processes are being killed.
CHECKER = "checker"
CLIENT_OPTIONS = {"operation_timeout": 60.0, "keep_alive": 1.0}


@dataclass
class History:
    acked: dict[int, MessageId] = field(default_factory=dict)  # message number → its receipt
    failed: set[int] = field(default_factory=set)
    sent: int = 0
    errors: list[str] = field(default_factory=list)


class ContinuousProducer:
    """Sends b"m-<n>" for n = 0, 1, 2, ... from a background thread until stopped."""

    def __init__(self, service_url: str, topic: str, producer_name: str = "chaos-producer") -> None:
        self.service_url = service_url
        self.topic = topic
        self.producer_name = producer_name
        self.history = History()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def acked_count(self) -> int:
        return len(self.history.acked)

    def wait_for_acks(self, count: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while self.acked_count() < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {self.acked_count()} of {count} messages acknowledged in {timeout}s; "
                                     f"errors: {self.history.errors[-3:]}")
            if not self._thread.is_alive():
                raise AssertionError(f"the producer died: {self.history.errors[-3:]}")
            time.sleep(0.05)

    def stop(self) -> History:
        self._stop.set()
        self._thread.join(180)
        assert not self._thread.is_alive(), "the producer did not finish"
        return self.history

    async def _run(self) -> None:
        history = self.history
        async with AsyncClient(self.service_url, **CLIENT_OPTIONS) as client:
            # The checker's subscription exists before the first message, so whatever the
            # retention policy, nothing acknowledged may be trimmed before the check reads it.
            checker = await client.subscribe(self.topic, CHECKER, initial_position=InitialPosition.Earliest)
            await checker.close()
            producer = await client.create_producer(
                self.topic, producer_name=self.producer_name, send_timeout=60.0, block_if_queue_full=True,
                max_pending_messages=2000,
            )

            def record(future: asyncio.Future[MessageId], n: int) -> None:
                if future.cancelled() or future.exception() is not None:
                    history.failed.add(n)
                    history.errors.append(repr(None if future.cancelled() else future.exception()))
                else:
                    history.acked[n] = future.result()

            n = 0
            while not self._stop.is_set():
                future = await producer.send_async(b"m-%d" % n)
                future.add_done_callback(lambda f, n=n: record(f, n))
                n += 1
                history.sent = n
                if n % 200 == 0:
                    await asyncio.sleep(0.01)  # a steady stream, not a flood
            await producer.flush()
            await producer.close()


async def _read_everything(service_url: str, topic: str, subscription: str) -> list[tuple[MessageId, bytes]]:
    async with AsyncClient(service_url, **CLIENT_OPTIONS) as client:
        consumer = await client.subscribe(topic, subscription, initial_position=InitialPosition.Earliest,
                                          receiver_queue_size=5000)
        # The producer has stopped, so the topic's last entry is where reading ends; past it only
        # the rest of its batch can follow, and that is already delivered. (Without the mark every
        # check paid a whole receive timeout at the end.)
        last = await consumer.get_last_message_id()
        assert isinstance(last, MessageId)
        out = []
        reached_last = False
        while (message := await consumer.receive(timeout=0.5 if reached_last else 10)) is not None:
            out.append((message.message_id, message.value))
            consumer.acknowledge(message)
            position = (message.message_id.ledger_id, message.message_id.entry_id)
            reached_last = reached_last or position >= (last.ledger_id, last.entry_id)
        await consumer.close()
        return out


def read_everything(service_url: str, topic: str, subscription: str = CHECKER) -> list[tuple[MessageId, bytes]]:
    return asyncio.run(_read_everything(service_url, topic, subscription))


def check(history: History, stored: list[tuple[MessageId, bytes]]) -> None:
    """Every acknowledged message is stored exactly once, in send order, and no two different
    messages share one message id."""
    numbers = [int(value.removeprefix(b"m-")) for _, value in stored]
    assert len(set(numbers)) == len(numbers), f"duplicates stored: {len(numbers) - len(set(numbers))}"
    assert numbers == sorted(numbers), "messages are stored out of send order"
    lost = sorted(set(history.acked) - set(numbers))
    assert not lost, f"{len(lost)} acknowledged messages lost, first {lost[:10]}"
    ids = [message_id for message_id, _ in stored]
    assert len(set(ids)) == len(ids), "two messages delivered with the same message id"
    # What failed may or may not be stored (its fate was unknown to the producer), never twice.
    assert set(numbers) <= set(range(history.sent))
