"""What producers and consumers report about themselves (`producer.stats()`, `consumer.stats()`),
and what they log every stats_interval: counters since creation and latency percentiles. Counting
happens per batch or per call, never as extra work per message on the hot path."""

from __future__ import annotations

from dataclasses import dataclass

# ---- latency histogram ----------------------------------------------------------------------

_SUB_BUCKETS = 16  # per power of two: a percentile is within 1/16 (~6%) of the true value
_SUB_BITS = 4


def _bucket(micros: int) -> int:
    """Log-linear bucket of a latency in microseconds: exact below 32 us, then 16 per doubling."""
    if micros < 2 * _SUB_BUCKETS:
        return micros
    shift = micros.bit_length() - _SUB_BITS - 1
    return (shift << _SUB_BITS) + (micros >> shift)


def _bucket_middle(bucket: int) -> float:
    """The middle of a bucket's range, in microseconds."""
    if bucket < 2 * _SUB_BUCKETS:
        return float(bucket)
    shift = (bucket >> _SUB_BITS) - 1
    top = bucket - (shift << _SUB_BITS)
    low, high = top << shift, ((top + 1) << shift) - 1
    return (low + high) / 2


class LatencyHistogram:
    """Latencies in bounded memory (a few hundred buckets at most), HdrHistogram style: adding is
    O(1), percentiles are within ~6%; the max is exact."""

    __slots__ = ("_counts", "count", "max", "sum")

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self.count = 0
        self.max = 0.0  # seconds
        self.sum = 0.0  # seconds, of every sample (for averages, and Prometheus summaries' _sum)

    def add(self, seconds: float) -> None:
        bucket = _bucket(int(seconds * 1_000_000))
        counts = self._counts
        counts[bucket] = counts.get(bucket, 0) + 1
        self.count += 1
        self.sum += seconds
        if seconds > self.max:
            self.max = seconds

    def percentiles_ms(self, *quantiles: float) -> list[float]:
        """The latency under which each quantile (0.5, 0.99, ...) of the samples fall, in ms; 0.0
        for every quantile when there are no samples."""
        if not self.count:
            return [0.0] * len(quantiles)
        ordered = sorted(self._counts.items())
        out = []
        max_ms = self.max * 1000
        for quantile in quantiles:
            wanted = max(1, quantile * self.count)
            seen = 0
            for bucket, count in ordered:
                seen += count
                if seen >= wanted:
                    out.append(min(_bucket_middle(bucket) / 1000, max_ms))
                    break
        return out


# ---- producer ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ProducerStats:
    """A producer's figures since it was created.

    messages_sent / bytes_sent: messages the broker acknowledged, and their payload bytes (values
    with their record framing, before compression). send_failures: messages queued that then failed
    (send timeout, closed while pending, topic terminated, refused by the broker); a send refused
    at the call (closed producer, message too large, queue full) raises there and is not counted.
    receipts: receipts from the broker (one per entry: a batch, or a chunk). pending_messages:
    queued and not yet acknowledged. Send latency, from a batch's first message being queued to its
    receipt, per entry: percentiles, max and the sum over every receipt, in milliseconds.
    """

    messages_sent: int
    bytes_sent: int
    send_failures: int
    receipts: int
    pending_messages: int
    send_latency_p50_ms: float
    send_latency_p95_ms: float
    send_latency_p99_ms: float
    send_latency_p999_ms: float
    send_latency_max_ms: float
    send_latency_sum_ms: float = 0.0


_QUANTILES = (0.5, 0.95, 0.99, 0.999)


class ProducerStatsRecorder:
    """The producer's counters, fed per receipt and per failure (never per message queued). Keeps
    a histogram since creation and one for the current logging interval."""

    __slots__ = ("_interval", "_interval_start", "bytes_sent", "latency", "messages_sent", "receipts",
                 "send_failures")

    def __init__(self, now: float) -> None:
        self.messages_sent = 0
        self.bytes_sent = 0
        self.send_failures = 0
        self.receipts = 0
        self.latency = LatencyHistogram()
        self._interval = LatencyHistogram()
        self._interval_start = (now, 0, 0, 0, 0)  # time, messages, bytes, failures, receipts

    def receipt(self, messages: int, size: int, latency: float) -> None:
        """One entry acknowledged, holding `messages` messages of `size` payload bytes."""
        self.receipts += 1
        self.messages_sent += messages
        self.bytes_sent += size
        self.latency.add(latency)
        self._interval.add(latency)

    def failed(self, messages: int) -> None:
        self.send_failures += messages

    def snapshot(self, pending_messages: int) -> ProducerStats:
        latency = self.latency
        p50, p95, p99, p999 = latency.percentiles_ms(*_QUANTILES)
        return ProducerStats(
            messages_sent=self.messages_sent, bytes_sent=self.bytes_sent, send_failures=self.send_failures,
            receipts=self.receipts, pending_messages=pending_messages, send_latency_p50_ms=p50,
            send_latency_p95_ms=p95, send_latency_p99_ms=p99, send_latency_p999_ms=p999,
            send_latency_max_ms=latency.max * 1000, send_latency_sum_ms=latency.sum * 1000,
        )

    def interval_report(self, now: float, pending_messages: int) -> str:
        """The figures since the previous report (rates, latencies), as a log line's text; starts
        the next interval."""
        started, messages, size, failures, receipts = self._interval_start
        elapsed = max(now - started, 1e-9)
        interval = self._interval
        p50, p95, p99, p999 = interval.percentiles_ms(*_QUANTILES)
        text = (
            f"{(self.messages_sent - messages) / elapsed:.1f} msg/s, "
            f"{(self.bytes_sent - size) / elapsed / 1024:.1f} KiB/s, "
            f"{self.receipts - receipts} receipts, {self.send_failures - failures} failed, "
            f"{pending_messages} pending; send latency ms p50 {p50:.3f} p95 {p95:.3f} p99 {p99:.3f} "
            f"p99.9 {p999:.3f} max {interval.max * 1000:.3f} "
            f"(totals: {self.messages_sent} sent, {self.send_failures} failed)"
        )
        self._interval = LatencyHistogram()
        self._interval_start = (now, self.messages_sent, self.bytes_sent, self.send_failures, self.receipts)
        return text


# ---- consumer ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConsumerStats:
    """A consumer's figures since it was created.

    messages_received / bytes_received: messages put on the receive queue, and the bytes of the
    entries that carried them (as stored: compressed when the producer compressed). acks_sent:
    acknowledgements sent to the broker, one per entry acked (a batch's once all its messages are)
    and one per cumulative ack; nacks_sent: negative_acknowledge() calls. receive_failures:
    receive calls that raised (the consumer closed under them). ack_timeouts: entries the ack
    timeout asked the broker to deliver again. dropped_entries:
    entries that could not be read (corrupt, undecodable) and incomplete chunked messages given up
    on. queue_size: messages waiting on the receive queue now. reconnects: streams after the first.
    """

    messages_received: int
    bytes_received: int
    acks_sent: int
    nacks_sent: int
    receive_failures: int
    ack_timeouts: int
    dropped_entries: int
    queue_size: int
    reconnects: int

    def interval_report(self, previous: ConsumerStats | None, elapsed: float) -> str:
        """The figures since `previous` (rates over `elapsed` seconds), as a log line's text."""
        before = previous or ConsumerStats(0, 0, 0, 0, 0, 0, 0, 0, 0)
        elapsed = max(elapsed, 1e-9)
        return (
            f"{(self.messages_received - before.messages_received) / elapsed:.1f} msg/s, "
            f"{(self.bytes_received - before.bytes_received) / elapsed / 1024:.1f} KiB/s received, "
            f"{self.acks_sent - before.acks_sent} acks, {self.nacks_sent - before.nacks_sent} nacks, "
            f"{self.ack_timeouts - before.ack_timeouts} ack timeouts, "
            f"{self.receive_failures - before.receive_failures} receive failures, "
            f"{self.dropped_entries - before.dropped_entries} dropped, {self.queue_size} queued "
            f"(totals: {self.messages_received} received, {self.acks_sent} acks)"
        )
