"""The dlq-worker's pure parts: a letter unpacked with its origin, publications cut into entries the
dedup can resume from, retry delays, settings, and the default dead-letter topic names."""

from __future__ import annotations

import pytest
from herald.api.v1 import common_pb2, deadletter_pb2, entry_pb2
from herald.broker.core.dead_letters import DeadLetterPolicy
from herald.common.codec.compression import compress, decompress
from herald.common.codec.entry import EntryMetadata, Record, decode_entry, encode_entry, iter_records, pack_record
from herald.common.errors import InvalidArgumentError, MessageTooLargeError
from herald.dlq.brokers import FailureMemory
from herald.dlq.letters import letter_key, letter_producer_name, letter_publication, producer_name
from herald.dlq.peek import dead_letter_topic
from herald.dlq.publication import Publication, entries_after
from herald.dlq.settings import DlqWorkerSettings, load_settings
from hypothesis import given
from hypothesis import strategies as st

TOPIC = "persistent://public/default/orders"


def entry(*records: Record, batched: bool = True, codec: int = entry_pb2.NONE, **metadata: object) -> bytes:
    payload = bytearray()
    for record in records:
        pack_record(payload, record.value, record.key, record.event_time, None, record.properties or None)
    return encode_entry(EntryMetadata(producer_name="app", sequence_id=7, highest_sequence_id=7 + len(records) - 1,
                                      num_messages=len(records), batched=batched, compression=codec,  # type: ignore[arg-type]
                                      uncompressed_size=len(payload), **metadata),  # type: ignore[arg-type]
                        compress(codec, payload))


def letter(data: bytes, topic: str = TOPIC, ledger: int = 12, entry_id: int = 3) -> deadletter_pb2.DeadLetter:
    return deadletter_pb2.DeadLetter(letter_id=1, topic=topic, subscription="billing",
                                     position=common_pb2.Position(ledger_id=ledger, entry_id=entry_id), data=data,
                                     redelivery_count=5, dead_letter_topic=f"{topic}-billing-DLQ")


def unpack(send: object) -> tuple[entry_pb2.EntryMetadata, list[Record]]:
    metadata, payload = decode_entry(send.entry)  # type: ignore[attr-defined]
    return metadata, list(iter_records(decompress(metadata.compression, payload, metadata.uncompressed_size,
                                                  metadata.uncompressed_size)))


# ---- a letter as it is published ----

def test_a_letter_keeps_each_message_and_adds_its_origin() -> None:
    records = [Record(b"a", "k1", 1_700_000_000_000, None, {"app": "x"}), Record(b"b", None, 0, None, {})]
    publication = letter_publication(letter(entry(*records, codec=entry_pb2.ZSTD, ordering_key=b"ok")))
    assert (publication.compression, publication.ordering_key, publication.batched) == (entry_pb2.ZSTD, b"ok", True)
    origin = {"REAL_TOPIC": TOPIC, "SUBSCRIPTION": "billing", "REDELIVERY_COUNT": "5",
              "REASON": "max redeliveries reached"}
    assert list(publication.messages) == [
        Record(b"a", "k1", 1_700_000_000_000, None, {"app": "x", **origin, "ORIGIN_MESSAGE_ID": "12:3:-1:0"}),
        Record(b"b", None, 0, None, {**origin, "ORIGIN_MESSAGE_ID": "12:3:-1:1"}),
    ]


def test_an_unbatched_letter_of_a_partition_names_its_partition_and_no_batch_index() -> None:
    partition = f"{TOPIC}-partition-2"
    (message,) = letter_publication(letter(entry(Record(b"a", None, 0, None, {}), batched=False),
                                           topic=partition)).messages
    assert (message.properties["ORIGIN_MESSAGE_ID"], message.properties["REAL_TOPIC"]) == ("12:3:2:-1", partition)


def test_a_message_back_from_a_retry_round_keeps_where_it_first_came_from() -> None:
    first = {"REAL_TOPIC": TOPIC, "ORIGIN_MESSAGE_ID": "1:2:-1:0", "RECONSUMETIMES": "1"}
    retry = f"{TOPIC}-billing-RETRY"
    (message,) = letter_publication(letter(entry(Record(b"a", None, 0, None, first)), topic=retry)).messages
    assert {k: message.properties[k] for k in first} == first
    assert message.properties["SUBSCRIPTION"] == "billing"


@pytest.mark.parametrize("kind", ["chunk", "encrypted", "malformed"])
def test_a_letter_whose_messages_cannot_be_unpacked_is_moved_as_it_is(kind: str) -> None:
    if kind == "malformed":
        data = encode_entry(EntryMetadata(producer_name="app", num_messages=1, batched=True), b"\xff\xff")
    elif kind == "chunk":
        data = encode_entry(EntryMetadata(producer_name="app", sequence_id=4, highest_sequence_id=4, num_messages=1,
                                          uuid="u-1", chunk_id=1, num_chunks=3, total_chunk_size=10), b"slice")
    else:
        data = entry(Record(b"secret", None, 0, None, {}), encryption_keys=["key-1"], deliver_at_time=99)
    publication = letter_publication(letter(data))
    assert publication.opaque is not None and len(publication) == 1
    (send,) = entries_after(publication, "dlq-x", -1, 5 * 1024 * 1024)
    metadata, payload = decode_entry(send.entry)
    original, original_payload = decode_entry(data)
    assert bytes(payload) == bytes(original_payload)
    assert (metadata.producer_name, metadata.sequence_id, send.sequence_id, metadata.deliver_at_time) == (
        "dlq-x", 0, 0, 0)
    assert (metadata.uuid, metadata.chunk_id, list(metadata.encryption_keys)) == (
        original.uuid, original.chunk_id, list(original.encryption_keys))
    assert entries_after(publication, "dlq-x", 0, 5 * 1024 * 1024) == []


def test_producer_names_are_short_deterministic_and_distinct() -> None:
    one = letter(entry(Record(b"a", None, 0, None, {})))
    assert letter_producer_name(one) == letter_producer_name(letter(one.data)) == producer_name(*letter_key(one))
    assert letter_producer_name(one) != letter_producer_name(letter(one.data, entry_id=4))
    assert letter_producer_name(one) != producer_name(TOPIC, "other", 12, 3)
    assert letter_producer_name(one).startswith("dlq-") and len(letter_producer_name(one)) == 28


# ---- publications as entries ----

def messages(count: int, size: int = 10) -> list[Record]:
    return [Record(bytes([65 + i % 26]) * size, f"k{i}", i, None, {"i": str(i)}) for i in range(count)]


def test_a_publication_goes_as_one_entry_numbered_from_zero() -> None:
    (send,) = entries_after(Publication(messages(4), compression=entry_pb2.LZ4, ordering_key=b"o"), "dlq-a", -1,
                            5 * 1024 * 1024)
    metadata, records = unpack(send)
    assert (send.sequence_id, send.highest_sequence_id, send.num_messages) == (0, 3, 4)
    assert (metadata.producer_name, metadata.compression, metadata.ordering_key, metadata.batched) == (
        "dlq-a", entry_pb2.LZ4, b"o", True)
    assert [(r.value, r.key, r.event_time, r.properties) for r in records] == [
        (m.value, m.key, m.event_time, m.properties) for m in messages(4)]


def test_what_the_broker_holds_under_the_name_is_not_sent_again() -> None:
    publication = Publication(messages(5))
    assert entries_after(publication, "dlq-a", 4, 1 << 20) == []
    (send,) = entries_after(publication, "dlq-a", 2, 1 << 20)
    assert (send.sequence_id, send.highest_sequence_id) == (3, 4)
    assert [r.value for r in unpack(send)[1]] == [m.value for m in messages(5)[3:]]


def test_explicit_sequence_ids_are_kept_and_those_held_skipped() -> None:
    records = [m._replace(sequence_id=seq) for m, seq in zip(messages(3), (2, 3, 5), strict=True)]
    (send,) = entries_after(Publication(records), "dlq-r", 2, 1 << 20)
    _, unpacked = unpack(send)
    assert (send.sequence_id, send.highest_sequence_id, send.num_messages) == (3, 5, 2)
    assert [r.sequence_id for r in unpacked] == [None, 5]  # the second is not first + 1: named


def test_a_publication_too_large_for_one_entry_is_cut_in_order_and_a_message_too_large_is_refused() -> None:
    sends = entries_after(Publication(messages(10, size=300)), "dlq-a", -1, 1024)
    assert len(sends) > 1 and all(len(send.entry) <= 1024 for send in sends)
    assert [s.sequence_id for s in sends[1:]] == [s.highest_sequence_id + 1 for s in sends[:-1]]
    assert [r.value for s in sends for r in unpack(s)[1]] == [m.value for m in messages(10, size=300)]
    with pytest.raises(MessageTooLargeError, match="at most 1024 bytes"):
        entries_after(Publication(messages(1, size=2000)), "dlq-a", -1, 1024)


@given(st.lists(st.binary(max_size=400), min_size=1, max_size=30), st.integers(min_value=-1, max_value=30),
       st.integers(min_value=600, max_value=4000))
def test_entries_hold_exactly_the_messages_after_the_last_sequence_id_in_order(
    values: list[bytes], last: int, limit: int,
) -> None:
    publication = Publication([Record(value, None, 0, None, {"p": "v"}) for value in values])
    sends = entries_after(publication, "dlq-prop", last, limit)
    got = [(s.sequence_id + i, r.value) for s in sends for i, r in enumerate(unpack(s)[1])]
    assert got == [(i, value) for i, value in enumerate(values) if i > last]
    assert all(len(send.entry) <= limit for send in sends)


# ---- retries, settings, names ----

def test_a_letter_waits_longer_after_each_failure_up_to_the_maximum() -> None:
    memory = FailureMemory(0.5, 3.0)
    key = (TOPIC, "s", 1, 2)
    assert not memory.is_retry(key)
    assert [memory.failed(key) for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert memory.is_retry(key)
    memory.forget(key)
    assert not memory.is_retry(key) and memory.failed(key) == 0.5


def test_settings_come_from_the_environment_and_bad_ones_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(overrides={"metrics_port": -1})
    assert (settings.flow_permits, settings.metrics_port, settings.initial_subscription) == (
        100, -1, "herald-dlq-replay")
    assert settings.worker_name  # host and pid by default
    monkeypatch.setenv("HERALD_DLQ_WORKER_FLOW_PERMITS", "7")
    assert load_settings().flow_permits == 7
    for bad, words in (({"flow_permits": 0}, "flow_permits must be at least 1"),
                       ({"retry_delay": 2.0, "retry_delay_max": 1.0}, "retry_delay_max (1.0) must be at least"),
                       ({"metrics_port": -2}, "metrics_port must be a port"),
                       ({"operation_timeout": 0}, "operation_timeout must be a positive number")):
        with pytest.raises(InvalidArgumentError, match=words.replace("(", r"\(").replace(")", r"\)")):
            DlqWorkerSettings(**bad)  # type: ignore[arg-type]


def test_a_partitions_dead_letter_topics_are_named_after_its_partitioned_topic() -> None:
    policy = DeadLetterPolicy.for_subscription(f"{TOPIC}-partition-3", "billing", 2)
    assert policy is not None
    assert (policy.dead_letter_topic, policy.retry_letter_topic) == (f"{TOPIC}-billing-DLQ", f"{TOPIC}-billing-RETRY")
    assert dead_letter_topic(f"{TOPIC}-partition-3", "billing") == dead_letter_topic("orders", "billing") == (
        f"{TOPIC}-billing-DLQ")
