"""Pulsar's admin REST API for topics and subscriptions, and HTTP lookup, through a real
`herald standalone` (--web-port) and plain HTTP; messages are produced with Herald's own client
(as a Pulsar tool would see a live topic)."""

from __future__ import annotations

import struct
import time

import pytest
from herald.api.pulsar import PulsarApi_pb2 as pulsar
from herald.client import AsyncClient
from herald.common.errors import TopicTerminatedError

from tests.conftest import StandaloneProcess
from tests.helpers import unique_name
from tests.rest.conftest import V2, Rest
from tests.rest.conftest import new_namespace as _namespace


def _single_messages(body: bytes, count: int) -> list[tuple[pulsar.SingleMessageMetadata, bytes]]:
    """The messages of a peeked batch (Pulsar's batch payload: size | SingleMessageMetadata | data)."""
    messages = []
    offset = 0
    for _ in range(count):
        (size,) = struct.unpack_from(">I", body, offset)
        metadata = pulsar.SingleMessageMetadata.FromString(body[offset + 4:offset + 4 + size])
        start = offset + 4 + size
        messages.append((metadata, body[start:start + metadata.payload_size]))
        offset = start + metadata.payload_size
    return messages


async def test_non_partitioned_topics_are_created_listed_and_deleted_with_pulsars_codes(rest: Rest) -> None:
    namespace = await _namespace(rest)
    topic = f"{V2}/persistent/{namespace}/plain"
    assert (await rest.put(topic)).status == 204
    again = await rest.put(topic)
    assert again.status == 409 and "already exists" in again.reason
    assert (await rest.get(f"{V2}/persistent/{namespace}")).body == [f"persistent://{namespace}/plain"]
    assert (await rest.get(f"{topic}/partitions")).body == {"partitions": 0}
    no_namespace = await rest.put(f"{V2}/persistent/{namespace}-gone/plain")
    assert no_namespace.status == 404
    bad_name = await rest.put(f"{V2}/persistent/{namespace}/bad name!")
    assert bad_name.status == 412 and "Topic name is not valid" in bad_name.reason
    assert (await rest.delete(topic)).status == 204
    assert (await rest.delete(topic)).status == 404
    assert (await rest.get(f"{V2}/persistent/{namespace}")).body == []


async def test_partitioned_topics_are_created_grown_read_listed_and_deleted(rest: Rest) -> None:
    namespace = await _namespace(rest)
    topic = f"{V2}/persistent/{namespace}/parts"
    assert (await rest.put(f"{topic}/partitions", 3)).status == 204
    assert (await rest.get(f"{topic}/partitions")).body == {"partitions": 3}
    assert (await rest.put(f"{topic}/partitions", 3)).status == 409
    assert (await rest.get(f"{V2}/persistent/{namespace}/partitioned")).body == [f"persistent://{namespace}/parts"]
    assert (await rest.get(f"{V2}/persistent/{namespace}")).body == [
        f"persistent://{namespace}/parts-partition-{i}" for i in range(3)]
    shrink = await rest.post(f"{topic}/partitions", 2)
    assert shrink.status == 422 and "can only be added" in shrink.reason
    assert (await rest.post(f"{topic}/partitions", 5)).status == 204
    assert (await rest.get(f"{topic}/partitions")).body == {"partitions": 5}
    by_topic_path = await rest.delete(topic)
    assert by_topic_path.status == 405 and "partitioned" in by_topic_path.reason
    assert (await rest.delete(f"{topic}/partitions")).status == 204
    assert (await rest.get(f"{topic}/partitions")).body == {"partitions": 0}
    assert (await rest.delete(f"{topic}/partitions")).status == 404


async def test_partition_counts_that_are_not_positive_integers_are_refused(rest: Rest) -> None:
    namespace = await _namespace(rest)
    topic = f"{V2}/persistent/{namespace}/parts"
    zero = await rest.put(f"{topic}/partitions", 0)
    assert zero.status == 406 and "more than 0" in zero.reason
    text = await rest.put(f"{topic}/partitions", "three")
    assert text.status == 400 and "number of partitions" in text.reason
    assert (await rest.put(f"{topic}/partitions")).status == 400
    not_partitioned = await rest.post(f"{V2}/persistent/{namespace}/never/partitions", 4)
    assert not_partitioned.status == 404


async def test_a_pulsar_tool_round_trip_stats_reset_peek_skip_and_delete(
    rest: Rest, rest_standalone: StandaloneProcess,
) -> None:
    namespace = await _namespace(rest)
    name = f"persistent://{namespace}/{unique_name('orders')}"
    topic = f"{V2}/{name.replace('://', '/')}"
    assert (await rest.put(f"{topic}/partitions", 2)).status == 204
    partition = f"{V2}/persistent/{namespace}/{name.rsplit('/', 1)[1]}-partition-0"
    # A subscription made by the admin from the earliest message (Pulsar's MessageId.earliest).
    sub = f"{topic}/subscription/audit"
    assert (await rest.put(sub, {"ledgerId": -1, "entryId": -1})).status == 204
    assert (await rest.put(sub)).status == 409
    assert (await rest.get(f"{topic}/subscriptions")).body == ["audit"]
    async with AsyncClient(rest_standalone.service_url) as client:
        producer = await client.create_producer(name)
        for i in range(6):
            await producer.send(b"order %d" % i, key=f"k{i}", properties={"n": str(i)})
        stats = (await rest.get(f"{topic}/partitioned-stats")).body
        assert stats["msgInCounter"] == 6 and stats["bytesInCounter"] > 0
        assert stats["metadata"] == {"partitions": 2} and len(stats["partitions"]) == 2
        assert [p["producerName"] for p in stats["publishers"]]
        assert stats["subscriptions"]["audit"]["msgBacklog"] == 6
        # Deleting a topic with a producer connected is a failed precondition; ?force=true disconnects it.
        busy = await rest.delete(f"{topic}/partitions")
        assert busy.status == 412
        await producer.close()

    one = (await rest.get(f"{partition}/stats")).body
    assert one["subscriptions"]["audit"]["type"] and "msgBacklog" in one["subscriptions"]["audit"]
    in_partition = one["subscriptions"]["audit"]["msgBacklog"]
    assert in_partition > 0
    # Peek: the first unacknowledged message of the subscription, its metadata in X-Pulsar-* headers.
    # Herald's client batches: the body is the batch's payload, as Pulsar answers a batched entry.
    peeked = await rest.get(f"{partition}/subscription/audit/position/1")
    assert peeked.status == 200, peeked
    [(single, data)] = _single_messages(peeked.body, int(peeked.headers["X-Pulsar-num-batch-message"]))
    assert data.startswith(b"order ") and single.partition_key == f"k{data.decode().split()[1]}"
    assert {p.key: p.value for p in single.properties} == {"n": data.decode().split()[1]}
    assert ":" in peeked.headers["X-Pulsar-Message-ID"] and int(peeked.headers["X-Pulsar-publish-time"]) > 0
    second = await rest.get(f"{partition}/subscription/audit/position/2")
    assert second.status in (200, 404) and second.body != peeked.body
    nothing = await rest.get(f"{partition}/subscription/audit/position/{in_partition + 1}")
    assert nothing.status == 404
    # Skip one on the partition, then everything on the topic.
    assert (await rest.post(f"{partition}/subscription/audit/skip/1")).status == 204
    after_skip = (await rest.get(f"{partition}/stats")).body["subscriptions"]["audit"]["msgBacklog"]
    assert after_skip == in_partition - 1
    assert (await rest.post(f"{topic}/subscription/audit/skip_all")).status == 204
    assert (await rest.get(f"{topic}/partitioned-stats")).body["subscriptions"]["audit"]["msgBacklog"] == 0
    # Reset by publish time (all of them again), then to the latest by message id.
    assert (await rest.post(f"{topic}/subscription/audit/resetcursor/0")).status == 204
    assert (await rest.get(f"{topic}/partitioned-stats")).body["subscriptions"]["audit"]["msgBacklog"] == 6
    future = int(time.time() * 1000) + 3_600_000
    assert (await rest.post(f"{topic}/subscription/audit/resetcursor/{future}")).status == 204
    assert (await rest.get(f"{topic}/partitioned-stats")).body["subscriptions"]["audit"]["msgBacklog"] == 0
    first = peeked.headers["X-Pulsar-Message-ID"].split(":")
    by_id = {"ledgerId": int(first[0]), "entryId": int(first[1])}
    assert (await rest.post(f"{partition}/subscription/audit/resetcursor", by_id)).status == 204
    assert (await rest.get(f"{partition}/stats")).body["subscriptions"]["audit"]["msgBacklog"] == in_partition
    internal = (await rest.get(f"{partition}/internalStats")).body
    assert internal["numberOfEntries"] >= 1 and "audit" in internal["cursors"]
    assert internal["cursors"]["audit"]["markDeletePosition"].count(":") == 1
    assert (await rest.get(f"{topic}/internalStats")).status == 405
    assert (await rest.delete(sub)).status == 204
    assert (await rest.delete(sub)).status == 404
    assert (await rest.get(f"{topic}/subscriptions")).body == []
    assert (await rest.delete(f"{topic}/partitions")).status == 204


async def test_subscription_calls_check_their_inputs(rest: Rest) -> None:
    namespace = await _namespace(rest)
    topic = f"{V2}/persistent/{namespace}/t"
    assert (await rest.put(topic)).status == 204
    sub = f"{topic}/subscription/s"
    bad_id = await rest.put(sub, {"ledgerId": "x", "entryId": 0})
    assert bad_id.status == 400 and "ledgerId" in bad_id.reason
    assert (await rest.put(sub)).status == 204
    assert (await rest.post(f"{sub}/skip/0")).status == 400
    assert (await rest.post(f"{sub}/skip/many")).status == 400
    assert (await rest.post(f"{sub}/resetcursor/yesterday")).status == 400
    assert (await rest.post(f"{sub}/resetcursor")).status == 400
    assert (await rest.get(f"{sub}/position/0")).status == 400
    assert (await rest.post(f"{topic}/subscription/nobody/skip_all")).status == 404
    assert (await rest.delete(f"{topic}/subscription/nobody")).status == 404


async def test_stats_unload_and_terminate_of_a_plain_topic(rest: Rest, rest_standalone: StandaloneProcess) -> None:
    namespace = await _namespace(rest)
    name = f"persistent://{namespace}/t"
    topic = f"{V2}/persistent/{namespace}/t"
    async with AsyncClient(rest_standalone.service_url) as client:
        producer = await client.create_producer(name)
        await producer.send(b"x" * 100)
        stats = (await rest.get(f"{topic}/stats")).body
        assert stats["msgInCounter"] == 1 and stats["bytesInCounter"] >= 100 and stats["storageSize"] > 0
        assert len(stats["publishers"]) == 1 and stats["subscriptions"] == {}
        await producer.close()
    assert (await rest.get(f"{topic}/partitioned-stats")).status == 404
    assert (await rest.put(f"{topic}/unload")).status == 204
    terminated = await rest.post(f"{topic}/terminate")
    assert terminated.status == 200
    assert set(terminated.body) == {"ledgerId", "entryId", "partitionIndex"} and terminated.body["entryId"] >= 0
    async with AsyncClient(rest_standalone.service_url) as client:
        with pytest.raises(TopicTerminatedError):
            await client.create_producer(name)


async def test_http_lookup_and_namespace_topics_answer_as_the_pulsar_clients_ask(
    rest: Rest, rest_standalone: StandaloneProcess,
) -> None:
    namespace = await _namespace(rest)
    assert (await rest.put(f"{V2}/persistent/{namespace}/parts/partitions", 2)).status == 204
    assert (await rest.put(f"{V2}/persistent/{namespace}/plain")).status == 204
    found = await rest.get(f"/lookup/v2/topic/persistent/{namespace}/plain")
    assert found.status == 200
    assert found.body["brokerUrl"] == rest_standalone.pulsar_url  # the owner's, as it registered it
    assert found.body["httpUrl"] == rest.base_url and found.body["brokerUrlTls"] == ""
    # The C++ client's HTTP lookup: partitioned metadata with checkAllowAutoCreation, then each partition.
    meta = await rest.get(f"{V2}/persistent/{namespace}/parts/partitions", params={"checkAllowAutoCreation": "true"})
    assert meta.body == {"partitions": 2}
    assert (await rest.get(f"/lookup/v2/topic/persistent/{namespace}/parts-partition-1")).status == 200
    listed = await rest.get(f"{V2}/namespaces/{namespace}/topics", params={"mode": "PERSISTENT"})
    assert sorted(listed.body) == sorted([f"persistent://{namespace}/plain",
                                          *(f"persistent://{namespace}/parts-partition-{i}" for i in range(2))])
    assert (await rest.get(f"{V2}/namespaces/{namespace}/topics", params={"mode": "SOME"})).status == 400
    assert (await rest.get(f"/lookup/v2/topic/persistent/{namespace}-gone/plain")).status == 404
