"""Deleting a persistent topic's stored state once nobody serves it any more: its cursors, dedup
snapshot, compaction state and ledger list from the metadata store, then its ledgers (compacted
ledgers included) from storage.

Metadata goes first and the ledger list last of it, so a deletion cut short leaves at worst a topic
with fewer subscriptions (it loads again) or ledgers no list names (garbage in storage, never read).
"""

from __future__ import annotations

import logging

from herald.broker.core.compaction.state import NO_LEDGER, CompactionState, state_key
from herald.broker.core.cursor import cursor_key
from herald.broker.core.dedup import dedup_key
from herald.broker.core.ledger_list import decode_record, managed_ledger_key
from herald.broker.core.managed_ledger import LedgerStorage
from herald.common.errors import HeraldError
from herald.metadata.store import MetadataStore

log = logging.getLogger(__name__)


async def delete_topic_data(store: MetadataStore, storage: LedgerStorage, ledger_name: str) -> list[int]:
    """Delete everything stored for managed ledger `ledger_name`; returns the ledger ids deleted
    from storage (a ledger storage failed to delete is logged and left behind)."""
    ledger_key = managed_ledger_key(ledger_name)
    found = await store.get(ledger_key)
    ledger_ids = [info.ledger_id for info in decode_record(found.value)[0]] if found else []
    for key in await store.list(cursor_key(ledger_name, "")):
        await store.delete(key)
    await store.delete(dedup_key(ledger_name))
    compaction = await store.get(state_key(ledger_name))
    if compaction is not None:  # the compacted ledger (and one a run left pending) go with the topic
        state = CompactionState.from_json(compaction.value)
        ledger_ids += [i for i in (state.ledger_id, state.pending_ledger_id) if i != NO_LEDGER]
        await store.delete(state_key(ledger_name))
    await store.delete(ledger_key)
    deleted = []
    for ledger_id in ledger_ids:
        try:
            await storage.delete_ledger(ledger_id)
            deleted.append(ledger_id)
        except HeraldError as exc:
            log.warning("managed ledger %s deleted, but not its ledger %s in storage: %s", ledger_name, ledger_id, exc)
    return deleted
