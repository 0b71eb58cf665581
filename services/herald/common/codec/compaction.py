"""Topic compaction's view of a stored entry, in either format (herald_entry, pulsar_entry): its
messages with their keys (`compactable_records`; a message whose value is empty, or Pulsar's
null_value, deletes its key: `is_tombstone`), and the entry rewritten for a compacted ledger with
the messages that did not survive flagged compacted-out (`compact_entry`).

A compacted-out message keeps its place in its batch, so batch indexes (and message ids) stay
those of the original entry, as Pulsar does: Herald's record gets FLAG_COMPACTED_OUT and an empty
value, Pulsar's SingleMessageMetadata its compacted_out flag and an empty payload. A rewritten
entry is written uncompressed (its survivors are few, and a reader never decompresses it again)."""

from __future__ import annotations

from collections.abc import Collection, Iterator

from herald.common.codec import herald_entry, pulsar_entry
from herald.common.codec.compression import NONE
from herald.common.codec.entry import open_entry
from herald.common.codec.herald_entry import FLAG_COMPACTED_OUT, RECORD_HEADER, Record, pack_record

_COMPACTED_OUT_RECORD = RECORD_HEADER.pack(0, FLAG_COMPACTED_OUT)


def is_tombstone(record: Record) -> bool:
    """Whether the message deletes its key from a compacted topic: an empty value (Herald), or a
    null or empty value (Pulsar's null_value)."""
    return record.null_value or not record.value


def compactable_records(entry: bytes | memoryview, limit: int) -> Iterator[Record] | None:
    """The entry's messages in batch-index order (compacted-out ones included, flagged), one at a
    time, or None when compaction cannot read them: an encrypted entry (only consumers hold the
    keys) or a chunk of a chunked message. InvalidArgumentError / ChecksumError /
    MessageTooLargeError (at once, or while iterating) when the entry does not read within `limit`
    bytes decompressed. An iterator, not a list: a compaction reads millions of messages, and a
    list of a batch's records alive at once is what makes Python's cyclic GC run (and, in its
    oldest generation, hold the broker's loop for tens of milliseconds)."""
    opened = open_entry(entry, verify=False)
    metadata = opened.metadata
    if metadata.encryption_keys or metadata.num_chunks > 0:
        return None
    return opened.records(opened.restore(limit))


def compact_entry(entry: bytes, keep: Collection[int], limit: int) -> bytes | None:
    """The entry for a compacted ledger: as it is when every message survives, None when none does
    (an unbatched message that does not survive is not written), else rewritten with the messages
    whose batch index is not in `keep` flagged compacted-out."""
    opened = open_entry(entry, verify=False)
    metadata = opened.metadata
    if not metadata.batched:
        return entry if 0 in keep else None
    if not keep:
        return None
    if opened.pulsar is not None:
        return pulsar_entry.compact_batch(entry, keep, limit)
    records = list(opened.records(opened.restore(limit)))
    if all(i in keep and not record.compacted_out for i, record in enumerate(records)):
        return entry
    payload = bytearray()
    for i, record in enumerate(records):
        if i in keep and not record.compacted_out:
            pack_record(payload, record.value, record.key, record.event_time, record.sequence_id,
                        record.properties or None)
        else:
            payload += _COMPACTED_OUT_RECORD
    rewritten = herald_entry.EntryMetadata()
    rewritten.CopyFrom(metadata)
    rewritten.compression = NONE  # type: ignore[assignment]
    rewritten.uncompressed_size = len(payload)
    return herald_entry.encode_entry(rewritten, payload)
