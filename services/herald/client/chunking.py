"""The producer's side of chunking: a message whose entry would be larger than the topic's max
message size (chunking_enabled, batching off) travels as several consecutive entries, each small
enough for the broker, that the consumer puts back together (its reassembly is another module's).
So does one larger than the max message size before compression, even when it compresses into
one entry (it is then a chunked message of one chunk): the broker refuses an unchunked entry
declaring more, since consumers bound what they decompress by the max message size.

What the chunks of one message carry, in EntryMetadata (proto/herald/v1/common.proto):
- uuid `<producer name>-<sequence id of the first chunk>` (as Pulsar), the same in every chunk;
  chunk_id 0..num_chunks-1; num_chunks; total_chunk_size, the size of the whole payload.
- The whole payload is the message's entry payload as it would have been unchunked: one record
  (herald.common.codec.entry), compressed when the producer compresses. Chunk i's payload is bytes
  [i * chunk_size, (i + 1) * chunk_size) of it: concatenated in chunk_id order they are the
  payload again, which then decompresses (compression and uncompressed_size are the same in every
  chunk) into the one record.
- Sequence ids: each chunk takes its own consecutive sequence id (sequence_id ==
  highest_sequence_id, num_messages 1, batched false), so the broker deduplicates chunk by chunk
  and a resend after a reconnect stores no chunk twice. The message's sequence id is its first
  chunk's; the producer's next message continues after the last chunk's. The send completes, with
  the last chunk's message id, once every chunk is stored.
- Everything else (producer name, publish time, deliver-at time, keys) is the same in every chunk.
"""

from __future__ import annotations

from herald.api.v1 import entry_pb2
from herald.common.codec.entry import HEADER_SIZE, encode_entry
from herald.common.errors import MessageTooLargeError

_MAX_INT64 = 2**63 - 1
_MAX_INT32 = 2**31 - 1
# The largest payload a chunked message may have: total_chunk_size is an int32.
MAX_CHUNKED_SIZE = _MAX_INT32


def chunk_uuid(producer_name: str, sequence_id: int) -> str:
    return f"{producer_name}-{sequence_id}"


def chunk_payload_size(metadata: entry_pb2.EntryMetadata, max_entry_size: int) -> int:
    """How many payload bytes one chunk entry of this message holds and stays within
    `max_entry_size` with its header and metadata (measured with the largest values the chunk
    fields can take, so that no chunk's metadata comes out bigger)."""
    widest = entry_pb2.EntryMetadata()
    widest.CopyFrom(metadata)
    widest.sequence_id = widest.highest_sequence_id = _MAX_INT64
    widest.chunk_id = widest.num_chunks = widest.total_chunk_size = widest.num_messages = _MAX_INT32
    widest.batched = False
    widest.uuid = chunk_uuid(metadata.producer_name, metadata.sequence_id)
    size = max_entry_size - HEADER_SIZE - widest.ByteSize()
    if size < 1:
        raise MessageTooLargeError(
            f"the topic's max message size of {max_entry_size} bytes leaves no room for a chunk's payload "
            "after its metadata: raise the topic's max_message_size")
    return size


def split(metadata: entry_pb2.EntryMetadata, payload: bytes, max_entry_size: int) -> list[bytes]:
    """The chunk entries of one message, in order. `metadata` is the message's own (its
    sequence_id the first chunk's); each chunk i gets sequence id sequence_id + i."""
    total = len(payload)
    if total > MAX_CHUNKED_SIZE:
        raise MessageTooLargeError(
            f"message payload of {total} bytes is larger than {MAX_CHUNKED_SIZE} bytes, the most a chunked "
            "message may carry")
    size = chunk_payload_size(metadata, max_entry_size)
    count = -(-total // size)
    first = metadata.sequence_id
    chunk = entry_pb2.EntryMetadata()
    chunk.CopyFrom(metadata)
    chunk.num_messages = 1
    chunk.batched = False
    chunk.uuid = chunk_uuid(metadata.producer_name, first)
    chunk.num_chunks = count
    chunk.total_chunk_size = total
    entries = []
    for index in range(count):
        chunk.sequence_id = chunk.highest_sequence_id = first + index
        chunk.chunk_id = index
        entries.append(encode_entry(chunk, payload[index * size:(index + 1) * size]))
    return entries
