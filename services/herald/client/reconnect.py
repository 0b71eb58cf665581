"""When a stream whose broker went away tries again (Pulsar's ConnectionHandler backoff, made to
follow lookup): a pure decision object, no I/O and no clock of its own (the caller passes `now`),
so its choices are unit-tested without a network (tests/unit/test_reconnect_policy.py).

Why two delays: a broker that died keeps owning its topics in lookup's answer until its lease
expires (3 heartbeats), then lookup names another broker at once. Backing off between attempts
against the SAME answer keeps a client from hammering a broker that refuses it; but a client that
also waited that growing backoff before asking lookup again would notice the new owner only at its
next backoff step (the 10.9 s produce gap issue 21 measured). So while the answer is expected to
change (the broker vanished, or said it no longer owns the topic), lookup is asked again at a
short, bounded interval, and a broker lookup names that is not the one that failed is tried at
once. A broker that answers and refuses (not ready, say) is asked again with backoff, and so is
lookup: thousands of clients of a topic that cannot load must not poll lookup twice a second."""

from __future__ import annotations

from herald.common.backoff import Backoff

# Longest wait between two lookups while the failed broker is still named: past the lease expiry,
# the new owner is found within this.
LOOKUP_POLL_MAX_SECONDS = 0.5


class ReconnectPolicy:
    """Decides when to look the topic up again and whether to connect to the broker it names.

    `failed(address, now, moving)` after each failure against `address` (a stream that broke, or an
    attempt that did not connect; `moving`: the topic is likely to get another owner soon);
    `lookup_delay(now)` is how long to wait before the next lookup; `should_connect(address, now)`
    says whether to connect to what that lookup named now (a different broker than the failed one:
    yes, at once; the same one: only once its backoff has passed); `connected()` after a handshake
    succeeded.
    """

    __slots__ = ("_failed_address", "_lookup_backoff", "_lookup_due_now", "_moving", "_retry_same_at",
                 "_same_backoff")

    def __init__(self, initial: float = 0.1, maximum: float = 60.0, jitter: float = 0.1,
                 lookup_poll_max: float = LOOKUP_POLL_MAX_SECONDS) -> None:
        self._same_backoff = Backoff(initial, maximum, jitter=jitter)
        self._lookup_backoff = Backoff(min(initial, lookup_poll_max), lookup_poll_max, jitter=jitter)
        self._failed_address: str | None = None
        self._retry_same_at = 0.0
        self._lookup_due_now = True
        self._moving = True

    def failed(self, address: str, now: float, moving: bool = True) -> None:
        """An attempt against (or the stream to) `address` failed; `moving` when lookup's answer is
        likely to change soon (the broker vanished or disowned the topic), False when the broker
        answered and refused."""
        self._moving = moving
        if address != self._failed_address:
            # A new answer that failed: its own backoff starts over.
            self._failed_address = address
            self._same_backoff.reset()
        self._retry_same_at = now + self._same_backoff.next()

    def lookup_delay(self, now: float) -> float:
        """Seconds to wait before the next lookup: the first one after a stream broke is immediate;
        while the topic is moving, later ones follow a short backoff capped at `lookup_poll_max`;
        they never wait past the moment the failed broker may be retried."""
        if self._lookup_due_now:
            self._lookup_due_now = False
            return 0.0
        until_retry = self._retry_same_at - now
        if self._moving:
            return max(0.0, min(self._lookup_backoff.next(), until_retry))
        return max(0.0, until_retry)

    def should_connect(self, address: str, now: float) -> bool:
        """Connect to `address`, which lookup names now? At once when it is not the broker that
        failed; the failed one only when its backoff has passed."""
        return address != self._failed_address or now >= self._retry_same_at

    def connected(self) -> None:
        """A handshake succeeded: the next failure starts from scratch."""
        self._failed_address = None
        self._retry_same_at = 0.0
        self._same_backoff.reset()
        self._lookup_backoff.reset()
        self._lookup_due_now = True
        self._moving = True
