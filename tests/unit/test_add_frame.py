"""An add serialized once for every replica (storage.client.add_frame): its bytes are protobuf's own
canonical serialization of the same AddRequest, alone or batched, so the storage contract on the
wire is unchanged; the entry bytes are copied into the frame's message once, whatever the replicas."""

from __future__ import annotations

from herald.api.v1 import storage_pb2
from herald.storage.client.add_frame import AddFrame, batch_message, varint
from hypothesis import given
from hypothesis import strategies as st

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
ADDS = st.builds(
    lambda request_id, ledger_id, entry_id, data, lac, recovery, traceparent: (
        AddFrame(request_id, ledger_id, entry_id, data, last_add_confirmed=lac, recovery=recovery,
                 traceparent=traceparent),
        storage_pb2.AddRequest(request_id=request_id, ledger_id=ledger_id, entry_id=entry_id, data=data,
                               last_add_confirmed=lac, recovery=recovery, traceparent=traceparent)),
    INT64, INT64, INT64, st.binary(max_size=300), INT64, st.booleans(), st.text(max_size=60))


@given(st.lists(ADDS, min_size=1, max_size=5))
def test_frames_are_protobufs_own_serialization_of_the_batch(
        adds: list[tuple[AddFrame, storage_pb2.AddRequest]]) -> None:
    frames = [frame for frame, _ in adds]
    expected = storage_pb2.AddBatchRequest(adds=[request for _, request in adds]).SerializeToString()
    assert batch_message(frames) == expected
    assert sum(frame.size for frame in frames) == len(expected)


@given(INT64)
def test_varint_is_protobufs(value: int) -> None:
    encoded = storage_pb2.AddRequest(ledger_id=value).SerializeToString()
    assert encoded == (b"\x10" + varint(value) if value else b"")


def test_an_add_sent_alone_is_the_same_buffer_for_every_replica() -> None:
    data = b"x" * 100_000
    frame = AddFrame(7, 3, 0, data, last_add_confirmed=-1)
    for _ in range(3):  # queued on three nodes' streams
        frame.queued()
    # What each node's stream writes for an add queued alone: one buffer, built once...
    first = batch_message([frame])
    frame.written()
    second = batch_message([frame])
    frame.written()
    assert second is first and batch_message([frame]) is first
    frame.written()
    # ... and not kept once every stream wrote it.
    assert batch_message([frame]) is not first
    parsed = storage_pb2.AddBatchRequest.FromString(first)
    assert [(a.request_id, a.ledger_id, a.entry_id, a.data, a.last_add_confirmed) for a in parsed.adds] == [
        (7, 3, 0, data, -1)]
    # The entry bytes are the caller's: not copied until a message is built.
    assert frame.parts[1] is data
