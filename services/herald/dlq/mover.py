"""Moving one dead letter: make sure its dead-letter topic holds letters until they are replayed
(the worker's initial subscription there), publish the letter under its own producer name, and
say whether it moved. A letter found in the topic already (a move that crashed before it was
reported, or a letter lent again after a lost report) counts as moved: dedup recognised it.

All of it acting as the letter's role (dlq.acting): the broker authorizes that role, not the
worker's. The initial subscription is made only where that role may consume; where it may not, the
letters are moved all the same, with no subscription holding them (logged)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict

from herald.api.v1 import deadletter_pb2
from herald.client.admin import AdminClient
from herald.client.config import DEFAULT_MAX_MESSAGE_SIZE, InitialPosition
from herald.common.errors import AlreadyExistsError, AuthorizationError, HeraldError, NotAllowedError
from herald.dlq.acting import acting_for
from herald.dlq.letters import letter_producer_name, letter_publication
from herald.dlq.metrics import DlqMetrics
from herald.dlq.publisher import IdempotentPublisher

log = logging.getLogger(__name__)

_HELD_TOPICS = 10_000


class LetterMover:
    def __init__(
        self, publisher: IdempotentPublisher, metrics: DlqMetrics, admin: AdminClient | None = None,
        initial_subscription: str = "", max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    ) -> None:
        self._publisher = publisher
        self._max_message_size = max_message_size
        self._metrics = metrics
        self._admin = admin
        self._initial_subscription = initial_subscription if admin is not None else ""
        # (Dead-letter topic, role) whose initial subscription exists, is being made, or may not be
        # made by that role: roles may differ in what they may do there.
        self._held: OrderedDict[tuple[str, str], asyncio.Future[None]] = OrderedDict()

    async def move(self, letter: deadletter_pb2.DeadLetter) -> HeraldError | None:
        """Publish the letter to its dead-letter topic: None when it is there (now or before), else
        the error that stopped it (counted; the caller hands the letter back)."""
        started = time.monotonic()
        self._metrics.moves_in_flight.inc()
        try:
            publication = letter_publication(letter, self._max_message_size)
            name = letter_producer_name(letter)
            with acting_for(letter.role):
                await self._hold(letter.dead_letter_topic, letter.role)
                published = await self._publisher.publish(letter.dead_letter_topic, name, publication)
        except HeraldError as exc:
            self._failed(letter, exc)
            return exc
        except Exception as exc:  # a bug must cost one letter a retry, never the worker
            log.exception("moving dead letter %d of %s %s failed unexpectedly", letter.letter_id, letter.topic,
                          letter.subscription)
            error = HeraldError(f"unexpected error: {exc!r}")
            self._failed(letter, error)
            return error
        finally:
            self._metrics.moves_in_flight.dec()
        if published.duplicate:
            self._metrics.duplicates.inc()
            log.info("dead letter %s of %s %s was in %s already (%s): not stored again", _at(letter), letter.topic,
                     letter.subscription, published.topic, name)
        self._metrics.letters_moved.inc()
        self._metrics.messages_moved.inc(len(publication))
        self._metrics.move_seconds.observe(time.monotonic() - started)
        return None

    def _failed(self, letter: deadletter_pb2.DeadLetter, error: HeraldError) -> None:
        self._metrics.failed(error)
        log.warning("dead letter %s of %s %s could not be moved to %s: %s", _at(letter), letter.topic,
                    letter.subscription, letter.dead_letter_topic, error)

    async def _hold(self, topic: str, role: str) -> None:
        """The initial subscription on `topic`, made once per topic and role (the first caller makes
        it, the others wait; a failure is tried again by the next letter). Called acting as `role`:
        the future made here runs in this context."""
        if not self._initial_subscription:
            return
        key = (topic, role)
        made = self._held.get(key)
        if made is None:
            made = self._held[key] = asyncio.ensure_future(self._subscribe(topic, role))
            while len(self._held) > _HELD_TOPICS:
                self._held.popitem(last=False)
        try:
            await asyncio.shield(made)
        except BaseException:
            if made.done() and (made.cancelled() or made.exception() is not None) and self._held.get(key) is made:
                del self._held[key]
            raise

    async def _subscribe(self, topic: str, role: str) -> None:
        assert self._admin is not None
        try:
            await self._admin.create_subscription(topic, self._initial_subscription, InitialPosition.Earliest)
            log.info("subscription %s made on dead-letter topic %s: its letters stay until replayed",
                     self._initial_subscription, topic)
        except AlreadyExistsError:
            pass
        except NotAllowedError as exc:  # a non-persistent dead-letter topic holds nothing anyway
            log.info("no subscription %s on %s: %s", self._initial_subscription, topic, exc)
        except AuthorizationError as exc:
            # Not the worker's to decide: the letters' role may not consume there. They are moved
            # all the same; only retention keeps them until a replay.
            log.warning("no subscription %s on dead-letter topic %s: role %r, whose letters go there, may not "
                        "make one (%s); letters are moved there with no subscription holding them",
                        self._initial_subscription, topic, role, exc)


def _at(letter: deadletter_pb2.DeadLetter) -> str:
    return f"{letter.position.ledger_id}:{letter.position.entry_id}"
