"""The nemesis's workload: named producers (the brokers deduplicate by producer name, on by
default) on a plain and a partitioned topic, each sending b"<producer>:<seq>" with a key, and live
consumers on Shared, Failover and Key_Shared subscriptions that record and acknowledge everything
they receive. It writes what happened as plain JSON (history_json) for the checker, which shares no
code with it."""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from herald.client import AsyncClient, ConsumerType, InitialPosition
from herald.client.admin import AdminClient
from herald.common.codec.message_id import MessageId

CLIENT_OPTIONS: dict[str, Any] = {"operation_timeout": 30.0, "keep_alive": 1.0}
SUBSCRIPTIONS = {"shared": ConsumerType.Shared, "failover": ConsumerType.Failover,
                 "key-shared": ConsumerType.KeyShared}
CONSUMERS_PER_SUBSCRIPTION = 2
KEYS = 16


@dataclass(frozen=True)
class WorkloadSpec:
    namespace: str = "public/default"
    plain_topic: str = "nemesis-plain"
    partitioned_topic: str = "nemesis-parted"
    partitions: int = 3
    producers_per_topic: int = 2

    @property
    def topics(self) -> dict[str, int]:
        return {self.plain_topic: 0, self.partitioned_topic: self.partitions}


def _id(message_id: MessageId) -> list[int]:
    return [message_id.ledger_id, message_id.entry_id, message_id.partition, message_id.batch_index]


@dataclass
class _Record:
    sends: list[dict[str, Any]] = field(default_factory=list)
    deliveries: dict[str, dict[str, list[list[Any]]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


class Workload:
    """Runs in a background thread with its own event loop: start(), later stop_producing(),
    drain() until every subscription caught up (or a deadline), then stop() and history_json()."""

    def __init__(self, service_url: str, proxy_url: str, spec: WorkloadSpec) -> None:
        self.service_url = service_url
        self.proxy_url = proxy_url  # one of the subscriptions consumes through `herald proxy`
        self.spec = spec
        self.record = _Record()
        self._producing = threading.Event()
        self._consuming = threading.Event()
        self._ready = threading.Event()
        self._subscribed = 0  # consumers that subscribed at least once
        self._produced = threading.Event()  # every producer stopped and every receipt came
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="workload", daemon=True)
        self.failure: BaseException | None = None

    def start(self, timeout: float = 120.0) -> Workload:
        self._producing.set()
        self._consuming.set()
        self._thread.start()
        if not self._ready.wait(timeout) or self.failure is not None:
            raise AssertionError(f"the workload did not start: {self.failure!r}")
        return self

    def acked(self) -> int:
        return sum(1 for send in list(self.record.sends) if send["acked"])

    def stop_producing(self, timeout: float = 120.0) -> None:
        """Stop sending and wait for every receipt, so that the acknowledged set is final."""
        self._producing.clear()
        if not self._produced.wait(timeout):
            raise AssertionError(f"the producers did not finish within {timeout}s")

    def caught_up(self) -> bool:
        """Every subscription of every topic has received every acknowledged message."""
        acked: dict[str, set[str]] = {}
        for send in list(self.record.sends):
            if send["acked"]:
                acked.setdefault(send["topic"], set()).add(send["payload"])
        return all(acked.get(topic, set()) <= {payload for payload, _ in list(received)}
                   for topic, subscriptions in self.record.deliveries.items()
                   for received in subscriptions.values())

    def drain(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.caught_up():
                return True
            time.sleep(0.5)
        return False

    def stop(self) -> None:
        self._producing.clear()
        self._consuming.clear()
        self._thread.join(180)

    def history_json(self) -> str:
        return json.dumps({
            "topics": {topic: partitions for topic, partitions in self.spec.topics.items()},
            "subscriptions": sorted(SUBSCRIPTIONS),
            "sends": self.record.sends,
            "deliveries": self.record.deliveries,
            "errors": self.record.errors[-50:],
        })

    def save(self, path: Path) -> None:
        path.write_text(self.history_json())

    # ---- inside the workload's loop ----

    async def _run(self) -> None:
        try:
            async with AdminClient(self.service_url) as admin:
                await admin.create_topic(f"persistent://{self.spec.namespace}/{self.spec.partitioned_topic}",
                                         partitions=self.spec.partitions)
            async with AsyncClient(self.service_url, **CLIENT_OPTIONS) as client, \
                    AsyncClient(self.proxy_url, **CLIENT_OPTIONS) as proxied:
                consumers = [asyncio.create_task(self._consume(proxied if name == "shared" else client, topic, name))
                             for topic in self.spec.topics for name in SUBSCRIPTIONS
                             for _ in range(CONSUMERS_PER_SUBSCRIPTION)]
                await self._all_subscribed()
                producers = [asyncio.create_task(self._produce(client, topic, f"{topic}-p{i}"))
                             for topic in self.spec.topics for i in range(self.spec.producers_per_topic)]
                self._ready.set()
                await asyncio.gather(*producers)
                self._produced.set()
                await asyncio.gather(*consumers)
        except BaseException as exc:
            self.failure = exc
            self._ready.set()
            raise

    async def _all_subscribed(self) -> None:
        """Every subscription exists before the first message: nothing acknowledged is skipped."""
        want = len(self.spec.topics) * len(SUBSCRIPTIONS) * CONSUMERS_PER_SUBSCRIPTION
        while self._subscribed < want:
            if self.failure is not None:
                return
            await asyncio.sleep(0.05)

    async def _produce(self, client: AsyncClient, topic: str, name: str) -> None:
        producer = None
        seq = 0
        pending: list[asyncio.Future[MessageId]] = []
        while self._producing.is_set():
            try:
                if producer is None:
                    producer = await client.create_producer(topic, producer_name=name, send_timeout=20.0,
                                                            block_if_queue_full=True, max_pending_messages=500)
            except Exception as exc:  # a fault: try again in a moment
                self.record.errors.append(f"{name}: {exc!r}")
                await asyncio.sleep(0.5)
                continue
            payload = f"{name}:{seq}"
            send: dict[str, Any] = {"producer": name, "topic": topic, "seq": seq, "payload": payload,
                                    "acked": False, "id": None}
            self.record.sends.append(send)
            seq += 1  # never reused: a failed send may be stored all the same
            try:
                future = await producer.send_async(payload.encode(), key=f"k{(seq - 1) % KEYS}")
            except Exception as exc:  # a fault: this producer is done, make another
                send["error"] = repr(exc)[:200]
                self.record.errors.append(f"{name}: {exc!r}")
                await _closed(producer)
                producer = None
                await asyncio.sleep(0.5)
                continue
            future.add_done_callback(functools.partial(self._receipt, send))
            pending.append(future)
            if seq % 20 == 0:
                await asyncio.sleep(0.02)  # a steady stream, not a flood
        await asyncio.gather(*pending, return_exceptions=True)

    @staticmethod
    def _receipt(send: dict[str, Any], future: asyncio.Future[MessageId]) -> None:
        if future.cancelled():
            send["error"] = "cancelled"
        elif future.exception() is not None:
            send["error"] = repr(future.exception())[:200]
        else:
            send["acked"], send["id"] = True, _id(future.result())

    async def _consume(self, client: AsyncClient, topic: str, subscription: str) -> None:
        received = self.record.deliveries.setdefault(topic, {}).setdefault(subscription, [])
        consumer = None
        subscribed = False
        while self._consuming.is_set():
            try:
                if consumer is None:
                    consumer = await client.subscribe(topic, subscription, SUBSCRIPTIONS[subscription],
                                                      InitialPosition.Earliest)
                    if not subscribed:
                        subscribed = True
                        self._subscribed += 1
                message = await consumer.receive(timeout=1.0)
                if message is not None:
                    received.append([message.value.decode(), _id(message.message_id)])
                    consumer.acknowledge(message)
            except Exception as exc:  # a fault: subscribe again
                self.record.errors.append(f"{subscription}@{topic}: {exc!r}")
                await _closed(consumer)
                consumer = None
                await asyncio.sleep(0.5)
        await _closed(consumer)


async def _closed(closable: Any) -> None:
    """Close a producer or consumer that hit a fault before making another under its name (a
    second producer of one name is refused while the first lives); None when there was none."""
    if closable is not None:
        try:
            await asyncio.wait_for(closable.close(), 10)
        except Exception:  # already broken: what matters is that it is gone
            pass
