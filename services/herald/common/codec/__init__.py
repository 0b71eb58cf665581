"""The bytes Herald stores and sends, with no I/O and no transport: the entry (one producer batch:
header, metadata, packed records), message ids and positions, topic names, checksums, compression,
properties. Must not know: gRPC, any service, the event loop.

The entry: one producer batch, and the unit broker and storage handle. It comes in two formats,
told apart by their magic: Herald's own (`herald_entry`, 0x0e0c, below) and Pulsar's (`pulsar_entry`,
0x0e01, what an official Pulsar producer sends, stored as it came). `entry` is the one reader of
both: everyone (the broker core, Herald's client, the dlq-worker, the peeks, the Spark source)
reads entries through it (`open_entry`, `read_metadata`, `unpack_entry`, `entry_checksum_ok`,
`permits_of`) and sees Herald's EntryMetadata and Records either way. Herald's format:

    entry   = magic:u16 | crc32c:u32 | metadata_length:u32 | EntryMetadata (protobuf) | payload
    payload = record*   (after decompression); a record is packed with struct: value length,
              flags, optional key / event time / explicit sequence id / properties, value

The producer writes it; the broker verifies the checksum and reads nothing but the metadata (for
its publish checks, dedup recovery, flow permits, keys and delays); storage stores it opaque under
a crc32c of its own; the consumer unpacks it. So per-message work happens once in the producer
and once in the consumer.

What the metadata claims is checked, never trusted to size anything. A record takes
MIN_RECORD_SIZE (5) bytes at least, so `records_capacity` bounds the messages an entry can hold:
by its payload, by its declared uncompressed size when it is compressed, by total_chunk_size for a
chunk. At publish the broker (herald.broker.core.producer) refuses an entry whose num_messages is
below 1, above that capacity or not the send's; whose producer_name is not the registered
producer's; or (unchunked and compressed) whose declared uncompressed size passes the max message
size plus ENTRY_FRAMING_ALLOWANCE. Entries stored before those checks existed still deliver:
`permits_of` (num_messages within the capacity; a chunk takes 1) is what the broker takes in flow
permits and what the consumer reckons too, giving back at once what it did not queue. The
consumer sizes everything else by the records it decodes, of which there may be no more than the
claim: `iter_records(payload, records_claimed(metadata))`. 5 MiB of zeros (20 KB with LZ4) would
be a million empty records; the consumer, the dlq-worker, `herald admin dlq peek` and
`herald admin topics peek` refuse them under num_messages=1 rather than make a million messages.

A Pulsar batch's messages take 6 bytes at least (their size and a SingleMessageMetadata), an
unbatched Pulsar entry is one message: `records_capacity(..., pulsar_format=True)`.

Decompression (`compression`: LZ4, ZLIB, ZSTD and SNAPPY, raw blocks as Pulsar writes them, via
cramjam; numbered as Pulsar numbers them; used by the consumer, the dlq-worker, `dlq peek`, the Spark source
and the Pulsar codec) is bounded by the declared size and by the caller's limit: a larger claim is
refused before any work, and no codec produces more than the claim plus one byte (zlib through
decompressobj with max_length, ZSTD read as a stream with a window no larger than the limit needs,
LZ4 blocks into a buffer of the claim, a SNAPPY block only when its own size header is the
claim). The producer compresses a closed batch's payload once.

The rest:
- message_id: MessageId (ledger id, entry id, partition, batch index), ordered, to and from bytes
  and text. `check_position` is every start position's rule (seek, cursor reset, a reader's
  start, a pull's start), run by the broker and, before sending, by the client: ids from -1 (the
  earliest) to 2^63-1 (the latest).
- names: TopicName (`persistent://tenant/namespace/name`, `non-persistent://...`, or a short name
  in public/default; partition i is `<topic>-partition-<i>`), tenant, namespace and subscription
  name checks.
- checksum: CRC32C (google-crc32c). properties: the limits on producer and consumer properties,
  which the broker keeps in memory (`check_properties`, run by the broker's admission and by the
  client's config).
- pulsar_entry: Pulsar's entry format, read as Herald's metadata and records (through `entry`) and
  made from a Herald entry for a Pulsar consumer.
"""
