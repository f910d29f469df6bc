"""The controller's decisions (pulllog.cluster.controller), as values: no ZooKeeper, no broker."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from pulllog.cluster.controller import (
    ElectionError,
    ElectionType,
    InvalidReplicationFactorError,
    assign_replicas,
    elect,
    elect_by_request,
    initial_state,
    preferred_start_index,
    reconcile,
)
from pulllog.cluster.state import LeaderAndIsr


def test_replicas_are_assigned_as_kafkas_rack_unaware_algorithm_with_a_fixed_start() -> None:
    # Kafka's AdminUtils with fixedStartIndex 0 over brokers 0..4 (its unit test's layout)
    assert assign_replicas([4, 2, 0, 3, 1], 10, 3, start_index=0) == {
        0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
        5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2)}


def test_a_random_assignment_is_seedable_and_spreads_leaders_and_replicas_evenly() -> None:
    first = assign_replicas([1, 2, 3], 6, 3, rng=random.Random(7))
    assert first == assign_replicas([1, 2, 3], 6, 3, rng=random.Random(7))
    assert all(sorted(replicas) == [1, 2, 3] for replicas in first.values())
    assert Counter(replicas[0] for replicas in first.values()) == {1: 2, 2: 2, 3: 2}


def test_a_replication_factor_above_the_live_brokers_is_refused_with_kafkas_message() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="Replication factor: 3 larger than available brokers: 2."):
        assign_replicas([1, 2], 1, 3)
    with pytest.raises(InvalidReplicationFactorError, match="at least 1"):
        assign_replicas([1, 2], 1, 0)


def test_new_partitions_continue_the_topics_layout() -> None:
    existing = assign_replicas([1, 2, 3], 2, 2, start_index=1)
    start = preferred_start_index([1, 2, 3], existing[0])
    assert start == 1
    assert assign_replicas([1, 2, 3], 2, 2, first_partition=2, start_index=start) == {2: (1, 3), 3: (2, 3)}


def test_a_new_partition_is_led_by_its_first_live_replica_with_every_live_replica_in_sync() -> None:
    assert initial_state((2, 3, 1), {1, 2, 3}, 4) == LeaderAndIsr(2, 0, (2, 3, 1), 4)
    assert initial_state((2, 3, 1), {1, 3}, 4) == LeaderAndIsr(3, 0, (3, 1), 4)
    assert initial_state((2,), {1, 3}, 4) is None


def test_when_the_leader_dies_the_first_live_isr_replica_in_assignment_order_leads_with_a_new_epoch() -> None:
    state = LeaderAndIsr(1, 5, (3, 1, 2), 1, zk_version=8)
    assert elect(state, (1, 2, 3), {2, 3}, 2) == LeaderAndIsr(2, 6, (3, 2), 2, 8)


def test_when_a_follower_dies_it_leaves_the_isr_and_the_epoch_goes_up() -> None:
    state = LeaderAndIsr(1, 5, (1, 2, 3), 1, zk_version=8)
    assert elect(state, (1, 2, 3), {1, 2}, 2) == LeaderAndIsr(1, 6, (1, 2), 2, 8)
    assert elect(state, (1, 2, 3), {1, 2, 3}, 2) is None
    # an out-of-sync follower's death changes nothing
    assert elect(LeaderAndIsr(1, 5, (1, 2), 1), (1, 2, 3), {1, 2}, 2) is None


def test_no_live_isr_replica_leaves_the_partition_offline_keeping_the_last_leader_in_the_isr() -> None:
    state = LeaderAndIsr(1, 5, (1,), 1, zk_version=3)
    assert elect(state, (1, 2, 3), {2, 3}, 2) == LeaderAndIsr(-1, 6, (1,), 2, 3)
    # already offline, nothing new: nothing written
    assert elect(LeaderAndIsr(-1, 6, (1,), 2), (1, 2, 3), {2, 3}, 2) is None


def test_unclean_election_takes_the_first_live_replica_only_when_enabled() -> None:
    state = LeaderAndIsr(1, 5, (1,), 1, zk_version=3)
    assert elect(state, (1, 3, 2), {2, 3}, 2, unclean=True) == LeaderAndIsr(3, 6, (3,), 2, 3)


def test_a_returning_isr_replica_leads_its_offline_partition_again() -> None:
    offline = LeaderAndIsr(-1, 6, (1,), 2, zk_version=4)
    assert elect(offline, (1, 2, 3), {1, 2, 3}, 3) == LeaderAndIsr(1, 7, (1,), 3, 4)
    # a returning replica outside the ISR does not (unless unclean)
    assert elect(offline, (1, 2, 3), {2}, 3) is None
    assert elect(offline, (1, 2, 3), {2}, 3, unclean=True) == LeaderAndIsr(2, 7, (2,), 3, 4)


def test_reconcile_starts_new_partitions_and_elects_the_others() -> None:
    assert reconcile((1, 2), None, {1, 2}, 1) == LeaderAndIsr(1, 0, (1, 2), 1)
    assert reconcile((1, 2), LeaderAndIsr(1, 0, (1, 2), 1), {2}, 1) == LeaderAndIsr(2, 1, (2,), 1)


def test_preferred_leader_election() -> None:
    state = LeaderAndIsr(2, 3, (2, 1), 1, zk_version=5)
    assert elect_by_request(state, (1, 2), {1, 2}, 2, ElectionType.PREFERRED) == LeaderAndIsr(1, 4, (2, 1), 2, 5)
    not_needed = elect_by_request(LeaderAndIsr(1, 3, (1, 2), 1), (1, 2), {1, 2}, 2, ElectionType.PREFERRED)
    assert isinstance(not_needed, ElectionError) and not_needed.code == "ELECTION_NOT_NEEDED"
    out_of_sync = elect_by_request(LeaderAndIsr(2, 3, (2,), 1), (1, 2), {1, 2}, 2, ElectionType.PREFERRED)
    assert isinstance(out_of_sync, ElectionError) and out_of_sync.code == "PREFERRED_LEADER_NOT_AVAILABLE"


def test_unclean_election_by_request() -> None:
    offline = LeaderAndIsr(-1, 3, (1,), 1, zk_version=5)
    assert elect_by_request(offline, (1, 2, 3), {2, 3}, 2, ElectionType.UNCLEAN) == LeaderAndIsr(2, 4, (2,), 2, 5)
    led = elect_by_request(LeaderAndIsr(2, 3, (2,), 1), (1, 2), {2}, 2, ElectionType.UNCLEAN)
    assert isinstance(led, ElectionError) and led.code == "ELECTION_NOT_NEEDED"
    none_live = elect_by_request(offline, (1, 2), set(), 2, ElectionType.UNCLEAN)
    assert isinstance(none_live, ElectionError) and none_live.code == "ELIGIBLE_LEADERS_NOT_AVAILABLE"
