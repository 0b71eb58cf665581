"""What one stream of a run measured (sends acknowledged, or messages received): counts, bytes and
latencies, per report interval and over the whole run after the warm-up.

Latencies are recorded in microseconds into HdrHistogram_py histograms (3 significant figures, so
a percentile is within 0.1% of the exact value). Recording into the histogram costs a few
microseconds per value in Python, so the hot path only appends the value to a list; `fold()`
(called by the runner every tick, which bounds the list to what one tick brings) counts equal
values first (a C loop) and records each distinct value once with its count."""

from __future__ import annotations

import collections
from dataclasses import dataclass

from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour: any latency beyond is recorded as one hour
SIGNIFICANT_FIGURES = 3
PERCENTILES = (50.0, 95.0, 99.0, 99.9)


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Latency percentiles in milliseconds."""

    p50: float
    p95: float
    p99: float
    p99_9: float
    max: float


@dataclass(frozen=True, slots=True)
class StreamStats:
    """What one stream did over a span of `seconds`: messages, bytes, and their latencies (None
    when nothing was recorded)."""

    name: str
    seconds: float
    messages: int
    bytes: int
    latency: Percentiles | None

    @property
    def msg_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)


def percentiles(histogram: HdrHistogram) -> Percentiles | None:
    """The reported percentiles of `histogram` in ms; None when it is empty."""
    if histogram.get_total_count() == 0:
        return None
    values = histogram.get_percentile_to_value_dict(list(PERCENTILES))
    p50, p95, p99, p99_9 = (values[p] / 1000 for p in PERCENTILES)
    return Percentiles(p50, p95, p99, p99_9, histogram.get_max_value() / 1000)


class Recorder:
    """One stream's measurements. `record(latency_us, size)` on the hot path (one event-loop
    thread, or behind the caller's own lock); fold(), interval() and summary() from the runner."""

    __slots__ = ("_bytes", "_interval", "_interval_bytes", "_interval_messages", "_samples", "_total",
                 "_total_bytes_value",
                 "measuring", "messages", "name", "warmup_messages")

    def __init__(self, name: str, *, measuring: bool = True) -> None:
        self.name = name
        self._samples: list[int] = []
        self._bytes = 0  # bytes recorded since the last fold
        self._interval = new_histogram()
        self._interval_messages = 0
        self._interval_bytes = 0
        self._total = new_histogram()
        # Totals after the warm-up (measuring), and how many messages the warm-up took.
        self.messages = 0
        self._total_bytes_value = 0
        self.warmup_messages = 0
        self.measuring = measuring

    def record(self, latency_us: int, size: int) -> None:
        self._samples.append(latency_us)
        self._bytes += size

    def fold(self) -> None:
        """Move the values recorded since the last fold into the histograms."""
        samples, self._samples = self._samples, []
        size, self._bytes = self._bytes, 0
        self._fold(samples, size)

    def _fold(self, samples: list[int], size: int) -> None:
        if not samples:
            return
        self._interval_messages += len(samples)
        self._interval_bytes += size
        measuring = self.measuring
        if measuring:
            self.messages += len(samples)
            self._total_bytes_value += size
        else:
            self.warmup_messages += len(samples)
        for value, count in collections.Counter(samples).items():
            value = min(max(value, 0), HIGHEST_US)
            self._interval.record_value(value, count)
            if measuring:
                self._total.record_value(value, count)

    def end_warmup(self) -> None:
        """From now on, what is recorded counts in the summary (what came before does not)."""
        self.fold()
        self.measuring = True

    def interval(self, seconds: float) -> StreamStats:
        """The interval that just ended (`seconds` long), and start the next one."""
        self.fold()
        stats = StreamStats(self.name, seconds, self._interval_messages, self._interval_bytes,
                            percentiles(self._interval))
        self._interval.reset()
        self._interval_messages = self._interval_bytes = 0
        return stats

    def summary(self, seconds: float) -> StreamStats:
        """The whole run after the warm-up (`seconds` long)."""
        self.fold()
        return StreamStats(self.name, seconds, self.messages, self._total_bytes_value, percentiles(self._total))

    @property
    def total_messages(self) -> int:
        """Every message recorded, warm-up included (what a --count limit counts)."""
        return self.messages + self.warmup_messages + len(self._samples)


class ThreadedRecorder(Recorder):
    """A Recorder fed from other threads (the pulsar-client's callback and receive threads). Each
    value goes into a deque as one (latency, size) pair: deque.append and popleft are atomic, so
    the recording threads take no lock and fold() (on the event loop) takes exactly the pairs that
    were complete when it looked, none twice and none lost."""

    __slots__ = ("_pending",)

    def __init__(self, name: str, *, measuring: bool = True) -> None:
        super().__init__(name, measuring=measuring)
        self._pending: collections.deque[tuple[int, int]] = collections.deque()

    def record(self, latency_us: int, size: int) -> None:
        self._pending.append((latency_us, size))

    def fold(self) -> None:
        pending = self._pending
        taken = [pending.popleft() for _ in range(len(pending))]  # what is there now; later pairs wait
        self._fold([latency for latency, _ in taken], sum(size for _, size in taken))

    @property
    def total_messages(self) -> int:
        return self.messages + self.warmup_messages + len(self._pending)
