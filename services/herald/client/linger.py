"""When a producer's open batch ships before it is full or its max publish delay passed: at the end of
the event loop turn that queued its messages (the application has yielded: it awaits a gather of
its sends, or one send), unless entries closed before that turn still await their
receipts. Then it keeps filling (Nagle's rule: batches stay full under load) and ships once those
are acknowledged, or when the delay passes, whichever comes first. No I/O: the accumulators
(accumulator.py) run it on their loop; their owner says how many entries are in flight."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable


class TurnRule(abc.ABC):
    """The rule, mixed into an accumulator, which keeps this state in its slots and gives flush()
    and _is_open(). `_in_flight` None turns the rule off (a batch ships when full, after the
    delay, or on flush())."""

    __slots__ = ("_held", "_in_flight", "_loop", "_turn", "_turn_emitted", "_urgent")

    def __init__(self, loop: asyncio.AbstractEventLoop, in_flight: Callable[[], int] | None) -> None:
        self._loop = loop
        self._in_flight = in_flight
        self._turn: asyncio.Handle | None = None  # the end of the turn that queued messages, to come
        self._turn_emitted = 0  # entries closed since that turn began: they do not hold the open batch back
        self._held = False  # kept open at a turn's end behind entries in flight: settled() may ship it
        self._urgent = False  # ship_soon(): ship at the turn's end whatever is in flight

    @abc.abstractmethod
    def flush(self) -> None:
        """Ship the open batch now."""

    @abc.abstractmethod
    def _is_open(self) -> bool:
        """Whether a batch is open (holds messages not shipped yet)."""

    def _turn_began(self) -> None:
        """Messages are being queued: look again once the loop ran everything else ready."""
        self._turn_emitted = 0
        self._turn = self._loop.call_soon(self._on_turn_end)

    def _on_turn_end(self) -> None:
        """The loop ran everything that was ready after the turn that queued messages: the
        application has yielded. Ship the open batch unless entries closed before that turn still
        await their receipts (then it keeps filling; settled() or the delay ships it)."""
        self._turn = None
        if not self._is_open():
            return
        if self._urgent or self._in_flight is None or self._in_flight() <= self._turn_emitted:
            self.flush()
        else:
            self._held = True

    def ship_soon(self) -> None:
        """A caller awaits the open batch's last message (send()): ship it at the end of this turn
        even behind entries in flight (messages queued by others in the same turn join it)."""
        if not self._is_open():
            return
        if self._in_flight is None:
            self.flush()
            return
        self._urgent = True
        if self._turn is None:
            self._turn_began()

    def settled(self) -> None:
        """Receipts came: a batch held behind entries in flight ships once none is left, at the end
        of the turn that handles them (the senders they wake may add to it first)."""
        if self._held and self._turn is None and self._in_flight is not None and not self._in_flight():
            self._turn_began()
