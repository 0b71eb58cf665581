"""The worker's side of the dead-letter contract: one Letters stream per live broker.

`BrokerFleet` asks lookup for the live brokers every refresh interval, opens a `BrokerLetters`
for each new one and stops those of brokers gone. A `BrokerLetters` keeps its broker's stream
open (reconnecting with backoff), lends itself at most `flow_permits` letters at a time, moves
each (LetterMover) and reports it moved, or, when it failed, hands it back after a delay that
grows with the letter's failures: meanwhile the letter is parked, lent to this worker but holding
no permit (up to max_parked per stream), so a dead-letter topic that refuses letters neither
starves the others nor gets them back in a tight loop. When a stream ends, the broker takes back
everything lent on it; moves still running finish, unreported (a later lending finds them done).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable

import grpc
import grpc.aio

from herald.api.v1 import deadletter_pb2, deadletter_pb2_grpc, lookup_pb2, lookup_pb2_grpc
from herald.client.connection import ConnectionPool
from herald.common.backoff import Backoff
from herald.common.errors import HeraldError, HeraldTimeoutError
from herald.common.tasks import cancel_and_wait, wait_event
from herald.common.transport.rpc import EOF, error_from_proto, error_from_rpc
from herald.dlq.letters import letter_key
from herald.dlq.metrics import DlqMetrics
from herald.dlq.mover import LetterMover
from herald.dlq.settings import DlqWorkerSettings

log = logging.getLogger(__name__)

LetterKey = tuple[str, str, int, int]
LettersCall = grpc.aio.StreamStreamCall[deadletter_pb2.DeadLetterRequest, deadletter_pb2.DeadLetterResponse]
_REMEMBERED_FAILURES = 100_000


class FailureMemory:
    """How many times each letter failed lately (bounded): its next retry delay, and whether a
    letter coming in is a retry. Shared by the worker's streams (a letter may come back through
    another broker, after its topic moved)."""

    def __init__(self, delay: float, maximum: float) -> None:
        self._delay = delay
        self._maximum = maximum
        self._failures: OrderedDict[LetterKey, int] = OrderedDict()

    def is_retry(self, key: LetterKey) -> bool:
        return key in self._failures

    def failed(self, key: LetterKey) -> float:
        """Count a failure; the seconds to wait before handing the letter back."""
        count = self._failures.pop(key, 0) + 1
        self._failures[key] = count
        while len(self._failures) > _REMEMBERED_FAILURES:
            self._failures.popitem(last=False)
        return float(min(self._maximum, self._delay * 2 ** min(count - 1, 32)))

    def forget(self, key: LetterKey) -> None:
        self._failures.pop(key, None)


class _Stream:
    """One Letters call and what was lent on it: writes one at a time, parked letters' timers."""

    def __init__(self, call: LettersCall, address: str) -> None:
        self.call = call
        self.address = address
        self.open = True
        # Failed letters waiting to be handed back: their timer, and whether they hold a permit.
        self.parked: dict[int, tuple[asyncio.TimerHandle, bool]] = {}
        self._write_lock = asyncio.Lock()

    async def send(self, request: deadletter_pb2.DeadLetterRequest) -> None:
        """Write a request; a broken stream is left to the read loop to notice."""
        if not self.open:
            return
        try:
            async with self._write_lock:
                await self.call.write(request)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, RuntimeError) as exc:
            log.debug("letters stream to %s: write failed: %s", self.address, exc)

    async def flow(self, permits: int) -> None:
        if permits > 0:
            await self.send(deadletter_pb2.DeadLetterRequest(flow=deadletter_pb2.DeadLetterFlow(permits=permits)))

    async def moved(self, letter_id: int) -> None:
        await self.send(deadletter_pb2.DeadLetterRequest(moved=deadletter_pb2.DeadLetterDone(letter_id=letter_id)))

    async def failed(self, letter_id: int, reason: str) -> None:
        await self.send(deadletter_pb2.DeadLetterRequest(failed=deadletter_pb2.DeadLetterDone(
            letter_id=letter_id, reason=reason[:1000])))

    def close(self) -> None:
        self.open = False
        self.call.cancel()


class BrokerLetters:
    """The dead letters of one broker."""

    def __init__(
        self, address: str, pool: ConnectionPool, mover: LetterMover, settings: DlqWorkerSettings,
        metrics: DlqMetrics, failures: FailureMemory,
    ) -> None:
        self.address = address
        self._pool = pool
        self._mover = mover
        self._settings = settings
        self._metrics = metrics
        self._failures = failures
        self._stream: _Stream | None = None
        # Permits in use: moves not finished (from this stream or earlier ones) and parked letters
        # past max_parked; a new stream asks for flow_permits minus these.
        self._running = 0
        self._moves: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._backoff = Backoff(initial=0.1, maximum=max(0.1, min(30.0, settings.broker_refresh_interval)),
                                jitter=0.1)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dlq-letters-{self.address}")

    async def stop(self) -> None:
        """End the stream (the broker lends its letters to others) and cancel the moves running:
        a publish cut short is finished, or found done, by whoever gets the letter next."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
        moves = list(self._moves)
        for move in moves:
            move.cancel()
        await asyncio.gather(*moves, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                await self._serve()
                reason = "the broker ended the stream"
            except grpc.aio.AioRpcError as exc:
                reason = str(error_from_rpc(exc, "the letters stream"))
            except HeraldError as exc:
                reason = str(exc)
            except Exception as exc:
                log.exception("letters stream to %s: unexpected error", self.address)
                reason = repr(exc)
            delay = self._backoff.next()
            log.info("letters stream to broker %s ended: %s; reconnecting in %.1fs", self.address, reason, delay)
            await asyncio.sleep(delay)

    async def _serve(self) -> None:
        channel = await self._pool.get(self.address)
        call: LettersCall = deadletter_pb2_grpc.DeadLetterServiceStub(channel).Letters(None)
        stream = _Stream(call, self.address)
        connected = False
        try:
            try:
                async with asyncio.timeout(self._settings.operation_timeout):
                    await call.wait_for_connection()
            except TimeoutError:
                raise HeraldTimeoutError(f"opening the letters stream to {self.address} timed out") from None
            self._stream = stream
            self._metrics.streams_connected.inc()
            connected = True
            self._backoff.reset()
            log.info("taking dead letters from broker %s", self.address)
            await stream.flow(self._settings.flow_permits - self._running)
            while True:
                reply = await call.read()
                if reply is EOF:
                    return
                assert isinstance(reply, deadletter_pb2.DeadLetterResponse)
                if reply.HasField("letters"):
                    for letter in reply.letters.letters:
                        self._start_move(letter, stream)
                else:
                    # A report about a letter the broker no longer lends us (acknowledged some other
                    # way, or taken back): nothing to do.
                    log.info("broker %s: %s", self.address, error_from_proto(reply.error))
        finally:
            if self._stream is stream:
                self._stream = None
            if connected:
                self._metrics.streams_connected.dec()
            self._unpark_all(stream)
            stream.close()

    def _start_move(self, letter: deadletter_pb2.DeadLetter, stream: _Stream) -> None:
        if self._failures.is_retry(letter_key(letter)):
            self._metrics.moves_retried.inc()
        self._running += 1
        task = asyncio.get_running_loop().create_task(self._move(letter, stream))
        self._moves.add(task)
        task.add_done_callback(self._moves.discard)

    async def _move(self, letter: deadletter_pb2.DeadLetter, stream: _Stream) -> None:
        try:
            error = await self._mover.move(letter)
        finally:
            self._running -= 1
        key = letter_key(letter)
        if error is None:
            self._failures.forget(key)
            if stream.open:
                await stream.moved(letter.letter_id)
            await self._grant()
            return
        delay = self._failures.failed(key)
        if not stream.open:
            await self._grant()  # the broker took it back with its stream
            return
        holds_permit = len(stream.parked) >= self._settings.max_parked
        self._park(stream, letter.letter_id, f"{type(error).__name__}: {error}", delay, holds_permit)
        if not holds_permit:
            await self._grant()

    def _park(self, stream: _Stream, letter_id: int, reason: str, delay: float, holds_permit: bool) -> None:
        """Hand the letter back after `delay`; until then it is lent to us."""
        loop = asyncio.get_running_loop()

        def hand_back() -> None:
            if stream.parked.pop(letter_id, None) is None:
                return
            self._metrics.letters_parked.dec()
            task = loop.create_task(self._hand_back(stream, letter_id, reason, holds_permit))
            self._moves.add(task)
            task.add_done_callback(self._moves.discard)

        stream.parked[letter_id] = (loop.call_later(delay, hand_back), holds_permit)
        self._metrics.letters_parked.inc()
        if holds_permit:
            self._running += 1  # it keeps its permit: counted like a move until handed back

    async def _hand_back(self, stream: _Stream, letter_id: int, reason: str, holds_permit: bool) -> None:
        if holds_permit:
            self._running -= 1
        await stream.failed(letter_id, reason)
        if holds_permit:
            await self._grant()

    def _unpark_all(self, stream: _Stream) -> None:
        """The stream ended: its parked letters went back to the broker with it, and those that
        held a permit free it (the next stream asks for what is free)."""
        for timer, holds_permit in stream.parked.values():
            timer.cancel()
            if holds_permit:
                self._running -= 1
        self._metrics.letters_parked.dec(len(stream.parked))
        stream.parked.clear()

    async def _grant(self) -> None:
        """One more letter may come: on the current stream (a new stream asks for what is free)."""
        stream = self._stream
        if stream is not None and stream.open:
            await stream.flow(1)


class BrokerFleet:
    """Every live broker's BrokerLetters, following lookup's list of brokers."""

    def __init__(
        self, lookup_address: str, pool: ConnectionPool, settings: DlqWorkerSettings, metrics: DlqMetrics,
        make: Callable[[str], BrokerLetters],
    ) -> None:
        self._lookup_address = lookup_address
        self._pool = pool
        self._settings = settings
        self._metrics = metrics
        self._make = make
        self.brokers: dict[str, BrokerLetters] = {}
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lookup_failing = False

    def start(self) -> None:
        if self._task is None:
            self._stopping.clear()
            self._task = asyncio.get_running_loop().create_task(self._follow(), name="dlq-broker-fleet")

    async def stop(self) -> None:
        self._stopping.set()
        task, self._task = self._task, None
        await cancel_and_wait(task)
        brokers, self.brokers = list(self.brokers.values()), {}
        await asyncio.gather(*(broker.stop() for broker in brokers))

    async def _follow(self) -> None:
        while not self._stopping.is_set():
            await self.refresh()
            await wait_event(self._stopping, self._settings.broker_refresh_interval)

    async def refresh(self) -> None:
        """Start taking letters from new brokers, stop for brokers gone."""
        try:
            addresses = await self._live_brokers()
        except HeraldError as exc:
            if not self._lookup_failing:
                log.warning("cannot list the brokers at lookup %s: %s; trying again every %gs (streams to known "
                            "brokers carry on)", self._lookup_address, exc, self._settings.broker_refresh_interval)
            self._lookup_failing = True
            return
        if self._lookup_failing:
            log.info("lookup %s answers again", self._lookup_address)
            self._lookup_failing = False
        for address in addresses - self.brokers.keys():
            broker = self.brokers[address] = self._make(address)
            broker.start()
        for address in self.brokers.keys() - addresses:
            log.info("broker %s is gone: no more letters from it", address)
            await self.brokers.pop(address).stop()

    async def _live_brokers(self) -> set[str]:
        timeout = self._settings.operation_timeout
        try:
            async with asyncio.timeout(timeout):
                channel = await self._pool.get(self._lookup_address)
                stub = lookup_pb2_grpc.LookupServiceStub(channel)
                reply = await stub.GetClusterInfo(lookup_pb2.ClusterInfoRequest(), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            self._pool.discard(self._lookup_address)
            raise error_from_rpc(exc, f"listing the brokers at {self._lookup_address}") from None
        except TimeoutError:
            raise HeraldError(f"listing the brokers at {self._lookup_address} timed out after {timeout:g}s") from None
        return {broker.address for broker in reply.brokers if broker.address}
