"""Traces with OpenTelemetry: the one place that sets up the tracer provider (from [tracing]
settings or HERALD_TRACING_* variables: exporter none, console or otlp; off by default), the flag
hot paths test before doing any tracing work (`if tracing.ENABLED:`; nothing else is done when it
is false), and W3C trace-context propagation in message properties, proto fields and gRPC metadata.

Spans follow OpenTelemetry's messaging conventions (docs/tracing.md says which exist and how they
connect); the modules making them use the helpers here. No gRPC here: the broker core uses this
module, and the gRPC server interceptor lives in herald.common.transport.tracing.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from herald.common.codec.names import TopicName
from herald.common.config import load_settings
from herald.common.errors import InvalidArgumentError

__all__ = [
    "ENABLED", "TRACEPARENT", "TRACESTATE", "Link", "Span", "SpanContext", "SpanKind", "Tracer", "TracingSettings",
    "configure", "configure_from_settings", "disable", "enable", "shutdown", "tracer",
]

log = logging.getLogger(__name__)

# Whether Herald makes spans at all. Hot paths test this (or a copy taken at construction) first.
ENABLED = False

TRACEPARENT = "traceparent"  # the W3C names, used as message property and gRPC metadata keys
TRACESTATE = "tracestate"
SYSTEM = "herald"  # messaging.system

# Attribute names (OpenTelemetry semantic conventions; Herald's own under messaging.herald.* and herald.*).
MESSAGING_SYSTEM = "messaging.system"
DESTINATION = "messaging.destination.name"
PARTITION = "messaging.destination.partition.id"
SUBSCRIPTION = "messaging.destination.subscription.name"
CONSUMER_GROUP = "messaging.consumer.group.name"
OPERATION_NAME = "messaging.operation.name"
OPERATION_TYPE = "messaging.operation.type"
MESSAGE_ID = "messaging.message.id"
MESSAGE_COUNT = "messaging.batch.message_count"
BODY_SIZE = "messaging.message.body.size"
CLIENT_ID = "messaging.client.id"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
SEQUENCE_ID = "messaging.herald.sequence_id"
LEDGER_ID = "messaging.herald.ledger_id"
ENTRY_ID = "messaging.herald.entry_id"
REDELIVERY_COUNT = "messaging.herald.redelivery_count"

EXPORTERS = ("none", "console", "otlp")


@dataclass
class TracingSettings:
    """[tracing] in a service's config file, or HERALD_TRACING_<FIELD> variables."""

    exporter: str = "none"  # none | console (JSON spans on stdout) | otlp (gRPC to otlp_endpoint)
    otlp_endpoint: str = ""  # http://host:4317 (https:// for TLS); empty: the OTLP exporter's default
    otlp_timeout: float = 10.0  # seconds an export may take, retries included; then the spans are dropped
    service_name: str = ""  # resource service.name; empty: the process's (herald-broker, herald-standalone...)
    sample_ratio: float = 1.0  # share of new traces recorded; spans with a parent follow its decision


_PROPAGATOR = TraceContextTextMapPropagator()
_provider: Any = None  # the TracerProvider Herald's spans go to
_owned: Any = None  # the one configure() made (shutdown() shuts it down)
_tracers: dict[str, Tracer] = {}
# Set while receive spans must not be made (a sync facade fetching ahead of its caller).
_SUPPRESSED: contextvars.ContextVar[bool] = contextvars.ContextVar("herald_tracing_suppressed", default=False)


# ---- set-up ------------------------------------------------------------------------------------


def load_tracing_settings(config_file: str | Path | None = None,
                          environ: Mapping[str, str] | None = None) -> TracingSettings:
    return load_settings(TracingSettings, "tracing", config_file=config_file, environ=environ)


def configure(service_name: str, config_file: str | Path | None = None, *,
              environ: Mapping[str, str] | None = None, set_global: bool = True) -> bool:
    """Set up tracing for this process from its settings; True when it is on. Called once at
    start-up by `herald` commands (service_name: herald-broker, herald-standalone, ...)."""
    return configure_from_settings(load_tracing_settings(config_file, environ), service_name, set_global=set_global)


def configure_from_settings(settings: TracingSettings, service_name: str, *, set_global: bool = False) -> bool:
    """Build a tracer provider exporting as `settings` say (exporter none: tracing off) and make
    Herald's spans go to it; with set_global it also becomes OpenTelemetry's global provider, for
    the application's own spans and the logs' trace ids."""
    exporter_name = settings.exporter.strip().lower()
    if exporter_name not in EXPORTERS:
        raise InvalidArgumentError(
            f"tracing exporter {settings.exporter!r} is unknown: use one of {', '.join(EXPORTERS)}")
    if not 0.0 <= settings.sample_ratio <= 1.0:
        raise InvalidArgumentError(f"tracing sample_ratio must be between 0 and 1, got {settings.sample_ratio}")
    shutdown()
    if exporter_name == "none":
        return False
    # The SDK is imported only when tracing is wanted.
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    exporter: SpanExporter
    if exporter_name == "console":
        exporter = ConsoleSpanExporter(out=sys.stdout)
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=settings.otlp_endpoint or None, timeout=settings.otlp_timeout)
    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.service_name or service_name}),
        sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
    )
    # Export on the processor's thread: a slow or unreachable collector never holds up messages
    # (the exporter logs its failures; spans it cannot deliver are dropped).
    provider.add_span_processor(BatchSpanProcessor(exporter, export_timeout_millis=settings.otlp_timeout * 1000))
    if set_global:
        trace.set_tracer_provider(provider)
    enable(provider)
    global _owned
    _owned = provider
    where = f" to {settings.otlp_endpoint or 'the default OTLP endpoint'}" if exporter_name == "otlp" else ""
    log.info("tracing on: %s exporter%s, service.name %s, sample ratio %g", exporter_name, where,
             settings.service_name or service_name, settings.sample_ratio)
    return True


def enable(provider: Any = None) -> None:
    """Make Herald's spans go to `provider` (an SDK TracerProvider; None: OpenTelemetry's global
    one). For applications and tests that set up OpenTelemetry themselves. Producers, consumers
    and servers made before this call stay untraced."""
    global ENABLED, _provider
    _provider = provider if provider is not None else trace.get_tracer_provider()
    _tracers.clear()
    ENABLED = True


def disable() -> None:
    """No more spans from Herald (objects made while it was on may still finish theirs)."""
    global ENABLED
    ENABLED = False


def shutdown() -> None:
    """Turn tracing off and flush and shut down the provider configure() made, if any."""
    global _owned
    disable()
    owned, _owned = _owned, None
    if owned is not None:
        owned.shutdown()


def tracer(component: str) -> Tracer:
    """The tracer of one part of Herald (herald.client, herald.broker, herald.storage...)."""
    found = _tracers.get(component)
    if found is None:
        provider = _provider if _provider is not None else trace.get_tracer_provider()
        found = _tracers[component] = provider.get_tracer(component)
    return found


# ---- context propagation -------------------------------------------------------------------------


def traceparent(span: Span | SpanContext | None) -> str:
    """The W3C traceparent of a span ("" for none, or one not valid)."""
    context = span.get_span_context() if isinstance(span, Span) else span
    if context is None or not context.is_valid:
        return ""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def inject(span: Span, carrier: dict[str, str]) -> None:
    """Write the span's context into a carrier (message properties): traceparent, and tracestate
    when there is one."""
    context = span.get_span_context()
    if not context.is_valid:
        return
    carrier[TRACEPARENT] = traceparent(context)
    if context.trace_state:
        carrier[TRACESTATE] = context.trace_state.to_header()


def span_context(carrier: Mapping[str, str] | None) -> SpanContext | None:
    """The remote span context a carrier holds (message properties, gRPC metadata as a dict), or None."""
    if not carrier or TRACEPARENT not in carrier:
        return None
    found = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    return found if found.is_valid else None


def parse(traceparent_value: str, tracestate: str = "") -> SpanContext | None:
    """The remote span context of a traceparent string (a proto field), or None."""
    if not traceparent_value:
        return None
    carrier = {TRACEPARENT: traceparent_value}
    if tracestate:
        carrier[TRACESTATE] = tracestate
    return span_context(carrier)


def parent(context: SpanContext | None) -> otel_context.Context | None:
    """An OpenTelemetry Context whose current span is the remote `context` (None: the root)."""
    if context is None:
        return None
    return trace.set_span_in_context(trace.NonRecordingSpan(context), otel_context.Context())


def current_span_context() -> SpanContext | None:
    """The current span's context, if there is a valid current span."""
    found = trace.get_current_span().get_span_context()
    return found if found.is_valid else None


def current() -> otel_context.Context | None:
    """The active context when a span is current, else None: saved to restore later (attach)."""
    return otel_context.get_current() if current_span_context() is not None else None


def attach(context: otel_context.Context) -> object:
    return otel_context.attach(context)


def detach(token: object) -> None:
    otel_context.detach(token)  # type: ignore[arg-type]


def grpc_metadata() -> tuple[tuple[str, str], ...] | None:
    """Metadata for an outgoing gRPC call carrying the current span's context (None when tracing is
    off or no span is current)."""
    if not ENABLED:
        return None
    span = trace.get_current_span()
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    inject(span, carrier)
    return tuple(carrier.items())


def metadata_context(metadata: Iterable[Any] | None) -> SpanContext | None:
    """The span context in a call's invocation metadata (pairs or grpc metadata items), or None."""
    if not metadata:
        return None
    carrier = {}
    for item in metadata:
        key, value = (item.key, item.value) if hasattr(item, "key") else item
        if key in (TRACEPARENT, TRACESTATE) and isinstance(value, str):
            carrier[key] = value
    return span_context(carrier)


def suppress() -> contextvars.Token[bool]:
    """Until reset: receive spans are not made in this context (the messages are fetched ahead of
    the caller, who gets its own spans when it takes them)."""
    return _SUPPRESSED.set(True)


def unsuppress(token: contextvars.Token[bool]) -> None:
    _SUPPRESSED.reset(token)


def suppressed() -> bool:
    return _SUPPRESSED.get()


# ---- spans -------------------------------------------------------------------------------------


def now() -> int:
    """A span start time (ns since the epoch, as OpenTelemetry wants)."""
    return time.time_ns()


def link(context: SpanContext | None, attributes: Mapping[str, Any] | None = None) -> list[Link]:
    return [] if context is None else [Link(context, attributes)]


def messaging_attributes(operation: str, topic: str, operation_type: str | None = None,
                         more: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The attributes every messaging span has: system, destination (a partition's topic and its
    index), operation; `more` adds others (None values are left out)."""
    attributes: dict[str, Any] = {MESSAGING_SYSTEM: SYSTEM, OPERATION_NAME: operation}
    if operation_type is not None:
        attributes[OPERATION_TYPE] = operation_type
    try:
        name = TopicName.parse(topic)
    except InvalidArgumentError:
        attributes[DESTINATION] = topic
    else:
        index = name.partition_index
        attributes[DESTINATION] = str(name.base) if index >= 0 else topic
        if index >= 0:
            attributes[PARTITION] = str(index)
    for key, value in (more or {}).items():
        if value is not None:
            attributes[key] = value
    return attributes


def server_attributes(address: str | None) -> dict[str, Any]:
    """server.address / server.port of a `host:port`."""
    if not address:
        return {}
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return {SERVER_ADDRESS: address}
    return {SERVER_ADDRESS: host.strip("[]"), SERVER_PORT: int(port)}


def end(span: Span, error: BaseException | None = None, end_time: int | None = None) -> None:
    """End a span, marking it failed (status ERROR, error.type the exception's class) on error."""
    if error is not None:
        fail(span, error)
    span.end(end_time)


def fail(span: Span, error: BaseException) -> None:
    span.set_attribute(ERROR_TYPE, type(error).__name__)
    span.set_status(Status(StatusCode.ERROR, str(error)))
