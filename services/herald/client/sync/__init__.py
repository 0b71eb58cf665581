"""The blocking API: Client, Producer, Consumer and Reader over the asyncio core, which runs on one
background event-loop thread owned by the Client. Calls that need an answer cross to the loop and
wait; calls that do not (send_async, acknowledge) are queued onto it without waiting.

- loop: `LoopThread`, one per Client, started on first use and stopped on close, and the
  `Submitter`: calls cross threads through a deque that wakes the loop once for a burst, not once
  per message. The blocking Producer, Consumer and Reader know the client's LoopThread, not the
  Client.
- producer: `Producer[T]`, over the AsyncProducer interface only (a topic's producer and a
  partitioned one alike): the value is encoded on the caller's thread and `enqueue_nowait` is
  queued through the Submitter.
- consumer: `Consumer[T]`, over the AsyncConsumer interface only. receive() fetches a few messages
  per crossing and buffers the rest (dropped when the consumer's `epoch` moves: a reconnect or a
  seek); acks and nacks go through the Submitter without waiting; listeners run on a thread of the
  consumer's own, with the blocking Consumer.
- reader: `Reader`, AsyncReader's API; a reader_listener runs on a thread of the reader's own.
- table_view: `TableView`, AsyncTableView's API; reads answer from a copy taken on the loop, actions
  run on a thread of the view's own.
"""

from herald.client.sync.client import Client
from herald.client.sync.consumer import Consumer
from herald.client.sync.producer import Producer
from herald.client.sync.reader import Reader
from herald.client.sync.table_view import TableView

__all__ = ["Client", "Consumer", "Producer", "Reader", "TableView"]
