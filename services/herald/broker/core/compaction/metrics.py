"""Topic compaction's Prometheus families, on the broker's registry (BrokerMetrics reports each run's
end here through the core's BrokerObserver port). Runs are rare: plain prometheus_client metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# A run over a few keys takes milliseconds; over a million messages, tens of seconds to minutes.
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class CompactionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.runs = Counter("herald_broker_compaction_runs", "Topic compactions ended on this broker, by result "
                            "(success, error).", ["result"], registry=registry)
        self.duration = Histogram("herald_broker_compaction_duration_seconds", "Time a topic compaction took, from "
                                  "its trigger to its end (either result).", buckets=DURATION_BUCKETS,
                                  registry=registry)
        self.messages_read = Counter("herald_broker_compaction_messages_read", "Keyed messages read by the first "
                                     "phase of successful compactions.", registry=registry)
        self.keys_kept = Counter("herald_broker_compaction_keys_kept", "Keys whose latest message successful "
                                 "compactions kept in the compacted ledger.", registry=registry)
        self.keys_removed = Counter("herald_broker_compaction_keys_removed", "Keys successful compactions removed: "
                                    "their latest message had an empty (or null) value.", registry=registry)
        self.entries_written = Counter("herald_broker_compaction_entries_written", "Entries written to compacted "
                                       "ledgers by successful compactions.", registry=registry)
        self.bytes_written = Counter("herald_broker_compaction_bytes_written", "Bytes written to compacted ledgers "
                                     "by successful compactions.", registry=registry)
        for result in ("success", "error"):
            self.runs.labels(result)  # both series exist from the start, at 0

    def finished(self, result: str, seconds: float, messages_read: int, keys_kept: int, keys_removed: int,
                 entries_written: int, bytes_written: int) -> None:
        self.runs.labels(result).inc()
        self.duration.observe(seconds)
        self.messages_read.inc(messages_read)
        self.keys_kept.inc(keys_kept)
        self.keys_removed.inc(keys_removed)
        self.entries_written.inc(entries_written)
        self.bytes_written.inc(bytes_written)
