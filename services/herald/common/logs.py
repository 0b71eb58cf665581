"""Logging set-up for Herald processes: one line per record, to stderr. HERALD_LOG_LEVEL picks the
level (INFO by default); HERALD_LOG_FORMAT=json makes each line one JSON object (for log
collectors), carrying the trace and span ids of the OpenTelemetry span recording when the record
was made, so that a log line leads to its trace; the default, text, is for people."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

from herald.common.errors import InvalidArgumentError

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")
# What every LogRecord has: anything else on a record came from `extra=` and goes into the JSON.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (ISO-8601, UTC), level, logger, message, then exception
    and stack when there are any, trace_id / span_id while a span records, and the record's extra
    fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        span = trace.get_current_span()
        if span.is_recording():
            context = span.get_span_context()
            entry["trace_id"] = trace.format_trace_id(context.trace_id)
            entry["span_id"] = trace.format_span_id(context.span_id)
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and key not in entry:
                entry[key] = value
        return json.dumps(entry, default=str)


def configure_logging(level: str | None = None, log_format: str | None = None) -> None:
    """Log to stderr at `level` (else HERALD_LOG_LEVEL, else INFO) in `log_format` (else
    HERALD_LOG_FORMAT, else text)."""
    chosen = (log_format or os.environ.get("HERALD_LOG_FORMAT") or "text").lower()
    if chosen not in LOG_FORMATS:
        raise InvalidArgumentError(f"log format {chosen!r} is unknown: set HERALD_LOG_FORMAT to text or json")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if chosen == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=(level or os.environ.get("HERALD_LOG_LEVEL", "INFO")).upper(), handlers=[handler])


def logs_as_json() -> bool:
    """Whether the process logs JSON lines (configure_logging chose the json format)."""
    return any(isinstance(handler.formatter, JsonFormatter) for handler in logging.getLogger().handlers)
