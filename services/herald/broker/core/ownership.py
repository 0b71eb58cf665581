"""The broker's side of topic ownership: before serving a topic it checks that lookup assigned the
topic to it, under its current lease. An assignment left from this broker's previous lease (a
restart) is taken over by compare-and-set; anyone else's is refused with NotOwnerError.

Unloading releases a topic: the key is deleted (by compare-and-set, only while it names this
broker) after a short-lived /unloading/<topic> marker tells lookup to prefer another broker. And
OwnershipMonitor watches /ownership/ so that a topic whose key vanished (lease expiry) or names
another owner is closed here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection

from herald.common.bounded import Pacer
from herald.common.errors import BadVersionError, HeraldError, NotOwnerError, ServiceNotReadyError
from herald.common.ownership import OWNERSHIP_PREFIX, Owner, ownership_key, unloading_key
from herald.common.tasks import cancel_and_wait
from herald.metadata.store import LeaseExpiredError, MetadataStore, Versioned, WatchEvent

log = logging.getLogger(__name__)


class BrokerOwnership:
    def __init__(self, store: MetadataStore, broker_id: str, address: str, unload_exclusion_seconds: float = 10.0,
                 ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.address = address
        self.unload_exclusion_seconds = unload_exclusion_seconds
        self.lease_id = 0  # set by registration with lookup

    async def acquire(self, topic: str) -> None:
        if not self.lease_id:
            raise ServiceNotReadyError(f"broker {self.broker_id} is (re)registering with lookup: retry {topic} soon")
        key = ownership_key(topic)
        current = await self.store.get(key)
        if current is None:
            raise NotOwnerError(f"topic {topic} has no owner yet: look it up again")
        owner = Owner.from_bytes(current.value)
        if owner.broker_id != self.broker_id:
            raise NotOwnerError(f"topic {topic} is owned by broker {owner.broker_id} at {owner.address}")
        if owner.lease_id == self.lease_id:
            return
        mine = Owner(self.broker_id, self.address, self.lease_id)
        try:
            await self.store.put(key, mine.to_bytes(), expected_version=current.version, lease_id=self.lease_id)
        except (BadVersionError, LeaseExpiredError) as exc:
            raise NotOwnerError(f"topic {topic} changed owner while this broker took it over: look again") from exc

    def owns(self, current: Versioned | None) -> bool:
        """Whether an ownership record (as read) names this broker under its current lease."""
        if current is None or not self.lease_id:
            return False
        owner = Owner.from_bytes(current.value)
        return owner.broker_id == self.broker_id and owner.lease_id == self.lease_id

    async def release(self, topic: str) -> bool:
        """Give the topic up so that the next lookup assigns it anew: mark it as just unloaded by
        this broker, then delete its ownership key if it still names this broker. False when it
        had no owner; NotOwnerError when another broker owns it."""
        key = ownership_key(topic)
        current = await self.store.get(key)
        if current is None:
            return False
        owner = Owner.from_bytes(current.value)
        if owner.broker_id != self.broker_id:
            raise NotOwnerError(f"topic {topic} is owned by broker {owner.broker_id} at {owner.address}")
        if self.unload_exclusion_seconds > 0:
            # Its own short lease: the marker outlives neither its purpose nor this broker.
            lease_id = await self.store.grant_lease(self.unload_exclusion_seconds)
            await self.store.put(unloading_key(topic), self.broker_id.encode(), lease_id=lease_id)
        try:
            await self.store.delete(key, expected_version=current.version)
        except BadVersionError:
            return False  # reassigned meanwhile (our lease expired): it is not ours to delete
        log.info("topic %s released by broker %s", topic, self.broker_id)
        return True


class OwnershipMonitor:
    """Tells the service about topics it serves that this broker no longer owns: checked on every
    change under /ownership/ to a served topic, and all together when the watch (re)starts and
    every `check_interval` seconds. The key is re-read each time, so a stale event never unloads
    a topic that is ours again."""

    def __init__(
        self, store: MetadataStore, ownership: BrokerOwnership, served: Callable[[], Collection[str]],
        on_lost: Callable[[str], None], check_interval: float = 30.0, retry_seconds: float = 1.0,
    ) -> None:
        self.store = store
        self.ownership = ownership
        self._served = served
        self._on_lost = on_lost
        self._check_interval = check_interval
        self._retry_seconds = retry_seconds
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            watch = self.store.watch(OWNERSHIP_PREFIX)  # registered now: nothing after start() is missed
            self._task = asyncio.get_running_loop().create_task(self._run(watch), name="ownership-monitor")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self, watch: AsyncIterator[WatchEvent]) -> None:
        while True:
            try:
                await self.check_all()
                if await self._follow(watch):
                    return  # the store closed
            except HeraldError as exc:
                log.warning("watching topic ownership failed (%s): watching again in %.1fs", exc, self._retry_seconds)
            finally:
                closer = getattr(watch, "aclose", None)
                if closer is not None:
                    with contextlib.suppress(Exception):
                        await closer()
            await asyncio.sleep(self._retry_seconds)
            watch = self.store.watch(OWNERSHIP_PREFIX)

    async def _follow(self, watch: AsyncIterator[WatchEvent]) -> bool:
        """Check served topics as their keys change, and all of them now and then; True when the
        watch ended."""
        events = aiter(watch)
        loop = asyncio.get_running_loop()
        next_full_check = loop.time() + self._check_interval
        # One pending read across timeouts: cancelling a watch's read would end the watch.
        pending: asyncio.Future[WatchEvent] = asyncio.ensure_future(anext(events))
        try:
            while True:
                done, _ = await asyncio.wait({pending}, timeout=max(0.0, next_full_check - loop.time()))
                if not done:
                    await self.check_all()
                    next_full_check = loop.time() + self._check_interval
                    continue
                try:
                    event = pending.result()
                except StopAsyncIteration:
                    return True
                pending = asyncio.ensure_future(anext(events))
                topic = event.key[len(OWNERSHIP_PREFIX):]
                if topic in self._served():
                    await self.check(topic, await self.store.get(event.key))
        finally:
            pending.cancel()

    async def check_all(self) -> None:
        served = list(self._served())
        if not served:
            return
        records = await self.store.list(OWNERSHIP_PREFIX)
        pacer = Pacer()  # a broker may serve thousands of partitions
        for topic in served:
            await self.check(topic, records.get(ownership_key(topic)))
            await pacer.pace()

    async def check(self, topic: str, current: Versioned | None) -> None:
        if not self.ownership.lease_id or self.ownership.owns(current) or topic not in self._served():
            return  # re-registering (every topic is being dropped anyway), or still ours
        who = "nobody" if current is None else Owner.from_bytes(current.value).broker_id
        log.warning("topic %s is owned by %s now, not by this broker: closing it here", topic, who)
        self._on_lost(topic)
