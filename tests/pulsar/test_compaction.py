"""Compaction of what the official Pulsar client produced (its batches and single messages, keys
and empty values, in Pulsar's entry format): compacted through `herald admin`, the compacted
ledger holds exactly the entries with each key's latest value (counted against the client's
message ids), and the Pulsar admin REST shapes answer for it."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pulsar
from herald.client.admin import SyncAdminClient

from tests.conftest import StandaloneProcess
from tests.helpers import eventually_sync, unique_topic


def test_a_topic_written_by_the_pulsar_client_is_compacted(
    server: StandaloneProcess, make_client: Callable[..., pulsar.Client],
) -> None:
    topic = unique_topic("pulsar-compaction")
    client = make_client()
    batched = client.create_producer(topic, batching_enabled=True, batching_max_messages=50,
                                     batching_max_publish_delay_ms=5, block_if_queue_full=True)
    single = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    rng = random.Random(8)
    sent: list[tuple[Any, str, bool]] = []  # (message id, key, delete)
    ids: list[Any] = []

    results: list[pulsar.Result] = []

    def callback(result: pulsar.Result, message_id: Any, key: str, delete: bool) -> None:
        results.append(result)  # on the client's thread: nothing raised here
        sent.append((message_id, key, delete))

    for n in range(2000):
        key, delete = f"k{rng.randrange(100)}", rng.random() < 0.1
        producer = single if n % 100 == 0 else batched
        producer.send_async(b"" if delete else b"v%d" % n, lambda r, m, k=key, d=delete: callback(r, m, k, d),
                            partition_key=key)
    batched.flush()
    single.flush()
    eventually_sync(lambda: len(sent) == 2000, "every send to be acknowledged")
    assert set(results) == {pulsar.Result.Ok}
    latest: dict[str, Any] = {}
    for message_id, key, delete in sorted(sent, key=lambda s: (s[0].ledger_id(), s[0].entry_id(),
                                                                 s[0].batch_index())):
        if delete:
            latest.pop(key, None)
        else:
            latest[key] = message_id
    ids.extend(latest.values())
    with SyncAdminClient(server.service_url) as admin:
        admin.compact_topic(topic)

        def done() -> Any:
            status = admin.compaction_status(topic)
            return status if status.status == "SUCCESS" else None

        status = eventually_sync(done, "the compaction to succeed")
    assert status.compacted_entries == len({(m.ledger_id(), m.entry_id()) for m in ids})
    batched.close()
    single.close()
