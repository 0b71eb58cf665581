"""Reading one stored entry for an admin: by its position (pulsar-admin get-message-by-id) or by
its offset from the earliest or latest entry (examine-message). The entry is read as stored, left
for the caller to decode, and nothing moves: no cursor, no acknowledgement."""

from __future__ import annotations

from herald.broker.core.ledger_list import Position
from herald.broker.core.managed_ledger import ManagedLedger
from herald.common.errors import InvalidArgumentError, NotFoundError


async def entry_at(ledger: ManagedLedger, topic: str, position: Position) -> bytes:
    """The entry stored at `position`; NotFoundError when the topic holds none there (never
    written, or deleted by retention)."""
    if position.ledger_id < 0 or position.entry_id < 0:
        raise InvalidArgumentError(f"message id {position} is invalid: ledger and entry are 0 or more")
    if ledger.has_entry(position) and position <= ledger.last_confirmed_position:
        found = await ledger.read_entries(position, 1, cache=False)
        if found and found[0][0] == position:
            return found[0][1]
    raise NotFoundError(f"topic {topic} has no message {position}: it was never written or was deleted "
                        f"(its first entry is {ledger.first_position}, its last {ledger.last_confirmed_position})")


def position_at_offset(ledger: ManagedLedger, topic: str, offset: int, *, latest: bool) -> Position:
    """The position `offset` entries from the earliest (offset 1: the first entry) or, with
    `latest`, from the latest (1: the last entry) of the entries kept; NotFoundError past them."""
    if offset < 1:
        raise InvalidArgumentError(f"offset {offset} is invalid: 1 is the first (or, from latest, the last) entry")
    last = ledger.last_confirmed_position
    # The entries each ledger holds, counted up to the last confirmed one (a ledger listed ahead of
    # its first add holds none).
    counts = [(info.ledger_id, info.entries) for info in ledger.ledgers if info.ledger_id <= last.ledger_id]
    remaining = offset
    for ledger_id, entries in (reversed(counts) if latest else counts):
        if remaining <= entries:
            return Position(ledger_id, entries - remaining if latest else remaining - 1)
        remaining -= entries
    kept = offset - remaining
    raise NotFoundError(f"topic {topic} keeps {kept} entries: there is none at offset {offset} from the "
                        f"{'latest' if latest else 'earliest'}")
