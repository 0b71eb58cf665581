"""The lines `herald perf` prints: one per report interval and a final summary, as text for people
or (--json) one JSON object per line for scripts. The JSON field names are documented in
docs/perf.md; change them only with the docs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from herald.perf.recorder import Percentiles, StreamStats


def _latency_json(latency: Percentiles | None) -> dict[str, float] | None:
    if latency is None:
        return None
    return {"p50": latency.p50, "p95": latency.p95, "p99": latency.p99, "p99_9": latency.p99_9, "max": latency.max}


def stream_json(stats: StreamStats) -> dict[str, Any]:
    return {"messages": stats.messages, "bytes": stats.bytes, "msg_per_s": round(stats.msg_per_s, 1),
            "mb_per_s": round(stats.mb_per_s, 3), "latency_ms": _latency_json(stats.latency)}


def _latency_text(latency: Percentiles | None) -> str:
    if latency is None:
        return "latency ms: -"
    return (f"latency ms p50 {latency.p50:.3f} p95 {latency.p95:.3f} p99 {latency.p99:.3f} "
            f"p99.9 {latency.p99_9:.3f} max {latency.max:.3f}")


def _stream_text(stats: StreamStats) -> str:
    return f"{stats.name}: {stats.msg_per_s:,.1f} msg/s {stats.mb_per_s:,.3f} MB/s {_latency_text(stats.latency)}"


def interval_line(elapsed: float, streams: Sequence[StreamStats], *, warmup: bool, as_json: bool) -> str:
    """One report interval ending `elapsed` seconds into the run."""
    if as_json:
        record: dict[str, Any] = {"type": "interval", "elapsed_s": round(elapsed, 3), "warmup": warmup}
        record.update({stats.name: stream_json(stats) for stats in streams})
        return json.dumps(record)
    tag = " (warm-up)" if warmup else ""
    return f"[{elapsed:8.1f}s]{tag} " + " | ".join(_stream_text(stats) for stats in streams)


def summary_line(command: str, seconds: float, streams: Sequence[StreamStats], *, warmup_s: float,
                 warmup_messages: int, errors: int, interrupted: bool, as_json: bool) -> str:
    """The whole run after the warm-up: totals, rates, percentiles of the cumulative histograms."""
    if as_json:
        record: dict[str, Any] = {
            "type": "summary", "command": command, "duration_s": round(seconds, 3), "warmup_s": warmup_s,
            "warmup_messages": warmup_messages, "errors": errors, "interrupted": interrupted,
        }
        record.update({stats.name: stream_json(stats) for stats in streams})
        return json.dumps(record)
    lines = [f"summary: {command} over {seconds:.1f}s after a {warmup_s:g}s warm-up "
             f"({warmup_messages:,} warm-up message(s) left out), {errors} error(s)"
             + (", interrupted" if interrupted else "")]
    lines += [f"  {stats.name}: {stats.messages:,} messages, {stats.bytes:,} bytes, "
              f"{stats.msg_per_s:,.1f} msg/s, {stats.mb_per_s:,.3f} MB/s, {_latency_text(stats.latency)}"
              for stats in streams]
    return "\n".join(lines)
