"""The storage node's Prometheus metrics (served at /metrics by herald.common.http.endpoint):
histograms observed per add, per read chunk and per journal group commit (never per message: an
entry is a producer's whole batch), and what a scrape reads: the ledger store's counters and
ledgers on the node's event loop (StorageCollector), the disk usage from the data directory.

The journal and the ledger store observe these metrics; this module knows neither of them (a
scrape calls the reading function it is given)."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from herald.common.collectors import HotHistogram, LoopCollector

# Queued to durable: one group commit on a local SSD is a few hundred microseconds; a busy disk or
# a large group takes tens of milliseconds.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
GROUP_RECORDS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
GROUP_BYTES_BUCKETS = (1024, 4096, 16384, 65536, 262144, 1048576, 2097152, 4194304, 8388608, 16777216)
# The data directory's parts, by the directory they live in (anything else: the index, index.lmdb/).
DISK_PARTS = {"journal": "journal", "entrylog": "entry_log"}


class StorageMetrics:
    """The storage node's metrics on `registry` (a fresh one unless an embedding process shares its
    own). The histograms are observed by the journal and the ledger store; watch() adds the
    scrape-time collector of an open ledger store (its `reading`), unwatch() removes it."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry if registry is not None else CollectorRegistry()
        self.add_latency = HotHistogram(
            "herald_storage_add_latency_seconds",
            "Time from an add being queued for the journal to its journal fsync completing (when it is answered; "
            "the entry log is written after).",
            LATENCY_BUCKETS, r)
        self.read_latency = HotHistogram(
            "herald_storage_read_latency_seconds",
            "Time to read one chunk of entries (one ReadEntries response, up to read_chunk_max_bytes) from the "
            "entry logs (or from memory, for entries not in them yet).", LATENCY_BUCKETS, r)
        self.journal_fsync_latency = HotHistogram(
            "herald_storage_journal_fsync_latency_seconds", "Time of each journal fsync (one per group commit).",
            LATENCY_BUCKETS, r)
        self.journal_group_records = HotHistogram(
            "herald_storage_journal_group_records",
            "Records (adds, fences, deletes) written and made durable together by one group commit.",
            GROUP_RECORDS_BUCKETS, r)
        self.journal_group_bytes = HotHistogram(
            "herald_storage_journal_group_bytes", "Bytes written to the journal by one group commit.",
            GROUP_BYTES_BUCKETS, r)
        self._collector: StorageCollector | None = None

    def watch(self, reading: Callable[[], StorageReading], data_dir: str, loop: asyncio.AbstractEventLoop) -> None:
        self.unwatch()
        self._collector = StorageCollector(reading, Path(data_dir), loop)
        self.registry.register(self._collector)  # type: ignore[arg-type]

    def unwatch(self) -> None:
        collector, self._collector = self._collector, None
        if collector is not None:
            self.registry.unregister(collector)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class StorageReading:
    entries_written: int
    bytes_written: int
    entries_read: int
    bytes_read: int
    fenced_adds: int
    checkpoints: int
    ledgers: int
    fenced_ledgers: int
    full_refused_adds: int = 0


def disk_usage(data_dir: Path) -> dict[str, int]:
    """Bytes of the data directory's files by part (journal, entry_log, index). Blocking; files
    deleted while it looks are skipped."""
    usage = {"journal": 0, "entry_log": 0, "index": 0}
    try:
        entries = list(os.scandir(data_dir))
    except FileNotFoundError:
        return usage
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                part = DISK_PARTS.get(entry.name, "index")
                usage[part] += _directory_size(Path(entry.path))
            else:
                usage["index"] += entry.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            continue
    return usage


def _directory_size(directory: Path) -> int:
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name), follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
    return total


class StorageCollector(LoopCollector[StorageReading]):
    """Counters, ledger counts and disk usage, read at each scrape (the disk on the scraping thread)."""

    def __init__(self, reading: Callable[[], StorageReading], data_dir: Path,
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._reading = reading  # the ledger store's counters and ledger counts, on the event loop
        self._data_dir = data_dir

    async def read(self) -> StorageReading:
        return self._reading()

    def read_here(self) -> StorageReading:
        return self._reading()

    def families(self, reading: StorageReading | None) -> Iterable[Metric]:
        counters = [
            CounterMetricFamily("herald_storage_write_entries_total", "Entries added and made durable on this node."),
            CounterMetricFamily("herald_storage_write_bytes_total", "Bytes of the entries added and made durable."),
            CounterMetricFamily("herald_storage_read_entries_total", "Entries read from the entry logs and sent."),
            CounterMetricFamily("herald_storage_read_bytes_total", "Bytes of the entries read and sent."),
            CounterMetricFamily("herald_storage_fenced_adds_total",
                                "Adds refused because their ledger is fenced (a newer writer took the ledger over)."),
            CounterMetricFamily("herald_storage_checkpoints_total",
                                "Checkpoints (entry logs synced, index committed, journal files deleted)."),
            CounterMetricFamily("herald_storage_full_refused_adds_total",
                                "Adds refused because the disk is full (max_data_bytes or min_free_bytes reached)."),
        ]
        ledgers = GaugeMetricFamily("herald_storage_ledgers", "Ledgers with entries or state on this node.")
        fenced = GaugeMetricFamily("herald_storage_fenced_ledgers", "Ledgers fenced on this node.")
        used = GaugeMetricFamily(
            "herald_storage_disk_used_bytes",
            "Bytes of the node's files in its data directory, by part (journal, entry_log, index).", labels=["part"])
        free = GaugeMetricFamily("herald_storage_disk_free_bytes",
                                 "Bytes free on the file system of the data directory.")
        capacity = GaugeMetricFamily("herald_storage_disk_capacity_bytes",
                                     "Size of the file system of the data directory.")
        everything: list[Metric] = [*counters, ledgers, fenced, used, free, capacity]
        if reading is None:
            return everything
        for family, value in zip(counters, (reading.entries_written, reading.bytes_written, reading.entries_read,
                                            reading.bytes_read, reading.fenced_adds, reading.checkpoints,
                                            reading.full_refused_adds),
                                 strict=True):
            family.add_metric([], value)
        ledgers.add_metric([], reading.ledgers)
        fenced.add_metric([], reading.fenced_ledgers)
        for part, size in disk_usage(self._data_dir).items():
            used.add_metric([part], size)
        try:
            disk = shutil.disk_usage(self._data_dir)
        except OSError:
            return everything
        free.add_metric([], disk.free)
        capacity.add_metric([], disk.total)
        return everything
