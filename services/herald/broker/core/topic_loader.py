"""Making a topic of the kind its name says, ready to load: a persistent topic opens its managed ledger
(recovering the last ledger a dead writer may have left open, then creating one to write to) and
recovers its deduplication state; a non-persistent topic needs nothing stored. The registry
(broker.core.topic_registry) applies policies, loads and serves what this makes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from herald.broker.core.dead_letters import DeadLetterQueue
from herald.broker.core.dedup import MessageDeduplication
from herald.broker.core.entry_cache import EntryCacheManager
from herald.broker.core.managed_ledger import LedgerStorage, ManagedLedger
from herald.broker.core.nonpersistent_topic import NonPersistentTopic
from herald.broker.core.ports import BrokerObserver
from herald.broker.core.topic import PersistentTopic
from herald.broker.core.topic_base import Topic
from herald.broker.core.topic_jobs import TopicJobs
from herald.broker.settings import BrokerSettings
from herald.common.codec.names import TopicName
from herald.metadata.policies import Policies
from herald.metadata.store import MetadataStore


def ledger_name(topic: TopicName) -> str:
    """The managed ledger's name (and metadata path) for a topic, as Pulsar spells it."""
    return f"{topic.tenant}/{topic.namespace}/{topic.domain}/{topic.local_name}"


class TopicLoader:
    def __init__(
        self, settings: BrokerSettings, store: MetadataStore, storage: LedgerStorage, entry_cache: EntryCacheManager,
        dead_letters: DeadLetterQueue, observer: BrokerObserver | None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._storage = storage
        self._entry_cache = entry_cache
        self._dead_letters = dead_letters
        self._observer = observer
        # One of each periodic job for all of this broker's persistent topics (not a task per topic).
        self.jobs = TopicJobs.for_settings(settings)

    async def create(
        self, name: TopicName, policies: Policies, on_fenced: Callable[[Topic[Any]], None],
    ) -> Topic[Any]:
        """A topic for `name`, not loaded yet. `policies` are its effective ones: a persistent
        topic's first ledger is made with their quorums. `on_fenced`: another broker took it over."""
        key = str(name)
        if not name.persistent:
            return NonPersistentTopic(key, self._settings, self._store)
        settings = self._settings
        ml_name = ledger_name(name)
        ledger = ManagedLedger(ml_name, self._store, self._storage, settings, self._entry_cache.cache_for(ml_name))
        persistence = policies.persistence
        assert persistence is not None
        ledger.persistence = (persistence.ensemble_size, persistence.write_quorum, persistence.ack_quorum)
        try:
            await ledger.open()
            dedup = MessageDeduplication(ml_name, self._store, bool(policies.deduplication_enabled),
                                         settings.dedup_snapshot_interval)
            await dedup.recover(ledger)
        except BaseException:
            with contextlib.suppress(Exception):
                await ledger.close()
            raise
        return PersistentTopic(key, ledger, dedup, settings, self._store, on_fenced=on_fenced,
                               dead_letters=self._dead_letters, observer=self._observer, jobs=self.jobs)
