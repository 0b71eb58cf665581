"""The dlq-worker as it runs: a real `herald dlq-worker` process (or two) against a real `herald
standalone`, the client producing and always-nacking consumers making dead letters. Each letter
lands in its dead-letter topic exactly once with its origin (also when a worker is SIGKILLed mid-
move, when it was published before its worker died, when two workers share the work), the
original subscription's backlog drains, letters a dead-letter topic refuses stay unacknowledged
and are retried, /metrics counts it all, and `herald admin dlq peek / replay` show and restore
dead letters, replaying each once."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from herald.api.v1 import admin_pb2
from herald.client import (
    AsyncClient,
    CompressionType,
    ConsumerType,
    DeadLetterPolicy,
    InitialPosition,
    Message,
    MessageId,
)
from herald.client.admin import AdminClient
from herald.client.config import ClientConfig
from herald.client.connection import ConnectionPool
from herald.client.consumer import AsyncConsumer
from herald.client.lookup import LookupService
from herald.dlq.letters import letter_producer_name, letter_publication
from herald.dlq.publisher import IdempotentPublisher
from herald.local_cluster import LocalCluster
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import VENV_BIN, StandaloneProcess, service_env
from tests.helpers import eventually, unique_name, unique_topic
from tests.wire import WireClient, open_letters

ORIGIN = ("REAL_TOPIC", "ORIGIN_MESSAGE_ID", "SUBSCRIPTION", "REDELIVERY_COUNT", "REASON")


# ---- the worker as a process ----

class WorkerProcess:
    """`herald dlq-worker` on a free metrics port; settings as HERALD_DLQ_WORKER_* variables."""

    def __init__(self, service_url: str, log_path: Path, **settings: object) -> None:
        self.service_url = service_url
        self.log_path = log_path
        self.env = service_env()
        self.env.update({f"HERALD_DLQ_WORKER_{name.upper()}": str(value) for name, value in settings.items()})
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_address = ""
        self.starts = 0

    def start(self, timeout: float = 30.0) -> None:
        self.starts += 1
        marker = f"==== start {self.starts} ===="
        with open(self.log_path, "ab") as log:
            log.write(f"{marker}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [str(VENV_BIN / "herald"), "dlq-worker", "--url", self.service_url, "--metrics-port", "0"],
                stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log(since=marker)
            found = re.search(r"metrics on http://(\S+)/metrics", text)
            if found:
                self.metrics_address = found.group(1)
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"dlq-worker exited with {self.proc.returncode}:\n{text[-4000:]}")
            time.sleep(0.05)
        raise TimeoutError(f"dlq-worker did not start within {timeout}s:\n{self.log()[-4000:]}")

    def log(self, since: str = "") -> str:
        text = self.log_path.read_text(errors="replace")
        return text[text.rfind(since):] if since else text

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def metrics(self) -> dict[str, float]:
        """Every sample, named with its labels: `herald_dlq_move_failures_total{error="NOT_FOUND"}`."""
        with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    def metric(self, name: str) -> float:
        return self.metrics().get(name, 0.0)


MakeWorker = Callable[..., WorkerProcess]


@pytest.fixture
def make_worker(tmp_path: Path) -> Iterator[MakeWorker]:
    """Start dlq-worker processes (short refresh and retry delays); all are stopped after the test."""
    started: list[WorkerProcess] = []

    def make(service_url: str, start: bool = True, **settings: object) -> WorkerProcess:
        options: dict[str, object] = {"broker_refresh_interval": 0.2, "retry_delay": 0.2, "retry_delay_max": 1.0}
        options.update(settings)
        worker = WorkerProcess(service_url, tmp_path / f"worker-{len(started)}.log", **options)
        started.append(worker)
        if start:
            worker.start()
        return worker

    try:
        yield make
    finally:
        for worker in started:
            worker.stop()


# ---- the client's side ----


@pytest.fixture
async def new_topic(admin: AdminClient) -> AsyncIterator[Callable[..., str]]:
    """Unique topic names; they and their dead-letter and retry topics are deleted after the test,
    which withdraws their letters (the next test's worker must not get them)."""
    made: list[str] = []

    def make(prefix: str = "dlq-worker") -> str:
        made.append(unique_topic(prefix))
        return made[-1]

    yield make
    for topic in made:
        for name in (topic, f"{topic}-s-DLQ", f"{topic}-s-RETRY"):
            try:
                await admin.delete_topic(name, force=True)
            except Exception:  # never created, or already gone
                pass


def metric_reaches(worker: WorkerProcess, name: str, value: float) -> Callable[[], Awaitable[bool]]:
    async def reached() -> bool:
        return worker.metric(name) >= value

    return reached


async def produce(client: AsyncClient, topic: str, count: int, per_entry: int = 1, prefix: str = "m",
                  **producer_options: Any) -> list[str]:
    """`count` messages, `per_entry` to an entry (1: unbatched), each with a key, a property and an
    event time; returns their values."""
    batched = per_entry > 1
    producer = await client.create_producer(
        topic, batching_enabled=batched, batching_max_messages=max(per_entry, 1), batching_max_publish_delay=10.0,
        **producer_options)
    values = []
    for start in range(0, count, per_entry):
        sent = []
        for i in range(start, min(start + per_entry, count)):
            value = f"{prefix}-{i}"
            values.append(value)
            sent.append(await producer.send_async(value.encode(), key=f"key-{i % 4}", properties={"n": str(i)},
                                                  event_time=1_700_000_000_000 + i))
        await producer.flush()
        await asyncio.gather(*sent)
    await producer.close()
    return values


class AlwaysNack:
    """A Shared consumer that negatively acknowledges everything it gets, remembering the id each
    value was first received with."""

    def __init__(self, consumer: AsyncConsumer[bytes]) -> None:
        self.consumer = consumer
        self.first_ids: dict[bytes, str] = {}
        self._task = asyncio.get_running_loop().create_task(self._nack())

    @classmethod
    async def subscribe(cls, client: AsyncClient, topic: str, max_redeliver_count: int = 3,
                        **options: Any) -> AlwaysNack:
        consumer = await client.subscribe(
            topic, "s", ConsumerType.Shared, InitialPosition.Earliest, negative_ack_redelivery_delay=0.05,
            dead_letter_policy=DeadLetterPolicy(max_redeliver_count, options.pop("dead_letter_topic", None)),
            **options)
        return cls(consumer)

    async def _nack(self) -> None:
        while True:
            message = await self.consumer.receive()
            self.first_ids.setdefault(message.data(), str(message.message_id))
            self.consumer.negative_acknowledge(message)

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self.consumer.close()


async def subscription_stats(admin: AdminClient, topic: str, subscription: str = "s") -> tuple[int, int]:
    """(dead letters, backlog entries) of the subscription."""
    stats = await admin.topic_stats(topic)
    (found,) = [s for s in stats.subscriptions if s.name == subscription]
    return found.dead_letters, found.backlog_entries


async def stats_become(admin: AdminClient, topic: str, dead: int, backlog: int, seconds: float = 60.0) -> None:
    async def reached() -> bool:
        return await subscription_stats(admin, topic) == (dead, backlog)

    await eventually(reached, f"{dead} dead letters and a backlog of {backlog} on {topic}", timeout=seconds)


async def read_all(client: AsyncClient, topic: str) -> list[Message[bytes]]:
    """Every message of a topic (each partition of a partitioned one), from the earliest."""
    found: list[Message[bytes]] = []
    for partition in await client.get_partitions_for_topic(topic):
        reader = await client.create_reader(partition, MessageId.earliest)
        while await reader.has_message_available():
            message = await reader.read_next(timeout=10)
            assert message is not None
            found.append(message)
        await reader.close()
    return found


def assert_once_each(messages: list[Message[bytes]], values: list[str]) -> None:
    counts = Counter(message.data().decode() for message in messages)
    assert sorted(counts) == sorted(values), f"missing {set(values) - set(counts)}, extra {set(counts) - set(values)}"
    assert {value: n for value, n in counts.items() if n > 1} == {}, "duplicates in the dead-letter topic"


class AdminCli:
    def __init__(self, url: str) -> None:
        self.url = url

    def run(self, *args: str, status: int = 0) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(VENV_BIN / "herald"), "admin", "--url", self.url, *args],
                                capture_output=True, text=True, env=service_env(), timeout=120)
        assert result.returncode == status, (
            f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}")
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.run("--json", *args).stdout)


# ---- the test: always-nacked messages end in the DLQ, once each ----

async def test_always_nacked_messages_land_in_the_dlq_once_each_with_their_origin_and_the_backlog_drains(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, new_topic: Callable[..., str],
    make_worker: MakeWorker,
) -> None:
    make_worker(shared_standalone.service_url)
    topic = new_topic()
    nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=3)
    values = await produce(client, topic, 10, prefix="single")
    values += await produce(client, topic, 20, per_entry=5, prefix="batched", compression_type=CompressionType.ZSTD)
    await stats_become(admin, topic, dead=0, backlog=0)
    first_ids = dict(nacker.first_ids)
    await nacker.close()
    moved = await read_all(client, f"{topic}-s-DLQ")
    assert_once_each(moved, values)
    for message in moved:
        n = int(message.properties["n"])
        assert (message.key, message.event_time) == (f"key-{n % 4}", 1_700_000_000_000 + n)
        assert {name: message.properties[name] for name in ORIGIN} == {
            "REAL_TOPIC": topic, "ORIGIN_MESSAGE_ID": first_ids[message.data()], "SUBSCRIPTION": "s",
            "REDELIVERY_COUNT": "3", "REASON": "max redeliveries reached"}
    assert {MessageId.from_str(m.properties["ORIGIN_MESSAGE_ID"]).batch_index for m in moved
            if m.data().startswith(b"single")} == {-1}  # unbatched where they came from


async def test_metrics_count_the_letters_and_messages_moved(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, new_topic: Callable[..., str],
    make_worker: MakeWorker,
) -> None:
    worker = make_worker(shared_standalone.service_url)
    await eventually(metric_reaches(worker, "herald_dlq_broker_streams_connected", 1), "the worker's stream")
    topic = new_topic()
    nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=1)
    await produce(client, topic, 3, per_entry=3)
    await produce(client, topic, 1, prefix="alone")
    await stats_become(admin, topic, dead=0, backlog=0)
    await nacker.close()
    samples = worker.metrics()
    assert samples["herald_dlq_letters_moved_total"] == 2
    assert samples["herald_dlq_messages_moved_total"] == 4
    assert samples["herald_dlq_move_duration_seconds_count"] == 2
    assert samples["herald_dlq_duplicates_total"] == 0
    assert samples["herald_dlq_moves_retried_total"] == 0
    # No failure: the known errors' series are there from the start, at 0.
    assert not [name for name, value in samples.items() if name.startswith("herald_dlq_move_failures_total") and value]
    assert (samples["herald_dlq_moves_in_flight"], samples["herald_dlq_letters_parked"]) == (0, 0)
    assert samples["herald_dlq_broker_streams_connected"] == 1


# ---- exactly once, whatever happens to workers ----

async def make_letters(client: AsyncClient, admin: AdminClient, topic: str, count: int) -> list[str]:
    """`count` unbatched dead letters, waiting for a worker."""
    nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=1, receiver_queue_size=count)
    values = await produce(client, topic, count)
    await stats_become(admin, topic, dead=count, backlog=count)
    await nacker.close()
    return values


async def dead_letters_once_its_stream_ended(wire: WireClient, admin: AdminClient, topic: str, count: int) -> int:
    """The subscription's dead-letter count once the broker has ended a killed worker's Letters
    stream: until then, a report the worker wrote just before dying may still be read. A stream of
    our own, with permits for every letter, is lent every letter the killed worker does not hold;
    once it holds as many of the topic's letters as the subscription counts, the killed worker
    holds none, so no report of its can change the count. Ending ours gives them back."""
    ours = await open_letters(wire, await wire.owner(topic))
    await ours.flow(count)
    held: set[int] = set()

    async def ours_holds_every_letter() -> bool:
        held.update(letter.letter_id for letter in await ours.receive(count, timeout=0.05) if letter.topic == topic)
        dead, _ = await subscription_stats(admin, topic)
        return len(held) == dead  # never fewer counted than ours holds: they are all still letters

    await eventually(ours_holds_every_letter, f"every dead letter of {topic} lent to a stream of ours")
    await ours.close()
    return len(held)


MARKER = b"marker: published after the killed worker's publications"


async def dlq_once_publications_landed(client: AsyncClient, admin: AdminClient, dlq: str) -> list[Message[bytes]]:
    """The dead-letter topic's messages once a killed worker's publications have all landed or
    failed: the broker has closed its producers there (it reads no more of their sends), and a
    marker published after their last sends is stored after them (a topic completes its adds in
    order). The marker is left out."""
    async def no_producers() -> bool:
        return not (await admin.topic_stats(dlq)).producers

    await eventually(no_producers, f"the killed worker's producers on {dlq} closed")
    producer = await client.create_producer(dlq, batching_enabled=False)
    await producer.send(MARKER)
    await producer.close()
    return [message for message in await read_all(client, dlq) if message.data() != MARKER]


async def test_a_worker_killed_mid_move_neither_loses_nor_duplicates_a_letter(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, wire: WireClient,
    new_topic: Callable[..., str], make_worker: MakeWorker,
) -> None:
    topic = new_topic()
    values = await make_letters(client, admin, topic, 300)
    first = make_worker(shared_standalone.service_url, flow_permits=3)
    await eventually(metric_reaches(first, "herald_dlq_letters_moved_total", 30), "the first worker's moves")
    first.kill()
    dead = await dead_letters_once_its_stream_ended(wire, admin, topic, len(values))
    assert dead > 0  # killed while letters were still waiting or being moved
    # Letters the killed worker published but never reported moved: in the DLQ and unacknowledged
    # (usually one or two: the kill lands between a publish and its report).
    in_doubt = len(await dlq_once_publications_landed(client, admin, f"{topic}-s-DLQ")) + dead - len(values)
    second = make_worker(shared_standalone.service_url)
    await stats_become(admin, topic, dead=0, backlog=0)
    samples = second.metrics()
    assert (samples["herald_dlq_letters_moved_total"], samples["herald_dlq_duplicates_total"]) == (dead, in_doubt)
    assert_once_each([m for m in await read_all(client, f"{topic}-s-DLQ") if m.data() != MARKER], values)


async def test_a_letter_published_before_its_worker_died_is_recognised_and_not_stored_again(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, new_topic: Callable[..., str],
    make_worker: MakeWorker,
) -> None:
    # A worker that published the letter and died before reporting it moved, step by step: take
    # the letter on a Letters stream, publish it as the worker does, and end the stream unreported.
    topic = new_topic()
    nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=1)
    values = await produce(client, topic, 3, per_entry=3)
    await stats_become(admin, topic, dead=1, backlog=1)
    await nacker.close()
    async with WireClient(shared_standalone.port) as wire:
        stream = await open_letters(wire, await wire.owner(topic))
        await stream.flow(1)
        (letter,) = await stream.receive(1)
        config = ClientConfig(service_url=shared_standalone.service_url)
        pool = ConnectionPool(config)
        publisher = IdempotentPublisher(pool, LookupService(pool, config), 30.0, 60.0)
        published = await publisher.publish(letter.dead_letter_topic, letter_producer_name(letter),
                                             letter_publication(letter))
        assert (published.stored, published.already) == (3, 0)
        await pool.close()
    assert await subscription_stats(admin, topic) == (1, 1)  # published, not acknowledged
    worker = make_worker(shared_standalone.service_url)
    await stats_become(admin, topic, dead=0, backlog=0)
    assert_once_each(await read_all(client, f"{topic}-s-DLQ"), values)
    samples = worker.metrics()
    assert (samples["herald_dlq_duplicates_total"], samples["herald_dlq_letters_moved_total"]) == (1, 1)


async def test_two_workers_share_the_letters_without_duplicates(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, new_topic: Callable[..., str],
    make_worker: MakeWorker,
) -> None:
    workers = [make_worker(shared_standalone.service_url) for _ in range(2)]
    for worker in workers:
        await eventually(metric_reaches(worker, "herald_dlq_broker_streams_connected", 1), "both workers' streams")
    topic = new_topic()
    nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=1)
    values = await produce(client, topic, 60)
    await stats_become(admin, topic, dead=0, backlog=0)
    await nacker.close()
    assert_once_each(await read_all(client, f"{topic}-s-DLQ"), values)
    moved = [worker.metric("herald_dlq_letters_moved_total") for worker in workers]
    assert sum(moved) == 60 and all(moved), moved  # each took a share, and no letter went twice


# ---- partitioned topics ----

async def test_letters_of_a_partitioned_topic_go_to_one_dlq_named_after_the_topic(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, new_topic: Callable[..., str],
    make_worker: MakeWorker,
) -> None:
    make_worker(shared_standalone.service_url)
    topic = new_topic()
    await admin.create_topic(topic, partitions=2)
    nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=1)
    values = await produce(client, topic, 12)
    await stats_become(admin, topic, dead=0, backlog=0)
    first_ids = dict(nacker.first_ids)
    await nacker.close()
    moved = await read_all(client, f"{topic}-s-DLQ")
    assert_once_each(moved, values)
    partitions = {f"{topic}-partition-{i}": i for i in range(2)}
    for message in moved:
        real = message.properties["REAL_TOPIC"]
        origin = MessageId.from_str(message.properties["ORIGIN_MESSAGE_ID"])
        assert (real in partitions, origin.partition) == (True, partitions.get(real))
        assert message.properties["ORIGIN_MESSAGE_ID"] == first_ids[message.data()]
    assert {message.properties["REAL_TOPIC"] for message in moved} == set(partitions)
    # Replayed, each goes back to the partition it died on.
    await admin.create_subscription(topic, "check", InitialPosition.Latest)
    check = await client.subscribe(topic, "check", ConsumerType.Shared)
    cli = AdminCli(shared_standalone.service_url)
    assert "replayed 12 messages" in cli.run("dlq", "replay", topic, "-s", "s").stdout
    back: list[Message[bytes]] = []
    while (message := await check.receive(timeout=2)) is not None:
        check.acknowledge(message)
        back.append(message)
    assert_once_each(back, values)
    by_value = {m.data(): m.properties["REAL_TOPIC"] for m in moved}
    assert all(message.topic == by_value[message.data()] for message in back)
    await check.close()


async def test_a_partitioned_dead_letter_topic_gets_each_letter_once(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, new_topic: Callable[..., str],
    make_worker: MakeWorker,
) -> None:
    make_worker(shared_standalone.service_url)
    topic, dlq = new_topic(), new_topic("partitioned-dlq")
    await admin.create_topic(dlq, partitions=3)
    nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=1, dead_letter_topic=dlq)
    values = await produce(client, topic, 30)
    await stats_become(admin, topic, dead=0, backlog=0)
    await nacker.close()
    moved = await read_all(client, dlq)
    assert_once_each(moved, values)
    assert len({message.topic for message in moved}) > 1  # spread over the partitions


# ---- a cluster of brokers ----

async def test_letters_of_every_broker_move_and_a_dead_letter_topic_that_moved_is_found_again(
    local_cluster: LocalCluster, make_worker: MakeWorker,
) -> None:
    worker = make_worker(local_cluster.service_url)
    await eventually(metric_reaches(worker, "herald_dlq_broker_streams_connected", 2), "a stream to each broker")
    dlq = "persistent://public/default/cluster-dlq"
    async with AsyncClient(local_cluster.service_url) as client, AdminClient(local_cluster.service_url) as admin:
        topics: list[str] = []
        owners: set[str] = set()
        while len(owners) < 2:  # origin topics on both brokers
            topics.append(f"persistent://public/default/cluster-{len(topics)}")
            owners.add(await _owner(local_cluster, topics[-1]))
        values: list[str] = []
        for round_ in range(2):
            if round_:
                # The dead-letter topic moves to the other broker: the worker's cached owner
                # answers NOT_OWNER and it looks the topic up again, failing no letter.
                before = await _owner(local_cluster, dlq)
                await admin.unload_topic(dlq)
                await client.create_producer(dlq)  # assigned anew
                assert await _owner(local_cluster, dlq) != before
            for topic in topics:
                nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=1, dead_letter_topic=dlq)
                values += await produce(client, topic, 2, prefix=f"{topic.rsplit('/', 1)[1]}-{round_}")
                await stats_become(admin, topic, dead=0, backlog=0)
                await nacker.close()
        assert_once_each(await read_all(client, dlq), values)
    assert not [name for name, value in worker.metrics().items()
                if name.startswith("herald_dlq_move_failures_total") and value]


async def _owner(cluster: LocalCluster, topic: str) -> str:
    async with WireClient(int(cluster.lookup.address.rsplit(":", 1)[1])) as wire:
        return await wire.owner(topic)


# ---- retry topics, with the worker running ----

async def test_reconsume_later_comes_back_after_its_delay_and_retried_messages_end_in_the_dlq(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, new_topic: Callable[..., str],
    make_worker: MakeWorker,
) -> None:
    make_worker(shared_standalone.service_url)
    topic = new_topic()
    consumer = await client.subscribe(topic, "s", ConsumerType.Shared, InitialPosition.Earliest, retry_enable=True,
                                      negative_ack_redelivery_delay=0.05,
                                      dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2))
    producer = await client.create_producer(topic)
    original = await producer.send(b"flaky", key="k", properties={"app": "1"})
    message = await consumer.receive(timeout=10)
    assert message is not None
    await consumer.reconsume_later(message, delay=2.0)
    assert await consumer.receive(timeout=0.5) is None  # held for its delay
    again = await consumer.receive(timeout=30)
    assert again is not None and again.data() == b"flaky"
    assert {k: again.properties[k] for k in ("RECONSUMETIMES", "DELAY_TIME", "REAL_TOPIC")} == {
        "RECONSUMETIMES": "1", "DELAY_TIME": "2000", "REAL_TOPIC": topic}
    # Nacked on the retry topic until its redeliveries run out: the worker moves it to the DLQ,
    # where it names the topic it first came from, not the retry topic.
    while again is not None:
        consumer.negative_acknowledge(again)
        again = await consumer.receive(timeout=2)
    # Reconsumed past max_redeliver_count: the client sends it to the DLQ itself.
    await producer.send(b"hopeless")
    for _ in range(3):
        hopeless = await consumer.receive(timeout=30)
        assert hopeless is not None and hopeless.data() == b"hopeless"
        await consumer.reconsume_later(hopeless, delay=0)

    async def both_in_dlq() -> bool:
        return len(await read_all(client, f"{topic}-s-DLQ")) == 2

    await eventually(both_in_dlq, "both messages in the DLQ")
    by_value = {m.data(): m for m in await read_all(client, f"{topic}-s-DLQ")}
    flaky = by_value[b"flaky"]
    assert (flaky.key, flaky.properties["app"], flaky.properties["REAL_TOPIC"]) == ("k", "1", topic)
    assert flaky.properties["ORIGIN_MESSAGE_ID"] == str(original)
    assert (flaky.properties["SUBSCRIPTION"], flaky.properties["REASON"]) == ("s", "max redeliveries reached")
    assert by_value[b"hopeless"].properties["RECONSUMETIMES"] == "3"
    # Replayed, both come back to the topic as first published: no retry rounds, no origin.
    cli = AdminCli(shared_standalone.service_url)
    assert "replayed 2 messages" in cli.run("dlq", "replay", topic, "--subscription", "s").stdout
    returned = {}
    for _ in range(2):
        back = await consumer.receive(timeout=30)
        assert back is not None
        consumer.acknowledge(back)
        returned[back.data()] = back
    assert set(returned) == {b"flaky", b"hopeless"}
    assert returned[b"flaky"].properties == {"app": "1"} and returned[b"hopeless"].properties == {}
    await consumer.close()


# ---- peek and replay ----

async def test_peek_shows_dead_letters_with_their_origin_and_replay_restores_each_once(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, new_topic: Callable[..., str],
    make_worker: MakeWorker,
) -> None:
    make_worker(shared_standalone.service_url)
    topic = new_topic()
    cli = AdminCli(shared_standalone.service_url)
    assert "(no dead letters in" in cli.run("dlq", "peek", topic, "-s", "s").stdout
    nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=1)
    values = await produce(client, topic, 6, per_entry=3, prefix="batch")
    values += await produce(client, topic, 1, prefix="alone")
    await stats_become(admin, topic, dead=0, backlog=0)
    await nacker.close()

    peeked = cli.json("dlq", "peek", topic, "--subscription", "s", "--count", "10")
    assert peeked["dead_letter_topic"] == f"{topic}-s-DLQ"
    assert sorted(m["value"] for m in peeked["messages"]) == sorted(values)
    for message in peeked["messages"]:
        assert message["origin"]["REAL_TOPIC"] == topic and message["origin"]["SUBSCRIPTION"] == "s"
        assert message["properties"] == {"n": str(int(message["value"].rsplit("-", 1)[1]))}
    assert len(cli.json("dlq", "peek", topic, "-s", "s", "-n", "2")["messages"]) == 2
    table = cli.run("dlq", "peek", topic, "-s", "s").stdout
    assert "REAL_TOPIC" in table and "ORIGIN_MESSAGE_ID" in table and "max redeliveries reached" in table
    assert all(value in table for value in values)

    await admin.create_subscription(topic, "check", InitialPosition.Latest)
    check = await client.subscribe(topic, "check", ConsumerType.Shared)
    # --limit cuts the first entry of three short; the next replay finishes it without duplicates.
    assert cli.json("dlq", "replay", topic, "-s", "s", "--limit", "2")["replayed"] == 2
    assert "replayed 5 messages" in cli.run("dlq", "replay", topic, "-s", "s").stdout
    assert cli.json("dlq", "replay", topic, "-s", "s") == {
        "dead_letter_topic": f"{topic}-s-DLQ", "replayed": 0, "already_there": 0}
    assert "(no dead letters in" in cli.run("dlq", "peek", topic, "-s", "s").stdout
    back: list[Message[bytes]] = []
    while (message := await check.receive(timeout=2)) is not None:
        check.acknowledge(message)
        back.append(message)
    assert_once_each(back, values)
    for message in back:
        n = int(message.properties["n"])
        assert (message.key, message.properties, message.event_time) == (
            f"key-{n % 4}", {"n": str(n)}, 1_700_000_000_000 + n)
    await check.close()


async def test_peek_reads_a_dead_letter_topic_no_replay_subscription_holds_and_changes_nothing(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, new_topic: Callable[..., str],
) -> None:
    # Dead letters the client put there itself (reconsume_later past its rounds), no worker ever
    # touched the topic: peek reads it from the earliest message, every partition.
    topic = new_topic()
    dlq = f"{topic}-s-DLQ"
    await admin.create_topic(dlq, partitions=2)
    producer = await client.create_producer(dlq, batching_enabled=False)
    for i in range(4):
        await producer.send(f"dead-{i}".encode(), key=str(i), properties={"REAL_TOPIC": topic, "RECONSUMETIMES": "3"})
    await producer.close()
    cli = AdminCli(shared_standalone.service_url)
    for _ in range(2):
        peeked = cli.json("dlq", "peek", topic, "-s", "s")["messages"]
        assert sorted(m["value"] for m in peeked) == [f"dead-{i}" for i in range(4)]
        assert {(m["origin"]["REAL_TOPIC"], m["properties"]["RECONSUMETIMES"]) for m in peeked} == {(topic, "3")}
    assert await admin.list_subscriptions(dlq) == []
    await admin.delete_topic(dlq, force=True)


def test_dlq_commands_explain_their_usage_errors(shared_standalone: StandaloneProcess) -> None:
    cli = AdminCli(shared_standalone.service_url)
    missing = cli.run("dlq", "peek", "t", status=2).stderr
    assert "--subscription" in missing
    broker = AdminCli("127.0.0.1:1")
    error = broker.run("dlq", "replay", "t", "-s", "s", status=2).stderr
    assert "dlq commands need a service URL (herald://host:port)" in error
    assert "invalid count" in cli.run("dlq", "replay", "t", "-s", "s", "--limit", "0", status=2).stderr


def test_help_lists_the_dlq_worker_and_the_admin_dlq_commands() -> None:
    env = service_env()
    top = subprocess.run([str(VENV_BIN / "herald"), "--help"], capture_output=True, text=True, env=env).stdout
    assert "dlq-worker" in top
    worker = subprocess.run([str(VENV_BIN / "herald"), "dlq-worker", "--help"], capture_output=True, text=True,
                            env=env).stdout
    for flag in ("--url", "--metrics-port", "--flow-permits", "--broker-refresh-interval", "--config"):
        assert flag in worker
    admin_help = subprocess.run([str(VENV_BIN / "herald"), "admin", "--help"], capture_output=True, text=True,
                                env=env).stdout
    assert "dlq" in admin_help
    group = subprocess.run([str(VENV_BIN / "herald"), "admin", "dlq", "--help"], capture_output=True, text=True,
                           env=env).stdout
    assert "    peek" in group and "    replay" in group


# ---- what goes wrong ----

async def test_a_letter_its_dead_letter_topic_refuses_stays_unacknowledged_and_moves_once_it_fits(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, new_topic: Callable[..., str],
    make_worker: MakeWorker,
) -> None:
    worker = make_worker(shared_standalone.service_url)
    namespace = f"public/{unique_name('tiny')}"
    await admin.create_namespace(namespace, admin_pb2.Policies(max_message_size=1024))
    topic, dlq = new_topic(), f"persistent://{namespace}/dlq"
    nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=1, dead_letter_topic=dlq)
    producer = await client.create_producer(topic)
    await producer.send(b"x" * 2000)
    await eventually(metric_reaches(worker, 'herald_dlq_move_failures_total{error="MESSAGE_TOO_LARGE"}', 2),
                     "the refusals counted")
    await eventually(metric_reaches(worker, "herald_dlq_moves_retried_total", 1), "the letter retried")
    assert await subscription_stats(admin, topic) == (1, 1)  # still unacknowledged
    assert worker.metric("herald_dlq_letters_moved_total") == 0
    await admin.set_namespace_policies(namespace, admin_pb2.Policies(max_message_size=1024 * 1024))
    await stats_become(admin, topic, dead=0, backlog=0)
    assert [m.data() for m in await read_all(client, dlq)] == [b"x" * 2000]
    await nacker.close()
    await admin.delete_topic(dlq, force=True)


async def test_a_letter_whose_dead_letter_namespace_does_not_exist_waits_until_it_does(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, new_topic: Callable[..., str],
    make_worker: MakeWorker,
) -> None:
    worker = make_worker(shared_standalone.service_url)
    namespace = f"public/{unique_name('later')}"
    topic, dlq = new_topic(), f"persistent://{namespace}/dlq"
    nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=1, dead_letter_topic=dlq)
    values = await produce(client, topic, 1)
    await eventually(metric_reaches(worker, 'herald_dlq_move_failures_total{error="NOT_FOUND"}', 1),
                     "the failure counted")
    assert await subscription_stats(admin, topic) == (1, 1)
    assert "does not exist" in worker.log()
    await admin.create_namespace(namespace)
    await stats_become(admin, topic, dead=0, backlog=0)
    assert_once_each(await read_all(client, dlq), values)
    await nacker.close()
    await admin.delete_topic(dlq, force=True)


async def refused_then_accepted(
    client: AsyncClient, admin: AdminClient, worker: WorkerProcess, topic: str, count: int,
    parked: int, meanwhile: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """`count` letters whose dead-letter namespace does not exist yet: once `parked` of them wait
    out their retry delay, run `meanwhile`, then make the namespace; each letter moves once."""
    namespace = f"public/{unique_name('later')}"
    dlq = f"persistent://{namespace}/dlq"
    nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=1, dead_letter_topic=dlq)
    values = await produce(client, topic, count)
    await eventually(metric_reaches(worker, "herald_dlq_letters_parked", parked), f"{parked} letters parked")
    if meanwhile is not None:
        await meanwhile()
    assert await subscription_stats(admin, topic) == (count, count)
    await admin.create_namespace(namespace)
    await stats_become(admin, topic, dead=0, backlog=0)
    assert_once_each(await read_all(client, dlq), values)
    await nacker.close()
    await admin.delete_topic(dlq, force=True)


async def test_refused_letters_wait_without_permits_so_other_letters_get_through(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, new_topic: Callable[..., str],
    make_worker: MakeWorker,
) -> None:
    worker = make_worker(shared_standalone.service_url, flow_permits=4, retry_delay=1.0, retry_delay_max=2.0)
    healthy = new_topic()

    async def healthy_letters_move() -> None:
        nacker = await AlwaysNack.subscribe(client, healthy, max_redeliver_count=1)
        values = await produce(client, healthy, 5)
        await stats_become(admin, healthy, dead=0, backlog=0)
        assert_once_each(await read_all(client, f"{healthy}-s-DLQ"), values)
        await nacker.close()

    await refused_then_accepted(client, admin, worker, new_topic(), 30, parked=30, meanwhile=healthy_letters_move)
    await eventually(metric_reaches(worker, "herald_dlq_letters_moved_total", 35), "every move counted")
    assert (worker.metric("herald_dlq_letters_parked"), worker.metric("herald_dlq_moves_in_flight")) == (0, 0)


async def test_refused_letters_past_max_parked_keep_their_permits_and_all_move_once_accepted(
    shared_standalone: StandaloneProcess, client: AsyncClient, admin: AdminClient, new_topic: Callable[..., str],
    make_worker: MakeWorker,
) -> None:
    worker = make_worker(shared_standalone.service_url, flow_permits=3, max_parked=4, retry_delay=0.3,
                         retry_delay_max=0.6)
    await refused_then_accepted(client, admin, worker, new_topic(), 20, parked=4 + 3)
    await eventually(metric_reaches(worker, "herald_dlq_letters_moved_total", 20), "every move counted")
    assert (worker.metric("herald_dlq_letters_parked"), worker.metric("herald_dlq_moves_in_flight")) == (0, 0)


async def test_a_worker_waits_for_an_unreachable_lookup_and_moves_letters_once_it_answers(
    tmp_path: Path, make_worker: MakeWorker,
) -> None:
    server = StandaloneProcess(tmp_path / "data", service_env())
    worker = make_worker(server.service_url, connection_timeout=1)
    await eventually(_logged(worker, "cannot list the brokers"), "the worker to report lookup unreachable")
    assert worker.running and worker.metric("herald_dlq_broker_streams_connected") == 0
    server.start()
    try:
        await eventually(metric_reaches(worker, "herald_dlq_broker_streams_connected", 1), "the worker's stream")
        async with AsyncClient(server.service_url) as client, AdminClient(server.service_url) as admin:
            topic = "persistent://public/default/late-lookup"
            nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=1)
            values = await produce(client, topic, 2)
            await stats_become(admin, topic, dead=0, backlog=0)
            await nacker.close()
            assert_once_each(await read_all(client, f"{topic}-s-DLQ"), values)
    finally:
        server.stop()


async def test_a_worker_takes_letters_again_after_its_broker_restarts(
    standalone: StandaloneProcess, make_worker: MakeWorker,
) -> None:
    worker = make_worker(standalone.service_url)
    topic = "persistent://public/default/restarted"
    values = []
    for round_ in range(2):
        if round_:
            standalone.restart()
        async with AsyncClient(standalone.service_url) as client, AdminClient(standalone.service_url) as admin:
            nacker = await AlwaysNack.subscribe(client, topic, max_redeliver_count=1)
            values += await produce(client, topic, 3, prefix=f"round-{round_}")
            await stats_become(admin, topic, dead=0, backlog=0)
            await nacker.close()
            assert_once_each(await read_all(client, f"{topic}-s-DLQ"), values)
    assert worker.metric("herald_dlq_broker_streams_connected") == 1


def test_invalid_worker_settings_are_refused_with_a_clear_error() -> None:
    env = service_env()
    result = subprocess.run([str(VENV_BIN / "herald"), "dlq-worker", "--flow-permits", "0"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2 and "flow_permits must be at least 1, got 0" in result.stderr
    env["HERALD_DLQ_WORKER_RETRY_DELAY"] = "soon"
    result = subprocess.run([str(VENV_BIN / "herald"), "dlq-worker"], capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode == 2 and "retry_delay='soon' is invalid" in result.stderr
    del env["HERALD_DLQ_WORKER_RETRY_DELAY"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([str(VENV_BIN / "herald"), "dlq-worker", "--metrics-port", str(port)],
                                capture_output=True, text=True, env=env, timeout=60)
    # Another process holds the port: the operation failed (1), not a usage error.
    assert result.returncode == 1 and f"cannot serve metrics on 127.0.0.1:{port}" in result.stderr


def _logged(worker: WorkerProcess, text: str) -> Callable[[], Awaitable[bool]]:
    async def found() -> bool:
        return text in worker.log()

    return found
