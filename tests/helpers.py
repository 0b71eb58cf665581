"""What tests share besides fixtures: waiting for a condition with a deadline (`eventually`, and
`eventually_sync` for code without an event loop) and names no other test uses (`unique_name`,
`unique_topic`).

Tests never sleep for a fixed time and then look: they poll a condition until it holds, and when
the deadline passes first the failure names what was awaited and the last value or error seen.
Names are unique per test session (a counter) and across sessions (a random tag), so tests that
share a server, a redis or a data directory never meet each other's topics, tenants or keys."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Generous: the machine running the suite is shared and slow at times; a condition that holds
# returns at its first poll, so a long deadline only costs time when a test fails anyway.
DEADLINE = 30.0
INTERVAL = 0.05

_Retry = tuple[type[BaseException], ...]


class _Attempts:
    """The deadline of one wait and what the last attempt saw, for the failure message."""

    def __init__(self, what: str, timeout: float) -> None:
        self.what = what
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.last_value: Any = None
        self.last_error: BaseException | None = None
        self.attempts = 0

    @property
    def over(self) -> bool:
        return time.monotonic() >= self.deadline

    def failure(self) -> AssertionError:
        seen = (f"last error: {self.last_error!r}" if self.last_error is not None
                else f"last value: {_tail(repr(self.last_value))}")
        return AssertionError(f"{self.what}: not within {self.timeout}s ({self.attempts} attempts; {seen})")


def _tail(text: str, limit: int = 4000) -> str:
    """The end of a long value (a scrape, a log): where what was awaited would have appeared."""
    return text if len(text) <= limit else f"...{text[-limit:]}"


async def eventually(
    check: Callable[[], T | Awaitable[T]], what: str, *,
    timeout: float = DEADLINE,  # noqa: ASYNC109 - the deadline is the point of this function
    interval: float = INTERVAL, until: Callable[[T], bool] | None = None, retry: _Retry = (),
) -> T:
    """Call `check` (plain or async) until its answer holds, and return that answer. An answer
    holds when it is true, or when `until(answer)` is, given `until`. An exception of a `retry`
    type (say AssertionError, AuthorizationError) means "not yet"; any other fails at once. After
    `timeout` seconds: AssertionError naming `what` and the last answer or error."""
    attempts = _Attempts(what, timeout)
    while True:
        attempts.attempts += 1
        try:
            answer = check()
            if inspect.isawaitable(answer):
                answer = await answer
        except retry as exc:
            attempts.last_error = exc
        else:
            attempts.last_value, attempts.last_error = answer, None
            if (until(answer) if until is not None else answer):
                return answer
        if attempts.over:
            raise attempts.failure() from attempts.last_error
        await asyncio.sleep(interval)


async def eventually_passes(
    action: Callable[[], T | Awaitable[T]], what: str, *, retry: _Retry = (AssertionError,),
    timeout: float = DEADLINE,  # noqa: ASYNC109 - the deadline is the point of this function
    interval: float = INTERVAL,
) -> T:
    """`eventually` for an action that fails until the system has caught up (an assertion inside
    it, a grant the services have not seen yet): call it until it returns without raising one of
    the `retry` types, whatever it returns, and return that."""
    return await eventually(action, what, timeout=timeout, interval=interval, until=_always, retry=retry)


def _always(_: object) -> bool:
    return True


def eventually_sync(
    check: Callable[[], T], what: str, *, timeout: float = DEADLINE, interval: float = INTERVAL,
    until: Callable[[T], bool] | None = None, retry: _Retry = (),
) -> T:
    """`eventually` for code that runs without an event loop (sync clients, grpc stubs, threads)."""
    attempts = _Attempts(what, timeout)
    while True:
        attempts.attempts += 1
        try:
            answer = check()
        except retry as exc:
            attempts.last_error = exc
        else:
            attempts.last_value, attempts.last_error = answer, None
            if (until(answer) if until is not None else answer):
                return answer
        if attempts.over:
            raise attempts.failure() from attempts.last_error
        time.sleep(interval)


# ---- names ----

_numbers = itertools.count(1)
# One per test session: a restarted session on the same redis or data directory names things anew.
_SESSION = uuid.uuid4().hex[:6]


def unique_name(prefix: str) -> str:
    """`<prefix>-<session tag>-<n>`: a topic, subscription, tenant or namespace part, or a key
    prefix, that no other test uses (valid wherever Herald takes a name: a-z, 0-9 and '-')."""
    return f"{prefix}-{_SESSION}-{next(_numbers)}"


def unique_topic(prefix: str, namespace: str = "public/default", *, persistent: bool = True) -> str:
    """A full topic name of its own in `namespace`: `persistent://public/default/<unique name>`."""
    domain = "persistent" if persistent else "non-persistent"
    return f"{domain}://{namespace}/{unique_name(prefix)}"


class ManualClock:
    """A clock for code that takes one (`clock=`): it reads `now`, which the test moves."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
