"""Stats rates: counters sampled on each stats pass, rates over a sliding window (broker.rates), and
a partitioned topic's stats summed from its partitions' (broker.stats.sum_partitions)."""

from __future__ import annotations

import pytest
from herald.broker.core.rates import RateMeters
from herald.broker.core.stats import ConsumerStats, ProducerStats, SubscriptionStats, TopicStats, sum_partitions

from tests.helpers import ManualClock


def test_a_rate_is_the_growth_since_the_start_while_younger_than_the_window() -> None:
    clock = ManualClock()
    meters = RateMeters(window=10.0, clock=clock)
    clock.now += 2
    assert meters.sample({"topic": (50, 5000)}) == {"topic": (25.0, 2500.0)}
    clock.now += 2
    assert meters.sample({"topic": (150, 15000)}) == {"topic": (37.5, 3750.0)}


def test_a_rate_covers_about_the_last_window_once_older() -> None:
    clock = ManualClock()
    meters = RateMeters(window=8.0, clock=clock)
    total = 0
    for _ in range(40):  # 10 messages a second for 20 s, sampled every half second
        clock.now += 0.5
        total += 5
        meters.sample({"t": (total,)})
    clock.now += 0.5
    total += 100  # a burst in the last half second
    [rate] = meters.sample({"t": (total,)})["t"]
    assert 10 < rate < 25  # the burst spread over about the window, not over 20 s nor 0.5 s


def test_something_new_starts_from_the_previous_pass_and_gone_meters_are_dropped() -> None:
    clock = ManualClock()
    meters = RateMeters(window=10.0, clock=clock)
    clock.now += 4
    meters.sample({"old": (0,)})
    clock.now += 2
    rates = meters.sample({"old": (0,), "new": (10,)})
    assert rates["new"] == (5.0,)  # it did not exist 2 s ago, at the previous pass
    clock.now += 1
    assert set(meters.sample({"new": (10,)})) == {"new"}
    clock.now += 1
    # "old" was dropped: seen again, it counts as new (from the previous pass, 1 s ago).
    assert meters.sample({"new": (10,), "old": (3,)})["old"] == (3.0,)


def test_a_counter_that_goes_back_counts_as_no_growth() -> None:
    clock = ManualClock()
    meters = RateMeters(window=10.0, clock=clock)
    clock.now += 1
    meters.sample({"c": (10,)})
    clock.now += 5
    assert meters.sample({"c": (0,)})["c"] == (0.0,)


def test_the_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="the rate window must be positive, got 0"):
        RateMeters(window=0)


async def test_partition_stats_are_summed_and_subscriptions_merged_by_name() -> None:
    def partition(index: int, msg_in: int, backlog: int, terminated: bool) -> TopicStats:
        return TopicStats(
            f"t-partition-{index}", msg_in_counter=msg_in, bytes_in_counter=msg_in * 10, entries=msg_in,
            storage_size=msg_in * 10, msg_rate_in=1.5, backlog_size=backlog * 10, terminated=terminated,
            producers=[ProducerStats(f"p{index}", msg_in)],
            subscriptions=[SubscriptionStats("sub", "Shared", consumers=1, backlog_entries=backlog,
                                             consumer_stats=[ConsumerStats(f"c{index}")])],
        )

    total = await sum_partitions("t", [partition(0, 3, 2, True), partition(1, 4, 1, False)])
    assert (total.topic, total.partitions, total.msg_in_counter, total.bytes_in_counter) == ("t", 2, 7, 70)
    assert (total.entries, total.storage_size, total.msg_rate_in, total.backlog_size) == (7, 70, 3.0, 30)
    assert not total.terminated  # only when every partition is
    assert [p.producer_name for p in total.producers] == ["p0", "p1"]
    [sub] = total.subscriptions
    assert (sub.name, sub.type, sub.consumers, sub.backlog_entries) == ("sub", "Shared", 2, 3)
    assert [c.consumer_name for c in sub.consumer_stats] == ["c0", "c1"]
    assert [p.topic for p in total.partition_stats] == ["t-partition-0", "t-partition-1"]
