"""Topic compaction on the broker core over a real embedded metadata store, storage node and storage
client: the compacted ledger holds exactly the latest value of each key (Herald batches, unbatched
messages, Pulsar batches with null values; deletes; keyless messages left out), batch indexes
stay those of the original entries, the next run replaces the ledger and deletes the old one, the
state survives a new broker, a run that died is cleaned up and started again, the threshold
triggers a run, and a storage failure ends in ERROR with its reason."""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import replace

import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.broker.core.compaction.state import CompactionState, CompactionStatus, state_key
from herald.broker.core.compaction.topic_compaction import COMPACTION_CURSOR
from herald.broker.core.ledger_list import Position
from herald.broker.core.service import BrokerService
from herald.broker.core.topic import PersistentTopic
from herald.broker.settings import BrokerSettings
from herald.common.codec import pulsar_entry
from herald.common.codec.entry import EntryMetadata, encode_entry, open_entry, pack_record
from herald.common.errors import CompactionInProgressError, LedgerNotFoundError
from herald.storage.client.ledger_metadata import ledger_key

from tests.integration import test_broker_core
from tests.integration.test_broker_core import EARLIEST, TOPIC, Cluster, eventually

cluster = test_broker_core.cluster  # the fixture: a metadata store, a storage node, brokers on demand

ML = "public/default/persistent/orders"
LIMIT = 10 * 1024 * 1024
Message = tuple[str | None, bytes | None]  # (key, value); value None: Pulsar's null value


def settings(**overrides: object) -> BrokerSettings:
    base = BrokerSettings(max_entries_per_ledger=40, min_ledger_rollover_seconds=0, retention_check_interval=3600)
    for name, value in overrides.items():
        setattr(base, name, value)
    return base


def herald_batch(sequence_id: int, messages: list[Message]) -> bytes:
    payload = bytearray()
    for key, value in messages:
        pack_record(payload, value or b"", key)
    return encode_entry(EntryMetadata(producer_name="w", sequence_id=sequence_id,
                                      highest_sequence_id=sequence_id + len(messages) - 1,
                                      num_messages=len(messages), batched=True), payload)


def herald_single(sequence_id: int, key: str | None, value: bytes) -> bytes:
    payload = bytearray()
    pack_record(payload, value, key)
    return encode_entry(EntryMetadata(producer_name="w", sequence_id=sequence_id, highest_sequence_id=sequence_id,
                                      num_messages=1, batched=False), payload)


def pulsar_batch(sequence_id: int, messages: list[Message]) -> bytes:
    """A Pulsar producer's batch; a None value is sent as Pulsar's null value."""
    parts = []
    for key, value in messages:
        single = pulsar.SingleMessageMetadata(payload_size=len(value or b""))
        if key is not None:
            single.partition_key = key
        if value is None:
            single.null_value = True
        meta = single.SerializeToString()
        parts += [len(meta).to_bytes(4, "big"), meta, value or b""]
    body = b"".join(parts)
    metadata = pulsar.MessageMetadata(producer_name="w", sequence_id=sequence_id, publish_time=1,
                                      num_messages_in_batch=len(messages), uncompressed_size=len(body))
    return pulsar_entry.encode(metadata, body)


def pulsar_single(sequence_id: int, key: str, value: bytes) -> bytes:
    metadata = pulsar.MessageMetadata(producer_name="w", sequence_id=sequence_id, publish_time=1,
                                      partition_key=key, uncompressed_size=len(value))
    return pulsar_entry.encode(metadata, value)


class Workload:
    """Entries of every kind over `keys` keys, with deletes, and what compaction must keep."""

    def __init__(self, keys: int, seed: int) -> None:
        self.random = random.Random(seed)
        self.keys = keys
        self.sequence = 0
        self.latest: dict[str, bytes] = {}

    def _message(self) -> Message:
        roll = self.random.random()
        if roll < 0.05:
            return None, b"no key"
        key = f"k{self.random.randrange(self.keys)}"
        return key, (b"" if roll < 0.15 else f"{key}={self.sequence}.{self.random.random()}".encode())

    def _apply(self, messages: list[Message]) -> None:
        for key, value in messages:
            if key is None:
                continue
            if value:
                self.latest[key] = value
            else:
                self.latest.pop(key, None)

    def entries(self, count: int) -> list[tuple[int, int, bytes]]:
        """(sequence id, messages, entry) for count entries."""
        out = []
        for _ in range(count):
            kind = self.random.randrange(4)
            first = self.sequence
            if kind == 0:
                key, value = self._message()
                messages: list[Message] = [(key, value or b"")]
                data = herald_single(first, key, value or b"")
            elif kind == 1:
                key = f"k{self.random.randrange(self.keys)}"
                value = f"{key}=single{first}".encode()
                messages = [(key, value)]
                data = pulsar_single(first, key, value)
            else:
                messages = [self._message() for _ in range(self.random.randrange(1, 30))]
                if kind == 3:  # Pulsar: a delete may be a null value
                    messages = [(k, None if v == b"" and self.random.random() < 0.5 else v) for k, v in messages]
                    data = pulsar_batch(first, messages)
                else:
                    data = herald_batch(first, messages)
            self._apply(messages)
            self.sequence += len(messages)
            out.append((first, len(messages), data))
        return out


async def publish(service: BrokerService, entries: list[tuple[int, int, bytes]]) -> list[tuple[int, int]]:
    producer, _ = await service.create_producer(TOPIC, "w")
    futures = [producer.topic.publish(producer, seq, seq + n - 1, n, data) for seq, n, data in entries]
    receipts = list(await asyncio.gather(*futures))
    await service.close_producer(producer)
    return receipts


async def compacted_values(topic: PersistentTopic) -> tuple[dict[str, bytes], list[tuple[Position, int, str]]]:
    """The view's live messages by key, and (original position, batch index, key) of each."""
    view = topic.compaction.view
    assert view is not None
    values: dict[str, bytes] = {}
    where: list[tuple[Position, int, str]] = []
    for window in await view.read_all(7):
        for position, data in window:
            opened = open_entry(data)
            for index, record in enumerate(opened.records(opened.restore(LIMIT))):
                if record.compacted_out:
                    assert record.value == b""
                    continue
                assert record.key is not None and record.key not in values, "one message per key"
                values[record.key] = record.value
                where.append((position, index, record.key))
    return values, where


async def compacted(service: BrokerService, after: float = 0.0) -> CompactionState:
    async def done() -> CompactionState | None:
        info = await service.compaction_status(TOPIC)
        if info.status is CompactionStatus.RUNNING or info.finished_at <= after:
            return None
        return (await service.get_topic(TOPIC)).compaction._record.state  # type: ignore[no-any-return]

    state = await eventually(done, "the compaction to end")
    assert state.status is CompactionStatus.SUCCESS, state.error
    return state


async def test_the_compacted_ledger_holds_exactly_the_latest_value_of_each_key(cluster: Cluster) -> None:
    service = await cluster.broker(settings())
    workload = Workload(keys=60, seed=19)
    entries = workload.entries(300)
    receipts = await publish(service, entries)
    topic = await service.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)
    assert (await service.compaction_status(TOPIC)).status is CompactionStatus.NOT_RUN
    await service.compact(TOPIC)
    state = await compacted(service)
    assert state.horizon == Position(*receipts[-1])
    values, where = await compacted_values(topic)
    assert values == workload.latest  # deletes gone, keyless messages gone, the latest value of the rest
    assert len(workload.latest) > 20 and len(values) < sum(n for _, n, _ in entries) // 10
    # Each kept message is at its original entry and batch index, in the topic's order.
    originals = {Position(*receipt): data for receipt, (_, _, data) in zip(receipts, entries, strict=True)}
    for position, index, key in where:
        opened = open_entry(originals[position])
        original = list(opened.records(opened.restore(LIMIT)))[index]
        assert original.key == key and original.value == values[key]
    assert [p for p, _, _ in where] == sorted(p for p, _, _ in where)
    # The compaction cursor holds retention at the horizon.
    assert topic.subscriptions[COMPACTION_CURSOR].cursor.mark_delete_position == state.horizon
    stored = await cluster.store.get(state_key(ML))
    assert stored is not None and CompactionState.from_json(stored.value) == state


async def test_the_next_run_replaces_the_compacted_ledger_and_deletes_the_old_one(cluster: Cluster) -> None:
    service = await cluster.broker(settings())
    workload = Workload(keys=40, seed=7)
    await publish(service, workload.entries(120))
    await service.compact(TOPIC)
    first = await compacted(service)
    topic = await service.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)
    receipts = await publish(service, workload.entries(80))
    await service.compact(TOPIC)
    second = await compacted(service, after=first.finished_at)
    assert second.ledger_id != first.ledger_id and second.horizon == Position(*receipts[-1])
    assert (await compacted_values(topic))[0] == workload.latest

    async def old_ledger_gone() -> bool:
        return await cluster.store.get(ledger_key(first.ledger_id)) is None

    await eventually(old_ledger_gone, "the old compacted ledger to be deleted")
    with pytest.raises(LedgerNotFoundError):
        await cluster.clients[0].open_ledger(first.ledger_id, recover=False)
    # Nothing new: the run succeeds and keeps the ledger.
    await service.compact(TOPIC)
    third = await compacted(service, after=second.finished_at)
    assert third.ledger_id == second.ledger_id
    # A broker that loads the topic anew serves the same view.
    await service.close_all()
    again = await cluster.broker(settings())
    reloaded = await again.get_topic(TOPIC)
    assert isinstance(reloaded, PersistentTopic)
    assert (await again.compaction_status(TOPIC)).status is CompactionStatus.SUCCESS
    assert (await compacted_values(reloaded))[0] == workload.latest


async def test_a_second_trigger_while_running_is_refused(cluster: Cluster) -> None:
    service = await cluster.broker(settings())
    await publish(service, Workload(keys=10, seed=1).entries(30))
    topic = await service.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)
    topic.compaction.trigger()
    with pytest.raises(CompactionInProgressError, match="already running"):
        await service.compact(TOPIC)
    await topic.compaction.wait()
    assert (await service.compaction_status(TOPIC)).status is CompactionStatus.SUCCESS


async def test_a_run_that_died_is_cleaned_up_and_started_again_on_load(cluster: Cluster) -> None:
    service = await cluster.broker(settings())
    workload = Workload(keys=30, seed=3)
    await publish(service, workload.entries(60))
    await service.compact(TOPIC)
    first = await compacted(service)
    receipts = await publish(service, workload.entries(40))
    # What a broker killed mid-run leaves: RUNNING, and a half-written ledger recorded as pending.
    pending = await cluster.clients[0].create_ledger(1, 1, 1, {"compacted-ledger": ML})
    await pending.add_entry(b"half written")
    topic = await service.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)
    await service.close_all()
    stored = await cluster.store.get(state_key(ML))
    assert stored is not None
    crashed = first.but(status=CompactionStatus.RUNNING, pending_ledger_id=pending.ledger_id)
    await cluster.store.put(state_key(ML), crashed.to_json(), expected_version=stored.version)
    again = await cluster.broker(settings())
    state = await compacted(again, after=first.finished_at)
    assert state.horizon == Position(*receipts[-1]) and state.pending_ledger_id == -1
    assert await cluster.store.get(ledger_key(pending.ledger_id)) is None
    reloaded = await again.get_topic(TOPIC)
    assert isinstance(reloaded, PersistentTopic)
    assert (await compacted_values(reloaded))[0] == workload.latest


async def test_a_backlog_past_the_compaction_threshold_triggers_a_run(cluster: Cluster) -> None:
    service = await cluster.broker(settings(retention_check_interval=0.05))
    workload = Workload(keys=20, seed=5)
    topic = await service.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)
    await topic.apply_policies(replace(await service.effective_policies(TOPIC), compaction_threshold=2000))
    assert topic.compaction.threshold == 2000
    receipts = await publish(service, workload.entries(100))
    assert topic.ledger.storage_size > 2000
    state = await compacted(service)
    assert state.horizon <= Position(*receipts[-1])
    assert topic.compaction.backlog_bytes() < topic.ledger.storage_size


async def test_a_storage_failure_ends_the_run_in_error_with_its_reason(cluster: Cluster) -> None:
    service = await cluster.broker(settings())
    await publish(service, Workload(keys=10, seed=2).entries(20))
    topic = await service.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)
    await cluster.storage_server.stop()  # no ledger can be created now
    topic.compaction.trigger()
    await topic.compaction.wait()
    info = await service.compaction_status(TOPIC)
    assert info.status is CompactionStatus.ERROR
    assert "ledger" in info.error or "storage" in info.error, info.error
    stored = await cluster.store.get(state_key(ML))
    assert stored is not None and json.loads(stored.value)["status"] == "ERROR"


async def test_deleting_the_topic_deletes_its_compaction_state_and_ledgers(cluster: Cluster) -> None:
    service = await cluster.broker(settings())
    await publish(service, Workload(keys=10, seed=4).entries(30))
    await service.compact(TOPIC)
    state = await compacted(service)
    assert await cluster.store.get(ledger_key(state.ledger_id)) is not None
    await service.delete_topic(TOPIC)
    assert await cluster.store.get(state_key(ML)) is None
    assert await cluster.store.get(ledger_key(state.ledger_id)) is None


async def test_a_view_that_did_not_open_is_opened_before_the_next_run_builds_on_it(cluster: Cluster) -> None:
    # No retention: once compacted, the ledgers before the horizon go (the compaction cursor was
    # all that held them), and the compacted ledger alone has their keys.
    service = await cluster.broker(settings(retention_time_seconds=0, retention_size_bytes=0))
    await service.compact(TOPIC)  # on the empty topic: its compaction cursor holds what comes next
    empty = await compacted(service)
    workload = Workload(keys=2000, seed=6)  # most keys written once: only the compacted ledger keeps them
    await publish(service, workload.entries(90))
    await service.compact(TOPIC)
    first = await compacted(service, after=empty.finished_at)
    topic = await service.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)
    assert await topic.retention.trim()
    topic.compaction.view = None  # as when storage did not answer while the topic loaded
    await publish(service, workload.entries(5))
    await service.compact(TOPIC)
    await compacted(service, after=first.finished_at)
    assert (await compacted_values(topic))[0] == workload.latest


async def test_message_ttl_does_not_move_the_compaction_cursor(cluster: Cluster) -> None:
    service = await cluster.broker(settings())
    await service.compact(TOPIC)  # on the empty topic: the cursor exists from here on
    await compacted(service)
    await service.create_subscription(TOPIC, "s", EARLIEST)
    await publish(service, Workload(keys=10, seed=9).entries(5))
    topic = await service.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)
    before = topic.subscriptions[COMPACTION_CURSOR].cursor.mark_delete_position
    topic.message_ttl_seconds = 1
    assert await topic.expiry.expire(now_ms=int(time.time() * 1000) + 60_000) > 0
    assert topic.subscriptions["s"].backlog == 0  # expired there
    # Not on the compaction's cursor: what no compaction read yet stays for the next one.
    assert topic.subscriptions[COMPACTION_CURSOR].cursor.mark_delete_position == before
    assert topic.subscriptions[COMPACTION_CURSOR].backlog == 5


async def test_the_view_reads_from_any_original_position(cluster: Cluster) -> None:
    service = await cluster.broker(settings())
    await publish(service, Workload(keys=300, seed=12).entries(200))
    await service.compact(TOPIC)
    await compacted(service)
    topic = await service.get_topic(TOPIC)
    assert isinstance(topic, PersistentTopic)
    view = topic.compaction.view
    assert view is not None and view.entries > 20
    everything = [p for window in await view.read_all(view.entries) for p, _ in window]
    assert len(everything) == view.entries and everything == sorted(everything)
    for index in (0, 1, 7, view.entries // 2, view.entries - 1):
        at = everything[index]
        # From a kept entry's own position, and from just after the one before it (a position
        # the view does not hold): the same entries, at most max_entries of them.
        assert [p for p, _ in await view.read_entries(at, 3)] == everything[index:index + 3]
        if index:
            between = Position(everything[index - 1].ledger_id, everything[index - 1].entry_id + 1)
            assert [p for p, _ in await view.read_entries(between, 2)] == everything[index:index + 2]
    assert [p for p, _ in await view.read_entries(Position(-1, -1), 1)] == everything[:1]
    assert await view.read_entries(Position(view.horizon.ledger_id, view.horizon.entry_id + 1), 5) == []
