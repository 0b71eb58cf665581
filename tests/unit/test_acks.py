"""The consumer's ack tracker: a batch's entry is acked on the broker only when all its messages
are; cumulative acks move a floor; acks wait grouped until taken."""

from __future__ import annotations

from herald.client.acks import AckTracker


def test_unbatched_message_acks_its_entry_at_once() -> None:
    tracker = AckTracker()
    assert tracker.acknowledge(1, 5, -1)
    assert tracker.take() == ([(1, 5)], None)
    assert len(tracker) == 0


def test_batch_entry_is_acked_only_when_all_its_messages_are() -> None:
    tracker = AckTracker()
    assert tracker.track(1, 5, 3) == 0b111
    assert not tracker.acknowledge(1, 5, 0, 3)
    assert not tracker.acknowledge(1, 5, 2, 3)
    assert len(tracker) == 0
    assert tracker.acknowledge(1, 5, 1, 3)
    assert tracker.take() == ([(1, 5)], None)
    assert tracker.batches_tracked() == 0


def test_acking_the_same_message_twice_does_not_complete_the_batch() -> None:
    tracker = AckTracker()
    tracker.track(1, 5, 2)
    assert not tracker.acknowledge(1, 5, 0, 2)
    assert not tracker.acknowledge(1, 5, 0, 2)
    assert tracker.acknowledge(1, 5, 1, 2)


def test_batch_size_from_the_message_works_without_tracking() -> None:
    tracker = AckTracker()
    assert not tracker.acknowledge(2, 0, 1, 2)
    assert tracker.acknowledge(2, 0, 0, 2)


def test_id_of_an_untracked_batch_acks_the_entry() -> None:
    # A bare MessageId of a batch this consumer never saw (or already completed).
    tracker = AckTracker()
    assert tracker.acknowledge(3, 3, 4)
    assert tracker.take() == ([(3, 3)], None)


def test_redelivered_batch_keeps_what_was_acked() -> None:
    tracker = AckTracker()
    tracker.track(1, 1, 4)
    tracker.acknowledge(1, 1, 0, 4)
    tracker.acknowledge(1, 1, 3, 4)
    assert tracker.track(1, 1, 4) == 0b0110
    assert tracker.is_acked(1, 1, 0) and not tracker.is_acked(1, 1, 1)


def test_cumulative_ack_of_a_whole_entry() -> None:
    tracker = AckTracker()
    assert tracker.acknowledge_cumulative(1, 9, -1)
    assert tracker.take() == ([], (1, 9))
    assert tracker.is_acked(1, 3, -1)
    assert not tracker.is_acked(1, 10, -1)


def test_cumulative_ack_inside_a_batch_acks_the_entry_before_it() -> None:
    tracker = AckTracker()
    tracker.track(1, 9, 3)
    assert tracker.acknowledge_cumulative(1, 9, 1, 3)
    assert tracker.take() == ([], (1, 8))
    # The rest of the batch then completes the entry.
    assert tracker.acknowledge(1, 9, 2, 3)
    assert tracker.take() == ([(1, 9)], None)


def test_cumulative_ack_of_a_batch_last_message_acks_the_entry() -> None:
    tracker = AckTracker()
    tracker.track(1, 9, 3)
    assert tracker.acknowledge_cumulative(1, 9, 2, 3)
    assert tracker.take() == ([], (1, 9))
    assert tracker.batches_tracked() == 0


def test_cumulative_inside_the_first_entry_of_a_ledger_waits() -> None:
    tracker = AckTracker()
    tracker.track(4, 0, 2)
    assert not tracker.acknowledge_cumulative(4, 0, 0, 2)
    assert tracker.take() == ([], None)


def test_only_the_newest_cumulative_ack_is_sent_and_older_ones_are_ignored() -> None:
    tracker = AckTracker()
    tracker.acknowledge_cumulative(1, 3, -1)
    tracker.acknowledge_cumulative(1, 7, -1)
    assert not tracker.acknowledge_cumulative(1, 5, -1)
    assert tracker.take() == ([], (1, 7))
    assert not tracker.acknowledge_cumulative(1, 6, -1)
    assert tracker.take() == ([], None)


def test_cumulative_floor_drops_covered_individual_acks_and_batches() -> None:
    tracker = AckTracker()
    tracker.track(1, 2, 3)
    tracker.acknowledge(1, 2, 0, 3)
    tracker.acknowledge(1, 1, -1)
    tracker.acknowledge(1, 8, -1)
    tracker.acknowledge_cumulative(1, 5, -1)
    assert len(tracker) == 3
    assert tracker.take() == ([(1, 8)], (1, 5))
    assert tracker.batches_tracked() == 0


def test_take_returns_positions_in_order_and_clears() -> None:
    tracker = AckTracker()
    for entry in (5, 1, 3, 1):
        tracker.acknowledge(2, entry, -1)
    assert tracker.take() == ([(2, 1), (2, 3), (2, 5)], None)
    assert tracker.take() == ([], None)


async def test_consumer_skips_messages_it_acked_when_their_batch_comes_again() -> None:
    # An offline consumer (never connected): what it does with delivered entries and acks.
    from herald.api.v1 import broker_pb2
    from herald.client.config import ClientConfig, ConsumerConfig
    from herald.client.connection import ConnectionPool
    from herald.client.lookup import LookupService
    from herald.client.topic_consumer import TopicConsumer
    from herald.common.codec.entry import EntryMetadata, encode_entry, pack_record

    config = ClientConfig("herald://127.0.0.1:1")
    pool = ConnectionPool(config)
    consumer = TopicConsumer("persistent://public/default/t", ConsumerConfig("s", ack_group_time=0), config, pool,
                             LookupService(pool, config), lambda _c: None)
    payload = bytearray()
    for value in (b"a", b"b", b"c"):
        pack_record(payload, value)
    data = encode_entry(EntryMetadata(producer_name="p", sequence_id=7, highest_sequence_id=9, num_messages=3,
                                      batched=True), payload)
    entry = broker_pb2.DeliveredEntry(ledger_id=1, entry_id=2, data=data)
    consumer._protocol.on_entries([entry])
    first = [await consumer.receive(timeout=0) for _ in range(3)]
    assert [m.value if m else None for m in first] == [b"a", b"b", b"c"]
    assert [m.sequence_id for m in first if m] == [7, 8, 9]
    assert first[1] is not None
    consumer.acknowledge(first[1])
    consumer._protocol.on_entries([broker_pb2.DeliveredEntry(ledger_id=1, entry_id=2, data=data, redelivery_count=1)])
    again = [await consumer.receive(timeout=0) for _ in range(3)]
    assert [m.value if m else None for m in again] == [b"a", b"c", None]
    assert [m.redelivery_count for m in again if m] == [1, 1]
    # A corrupt entry is dropped, not delivered.
    corrupt = bytearray(data)
    corrupt[-1] ^= 1
    consumer._protocol.on_entries([broker_pb2.DeliveredEntry(ledger_id=1, entry_id=3, data=bytes(corrupt))])
    assert await consumer.receive(timeout=0) is None
    assert consumer.corrupt_entries == 1
    await consumer.close()


def test_a_delivered_batch_has_unacked_messages_until_its_last_ack() -> None:
    tracker = AckTracker()
    assert not tracker.has_unacked_messages(1, 5)  # never delivered
    tracker.track(1, 5, 3)
    assert tracker.has_unacked_messages(1, 5)
    tracker.acknowledge_cumulative(1, 5, 1, 3)
    assert tracker.has_unacked_messages(1, 5)
    tracker.acknowledge(1, 5, 2, 3)
    assert not tracker.has_unacked_messages(1, 5)


def test_reset_after_a_seek_lets_messages_behind_the_floor_be_acked_again() -> None:
    tracker = AckTracker()
    assert tracker.acknowledge_cumulative(1, 9, -1)
    tracker.track(2, 0, 2)
    tracker.acknowledge(2, 0, 0, 2)
    tracker.take()
    tracker.reset()
    # Delivered again after seeking back: acks below the old floor count, and the batch is whole.
    assert tracker.track(2, 0, 2) == 0b11
    assert tracker.acknowledge_cumulative(1, 3, -1)
    assert tracker.acknowledge(1, 4, -1)
    assert tracker.take() == ([(1, 4)], (1, 3))


async def test_a_batchs_messages_acked_in_any_order_ack_its_entry_once_and_a_seek_starts_over() -> None:
    """The consumer's ack fast path (a flag cleared on the batch's BatchAcks for every message but
    the batch's last): acking a message twice counts once, the entry's ack goes once all its
    messages are acked, and after a seek a batch delivered again is tracked afresh."""
    from herald.api.v1 import broker_pb2
    from herald.client.config import ClientConfig, ConsumerConfig
    from herald.client.connection import ConnectionPool
    from herald.client.lookup import LookupService
    from herald.client.topic_consumer import TopicConsumer
    from herald.common.codec.entry import EntryMetadata, encode_entry, pack_record

    config = ClientConfig("herald://127.0.0.1:1")
    pool = ConnectionPool(config)
    consumer = TopicConsumer("persistent://public/default/t", ConsumerConfig("s", ack_group_time=0), config, pool,
                             LookupService(pool, config), lambda _c: None)
    payload = bytearray()
    for value in (b"a", b"b", b"c", b"d"):
        pack_record(payload, value)
    data = encode_entry(EntryMetadata(producer_name="p", sequence_id=0, highest_sequence_id=3, num_messages=4,
                                      batched=True), payload)
    delivered = broker_pb2.DeliveredEntry(ledger_id=1, entry_id=2, data=data)

    def acks_sent() -> list[list[tuple[int, int]]]:
        outbox = consumer._protocol.outbox
        sent = [[(p.ledger_id, p.entry_id) for p in request.ack.positions] for request in outbox
                if request.WhichOneof("command") == "ack"]
        outbox.clear()
        return sent

    consumer._protocol.on_entries([delivered])
    a, b, c, d = [await consumer.receive(timeout=0) for _ in range(4)]
    assert a and b and c and d
    for message in (b, b, d, b, c):  # b three times: it counts once
        consumer.acknowledge(message)
    assert acks_sent() == []
    consumer.acknowledge(a)  # the last one
    assert acks_sent() == [[(1, 2)]]
    consumer.acknowledge(a)  # again: the entry was acked already, nothing more goes
    assert acks_sent() == []

    consumer._protocol.on_entries([broker_pb2.DeliveredEntry(ledger_id=1, entry_id=3, data=data)])
    before_seek = [await consumer.receive(timeout=0) for _ in range(4)]
    consumer.acknowledge(before_seek[0])  # 1 of 4
    consumer._protocol.seeked()  # every message may come again, counted unacked
    consumer._protocol._seeking = False  # the new stream's deliveries
    consumer._protocol.on_entries([broker_pb2.DeliveredEntry(ledger_id=1, entry_id=3, data=data)])
    after_seek = [await consumer.receive(timeout=0) for _ in range(4)]
    assert [m.data() if m else None for m in after_seek] == [b"a", b"b", b"c", b"d"]  # a came again
    for message in after_seek[1:]:
        assert message
        consumer.acknowledge(message)
    assert acks_sent() == []  # a, acked before the seek, does not count
    assert after_seek[0]
    consumer.acknowledge(after_seek[0])
    assert acks_sent() == [[(1, 3)]]
    await consumer.close()
