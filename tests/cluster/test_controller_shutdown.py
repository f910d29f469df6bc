"""The controller's controlled-shutdown decisions (pure functions, no ZooKeeper): Kafka's
ControlledShutdownLeaderSelector for the partitions the stopping broker leads, the ISR removal
for those it follows, and the brokers elections may pick while some are shutting down."""

from __future__ import annotations

from pulllog.cluster.controller import electable_brokers, reconcile, shutdown_decision
from pulllog.cluster.state import LeaderAndIsr

LIVE = {1, 2, 3}


def test_a_led_partition_goes_to_the_first_in_sync_live_replica_in_assignment_order() -> None:
    state = LeaderAndIsr(2, 4, (2, 1, 3), 1, zk_version=7)
    assert shutdown_decision(state, (2, 3, 1), 2, LIVE, {2}, 5) == LeaderAndIsr(3, 5, (1, 3), 5, 7)


def test_a_replica_out_of_sync_dead_or_itself_shutting_down_does_not_take_over() -> None:
    state = LeaderAndIsr(1, 0, (1, 2, 3), 1)
    assert shutdown_decision(state, (1, 2, 3), 1, {1, 3}, {1}, 1).leader == 3  # 2 is dead
    assert shutdown_decision(state, (1, 2, 3), 1, LIVE, {1, 2}, 1) == LeaderAndIsr(3, 1, (3,), 1)
    assert shutdown_decision(LeaderAndIsr(1, 0, (1, 3), 1), (1, 2, 3), 1, LIVE, {1}, 1).leader == 3  # 2 out of sync


def test_a_led_partition_with_no_other_in_sync_replica_stays_led_by_the_stopping_broker() -> None:
    assert shutdown_decision(LeaderAndIsr(1, 0, (1,), 1), (1, 2, 3), 1, LIVE, {1}, 1) is None


def test_a_followed_partition_loses_the_stopping_broker_from_its_isr_under_the_same_leader() -> None:
    # The new leader epoch fences a fetch the stopping broker sent before it stopped fetching.
    state = LeaderAndIsr(1, 3, (1, 2, 3), 1, zk_version=2)
    assert shutdown_decision(state, (1, 2, 3), 2, LIVE, {2}, 4) == LeaderAndIsr(1, 4, (1, 3), 4, 2)
    assert shutdown_decision(LeaderAndIsr(1, 3, (1, 3), 1), (1, 2, 3), 2, LIVE, {2}, 4) is None  # not in sync


def test_a_partition_with_one_replica_is_left_alone() -> None:
    assert shutdown_decision(LeaderAndIsr(1, 0, (1,), 1), (1,), 1, LIVE, {1}, 1) is None


def test_elections_skip_a_broker_shutting_down_but_do_not_take_its_partitions_offline() -> None:
    # Broker 1 died: 2 is in sync but shutting down, so 3 leads.
    died = LeaderAndIsr(1, 0, (1, 2, 3), 1)
    chosen = reconcile((1, 2, 3), died, electable_brokers({2, 3}, {2}, died), 1)
    assert chosen is not None and (chosen.leader, chosen.isr) == (3, (3,))
    # A partition the broker shutting down still leads (no one could take it) stays led by it.
    kept = LeaderAndIsr(2, 0, (2,), 1)
    assert reconcile((2, 3), kept, electable_brokers(LIVE, {2}, kept), 1) is None
    # A new partition is not given to it.
    new = reconcile((2, 3, 1), None, electable_brokers(LIVE, {2}, None), 1)
    assert new is not None and (new.leader, new.isr) == (3, (3, 1))
