"""What producers and consumers report about themselves (`producer.stats()`, `consumer.stats()`),
and what they log every stats_interval: counters since creation and latency percentiles. Counting
happens per batch or per call, never as extra work per message on the hot path."""

from __future__ import annotations
