"""The blocking Client: the same options and calls as AsyncClient, for threads. Its asyncio core
runs on a LoopThread started on first use and stopped when the client closes."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from herald.client.client import AsyncClient
from herald.client.config import ClientConfig, ConsumerType, InitialPosition, ProducerConfig
from herald.client.reader_pull import PullResult
from herald.client.sync.consumer import Consumer
from herald.client.sync.loop import LoopThread
from herald.client.sync.producer import Producer
from herald.client.sync.reader import Reader
from herald.client.sync.table_view import TableView
from herald.common.codec.message_id import MessageId
from herald.common.errors import AlreadyClosedError, InvalidArgumentError

if TYPE_CHECKING:
    from herald.client.client import Topics
    from herald.client.schema import Schema


class Client:
    """A blocking client of one Herald cluster (`herald://host:port`); the same options as
    AsyncClient. Its asyncio core runs on a background thread started on first use."""

    def __init__(self, service_url: str, **options: Any) -> None:
        try:
            # Fails here, in the caller's thread, on a bad option.
            self._config = ClientConfig(service_url, **options)
        except TypeError as exc:
            raise InvalidArgumentError(f"invalid client option: {exc}") from None
        self._service_url = service_url
        self._options = options
        self._thread = LoopThread()
        self._async: AsyncClient | None = None
        self._start_lock = threading.Lock()

    def _core(self) -> AsyncClient:
        if self._thread.closed:
            raise AlreadyClosedError("client already closed")
        with self._start_lock:
            if self._async is None:
                self._async = self._thread.run(self._make())
            return self._async

    async def _make(self) -> AsyncClient:
        return AsyncClient(self._service_url, **self._options)

    def create_producer(self, topic: str, **options: Any) -> Producer[Any]:
        """A producer on `topic`; options as AsyncClient.create_producer."""
        core = self._core()
        producer = self._thread.run(core.create_producer(topic, **options))
        config = ProducerConfig(**{name: value for name, value in options.items() if name != "schema"})
        return Producer(self._thread, producer, config.max_pending_messages,
                        config.send_timeout or self._config.operation_timeout)

    def subscribe(
        self, topic: Topics, subscription_name: str, consumer_type: ConsumerType = ConsumerType.Exclusive,
        initial_position: InitialPosition = InitialPosition.Latest, **options: Any,
    ) -> Consumer[Any]:
        """A consumer of `topic` (a name, a list of names or a compiled pattern) through
        `subscription_name`; options as AsyncClient.subscribe. A message_listener or
        consumer_event_listener runs on a thread of the consumer's own and gets the blocking Consumer."""
        core = self._core()
        return Consumer._subscribe(self._thread, core, topic, subscription_name, consumer_type, initial_position,
                                   dict(options))

    def create_reader(self, topic: str, start_message_id: MessageId, **options: Any) -> Reader[Any]:
        """A reader of `topic` from `start_message_id` on; options as AsyncClient.create_reader.
        A reader_listener runs on a thread of the reader's own and gets the blocking Reader."""
        return Reader._create(self._thread, self._core(), topic, start_message_id, dict(options))

    def create_table_view(self, topic: str, *, schema: Schema[Any] | None = None) -> TableView[Any]:
        """A live dict of key -> latest value of `topic`; as AsyncClient.create_table_view. Its
        listeners run on a thread of the view's own."""
        return TableView._create(self._thread, self._core(), topic, schema)

    def get_partitions_for_topic(self, topic: str) -> list[str]:
        core = self._core()
        return self._thread.run(core.get_partitions_for_topic(topic))

    def get_last_message_id(self, topic: str) -> MessageId:
        """As AsyncClient.get_last_message_id."""
        core = self._core()
        return self._thread.run(core.get_last_message_id(topic))

    def pull(
        self, topic: str, start: MessageId | None = None, *, max_entries: int = 0, max_bytes: int = 0,
        timeout: float = 0.0, read_compacted: bool = False,
    ) -> PullResult:
        """As AsyncClient.pull."""
        core = self._core()
        return self._thread.run(core.pull(topic, start, max_entries=max_entries, max_bytes=max_bytes,
                                          timeout=timeout, read_compacted=read_compacted))

    def close(self) -> None:
        """Close every producer and consumer, then the connections and the client's thread.
        A second close raises AlreadyClosedError."""
        if self._thread.closed:
            raise AlreadyClosedError("client already closed")
        self._thread.closed = True
        try:
            if self._async is not None:
                self._thread.run(self._async.close())
        finally:
            self._thread.stop()

    def shutdown(self) -> None:
        """Stop at once: fail what is pending and drop the connections."""
        if self._thread.closed:
            return
        self._thread.closed = True
        try:
            if self._async is not None:
                self._thread.run(self._async.shutdown())
        finally:
            self._thread.stop()

    @property
    def closed(self) -> bool:
        return self._thread.closed

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._thread.closed:
            self.close()
