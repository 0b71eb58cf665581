"""Compaction's entry codec, both formats: an entry rewritten for a compacted ledger keeps every
message's place (batch indexes stable) with the removed ones flagged compacted-out and emptied,
survivors byte for byte; an unbatched message survives whole or is not written; keys and
null/empty values read per message; and every consumer (the client's protocol object, dlq peek,
`herald admin` peek rendering) skips compacted-out messages while the entry's ack still completes."""

from __future__ import annotations

import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.api.v1 import broker_pb2
from herald.cli.admin.render import decoded_entries
from herald.common.codec import pulsar_entry
from herald.common.codec.compaction import compact_entry, compactable_records, is_tombstone
from herald.common.codec.compression import ZSTD, compress
from herald.common.codec.entry import EntryMetadata, encode_entry, open_entry, pack_record
from herald.common.codec.message_id import MessageId

from tests.unit.test_consumer_protocol import Owner, connected, entries, requests

LIMIT = 1024 * 1024


def herald_batch(messages: list[tuple[str | None, bytes]], compression: int = 0) -> bytes:
    payload = bytearray()
    for key, value in messages:
        pack_record(payload, value, key, properties={"p": key or "-"})
    metadata = EntryMetadata(producer_name="p", sequence_id=10, highest_sequence_id=10 + len(messages) - 1,
                             num_messages=len(messages), batched=True, publish_time=1)
    if compression:
        metadata.compression = compression  # type: ignore[assignment]
        metadata.uncompressed_size = len(payload)
        return encode_entry(metadata, compress(compression, payload))
    return encode_entry(metadata, payload)


def pulsar_batch(messages: list[tuple[str | None, bytes | None]], compression: int = 0) -> bytes:
    parts = []
    for key, value in messages:
        single = pulsar.SingleMessageMetadata(payload_size=len(value or b""), sequence_id=len(parts))
        if key is not None:
            single.partition_key = key
        if value is None:
            single.null_value = True
        meta = single.SerializeToString()
        parts += [len(meta).to_bytes(4, "big"), meta, value or b""]
    body = b"".join(parts)
    metadata = pulsar.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1,
                                      num_messages_in_batch=len(messages), uncompressed_size=len(body))
    if compression:
        metadata.compression = compression  # type: ignore[assignment]
        return pulsar_entry.encode(metadata, compress(compression, body))
    return pulsar_entry.encode(metadata, body)


def records(data: bytes) -> list[tuple[str | None, bytes, bool]]:
    opened = open_entry(data)
    return [(r.key, r.value, r.compacted_out) for r in opened.records(opened.restore(LIMIT))]


@pytest.mark.parametrize("compression", [0, ZSTD], ids=["plain", "zstd"])
def test_a_herald_batch_keeps_every_place_and_flags_what_did_not_survive(compression: int) -> None:
    original = herald_batch([("a", b"1"), ("b", b"2"), (None, b"x"), ("a", b"3")], compression)
    compacted = compact_entry(original, {1, 3}, LIMIT)
    assert compacted is not None and compacted != original
    assert records(compacted) == [(None, b"", True), ("b", b"2", False), (None, b"", True), ("a", b"3", False)]
    kept = list(open_entry(compacted).records(open_entry(compacted).restore(LIMIT)))
    assert kept[1].properties == {"p": "b"}  # a survivor is kept whole
    metadata = open_entry(compacted).metadata
    assert (metadata.num_messages, metadata.sequence_id, metadata.compression) == (4, 10, 0)
    assert compact_entry(original, {0, 1, 2, 3}, LIMIT) == original  # every message survives: as it is
    assert compact_entry(original, set(), LIMIT) is None


@pytest.mark.parametrize("compression", [0, ZSTD], ids=["plain", "zstd"])
def test_a_pulsar_batch_sets_compacted_out_and_drops_the_payloads(compression: int) -> None:
    original = pulsar_batch([("a", b"1"), ("b", None), ("a", b"3")], compression)
    compacted = compact_entry(original, {2}, LIMIT)
    assert compacted is not None and pulsar_entry.is_pulsar_entry(compacted)
    assert records(compacted) == [("a", b"", True), ("b", b"", True), ("a", b"3", False)]
    metadata, _ = pulsar_entry.split(compacted)
    assert metadata.num_messages_in_batch == 3 and metadata.compression == pulsar.NONE
    assert compact_entry(original, {0, 1, 2}, LIMIT) == original


def test_an_unbatched_message_survives_whole_or_is_not_written() -> None:
    payload = bytearray()
    pack_record(payload, b"v", "k")
    single = encode_entry(EntryMetadata(producer_name="p", num_messages=1, batched=False), payload)
    assert compact_entry(single, {0}, LIMIT) == single
    assert compact_entry(single, set(), LIMIT) is None
    metadata = pulsar.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key="k")
    plain = pulsar_entry.encode(metadata, b"v")
    assert compact_entry(plain, {0}, LIMIT) == plain and compact_entry(plain, set(), LIMIT) is None


def test_keys_and_deleting_values_read_alike_in_both_formats() -> None:
    herald = compactable_records(herald_batch([("a", b""), ("b", b"x"), (None, b"y")]), LIMIT)
    assert herald is not None
    assert [(r.key, is_tombstone(r)) for r in herald] == [("a", True), ("b", False), (None, False)]
    batch = compactable_records(pulsar_batch([("a", None), ("b", b""), ("c", b"z")]), LIMIT)
    assert batch is not None
    assert [(r.key, r.null_value, is_tombstone(r)) for r in batch] == [
        ("a", True, True), ("b", False, True), ("c", False, False)]
    metadata = pulsar.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key="k",
                                      null_value=True)
    (null,) = compactable_records(pulsar_entry.encode(metadata, b""), LIMIT) or []
    assert (null.key, is_tombstone(null)) == ("k", True)


def test_encrypted_entries_and_chunks_are_not_read_for_compaction() -> None:
    payload = bytearray()
    pack_record(payload, b"secret", "k")
    encrypted = encode_entry(EntryMetadata(producer_name="p", num_messages=1, encryption_keys=["key"]), payload)
    assert compactable_records(encrypted, LIMIT) is None
    chunk = encode_entry(EntryMetadata(producer_name="p", num_messages=1, uuid="u", chunk_id=0, num_chunks=2,
                                       total_chunk_size=20), b"0123456789")
    assert compactable_records(chunk, LIMIT) is None


def test_a_consumer_skips_compacted_out_messages_and_its_ack_completes_the_entry() -> None:
    owner = Owner()
    protocol = connected(owner, queue_size=4)
    requests(protocol)
    compacted = compact_entry(herald_batch([("a", b"1"), ("b", b"2"), ("a", b"3")]), {1}, LIMIT)
    assert compacted is not None
    protocol.on_reply(entries((7, compacted)))
    (message,) = protocol.queue
    assert (message.data(), message.key, message.message_id) == (b"2", "b", MessageId(1, 7, -1, 1))
    assert requests(protocol) == ["flow 2"]  # the two compacted-out messages' permits go back
    assert protocol.acknowledge(1, 7, 1, 3) is True  # acking the one message acks the entry
    assert protocol.tracker.take() == ([(1, 7)], None)


def test_a_pulsar_compacted_batch_is_skipped_alike_and_peek_shows_only_the_survivors() -> None:
    owner = Owner()
    protocol = connected(owner)
    compacted = compact_entry(pulsar_batch([("a", b"1"), ("b", b"2")]), {0}, LIMIT)
    assert compacted is not None
    protocol.on_reply(entries((3, compacted)))
    assert [(m.data(), m.message_id.batch_index) for m in protocol.queue] == [(b"1", 0)]
    (shown,) = decoded_entries([broker_pb2.DeliveredEntry(ledger_id=1, entry_id=3, data=compacted)])
    assert [m["key"] for m in shown["messages"]] == ["a"]
