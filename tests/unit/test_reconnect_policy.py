"""The reconnect decisions of a stream whose broker went away (herald.client.reconnect), as a pure
unit: no network, no sleeping; the test passes the clock. Issue 21 item 5: once lookup names a
different broker than the one that failed, the client connects at once instead of waiting out a
backoff; backoff applies only to repeated failures against the same answer."""

from __future__ import annotations

from herald.client.reconnect import LOOKUP_POLL_MAX_SECONDS, ReconnectPolicy


def test_a_different_broker_named_by_lookup_is_tried_at_once_however_long_the_backoff_grew() -> None:
    policy = ReconnectPolicy(jitter=0)
    now = 0.0
    for _ in range(12):  # the dead broker refused a dozen times: its backoff is long now
        policy.failed("dead:1", now)
        now += 0.01
    assert not policy.should_connect("dead:1", now)
    assert policy.should_connect("alive:2", now)


def test_lookup_is_asked_again_at_a_bounded_interval_while_the_failed_broker_backs_off() -> None:
    policy = ReconnectPolicy(jitter=0)
    now = 0.0
    policy.failed("dead:1", now)
    assert policy.lookup_delay(now) == 0.0  # the first lookup after a stream broke is immediate
    delays = []
    for _ in range(20):
        policy.failed("dead:1", now)
        delay = policy.lookup_delay(now)
        delays.append(delay)
        now += delay
    assert max(delays) <= LOOKUP_POLL_MAX_SECONDS
    # ... while the same broker is retried ever later: the backoff is for the same answer.
    policy.failed("dead:1", now)
    assert not policy.should_connect("dead:1", now + LOOKUP_POLL_MAX_SECONDS)


def test_the_same_broker_is_retried_once_its_backoff_passed() -> None:
    policy = ReconnectPolicy(initial=0.1, jitter=0)
    policy.failed("b:1", 10.0)
    assert not policy.should_connect("b:1", 10.05)
    assert policy.should_connect("b:1", 10.1)
    policy.failed("b:1", 10.1)  # again: the wait doubles
    assert not policy.should_connect("b:1", 10.25)
    assert policy.should_connect("b:1", 10.3)


def test_a_new_failing_answer_starts_its_own_backoff_and_connecting_resets_everything() -> None:
    policy = ReconnectPolicy(initial=0.1, jitter=0)
    for step in range(8):
        policy.failed("a:1", float(step))
    policy.failed("b:2", 100.0)  # lookup moved on, and the new broker failed once: short backoff
    assert policy.should_connect("b:2", 100.1)
    policy.connected()
    assert policy.should_connect("a:1", 0.0)
    assert policy.lookup_delay(0.0) == 0.0


def test_a_broker_that_answers_and_refuses_backs_lookup_off_too() -> None:
    """Not moving (say the broker is not ready): lookup's answer stands, so it is asked again only
    when the broker may be retried, not twice a second by every client of the topic."""
    policy = ReconnectPolicy(initial=0.1, jitter=0)
    now = 0.0
    policy.failed("b:1", now)
    assert policy.lookup_delay(now) == 0.0
    for _ in range(10):
        policy.failed("b:1", now, moving=False)
    delay = policy.lookup_delay(now)
    assert delay > LOOKUP_POLL_MAX_SECONDS
    assert policy.should_connect("b:1", now + delay)
    policy.failed("b:1", now + delay, moving=True)  # then it vanished: lookups are frequent again
    assert policy.lookup_delay(now + delay) <= LOOKUP_POLL_MAX_SECONDS
