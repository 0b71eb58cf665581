"""Dead letters: entries whose redelivery count reached their subscription's max_redeliver_count.
The dispatcher no longer delivers such an entry but hands it to the broker-wide DeadLetterQueue,
which lends it to a dead-letter worker (the dlq-worker service, through DeadLetterService) within
the worker's flow permits. The worker publishes it to the dead-letter topic and reports it moved:
the entry is then acknowledged on its subscription. Until then it stays unacknowledged (it comes
back after a restart) and counted as the subscription's dead_letter_count.

Each letter is out to one worker at a time; a failed letter, or the letters of a worker whose
stream ended, go back to the queue for any worker. A subscription that closes (unload) withdraws
its letters: its next owner finds the entries unacknowledged and hands them out again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from herald.broker.core.ledger_list import Position
from herald.common.codec.names import TopicName
from herald.common.errors import InvalidArgumentError, NotFoundError
from herald.metadata.resources import StoredDeadLetterPolicy

log = logging.getLogger(__name__)

# What one next_letters() call returns at most.
DEFAULT_MAX_LETTERS = 100


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    """A subscription's dead-letter policy (kept in memory: clients send it on every subscribe).
    `role` is the one on whose authority its letters move (the subscriber's, or the admin's who
    set it; "" with authorization off): the dlq-worker acts as that role, and the role was checked
    for produce on both topics when the policy was given."""

    max_redeliver_count: int
    dead_letter_topic: str
    retry_letter_topic: str
    role: str = ""

    @classmethod
    def for_subscription(
        cls, topic: str, subscription: str, max_redeliver_count: int,
        dead_letter_topic: str = "", retry_letter_topic: str = "", role: str = "",
    ) -> DeadLetterPolicy | None:
        """The policy a subscriber asked for, with Pulsar's default topic names
        (`<topic>-<subscription>-DLQ`, `<topic>-<subscription>-RETRY`; a partition's are its
        partitioned topic's, as Pulsar's client names them); None when max_redeliver_count is 0 (no
        policy). InvalidArgumentError for a bad count or topic name."""
        if max_redeliver_count < 0:
            raise InvalidArgumentError(
                f"dead-letter policy: max_redeliver_count must be positive (0 disables the policy), "
                f"got {max_redeliver_count}")
        if max_redeliver_count == 0:
            return None
        base = str(TopicName.parse(topic).base)
        return cls(
            max_redeliver_count,
            _policy_topic("dead_letter_topic", dead_letter_topic) or f"{base}-{subscription}-DLQ",
            _policy_topic("retry_letter_topic", retry_letter_topic) or f"{base}-{subscription}-RETRY",
            role,
        )


    @classmethod
    def from_stored(
        cls, topic: str, subscription: str, stored: StoredDeadLetterPolicy | None,
    ) -> DeadLetterPolicy | None:
        """The policy an admin set for the subscription (None when there is none)."""
        if stored is None:
            return None
        return cls.for_subscription(topic, subscription, stored.max_redeliver_count,
                                    stored.dead_letter_topic, stored.retry_letter_topic, stored.role)


def _policy_topic(field: str, name: str) -> str:
    """The full name of a topic the policy names ("" when not given); the error names the field,
    or a subscriber would take it for a complaint about the topic it subscribes to."""
    if not name:
        return ""
    try:
        return str(TopicName.parse(name))
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"dead-letter policy: {field}: {exc}") from None


class LetterOwner(Protocol):
    """The subscription a letter comes from."""

    @property
    def topic_name(self) -> str: ...
    @property
    def name(self) -> str: ...
    def dead_letter_moved(self, position: Position) -> None:
        """The worker published the letter: acknowledge the entry."""


@dataclass(eq=False, slots=True)
class DeadLetter:
    letter_id: int
    owner: LetterOwner
    position: Position
    data: bytes
    redelivery_count: int
    dead_letter_topic: str
    retry_letter_topic: str
    role: str = ""  # the policy's: the worker moves the letter as this role
    worker: DeadLetterWorker | None = None  # the worker it is lent to, if any

    @property
    def topic(self) -> str:
        return self.owner.topic_name

    @property
    def subscription(self) -> str:
        return self.owner.name


class DeadLetterWorker:
    """One worker's side (one Letters stream): its permits, the letters lent to it, and those
    waiting for its stream to send them."""

    def __init__(self, queue: DeadLetterQueue, worker_id: int) -> None:
        self._queue = queue
        self.worker_id = worker_id
        self.permits = 0
        self.closed = False
        self.outstanding: dict[int, DeadLetter] = {}  # lent to this worker, by letter id
        self._buffer: deque[DeadLetter] = deque()  # lent, not yet taken by the stream
        self._ready = asyncio.Event()

    def flow(self, permits: int) -> None:
        """The worker can take `permits` more letters."""
        if permits < 0:
            raise InvalidArgumentError(f"dead-letter flow permits must not be negative, got {permits}")
        self.permits += permits
        self._queue.hand_out()

    async def next_letters(self, max_letters: int = DEFAULT_MAX_LETTERS) -> list[DeadLetter]:
        """Wait for letters and take them (at least one, up to max_letters); [] once closed."""
        while not self._buffer:
            if self.closed:
                return []
            self._ready.clear()
            await self._ready.wait()
        taken: list[DeadLetter] = []
        while self._buffer and len(taken) < max_letters:
            taken.append(self._buffer.popleft())
        return taken

    def moved(self, letter_id: int) -> None:
        """Published to its dead-letter topic: the entry is acknowledged on its subscription."""
        self._queue.moved(self._lent(letter_id))

    def failed(self, letter_id: int, reason: str = "") -> None:
        """Could not be published: the letter goes back to the queue for any worker."""
        letter = self._lent(letter_id)
        log.info("dead letter %d (%s %s %s) failed on worker %d: %s", letter_id, letter.topic,
                 letter.subscription, letter.position, self.worker_id, reason or "no reason given")
        self._queue.put_back([letter])

    def close(self) -> None:
        """The worker's stream ended: its letters go back to the queue. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._ready.set()
        self._queue.detach(self)

    def _lent(self, letter_id: int) -> DeadLetter:
        letter = self.outstanding.pop(letter_id, None)
        if letter is None:
            raise NotFoundError(
                f"dead letter {letter_id} is not lent to this worker: it was already reported, or "
                f"withdrawn because its subscription closed (it will be handed out again)")
        if letter in self._buffer:
            self._buffer.remove(letter)
        letter.worker = None
        return letter

    # ---- the queue's side ----

    @property
    def can_take(self) -> bool:
        return self.permits > 0 and not self.closed

    def push(self, letter: DeadLetter) -> None:
        letter.worker = self
        self.outstanding[letter.letter_id] = letter
        self._buffer.append(letter)
        self.permits -= 1
        self._ready.set()

    def drop(self, letter: DeadLetter) -> None:
        """A withdrawn letter: forget it (a permit comes back when it was never sent)."""
        self.outstanding.pop(letter.letter_id, None)
        if letter in self._buffer:
            self._buffer.remove(letter)
            self.permits += 1
        letter.worker = None

    def take_all(self) -> list[DeadLetter]:
        letters = list(self.outstanding.values())
        self.outstanding.clear()
        self._buffer.clear()
        for letter in letters:
            letter.worker = None
        return letters


class DeadLetterQueue:
    """Every dead letter of this broker's subscriptions, waiting for a worker or lent to one."""

    def __init__(self) -> None:
        self._letter_ids = itertools.count(1)
        self._worker_ids = itertools.count(1)
        self._by_owner: dict[LetterOwner, dict[Position, DeadLetter]] = {}
        self._waiting: deque[DeadLetter] = deque()  # in hand-over order; withdrawn ones are skipped
        self._workers: list[DeadLetterWorker] = []
        self._next_worker = 0
        self.moved_counter = 0

    # ---- subscriptions' side ----

    def hand_over(
        self, owner: LetterOwner, position: Position, data: bytes, redelivery_count: int, policy: DeadLetterPolicy,
    ) -> bool:
        """Take an entry as a dead letter; False when it is one already."""
        letters = self._by_owner.setdefault(owner, {})
        if position in letters:
            return False
        letter = DeadLetter(next(self._letter_ids), owner, position, data, redelivery_count,
                            policy.dead_letter_topic, policy.retry_letter_topic, policy.role)
        letters[position] = letter
        self._waiting.append(letter)
        self.hand_out()
        return True

    def holds(self, owner: LetterOwner, position: Position) -> bool:
        letters = self._by_owner.get(owner)
        return letters is not None and position in letters

    def count_for(self, owner: LetterOwner) -> int:
        letters = self._by_owner.get(owner)
        return len(letters) if letters else 0

    def withdraw(self, owner: LetterOwner) -> None:
        """The subscription closed: forget its letters (they stay unacknowledged on its cursor)."""
        self._forget(list(self._by_owner.pop(owner, {}).values()))

    def forget_acknowledged(self, owner: LetterOwner, is_acked: Callable[[Position], bool]) -> None:
        """Entries acknowledged some other way (a cumulative ack, skip, message TTL, a reset past
        them) are letters no more: no worker must publish them, nor count them as waiting."""
        letters = self._by_owner.get(owner)
        if not letters:
            return
        gone = [letters.pop(position) for position in [p for p in letters if is_acked(p)]]
        if not letters:
            del self._by_owner[owner]
        if gone:
            log.info("%d dead letters of %s %s were acknowledged before being moved", len(gone),
                     owner.topic_name, owner.name)
            self._forget(gone)

    def _forget(self, letters: list[DeadLetter]) -> None:
        for letter in letters:
            if letter.worker is not None:
                letter.worker.drop(letter)
        self._waiting = deque(letter for letter in self._waiting if self._is_live(letter))
        self.hand_out()  # permits of dropped, unsent letters came back

    @property
    def outstanding(self) -> int:
        return sum(len(letters) for letters in self._by_owner.values())

    # ---- workers' side ----

    def attach_worker(self) -> DeadLetterWorker:
        worker = DeadLetterWorker(self, next(self._worker_ids))
        self._workers.append(worker)
        return worker

    def detach(self, worker: DeadLetterWorker) -> None:
        if worker in self._workers:
            self._workers.remove(worker)
        self.put_back(worker.take_all())

    def moved(self, letter: DeadLetter) -> None:
        letters = self._by_owner.get(letter.owner)
        if letters is None or letters.get(letter.position) is not letter:
            return  # withdrawn meanwhile
        del letters[letter.position]
        if not letters:
            del self._by_owner[letter.owner]
        self.moved_counter += 1
        letter.owner.dead_letter_moved(letter.position)

    def put_back(self, letters: list[DeadLetter]) -> None:
        """Letters a worker gave back go first, in the order they were handed over."""
        for letter in sorted(letters, key=lambda item: item.letter_id, reverse=True):
            self._waiting.appendleft(letter)
        self.hand_out()

    def _is_live(self, letter: DeadLetter) -> bool:
        letters = self._by_owner.get(letter.owner)
        return letters is not None and letters.get(letter.position) is letter

    def hand_out(self) -> None:
        """Lend waiting letters to workers with permits, round-robin."""
        while self._waiting:
            worker = self._next_ready_worker()
            if worker is None:
                return
            letter = self._waiting.popleft()
            if self._is_live(letter) and letter.worker is None:
                worker.push(letter)

    def _next_ready_worker(self) -> DeadLetterWorker | None:
        workers = self._workers
        for k in range(len(workers)):
            index = (self._next_worker + k) % len(workers)
            if workers[index].can_take:
                self._next_worker = index + 1
                return workers[index]
        return None
