"""herald perf's recorder and report lines: interval and cumulative histograms, the warm-up, and
percentiles that match a sorted-list reference within the histogram's precision."""

from __future__ import annotations

import json
import math
import threading

from herald.perf.recorder import Recorder, ThreadedRecorder
from herald.perf.report import interval_line, summary_line
from hypothesis import given, settings
from hypothesis import strategies as st

PRECISION = 1e-3  # 3 significant figures


def reference(values: list[int], percentile: float) -> int:
    """The value at `percentile` by HdrHistogram's rule: the smallest value with at least
    ceil-ish(percentile% of n) values at or below it."""
    ordered = sorted(values)
    rank = max(1, int(percentile * len(ordered) / 100 + 0.5))
    return ordered[rank - 1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=60_000_000), min_size=1, max_size=2000))
def test_percentiles_match_a_sorted_list_within_the_histograms_precision(values: list[int]) -> None:
    recorder = Recorder("produce")
    for value in values:
        recorder.record(value, 100)
    stats = recorder.interval(1.0)
    assert stats.messages == len(values) and stats.bytes == 100 * len(values)
    latency = stats.latency
    assert latency is not None
    for percentile, reported in ((50, latency.p50), (95, latency.p95), (99, latency.p99), (99.9, latency.p99_9)):
        exact_ms = reference(values, percentile) / 1000
        assert math.isclose(reported, exact_ms, rel_tol=PRECISION, abs_tol=0.001), (percentile, reported, exact_ms)
    assert math.isclose(latency.max, max(values) / 1000, rel_tol=PRECISION, abs_tol=0.001)
    assert latency.p50 <= latency.p95 <= latency.p99 <= latency.p99_9 <= latency.max


def test_intervals_start_afresh_and_the_summary_covers_them_all() -> None:
    recorder = Recorder("consume")
    for value in range(1, 1001):
        recorder.record(value, 10)
    first = recorder.interval(1.0)
    recorder.record(5_000_000, 10)
    second = recorder.interval(2.0)
    assert (first.messages, second.messages) == (1000, 1)
    assert second.latency is not None and second.latency.p50 > 4000  # the first interval's values are gone
    assert second.msg_per_s == 0.5
    total = recorder.summary(3.0)
    assert total.messages == 1001 and total.bytes == 10_010
    assert total.latency is not None and total.latency.p50 < 1.0 and total.latency.max > 4000


def test_what_the_warm_up_records_is_left_out_of_the_summary() -> None:
    recorder = Recorder("produce", measuring=False)
    for _ in range(50):
        recorder.record(9_000_000, 1)  # slow warm-up sends
    recorder.end_warmup()
    for _ in range(10):
        recorder.record(1000, 1)
    total = recorder.summary(1.0)
    assert (total.messages, recorder.warmup_messages, recorder.total_messages) == (10, 50, 60)
    assert total.latency is not None and total.latency.max < 2


def test_an_empty_interval_has_no_latency_and_prints_a_dash() -> None:
    stats = Recorder("consume").interval(1.0)
    assert stats.latency is None and stats.msg_per_s == 0
    assert "latency ms: -" in interval_line(1.0, [stats], warmup=False, as_json=False)
    assert json.loads(interval_line(1.0, [stats], warmup=False, as_json=True))["consume"]["latency_ms"] is None


def test_negative_and_huge_latencies_are_clamped_rather_than_lost() -> None:
    recorder = Recorder("consume")
    recorder.record(-5, 1)  # a publish time a little ahead of this machine's clock
    recorder.record(10**13, 1)
    stats = recorder.interval(1.0)
    assert stats.messages == 2 and stats.latency is not None and stats.latency.p50 == 0


def test_json_lines_carry_the_documented_fields() -> None:
    recorder = Recorder("send")
    recorder.record(1500, 100)
    line = json.loads(interval_line(2.0, [recorder.interval(2.0)], warmup=True, as_json=True))
    assert line["type"] == "interval" and line["elapsed_s"] == 2.0 and line["warmup"] is True
    assert set(line["send"]) == {"messages", "bytes", "msg_per_s", "mb_per_s", "latency_ms"}
    assert set(line["send"]["latency_ms"]) == {"p50", "p95", "p99", "p99_9", "max"}
    summary = json.loads(summary_line("produce", 2.0, [recorder.summary(2.0)], warmup_s=1.0, warmup_messages=3,
                                      errors=0, interrupted=True, as_json=True))
    assert {key: summary[key] for key in ("type", "command", "warmup_s", "warmup_messages", "errors", "interrupted")} \
        == {"type": "summary", "command": "produce", "warmup_s": 1.0, "warmup_messages": 3, "errors": 0,
            "interrupted": True}
    assert summary["send"]["messages"] == 1 and summary["send"]["msg_per_s"] == 0.5


def test_a_threaded_recorder_loses_nothing_to_folds_racing_the_threads_that_record() -> None:
    recorder = ThreadedRecorder("consume")

    def feed() -> None:
        for value in range(20_000):
            recorder.record(value % 977 + 1, 1)

    threads = [threading.Thread(target=feed) for _ in range(4)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        recorder.fold()
    for thread in threads:
        thread.join()
    assert recorder.summary(1.0).messages == 80_000
