"""Offsets and the maxMessagesPerTrigger cut, on their own (no Spark, no server)."""

from __future__ import annotations

import pytest
from herald.common.codec.message_id import MessageId
from herald.common.errors import InvalidArgumentError
from herald_spark import offsets
from herald_spark.trigger_limit import advance, entries_between

LEDGERS = [(3, 10), (7, 0), (9, 4)]  # (ledger, entries): an empty ledger in the middle


def test_the_offset_after_a_last_message_is_the_start_of_the_next_entry() -> None:
    assert offsets.after(MessageId(5, 9, 0, 99), 0) == MessageId(5, 10, 0, -1)
    assert offsets.after(MessageId(-1, -1, -1, -1), 2) == offsets.earliest(2)
    assert offsets.earliest(2) < MessageId(0, 0, 2, -1) < MessageId(0, 0, 2, 0)


def test_offsets_json_names_full_topics_and_message_ids() -> None:
    spec = offsets.parse_spec("startingOffsets", '{"orders-partition-1": "5:3:1:-1", "b": "earliest"}', "latest")
    assert spec == {"persistent://public/default/orders-partition-1": "5:3:1:-1",
                    "persistent://public/default/b": "earliest"}
    assert offsets.to_json(offsets.from_json({"b": "1:2:0:-1", "a": "3:4:0:5"})) == {"a": "3:4:0:5", "b": "1:2:0:-1"}
    with pytest.raises(InvalidArgumentError, match="startingOffsets"):
        offsets.parse_spec("startingOffsets", '{"a": 5}', "latest")


def test_entries_are_counted_and_skipped_across_ledgers() -> None:
    start, end = MessageId(3, 8, 0, -1), MessageId(9, 3, 0, -1)
    assert entries_between(LEDGERS, start, end) == 2 + 3
    assert advance(LEDGERS, start, end, 1) == MessageId(3, 9, 0, -1)
    assert advance(LEDGERS, start, end, 2) == MessageId(9, 0, 0, -1)
    assert advance(LEDGERS, start, end, 4) == MessageId(9, 2, 0, -1)
    assert advance(LEDGERS, start, end, 9) == end
    assert entries_between(LEDGERS, MessageId(-1, -1, 0, -1), end) == 13
