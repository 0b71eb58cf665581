"""The producer's stats: a latency histogram in bounded memory whose percentiles stay within a few
percent of the truth, and a recorder counting per receipt and per failure."""

from __future__ import annotations

import random

import pytest
from herald.client.stats import LatencyHistogram, ProducerStatsRecorder, _bucket, _bucket_middle
from hypothesis import given
from hypothesis import strategies as st


@given(st.integers(0, 10**12))
def test_a_latency_falls_in_a_bucket_whose_middle_is_within_7_percent(micros: int) -> None:
    middle = _bucket_middle(_bucket(micros))
    assert abs(middle - micros) <= max(0.5, micros * 0.07)


def test_buckets_grow_with_latency() -> None:
    buckets = [_bucket(us) for us in range(0, 100_000)]
    assert buckets == sorted(buckets)


def test_percentiles_are_close_to_the_true_ones_and_the_max_is_exact() -> None:
    rng = random.Random(5)
    samples = [rng.expovariate(1 / 0.005) for _ in range(20_000)]  # seconds, mean 5 ms
    histogram = LatencyHistogram()
    for sample in samples:
        histogram.add(sample)
    ordered = sorted(samples)
    for quantile, got in zip((0.5, 0.95, 0.99, 0.999), histogram.percentiles_ms(0.5, 0.95, 0.99, 0.999),
                             strict=True):
        true_ms = ordered[int(quantile * len(ordered)) - 1] * 1000
        assert abs(got - true_ms) <= true_ms * 0.07 + 0.001
    assert histogram.max == max(samples)
    assert histogram.count == 20_000


def test_an_empty_histogram_reports_zeros() -> None:
    assert LatencyHistogram().percentiles_ms(0.5, 0.99) == [0.0, 0.0]


def test_recorder_counts_receipts_and_failures_into_a_snapshot() -> None:
    recorder = ProducerStatsRecorder(now=100.0)
    recorder.receipt(messages=10, size=1000, latency=0.002)
    recorder.receipt(messages=0, size=0, latency=0.004)  # a chunk that is not its message's last
    recorder.failed(3)
    stats = recorder.snapshot(pending_messages=7)
    assert (stats.messages_sent, stats.bytes_sent, stats.receipts, stats.send_failures, stats.pending_messages) == (
        10, 1000, 2, 3, 7)
    # Deterministic, but an estimate: LatencyHistogram's buckets put percentiles within ~6%.
    assert stats.send_latency_p50_ms == pytest.approx(2.0, rel=0.06)
    assert stats.send_latency_max_ms == 4.0
    assert stats.send_latency_p50_ms <= stats.send_latency_p99_ms <= stats.send_latency_max_ms


def test_interval_report_gives_rates_since_the_last_report_and_starts_a_new_interval() -> None:
    recorder = ProducerStatsRecorder(now=0.0)
    recorder.receipt(messages=100, size=10 * 1024, latency=0.010)
    first = recorder.interval_report(now=10.0, pending_messages=2)
    assert first.startswith("10.0 msg/s, 1.0 KiB/s, 1 receipts, 0 failed, 2 pending")
    assert "max 10.000" in first
    recorder.failed(1)
    second = recorder.interval_report(now=20.0, pending_messages=0)
    assert second.startswith("0.0 msg/s, 0.0 KiB/s, 0 receipts, 1 failed, 0 pending")
    assert "p50 0.000" in second and "(totals: 100 sent, 1 failed)" in second
