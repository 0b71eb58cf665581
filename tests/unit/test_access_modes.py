"""Producer access modes and topic epochs (broker.core.access_modes), over the embedded metadata
store: who may join, who waits, who is fenced, and the epoch each exclusive taker gets."""

from __future__ import annotations

import asyncio

import pytest
from herald.broker.core.access_modes import ProducerAccess, ProducerAccessMode
from herald.common.errors import InvalidArgumentError, ProducerBusyError, ProducerFencedError
from herald.metadata.store import MetadataStore

from tests.helpers import eventually

TOPIC = "persistent://public/default/t"
Mode = ProducerAccessMode


def nothing() -> None:
    pass


async def take(access: ProducerAccess, name: str, mode: Mode, producers: set[str],
               topic_epoch: int | None = None) -> int:
    await access.claim(name, mode, topic_epoch, producers, nothing, None)
    epoch = await access.epoch_for(topic_epoch)
    producers.add(name)
    return epoch


def test_modes_parse_by_number_and_name() -> None:
    assert Mode.parse(3) is Mode.EXCLUSIVE_WITH_FENCING
    assert Mode.parse("wait-for-exclusive") is Mode.WAIT_FOR_EXCLUSIVE
    with pytest.raises(InvalidArgumentError, match="unknown producer access mode"):
        Mode.parse(9)


async def test_exclusive_refuses_others_and_shared_is_refused_while_it_holds(store: MetadataStore) -> None:
    access = ProducerAccess(TOPIC, store)
    producers: set[str] = set()
    assert await take(access, "a", Mode.EXCLUSIVE, producers) == 0
    with pytest.raises(ProducerFencedError, match="exclusive producer"):
        await take(access, "b", Mode.EXCLUSIVE, producers)
    with pytest.raises(ProducerBusyError, match="exclusive producer"):
        access.check_shared("c")
    producers.discard("a")
    access.released("a", producers)
    access.check_shared("c")
    producers.add("c")
    with pytest.raises(ProducerFencedError, match="shared producer"):
        await take(access, "d", Mode.EXCLUSIVE, producers)


async def test_the_epoch_moves_on_is_kept_in_the_store_and_an_older_one_is_fenced(store: MetadataStore) -> None:
    access = ProducerAccess(TOPIC, store)
    producers: set[str] = set()
    assert await take(access, "a", Mode.EXCLUSIVE, producers) == 0
    producers.clear()
    access.released("a", producers)
    assert await take(access, "b", Mode.EXCLUSIVE, producers) == 1
    producers.clear()
    access.released("b", producers)
    reloaded = ProducerAccess(TOPIC, store)  # the topic loaded again (an unload, a failover)
    with pytest.raises(ProducerFencedError, match="epoch moved on to 1"):
        await take(reloaded, "a", Mode.EXCLUSIVE, set(), topic_epoch=0)
    assert await take(reloaded, "b", Mode.EXCLUSIVE, set(), topic_epoch=1) == 1


async def test_wait_for_exclusive_waits_in_order_until_the_topic_is_free(store: MetadataStore) -> None:
    access = ProducerAccess(TOPIC, store)
    producers: set[str] = set()
    await take(access, "holder", Mode.EXCLUSIVE, producers)
    queued: list[str] = []

    async def wait(name: str) -> int:
        await access.claim(name, Mode.WAIT_FOR_EXCLUSIVE, None, producers, nothing, lambda: queued.append(name))
        return await access.epoch_for(None)

    first = asyncio.ensure_future(wait("w1"))
    second = asyncio.ensure_future(wait("w2"))
    await eventually(lambda: len(queued) == 2, "both waiters queued")
    assert queued == ["w1", "w2"] and not first.done() and access.waiting == 2
    with pytest.raises(ProducerBusyError):  # shared ones do not jump the queue
        access.check_shared("s")
    producers.discard("holder")
    access.released("holder", producers)
    assert await first == 1 and access.holder == "w1"
    assert not second.done()
    access.released("w1", producers)
    assert await second == 2


async def test_fencing_closes_the_holder_and_refuses_the_waiting(store: MetadataStore) -> None:
    access = ProducerAccess(TOPIC, store)
    producers: set[str] = set()
    await take(access, "holder", Mode.EXCLUSIVE, producers)
    waiter = asyncio.ensure_future(access.claim("w", Mode.WAIT_FOR_EXCLUSIVE, None, producers, nothing, None))
    await eventually(lambda: access.waiting == 1, "the waiter queued")
    fenced: list[str] = []

    def fence() -> None:
        fenced.extend(sorted(producers))
        producers.clear()

    await access.claim("new", Mode.EXCLUSIVE_WITH_FENCING, None, producers, fence, None)
    assert await access.epoch_for(None) == 1
    assert fenced == ["holder"] and access.holder == "new"
    with pytest.raises(ProducerFencedError, match="waiting for it were fenced"):
        await waiter


async def test_a_cancelled_waiter_leaves_the_queue(store: MetadataStore) -> None:
    access = ProducerAccess(TOPIC, store)
    producers: set[str] = set()
    await take(access, "holder", Mode.EXCLUSIVE, producers)
    waiter = asyncio.ensure_future(access.claim("w", Mode.WAIT_FOR_EXCLUSIVE, None, producers, nothing, None))
    await eventually(lambda: access.waiting == 1, "the waiter queued")
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert access.waiting == 0
    producers.clear()
    access.released("holder", producers)
    assert access.holder is None


async def test_a_claim_overtaken_by_a_fencing_taker_is_fenced(store: MetadataStore) -> None:
    access = ProducerAccess(TOPIC, store)
    producers: set[str] = set()
    await access.claim("slow", Mode.EXCLUSIVE, None, producers, nothing, None)
    await access.claim("fencer", Mode.EXCLUSIVE_WITH_FENCING, None, producers, nothing, None)
    await access.epoch_for(None)
    with pytest.raises(ProducerFencedError, match="took the topic with fencing"):
        access.check_holder("slow")
    access.check_holder("fencer")
