"""Message ids: ordered by (ledger, entry, partition, batch index); bytes and text round trips."""

from __future__ import annotations

import pytest
from herald.common.codec.message_id import EARLIEST, LATEST, MessageId
from herald.common.errors import InvalidArgumentError
from hypothesis import given
from hypothesis import strategies as st

i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
i32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
ids = st.builds(MessageId, i64, i64, i32, i32)


def test_ids_order_by_ledger_then_entry_then_batch_index() -> None:
    ordered = [MessageId(1, 0), MessageId(1, 1, -1, 0), MessageId(1, 1, -1, 1), MessageId(1, 2), MessageId(2, 0)]
    assert sorted(reversed(ordered)) == ordered
    assert EARLIEST < MessageId(0, 0) < LATEST


def test_defaults_mean_not_partitioned_and_not_batched() -> None:
    assert MessageId(3, 4) == MessageId(3, 4, -1, -1)


def test_text_form() -> None:
    assert str(MessageId(3, 4, 1, 7)) == "3:4:1:7"
    assert MessageId.from_str("3:4") == MessageId(3, 4)


@pytest.mark.parametrize("text", ["", "3", "a:b", "1:2:3:4:5", "1::2"])
def test_bad_text_is_refused(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="message id"):
        MessageId.from_str(text)


def test_bad_bytes_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="24 bytes"):
        MessageId.from_bytes(b"\x00" * 5)


@given(ids)
def test_bytes_round_trip(message_id: MessageId) -> None:
    assert MessageId.from_bytes(message_id.to_bytes()) == message_id


@given(ids)
def test_text_round_trip(message_id: MessageId) -> None:
    assert MessageId.from_str(str(message_id)) == message_id


@given(ids, ids)
def test_order_matches_the_tuple_order(a: MessageId, b: MessageId) -> None:
    assert (a < b) == (tuple(a) < tuple(b))
    assert (a == b) == (a.to_bytes() == b.to_bytes())
