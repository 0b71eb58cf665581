"""`herald proxy` as a real process in front of `herald standalone` and of a local cluster: a client
given only the proxy's URL produces, consumes, reads, pulls, lists topics and administers; it keeps
going through the death of a topic's owner and through a proxy's drain; the connection limit, the
metrics and every error path the proxy adds."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from herald.api.v1 import broker_pb2, broker_pb2_grpc, common_pb2, lookup_pb2, lookup_pb2_grpc
from herald.client import AsyncClient, AsyncConsumer, ConsumerType, InitialPosition, MessageId
from herald.client.admin import AdminClient
from herald.common.errors import (
    ConsumerBusyError,
    HeraldError,
    HeraldTimeoutError,
    InvalidArgumentError,
    NotAllowedError,
    NotFoundError,
    ServiceNotReadyError,
)
from herald.common.transport.rpc import error_from_rpc
from herald.local_cluster import ClusterProcess, LocalCluster, free_port

from tests.chaos.checker import CHECKER, CLIENT_OPTIONS, PHASE_SECONDS, ContinuousProducer, check
from tests.conftest import VENV_BIN, StandaloneProcess, service_env
from tests.helpers import eventually, eventually_passes, unique_name, unique_topic
from tests.wire import make_entry, values_of


def start_proxy(log_dir: Path, lookup_address: str, name: str = "proxy", port: int | None = None,
                **settings: object) -> ClusterProcess:
    """`herald proxy` on free ports (or `port`), its other settings as HERALD_PROXY_* variables."""
    env = service_env()
    env.update({f"HERALD_PROXY_{key.upper()}": str(value) for key, value in settings.items()})
    port = free_port() if port is None else port
    metrics_port = free_port()
    proxy = ClusterProcess(
        name, [str(VENV_BIN / "herald"), "proxy", "--lookup-address", lookup_address, "--port", str(port),
               "--metrics-port", str(metrics_port)],
        log_dir, "proxy listening on", port, env, metrics_port=metrics_port)
    proxy.start()
    return proxy


def url_of(proxy: ClusterProcess) -> str:
    return f"herald://{proxy.address}"


def scrape(proxy: ClusterProcess) -> dict[str, float]:
    """The proxy's /metrics as {series: value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith("herald_proxy_")}


def lookup_address(standalone: StandaloneProcess) -> str:
    return f"127.0.0.1:{standalone.port}"


@pytest.fixture(scope="module")
def proxy(shared_standalone: StandaloneProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    """One `herald proxy` in front of the module's standalone."""
    process = start_proxy(tmp_path_factory.mktemp("proxy"), lookup_address(shared_standalone))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def make_proxy(tmp_path: Path) -> Iterator[Callable[..., ClusterProcess]]:
    """Start proxies of the test's own (`make_proxy(lookup_address, **settings)`); all are stopped
    after the test."""
    started: list[ClusterProcess] = []

    def make(lookup: str, **settings: object) -> ClusterProcess:
        started.append(start_proxy(tmp_path, lookup, name=f"proxy-{len(started)}", **settings))
        return started[-1]

    try:
        yield make
    finally:
        for process in started:
            process.stop()


@pytest.fixture
async def client(proxy: ClusterProcess) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(url_of(proxy)) as made:
        yield made


@pytest.fixture
async def admin(proxy: ClusterProcess) -> AsyncIterator[AdminClient]:
    async with AdminClient(url_of(proxy), timeout=20) as made:
        yield made


async def produce(client: AsyncClient, topic: str, values: list[bytes], **options: object) -> list[MessageId]:
    producer = await client.create_producer(topic, **options)
    ids = [await future for future in [await producer.send_async(value) for value in values]]
    await producer.close()
    return ids


async def receive(consumer: AsyncConsumer[bytes], count: int) -> list[bytes]:
    values = []
    while len(values) < count and (message := await consumer.receive(timeout=20)) is not None:
        values.append(message.value)
        consumer.acknowledge(message)
    return values


# ---- the client-facing API through the proxy ----

async def test_a_client_given_only_the_proxy_url_produces_and_consumes(client: AsyncClient) -> None:
    topic = unique_topic("px")
    consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
    await produce(client, topic, [b"%d" % i for i in range(500)])
    assert await receive(consumer, 500) == [b"%d" % i for i in range(500)]
    await consumer.close()


async def test_every_address_the_proxy_answers_is_its_own(proxy: ClusterProcess) -> None:
    topic = unique_topic("px")
    async with grpc.aio.insecure_channel(proxy.address) as channel:
        lookup = lookup_pb2_grpc.LookupServiceStub(channel)
        found = await lookup.LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic))
        route = await lookup.GetTopicRoute(lookup_pb2.TopicRouteRequest(topic=topic))
        cluster = await lookup.GetClusterInfo(lookup_pb2.ClusterInfoRequest())
    assert (found.broker_address, found.redirect) == (proxy.address, False)
    assert found.broker_id == "standalone"  # who serves it behind the proxy
    assert [r.broker_address for r in route.routes] == [proxy.address]
    assert [(b.broker_id, b.address) for b in cluster.brokers] == [("standalone", proxy.address)]


async def test_readers_and_last_message_ids_go_through_the_proxy(client: AsyncClient) -> None:
    topic = unique_topic("reader")
    ids = await produce(client, topic, [b"a", b"b", b"c"], batching_enabled=False)
    reader = await client.create_reader(topic, MessageId.earliest)
    assert [(await reader.read_next(timeout=20)).value for _ in range(3)] == [b"a", b"b", b"c"]
    assert not await reader.has_message_available()
    from_second = await client.create_reader(topic, ids[1], start_message_id_inclusive=True)
    assert (await from_second.read_next(timeout=20)).value == b"b"
    await reader.close()
    await from_second.close()


async def test_pull_goes_to_the_broker_serving_the_queue(client: AsyncClient, admin: AdminClient,
                                                         proxy: ClusterProcess) -> None:
    topic = unique_topic("pull")
    await produce(client, topic, [b"a", b"b"], batching_enabled=False)
    parted = unique_topic("pull-parts")
    await admin.create_topic(parted, partitions=2)
    await produce(client, f"{parted}-partition-1", [b"p1"])
    async with grpc.aio.insecure_channel(proxy.address) as channel:
        broker = broker_pb2_grpc.BrokerServiceStub(channel)
        reply = await broker.Pull(broker_pb2.PullRequest(topic=topic, partition=-1, max_entries=10))
        assert [v for e in reply.entries for v in values_of(e)] == [b"a", b"b"]
        waiting = asyncio.ensure_future(broker.Pull(broker_pb2.PullRequest(
            topic=topic, partition=-1, start=reply.next, timeout_ms=30_000)))
        await produce(client, topic, [b"c"])
        later = await waiting
        assert [v for e in later.entries for v in values_of(e)] == [b"c"]
        queue = await broker.Pull(broker_pb2.PullRequest(topic=parted, partition=1))
        assert [v for e in queue.entries for v in values_of(e)] == [b"p1"]
        last = await broker.GetLastMessageId(broker_pb2.GetLastMessageIdRequest(topic=topic))
        assert (last.last.ledger_id, last.last.entry_id) == (later.entries[0].ledger_id, later.entries[0].entry_id)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await broker.Pull(broker_pb2.PullRequest(topic=parted, partition=2))
    error = error_from_rpc(raised.value)
    assert isinstance(error, InvalidArgumentError) and "has 2 queues" in str(error)


async def test_a_partitioned_topic_through_the_proxy(client: AsyncClient, admin: AdminClient) -> None:
    topic = unique_topic("parts")
    await admin.create_topic(topic, partitions=3)
    assert await client.get_partitions_for_topic(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = await client.subscribe(topic, "s", ConsumerType.Shared, InitialPosition.Earliest)
    producer = await client.create_producer(topic)
    for future in [await producer.send_async(b"%d" % i, key=f"k{i % 7}") for i in range(300)]:
        await future
    await producer.close()
    assert sorted(await receive(consumer, 300)) == sorted(b"%d" % i for i in range(300))
    stats = await admin.topic_stats(topic)
    assert stats.msg_in_counter == 300
    await consumer.close()


async def test_admin_calls_and_topic_listing_go_through_the_proxy(
    client: AsyncClient, admin: AdminClient, proxy: ClusterProcess,
) -> None:
    tenant = unique_name("acme")
    await admin.create_tenant(tenant)
    await admin.create_namespace(f"{tenant}/orders")
    created, other = f"persistent://{tenant}/orders/created", f"persistent://{tenant}/orders/paid"
    await admin.create_topic(created, partitions=2)
    await produce(client, other, [b"x"])
    assert sorted(await admin.list_topics(f"{tenant}/orders")) == [created, other]
    assert await admin.get_partitions(created) == 2
    assert [broker.broker_id for broker in await admin.list_brokers()] == ["standalone"]
    assert await admin.broker_address() == proxy.address  # the admin client never dials a broker
    async with grpc.aio.insecure_channel(proxy.address) as channel:
        listed = await lookup_pb2_grpc.LookupServiceStub(channel).GetTopicsOfNamespace(
            lookup_pb2.TopicsOfNamespaceRequest(namespace=f"{tenant}/orders"))
    assert sorted(listed.topics) == [created, other]
    # Pattern consumers list topics through the proxy too.
    consumer = await client.subscribe(re.compile(f"persistent://{tenant}/orders/.*"), "s",
                                      initial_position=InitialPosition.Earliest)
    assert sorted(consumer.topics) == [created, other]  # type: ignore[attr-defined]
    assert await receive(consumer, 1) == [b"x"]
    await consumer.close()
    with pytest.raises(NotFoundError, match="does not exist"):
        await admin.get_tenant(unique_name("missing"))
    async with AdminClient(proxy.address, timeout=20) as direct:  # the proxy as a broker address
        assert tenant in await direct.list_tenants()


# ---- what the proxy measures ----

async def test_metrics_count_connections_streams_and_bytes(client: AsyncClient, proxy: ClusterProcess) -> None:
    before = scrape(proxy)
    topic = unique_topic("metrics")
    consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
    await produce(client, topic, [b"x" * 1000] * 20, batching_enabled=False)
    assert len(await receive(consumer, 20)) == 20
    during = scrape(proxy)
    await consumer.close()
    assert during["herald_proxy_active_connections"] >= 1
    assert during["herald_proxy_connections_total"] >= 1
    assert during['herald_proxy_active_streams{kind="consume"}'] >= 1
    assert during['herald_proxy_streams_total{kind="produce"}'] > before['herald_proxy_streams_total{kind="produce"}']
    for direction in ("to_broker", "to_client"):
        series = f'herald_proxy_forwarded_bytes_total{{direction="{direction}"}}'
        assert during[series] - before[series] > 20 * 1000
    assert during['herald_proxy_lookups_total{result="ok"}'] > before['herald_proxy_lookups_total{result="ok"}']
    assert during["herald_proxy_draining"] == 0


# ---- errors ----

async def test_lookup_refusals_reach_the_client_as_lookup_gave_them(client: AsyncClient) -> None:
    with pytest.raises(NotFoundError, match="missing-tenant"):
        await client.create_producer("persistent://missing-tenant/ns/t")
    with pytest.raises(InvalidArgumentError, match="invalid"):
        await client.subscribe("persistent://public/default/bad name", "s")


async def test_broker_refusals_reach_the_client_unchanged(client: AsyncClient) -> None:
    topic = unique_topic("busy")
    first = await client.subscribe(topic, "exclusive")
    with pytest.raises(ConsumerBusyError):
        await client.subscribe(topic, "exclusive")
    await first.close()


async def test_streams_must_start_with_registration_or_subscription(proxy: ClusterProcess) -> None:
    async with grpc.aio.insecure_channel(proxy.address) as channel:
        broker = broker_pb2_grpc.BrokerServiceStub(channel)
        send = broker_pb2.ProduceRequest(send=broker_pb2.SendEntry(sequence_id=0, entry=make_entry("p", 0, b"a")))
        replies = [reply async for reply in broker.Produce(iter([send]))]
        assert [r.error.code for r in replies] == [common_pb2.INVALID_ARGUMENT]
        assert "must start with RegisterProducer" in replies[0].error.message
        flow = broker_pb2.ConsumeRequest(flow=broker_pb2.Flow(permits=1))
        replies = [reply async for reply in broker.Consume(iter([flow]))]
        assert "must start with Subscribe" in replies[0].error.message
        raw = channel.stream_stream("/herald.v1.BrokerService/Produce", None, None)
        replies = [broker_pb2.ProduceResponse.FromString(r) async for r in raw(iter([b"\xff\xff garbage"]))]
        assert replies[0].error.code == common_pb2.INVALID_ARGUMENT
        assert "malformed ProduceRequest" in replies[0].error.message
        assert [r async for r in broker.Produce(iter([]))] == []  # a stream closed at once just ends
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await channel.unary_unary("/herald.v1.BrokerService/Pull", None, None)(b"\xff\xff garbage")
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed PullRequest" in str(error_from_rpc(raised.value))


async def test_a_stream_the_broker_ends_cleanly_ends_cleanly_for_the_client(proxy: ClusterProcess) -> None:
    topic = unique_topic("unsubscribe")
    async with grpc.aio.insecure_channel(proxy.address) as channel:
        call = broker_pb2_grpc.BrokerServiceStub(channel).Consume()
        await call.write(broker_pb2.ConsumeRequest(subscribe=broker_pb2.Subscribe(topic=topic, subscription="s")))
        assert (await call.read()).HasField("subscribed")
        await call.write(broker_pb2.ConsumeRequest(unsubscribe=broker_pb2.Unsubscribe(request_id=7)))
        result = await call.read()
        assert result.result.request_id == 7 and not result.result.HasField("error")
        assert await call.read() is grpc.aio.EOF  # the broker ended the stream after unsubscribing
        assert await call.code() == grpc.StatusCode.OK


async def test_brokers_cannot_register_through_the_proxy(proxy: ClusterProcess) -> None:
    async with grpc.aio.insecure_channel(proxy.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await lookup_pb2_grpc.LookupServiceStub(channel).RegisterBroker(
                lookup_pb2.RegisterBrokerRequest(broker_id="b", address="127.0.0.1:1"))
    error = error_from_rpc(raised.value)
    assert isinstance(error, NotAllowedError) and "never through a proxy" in str(error)


async def test_an_unreachable_lookup_is_a_retryable_error_naming_it(
    make_proxy: Callable[..., ClusterProcess],
) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    lonely = make_proxy(nowhere, operation_timeout=2)
    async with AsyncClient(url_of(lonely), operation_timeout=1.5) as client:
        with pytest.raises(HeraldTimeoutError, match=f"lookup at {nowhere} is unreachable"):
            await client.create_producer("t")
    async with grpc.aio.insecure_channel(lonely.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await lookup_pb2_grpc.LookupServiceStub(channel).LookupTopic(lookup_pb2.LookupTopicRequest(topic="t"))
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        assert isinstance(error_from_rpc(raised.value), ServiceNotReadyError)
        # Admin calls too, once the proxy tried for its operation timeout.
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await channel.unary_unary("/herald.v1.AdminService/ListTenants", None, None)(b"", timeout=60)
        error = error_from_rpc(raised.value)
        assert isinstance(error, HeraldTimeoutError)
        assert "did not complete within 2s" in str(error) and f"lookup at {nowhere} is unreachable" in str(error)


def test_proxy_refuses_to_start_without_a_lookup_address() -> None:
    result = subprocess.run([str(VENV_BIN / "herald"), "proxy", "--port", "0", "--metrics-port", "-1"],
                            capture_output=True, text=True, env=service_env(), timeout=60)
    assert result.returncode == 2
    assert "the proxy needs lookup_address" in result.stderr


async def test_unloaded_topic_is_looked_up_again_and_its_streams_resume(
    client: AsyncClient, admin: AdminClient, proxy: ClusterProcess,
) -> None:
    """The broker closes streams of a topic it unloads: the proxy ends the client's streams (with a
    retryable error, or cleanly when the broker ended them so), and the client comes back through
    the proxy on new streams."""
    topic = unique_topic("unload")
    consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
    producer = await client.create_producer(topic)
    await (await producer.send_async(b"before"))
    before = scrape(proxy)
    await admin.unload_topic(topic)
    await (await producer.send_async(b"after"))
    assert await receive(consumer, 2) == [b"before", b"after"]
    after = scrape(proxy)
    # Which of the two ways each stream ended depends on timing; that both came back does not.
    for kind in ("produce", "consume"):
        series = f'herald_proxy_streams_total{{kind="{kind}"}}'
        assert after[series] > before[series], f"no new {kind} stream through the proxy"
    await producer.close()
    await consumer.close()


# ---- the connection limit ----

async def test_connections_over_the_limit_get_a_clear_error_and_the_others_keep_working(
    shared_standalone: StandaloneProcess, make_proxy: Callable[..., ClusterProcess],
) -> None:
    limited = make_proxy(lookup_address(shared_standalone), max_connections=1, connection_idle_timeout=1)
    topic = unique_topic("limit")
    async with AsyncClient(url_of(limited)) as first:
        producer = await first.create_producer(topic)
        await (await producer.send_async(b"1"))
        async with AsyncClient(url_of(limited), operation_timeout=1) as second:
            with pytest.raises(HeraldError, match=re.escape("has reached its limit of 1 client connections")):
                await second.create_producer(topic)
        async with grpc.aio.insecure_channel(limited.address) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await lookup_pb2_grpc.LookupServiceStub(channel).LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic))
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_connections" in (raised.value.details() or "")
        await (await producer.send_async(b"2"))  # the connection inside the limit is unaffected
        assert scrape(limited)["herald_proxy_rejected_connections_total"] >= 2
    # Once the first client is gone (and its connection idle past the timeout), a new one is let in.
    async def third_client_produces() -> None:
        async with AsyncClient(url_of(limited), operation_timeout=1) as third:
            await produce(third, topic, [b"3"])

    await eventually_passes(third_client_produces, "a connection let in after the first client left",
                            retry=(HeraldError,), timeout=60)
    async with AsyncClient(url_of(limited)) as reader:
        consumer = await reader.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        assert await receive(consumer, 3) == [b"1", b"2", b"3"]


# ---- keeping going: drain and failover ----

class ContinuousConsumer:
    """Receives and acknowledges b"m-<n>" from a background thread until stopped, recording each
    delivery (message id, n)."""

    def __init__(self, service_url: str, topic: str, subscription: str = "live") -> None:
        self.service_url = service_url
        self.topic = topic
        self.subscription = subscription
        self.received: list[tuple[str, int]] = []
        self._stop = threading.Event()
        self._subscribed = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def start(self) -> ContinuousConsumer:
        self._thread.start()
        assert self._subscribed.wait(60), f"the consumer did not subscribe: {self._error!r}"
        return self

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:
            self._error = exc
            raise

    async def _run(self) -> None:
        async with AsyncClient(self.service_url, **CLIENT_OPTIONS) as client:
            consumer = await client.subscribe(self.topic, self.subscription, initial_position=InitialPosition.Earliest,
                                              receiver_queue_size=2000)
            self._subscribed.set()
            while not self._stop.is_set():
                message = await consumer.receive(timeout=0.2)
                if message is not None:
                    self.received.append((str(message.message_id), int(message.value.removeprefix(b"m-"))))
                    consumer.acknowledge(message)
            await consumer.close()

    def numbers(self) -> set[int]:
        return {n for _, n in list(self.received)}

    def wait_for(self, wanted: set[int], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not wanted <= self.numbers():
            missing = sorted(wanted - self.numbers())
            assert time.monotonic() < deadline, f"{len(missing)} acknowledged messages never consumed: {missing[:10]}"
            assert self._thread.is_alive(), f"the consumer died: {self._error!r}"
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the consumer did not finish"

    def check(self, acked: set[int]) -> None:
        """Every acknowledged message was consumed; a message delivered again (its ack not yet
        persisted when its broker died) came back under the same id, never as another message."""
        assert acked <= self.numbers()
        by_id: dict[str, set[int]] = {}
        for message_id, n in self.received:
            by_id.setdefault(message_id, set()).add(n)
        assert all(len(numbers) == 1 for numbers in by_id.values()), "one message id named two messages"


class FloodProducer(ContinuousProducer):
    """A ContinuousProducer that never pauses: sends are always in flight, so a stream ended
    before its receipts came back would show (as sends stored twice, acknowledged as duplicates)."""

    async def _run(self) -> None:
        history = self.history
        async with AsyncClient(self.service_url, **CLIENT_OPTIONS) as client:
            checker = await client.subscribe(self.topic, CHECKER, initial_position=InitialPosition.Earliest)
            await checker.close()
            producer = await client.create_producer(self.topic, producer_name=self.producer_name, send_timeout=60.0,
                                                    block_if_queue_full=True, max_pending_messages=2000)

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
            await producer.flush()
            await producer.close()


async def _read_all(service_url: str, topic: str) -> list[tuple[MessageId, bytes]]:
    async with AsyncClient(service_url, **CLIENT_OPTIONS) as client:
        reader = await client.create_reader(topic, MessageId.earliest, receiver_queue_size=5000)
        stored = []
        while await reader.has_message_available():
            message = await reader.read_next(timeout=30)
            assert message is not None, "the topic has more messages but none came"
            stored.append((message.message_id, message.value))
        await reader.close()
        return stored


def read_all(service_url: str, topic: str) -> list[tuple[MessageId, bytes]]:
    """Everything stored in `topic`, read to its last message (the chaos checker's reader waits for
    a silence instead)."""
    return asyncio.run(_read_all(service_url, topic))


def run_for(producer: ContinuousProducer, seconds: float, more: int = 200) -> None:
    before = producer.acked_count()
    time.sleep(seconds)
    producer.wait_for_acks(before + more)


def test_drained_proxy_lets_streams_finish_exits_0_and_its_replacement_takes_over(
    shared_standalone: StandaloneProcess, make_proxy: Callable[..., ClusterProcess], caplog: pytest.LogCaptureFixture,
) -> None:
    """SIGTERM: the proxy stops taking sends, hands back the receipts of what it forwarded, ends
    its streams with a retryable error and exits 0; a proxy started on the same address (a new
    replica behind the same Service) takes the clients over, and nothing acknowledged is lost or
    stored twice."""
    caplog.set_level(logging.INFO, logger="herald.client")
    draining = make_proxy(lookup_address(shared_standalone), drain_timeout=10)
    topic = unique_topic("drain")
    producer = FloodProducer(url_of(draining), topic).start()
    producer.wait_for_acks(500)
    consumer = ContinuousConsumer(url_of(draining), topic).start()
    run_for(producer, PHASE_SECONDS / 3)
    draining.stop()
    assert draining.proc is not None and draining.proc.returncode == 0
    log = draining.log_path.read_text()
    assert "draining" in log and "drained: every stream ended" in log
    told = [r.getMessage() for r in caplog.records if "disconnected: proxy is draining: reconnect" in r.getMessage()]
    assert any(m.startswith("producer") for m in told) and any(m.startswith("consumer") for m in told)
    draining.start()  # the replacement, on the same address
    run_for(producer, PHASE_SECONDS / 3)
    history = producer.stop()
    assert not history.failed, f"the application saw send failures: {history.errors[:3]}"
    # Every send the draining proxy forwarded had its receipt delivered before the stream ended:
    # none was stored and then sent again (the broker would have acknowledged it as a duplicate).
    assert not [n for n, message_id in history.acked.items() if message_id.ledger_id < 0]
    consumer.wait_for(set(history.acked))
    consumer.stop()
    consumer.check(set(history.acked))
    check(history, read_all(url_of(draining), topic))


async def test_draining_proxy_hands_back_the_receipts_of_the_sends_it_forwarded(
    shared_standalone: StandaloneProcess, make_proxy: Callable[..., ClusterProcess],
) -> None:
    """The broker is frozen (SIGSTOP) with sends forwarded to it when the proxy is told to stop:
    the proxy waits, relays their receipts once the broker wakes, then ends the stream with the
    retryable 'draining' error and exits 0. Meanwhile new calls are refused, and a stream that
    never said what it wants is ended."""
    proxy = make_proxy(lookup_address(shared_standalone), drain_timeout=60)
    topic = unique_topic("drain-receipts")
    entries = [make_entry("drainer", n, b"v%d" % n) for n in range(30)]
    assert shared_standalone.proc is not None
    async with grpc.aio.insecure_channel(proxy.address) as channel:
        call = broker_pb2_grpc.BrokerServiceStub(channel).Produce()
        await call.write(broker_pb2.ProduceRequest(register=broker_pb2.RegisterProducer(
            topic=topic, producer_name="drainer")))
        assert (await call.read()).registered.producer_name == "drainer"

        async def send(n: int) -> None:
            await call.write(broker_pb2.ProduceRequest(send=broker_pb2.SendEntry(
                sequence_id=n, highest_sequence_id=n, num_messages=1, entry=entries[n])))

        for n in range(20):
            await send(n)
        assert [(await call.read()).receipt.sequence_id for _ in range(20)] == list(range(20))
        silent = broker_pb2_grpc.BrokerServiceStub(channel).Consume()  # opened, no Subscribe ever sent
        await silent.wait_for_connection()
        forwarded = scrape(proxy)['herald_proxy_forwarded_bytes_total{direction="to_broker"}']
        shared_standalone.proc.send_signal(signal.SIGSTOP)
        try:
            for n in range(20, 30):
                await send(n)
            wanted = forwarded + sum(len(entry) for entry in entries[20:])
            # Scraping blocks: off the loop, as the gRPC calls in flight need it.
            await eventually(lambda: asyncio.to_thread(
                lambda: scrape(proxy)['herald_proxy_forwarded_bytes_total{direction="to_broker"}'] >= wanted),
                "the proxy forwarding the last sends")
            assert proxy.proc is not None
            proxy.proc.terminate()
            await eventually(lambda: "draining" in proxy.log_path.read_text(), "the proxy starting to drain")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await lookup_pb2_grpc.LookupServiceStub(channel).LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic))
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert str(error_from_rpc(refused.value)) == "proxy is draining: reconnect"
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await asyncio.wait_for(silent.read(), 30)
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        finally:
            shared_standalone.proc.send_signal(signal.SIGCONT)
        replies = []
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            while (reply := await call.read()) is not grpc.aio.EOF:
                replies.append(reply)
    assert [r.receipt.sequence_id for r in replies[:-1]] == list(range(20, 30))
    assert replies[-1].error.code == common_pb2.SERVICE_NOT_READY
    assert replies[-1].error.message == "proxy is draining: reconnect"
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert await asyncio.to_thread(proxy.proc.wait, 60) == 0


@pytest.mark.timeout(300)
def test_producer_and_consumer_on_the_proxy_survive_the_owner_being_killed(
    make_local_cluster: Callable[..., LocalCluster],
) -> None:
    """The issue's test: a producer and a consumer given only the proxy's URL keep going when the
    topic's owner is SIGKILLed; every acknowledged message is consumed and stored exactly once."""
    cluster = make_local_cluster(proxies=1)
    assert ("proxy URL", cluster.proxy_url) in cluster.describe()
    topic = "proxy-failover"
    producer = ContinuousProducer(cluster.proxy_url, topic).start()
    producer.wait_for_acks(500)
    consumer = ContinuousConsumer(cluster.proxy_url, topic).start()
    run_for(producer, PHASE_SECONDS)
    with grpc.insecure_channel(cluster.lookup.address) as channel:
        owner_address = lookup_pb2_grpc.LookupServiceStub(channel).LookupTopic(
            lookup_pb2.LookupTopicRequest(topic=topic), timeout=30).broker_address
    owner = cluster.broker_at(owner_address)
    owner.kill()
    run_for(producer, PHASE_SECONDS, more=500)  # progress again, on the other broker
    history = producer.stop()
    consumer.wait_for(set(history.acked))
    consumer.stop()
    consumer.check(set(history.acked))
    check(history, read_all(cluster.proxy_url, topic))
    metrics = scrape(cluster.proxies[0])
    assert metrics['herald_proxy_upstream_failures_total{kind="produce"}'] >= 1
    assert metrics['herald_proxy_upstream_failures_total{kind="consume"}'] >= 1
