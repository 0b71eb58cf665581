"""Chaos tests (ARCHITECTURE.md, Guarantees 1-4) on a local cluster of real processes: processes
die or freeze while a producer runs; afterwards every acknowledged message is there exactly once,
in order. Short by default; HERALD_SOAK=1 runs each phase longer."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from herald.api.v1 import lookup_pb2, lookup_pb2_grpc
from herald.local_cluster import LocalCluster

from tests.chaos.checker import PHASE_SECONDS, ContinuousProducer, check, read_everything
from tests.helpers import eventually_sync

# Each scenario is bounded: minutes in the soak version, well under two in the CI one.
pytestmark = pytest.mark.timeout(900)


def owner_of(cluster: LocalCluster, topic: str) -> str:
    with grpc.insecure_channel(cluster.lookup.address) as channel:
        stub = lookup_pb2_grpc.LookupServiceStub(channel)
        return str(stub.LookupTopic(lookup_pb2.LookupTopicRequest(topic=topic), timeout=30).broker_address)


def run_for(producer: ContinuousProducer, seconds: float, progress_within: float = 120.0) -> None:
    """Let the producer run for a while, making sure it really makes progress (within
    `progress_within` seconds)."""
    before = producer.acked_count()
    time.sleep(seconds)
    producer.wait_for_acks(before + 100, timeout=progress_within)


def test_owner_broker_killed_during_produce(local_cluster: LocalCluster) -> None:
    """a. SIGKILL the owner broker: the other takes over; nothing acknowledged is lost or doubled."""
    topic = "chaos-kill-broker"
    producer = ContinuousProducer(local_cluster.service_url, topic).start()
    producer.wait_for_acks(500)
    run_for(producer, PHASE_SECONDS)
    owner = local_cluster.broker_at(owner_of(local_cluster, topic))
    owner.kill()
    run_for(producer, PHASE_SECONDS)  # progress again: on the other broker
    assert owner_of(local_cluster, topic) != owner.address
    history = producer.stop()
    check(history, read_everything(local_cluster.service_url, topic))


def test_storage_node_killed_during_produce(local_cluster: LocalCluster) -> None:
    """b. SIGKILL one storage node of the 3/2/2 ensembles: producing goes on, nothing is lost."""
    topic = "chaos-kill-storage"
    producer = ContinuousProducer(local_cluster.service_url, topic).start()
    producer.wait_for_acks(500)
    run_for(producer, PHASE_SECONDS)
    local_cluster.storage[1].kill()
    run_for(producer, PHASE_SECONDS)
    history = producer.stop()
    check(history, read_everything(local_cluster.service_url, topic))


def test_paused_owner_is_fenced_when_it_wakes(local_cluster: LocalCluster) -> None:
    """c. SIGSTOP the owner past its lease; another broker takes over; SIGCONT: the old owner's
    writes are fenced and no message id ever names two different entries."""
    topic = "chaos-pause-broker"
    producer = ContinuousProducer(local_cluster.service_url, topic).start()
    producer.wait_for_acks(500)
    owner = local_cluster.broker_at(owner_of(local_cluster, topic))
    owner.pause()
    # Its lease expires, lookup reassigns.
    eventually_sync(lambda: owner_of(local_cluster, topic), "the paused broker's topic reassigned",
                    until=lambda address: address != owner.address, timeout=60, interval=0.2)
    # Its sends in flight went to the paused owner, whose connection stays up: the client must
    # notice the silence (keep_alive 1 s) and move, well before the producer's 60 s send timeout.
    run_for(producer, PHASE_SECONDS, progress_within=30)
    owner.resume()
    run_for(producer, PHASE_SECONDS)
    history = producer.stop()
    check(history, read_everything(local_cluster.service_url, topic))
    assert "fenced" in owner.log_path.read_text().lower() or "lease" in owner.log_path.read_text().lower()


def test_every_process_restarted(local_cluster: LocalCluster) -> None:
    """d. Restart every process, one after the other and then all at once: all data is readable."""
    topic = "chaos-restart-all"
    producer = ContinuousProducer(local_cluster.service_url, topic).start()
    producer.wait_for_acks(500)
    for process in [*local_cluster.storage, *local_cluster.brokers, local_cluster.lookup]:
        process.restart()
        run_for(producer, PHASE_SECONDS / 3)
    history = producer.stop()
    # Lookup's restart failed the brokers' heartbeats (retried every 0.25 s): each broker tells the
    # streak in a line, and its end in another, not a line per attempt.
    for broker in local_cluster.brokers:
        text = broker.log_path.read_text()
        failures = [line for line in text.splitlines() if "WARNING" in line and "heartbeat to lookup" in line]
        assert 1 <= len(failures) <= 2, failures
        assert "heartbeat to lookup at" in text and "works again after" in text, broker.name
    local_cluster.stop()
    local_cluster.start()
    check(history, read_everything(local_cluster.service_url, topic))


def test_corrupt_entry_log_is_read_from_another_replica(local_cluster: LocalCluster) -> None:
    """e. Flip bytes in a storage node's entry logs: reads come from the other replica and the
    corruption is reported, never returned as data."""
    topic = "chaos-corrupt"
    producer = ContinuousProducer(local_cluster.service_url, topic).start()
    producer.wait_for_acks(3000)
    history = producer.stop()
    victim = local_cluster.storage[0]
    victim.stop()  # a clean stop checkpoints: the entries now live in its entry logs
    flipped = 0
    for log_file in sorted(Path(local_cluster.base / victim.name).rglob("*.entrylog")):
        data = bytearray(log_file.read_bytes())
        for offset in range(64, len(data), 512):
            data[offset] ^= 0xFF
            flipped += 1
        log_file.write_bytes(bytes(data))
    assert flipped > 0, "the node had no entry log to corrupt"
    victim.start()
    for broker in local_cluster.brokers:  # empty the brokers' entry caches: reads go to storage
        broker.restart()
    check(history, read_everything(local_cluster.service_url, topic))
    reports = "".join(b.log_path.read_text() for b in local_cluster.brokers) + victim.log_path.read_text()
    assert "corrupt" in reports.lower()
