"""Log formats: HERALD_LOG_FORMAT=json gives one JSON object per line (time, level, logger, message,
exception, trace ids of a recording span, extra fields); text stays the human format."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime

import pytest
from herald.common.logs import JsonFormatter
from opentelemetry.sdk.trace import TracerProvider

from tests.conftest import service_env


@pytest.fixture
def json_log() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger whose records go, formatted by JsonFormatter, to a string."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("herald.test-logs")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, out
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


def lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_json_records_are_one_object_per_line_with_time_level_logger_and_message(
    json_log: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = json_log
    logger.info("topic %s loaded in %d ms", "persistent://a/b/c", 12)
    logger.warning("multi\nline message")
    first, second = lines(out)
    assert first["level"] == "INFO"
    assert first["logger"] == "herald.test-logs"
    assert first["message"] == "topic persistent://a/b/c loaded in 12 ms"
    assert isinstance(first["time"], str) and first["time"].endswith("Z")
    assert datetime.fromisoformat(first["time"].replace("Z", "+00:00")).utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert second["level"] == "WARNING" and second["message"] == "multi\nline message"
    assert "exception" not in first and "trace_id" not in first


def test_json_records_carry_the_exception_text(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = json_log
    try:
        raise ValueError("ledger 7 is damaged")
    except ValueError:
        logger.exception("recovery failed")
    (record,) = lines(out)
    assert record["level"] == "ERROR" and record["message"] == "recovery failed"
    assert isinstance(record["exception"], str)
    assert "Traceback" in record["exception"] and "ValueError: ledger 7 is damaged" in record["exception"]


def test_json_records_carry_the_trace_and_span_ids_of_the_recording_span(
    json_log: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = json_log
    tracer = TracerProvider().get_tracer("test-logs")
    with tracer.start_as_current_span("publish") as span:
        logger.info("inside the span")
        context = span.get_span_context()
    logger.info("after the span")
    inside, after = lines(out)
    assert inside["trace_id"] == f"{context.trace_id:032x}"
    assert inside["span_id"] == f"{context.span_id:016x}"
    assert "trace_id" not in after and "span_id" not in after


def test_json_records_carry_extra_fields(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = json_log
    logger.info("fenced", extra={"ledger_id": 42, "node": "127.0.0.1:3181"})
    (record,) = lines(out)
    assert record["ledger_id"] == 42 and record["node"] == "127.0.0.1:3181"


LOG_SOMETHING = """
import logging
from herald.common.logs import configure_logging
configure_logging()
logging.getLogger("herald.broker").info("broker %s ready", "b-0")
logging.getLogger("herald.broker").debug("debug detail")
"""


def run_logging(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LOG_SOMETHING], env={**service_env(), **env},
                          capture_output=True, text=True, timeout=60)


def test_herald_log_format_json_makes_a_process_log_json_lines() -> None:
    done = run_logging(HERALD_LOG_FORMAT="json")
    assert done.returncode == 0, done.stderr
    (record,) = [json.loads(line) for line in done.stderr.splitlines()]
    assert record["level"] == "INFO" and record["logger"] == "herald.broker" and record["message"] == "broker b-0 ready"


def test_text_format_is_the_default_and_honours_herald_log_level() -> None:
    done = run_logging(HERALD_LOG_LEVEL="DEBUG")
    assert done.returncode == 0, done.stderr
    shown = done.stderr.splitlines()
    assert len(shown) == 2
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO herald.broker: broker b-0 ready", shown[0])
    assert shown[1].endswith("DEBUG herald.broker: debug detail")


def test_an_unknown_log_format_is_refused_with_the_formats_it_takes() -> None:
    done = subprocess.run([sys.executable, "-m", "herald.cli", "produce", "t", "--url", "herald://127.0.0.1:1"],
                          env={**service_env(), "HERALD_LOG_FORMAT": "xml"}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "log format 'xml' is unknown" in done.stderr and "text or json" in done.stderr
