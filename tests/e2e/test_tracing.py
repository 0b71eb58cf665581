"""Traces (docs/tracing.md): the client and every service of a standalone Herald run in this process
and send their spans to one in-memory exporter, so a produce-consume can be followed from the
message's create span to the consumer's receive / process span. Also: nothing at all with tracing
off, the console exporter of a `herald` command, and an unreachable OTLP collector."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from herald.client import AsyncClient, Client, InitialPosition
from herald.common import tracing
from herald.local_cluster import free_port
from herald.standalone import Standalone, StandaloneSettings
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.conftest import VENV_BIN, service_env
from tests.helpers import eventually, unique_topic

Spans = Sequence[ReadableSpan]


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Herald's spans (client and services alike) go to this exporter while the test runs."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing.enable(provider)
    try:
        yield spans
    finally:
        tracing.disable()
        provider.shutdown()


@pytest.fixture
def app_tracer(exporter: InMemorySpanExporter) -> Any:
    """The application's own tracer, on the same provider as Herald's."""
    return tracing._provider.get_tracer("the-application")


async def start_standalone(data_dir: Path) -> Standalone:
    """lookup, broker and storage in this process and this event loop, on free ports."""
    standalone = Standalone(StandaloneSettings(
        data_dir=str(data_dir), port=free_port(), broker_port=free_port(), storage_port=free_port(),
        proxy_port=-1, metrics_port=-1, pulsar_port=-1, web_port=-1, dlq_worker=False))
    await standalone.start()
    return standalone


@pytest.fixture
async def standalone(tmp_path: Path, exporter: InMemorySpanExporter) -> AsyncIterator[Standalone]:
    """A standalone Herald made while tracing is on (its servers trace)."""
    server = await start_standalone(tmp_path / "data")
    try:
        yield server
    finally:
        await server.stop()


async def spans_when(exporter: InMemorySpanExporter, ready: Callable[[Spans], bool], within: float = 20) -> Spans:
    """The finished spans once `ready` says they are all there (spans end as receipts and writes
    complete, after the calls that caused them returned)."""
    try:
        spans: Spans = await eventually(exporter.get_finished_spans, "the spans all there", until=ready,
                                        timeout=within)
    except AssertionError as exc:  # name the spans that did end (their repr says nothing)
        raise AssertionError(f"{exc}\n{describe(exporter.get_finished_spans())}") from None
    return spans


def named(spans: Spans, name: str, kind: SpanKind | None = None) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name and (kind is None or span.kind is kind)]


def one(spans: Spans, name: str, kind: SpanKind | None = None) -> ReadableSpan:
    found = named(spans, name, kind)
    assert len(found) == 1, f"expected one {name!r} span ({kind}), got {len(found)}: {describe(spans)}"
    return found[0]


def has(*wanted: tuple[str, SpanKind]) -> Callable[[Spans], bool]:
    return lambda spans: all(named(spans, name, kind) for name, kind in wanted)


def describe(spans: Spans) -> list[str]:
    return [f"{span.name} ({span.kind.name})" for span in spans]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.trace_id


def linked(span: ReadableSpan) -> set[int]:
    return {link.context.span_id for link in span.links}


def traceparent_of(span: ReadableSpan) -> str:
    assert span.context is not None
    return tracing.traceparent(span.context)


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_one_produce_consume_is_one_connected_trace(
    standalone: Standalone, exporter: InMemorySpanExporter,
) -> None:
    topic = unique_topic("traced")
    async with AsyncClient(standalone.service_url, operation_timeout=30) as client:
        producer = await client.create_producer(topic)
        consumer = await client.subscribe(topic, "readers", initial_position=InitialPosition.Earliest)
        message_id = await producer.send(b"hello")
        message = await consumer.receive(timeout=20)
        assert message is not None and message.value == b"hello"
        consumer.acknowledge(message)

    spans = await spans_when(exporter, has(
        (f"create {topic}", SpanKind.PRODUCER), (f"send {topic}", SpanKind.CLIENT),
        (f"publish {topic}", SpanKind.SERVER), ("storage add", SpanKind.CLIENT), ("storage add", SpanKind.SERVER),
        (f"deliver {topic}", SpanKind.PRODUCER), (f"receive {topic}", SpanKind.CLIENT)))
    create = one(spans, f"create {topic}", SpanKind.PRODUCER)
    send = one(spans, f"send {topic}", SpanKind.CLIENT)
    publish = one(spans, f"publish {topic}", SpanKind.SERVER)
    add = one(spans, "storage add", SpanKind.CLIENT)
    stored = one(spans, "storage add", SpanKind.SERVER)
    deliver = one(spans, f"deliver {topic}", SpanKind.PRODUCER)
    receive = one(spans, f"receive {topic}", SpanKind.CLIENT)

    # One trace, from the message's creation to its receipt by the consumer.
    assert {trace_id(span) for span in (create, send, publish, add, stored, deliver, receive)} == {trace_id(create)}
    assert create.parent is None
    assert parent_of(send) == span_id(create) and span_id(create) in linked(send)
    assert parent_of(publish) == span_id(send)
    assert parent_of(add) == span_id(publish)
    assert parent_of(stored) == span_id(add)
    assert parent_of(deliver) == span_id(send)
    assert parent_of(receive) == span_id(deliver)
    assert span_id(create) in linked(receive)
    # The message carries its creation context.
    assert message.properties["traceparent"] == traceparent_of(create)

    # The messaging conventions' attributes.
    for span in (create, send, publish, deliver, receive):
        assert attributes(span)["messaging.system"] == "herald"
        assert attributes(span)["messaging.destination.name"] == topic
    assert attributes(create)["messaging.operation.type"] == "create"
    assert attributes(send)["messaging.operation.type"] == "send"
    assert attributes(send)["messaging.batch.message_count"] == 1
    assert attributes(send)["messaging.client.id"] == producer.producer_name
    assert attributes(send)["server.address"] == "127.0.0.1"
    assert (attributes(send)["messaging.herald.ledger_id"], attributes(send)["messaging.herald.entry_id"]) == (
        message_id.ledger_id, message_id.entry_id)
    assert attributes(publish)["messaging.operation.name"] == "publish"
    assert attributes(stored)["herald.ledger_id"] == message_id.ledger_id
    assert attributes(stored)["herald.entry_id"] == message_id.entry_id
    assert attributes(deliver)["messaging.destination.subscription.name"] == "readers"
    assert attributes(receive)["messaging.operation.type"] == "receive"
    assert attributes(receive)["messaging.message.id"] == str(message.message_id)
    assert attributes(receive)["messaging.consumer.group.name"] == "readers"
    assert attributes(receive)["messaging.client.id"] == consumer.consumer_name


async def test_a_batch_send_links_every_message_and_receive_many_is_one_span(
    standalone: Standalone, exporter: InMemorySpanExporter,
) -> None:
    topic = unique_topic("traced")
    async with AsyncClient(standalone.service_url, operation_timeout=30) as client:
        producer = await client.create_producer(topic, batching_max_publish_delay=10.0, batching_max_messages=3)
        consumer = await client.subscribe(topic, "readers", initial_position=InitialPosition.Earliest)
        for future in [await producer.send_async(b"%d" % i) for i in range(3)]:
            await future
        messages: list[Any] = []
        deadline = time.monotonic() + 20
        while len(messages) < 3 and time.monotonic() < deadline:
            messages += await consumer.receive_many(10, timeout=1)
        assert [m.value for m in messages] == [b"0", b"1", b"2"]

    spans = await spans_when(exporter, has((f"deliver {topic}", SpanKind.PRODUCER)))
    creates = named(spans, f"create {topic}")
    send = one(spans, f"send {topic}")
    assert len(creates) == 3
    assert linked(send) == {span_id(create) for create in creates}
    assert attributes(send)["messaging.batch.message_count"] == 3
    receives = named(spans, f"receive {topic}")
    assert receives, describe(spans)
    assert set().union(*(linked(receive) for receive in receives)) >= {span_id(create) for create in creates}
    if len(receives) == 1:  # all three came in one call
        assert attributes(receives[0])["messaging.batch.message_count"] == 3


async def test_a_message_listener_runs_in_a_process_span(
    standalone: Standalone, exporter: InMemorySpanExporter, app_tracer: Any,
) -> None:
    topic = unique_topic("traced")
    done = asyncio.Event()

    async def listener(consumer: Any, message: Any) -> None:
        with app_tracer.start_as_current_span("handle"):  # the application's work, inside the process span
            consumer.acknowledge(message)
        done.set()

    async with AsyncClient(standalone.service_url, operation_timeout=30) as client:
        await client.subscribe(topic, "workers", initial_position=InitialPosition.Earliest,
                               message_listener=listener)
        producer = await client.create_producer(topic)
        await producer.send(b"job")
        await asyncio.wait_for(done.wait(), 20)

    spans = await spans_when(exporter, has((f"process {topic}", SpanKind.CONSUMER), ("handle", SpanKind.INTERNAL)))
    create = one(spans, f"create {topic}")
    deliver = one(spans, f"deliver {topic}")
    process = one(spans, f"process {topic}", SpanKind.CONSUMER)
    handle = one(spans, "handle")
    assert parent_of(process) == span_id(deliver)
    assert span_id(create) in linked(process)
    assert parent_of(handle) == span_id(process)
    assert trace_id(handle) == trace_id(create)
    assert attributes(process)["messaging.operation.type"] == "process"
    assert attributes(process)["messaging.destination.subscription.name"] == "workers"


async def test_calls_made_within_an_application_span_join_its_trace(
    standalone: Standalone, exporter: InMemorySpanExporter, app_tracer: Any,
) -> None:
    topic = unique_topic("traced")
    async with AsyncClient(standalone.service_url, operation_timeout=30) as client:
        with app_tracer.start_as_current_span("request") as request:
            producer = await client.create_producer(topic)  # a lookup, then the producer's registration
            await producer.send(b"hello")
        await producer.close()

    spans = await spans_when(exporter, has((f"publish {topic}", SpanKind.SERVER)))
    create = one(spans, f"create {topic}")
    assert parent_of(create) == request.get_span_context().span_id
    lookups = named(spans, "herald.v1.LookupService/LookupTopic", SpanKind.SERVER)
    assert lookups and all(parent_of(lookup) == request.get_span_context().span_id for lookup in lookups)
    assert attributes(lookups[0])["rpc.system"] == "grpc"
    registration = one(spans, "herald.v1.BrokerService/Produce", SpanKind.SERVER)
    assert parent_of(registration) == request.get_span_context().span_id


async def test_the_blocking_client_makes_its_spans_in_the_callers_context(
    standalone: Standalone, exporter: InMemorySpanExporter, app_tracer: Any,
) -> None:
    topic = unique_topic("traced")
    service_url = standalone.service_url

    def on_a_thread() -> tuple[int, int, str]:
        with Client(service_url, operation_timeout=30) as client:
            producer = client.create_producer(topic)
            consumer = client.subscribe(topic, "readers", initial_position=InitialPosition.Earliest)
            with app_tracer.start_as_current_span("sender") as sender:
                producer.send(b"hello")
            with app_tracer.start_as_current_span("receiver") as receiver:
                message = consumer.receive(timeout=20)
            assert message is not None
            consumer.acknowledge(message)
            return sender.get_span_context().span_id, receiver.get_span_context().span_id, str(message.message_id)

    sender_id, receiver_id, message_id = await asyncio.to_thread(on_a_thread)
    spans = await spans_when(exporter, has((f"receive {topic}", SpanKind.CLIENT)))
    create = one(spans, f"create {topic}")
    receive = one(spans, f"receive {topic}")
    deliver = one(spans, f"deliver {topic}")
    assert parent_of(create) == sender_id
    assert parent_of(receive) == receiver_id  # the caller's span, not the deliver span
    assert {span_id(create), span_id(deliver)} <= linked(receive)
    assert attributes(receive)["messaging.message.id"] == message_id


async def test_with_tracing_off_no_span_is_made_and_no_trace_context_is_added(tmp_path: Path) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing.enable(provider)
    tracing.disable()  # configured, but off
    standalone = await start_standalone(tmp_path / "data")
    topic = unique_topic("traced")
    try:
        async with AsyncClient(standalone.service_url, operation_timeout=30) as client:
            producer = await client.create_producer(topic)
            consumer = await client.subscribe(topic, "readers", initial_position=InitialPosition.Earliest,
                                              receiver_queue_size=10)
            await producer.send(b"plain", properties={"mine": "yes"})
            message = await consumer.receive(timeout=20)
            assert message is not None
            assert message.properties == {"mine": "yes"}
            assert message._entry.traceparent == ""
            consumer.acknowledge(message)
    finally:
        await standalone.stop()
        provider.shutdown()
    assert spans.get_finished_spans() == ()


async def test_console_exporter_writes_the_spans_of_a_herald_command(tmp_path: Path) -> None:
    standalone = await start_standalone(tmp_path / "data")
    topic = unique_topic("traced")
    try:
        env = {**service_env(), "HERALD_TRACING_EXPORTER": "console"}
        proc = await asyncio.create_subprocess_exec(
            str(VENV_BIN / "herald"), "produce", topic, "-m", "hello", "--url", standalone.service_url,
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await standalone.stop()
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    decoder = json.JSONDecoder()
    exported = []
    index = text.find("{")
    while index >= 0:
        span, end = decoder.raw_decode(text, index)
        exported.append(span)
        index = text.find("{", end)
    names = {span["name"] for span in exported}
    assert {f"create {topic}", f"send {topic}"} <= names
    assert all(span["resource"]["attributes"]["service.name"] == "herald-produce" for span in exported)


async def test_an_unreachable_otlp_collector_does_not_hold_up_messages(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert tracing.configure_from_settings(
        tracing.TracingSettings(exporter="otlp", otlp_endpoint=endpoint, otlp_timeout=1.0), "herald-test")
    try:
        standalone = await start_standalone(tmp_path / "data")
        topic = unique_topic("traced")
        try:
            async with AsyncClient(standalone.service_url, operation_timeout=30) as client:
                producer = await client.create_producer(topic)
                consumer = await client.subscribe(topic, "readers", initial_position=InitialPosition.Earliest)
                for future in [await producer.send_async(b"%d" % i) for i in range(100)]:
                    await future
                values = []
                while len(values) < 100 and (message := await consumer.receive(timeout=20)) is not None:
                    values.append(message.value)
                    consumer.acknowledge(message)
            assert values == [b"%d" % i for i in range(100)]
        finally:
            await standalone.stop()
    finally:
        with caplog.at_level(logging.WARNING, logger="opentelemetry.exporter.otlp.proto.grpc.exporter"):
            # Export what is queued (it fails: the spans are dropped) and stop the exporter thread.
            await asyncio.to_thread(tracing.shutdown)
    failures = [record for record in caplog.records
                if record.name.startswith("opentelemetry.exporter.otlp") and record.levelno >= logging.WARNING]
    assert failures, "the exporter logged no failure"
    assert any(endpoint.removeprefix("http://") in record.getMessage() for record in failures)
