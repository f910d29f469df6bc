"""Partition reassignment (KIP-455) as values: the znode's shape and the controller's decisions
(pulllog.cluster.controller), no ZooKeeper, no broker."""

from __future__ import annotations

import json
import uuid

from pulllog.cluster.controller import (
    ReplicaAssignment,
    finish_reassignment,
    restrict_to_replicas,
    strands_the_partition,
    validate_reassignment,
)
from pulllog.cluster.state import LeaderAndIsr
from pulllog.cluster.znodes import TopicAssignment


def test_a_reassignment_is_kept_in_the_topic_znode_as_kafka_keeps_it() -> None:
    topic_id = uuid.UUID(int=7)
    moving = TopicAssignment("t", topic_id, {0: (2, 3, 1), 1: (1, 2)}, {0: (3,)}, {0: (1,)})
    data = json.loads(moving.encode())
    assert data["partitions"] == {"0": [2, 3, 1], "1": [1, 2]}
    assert data["adding_replicas"] == {"0": [3]} and data["removing_replicas"] == {"0": [1]}
    back = TopicAssignment.decode("t", moving.encode())
    assert back == moving and back.reassigning(0) and not back.reassigning(1)
    # Kafka's own writer: a partition not under reassignment is left out of both maps
    kafkas = (b'{"version":3,"partitions":{"0":[2,3,1]},"adding_replicas":{"0":[3]},'
              b'"removing_replicas":{"0":[1]},"topic_id":"AAAAAAAAAAAAAAAAAAAABw"}')
    assert TopicAssignment.decode("t", kafkas) == TopicAssignment("t", topic_id, {0: (2, 3, 1)}, {0: (3,)}, {0: (1,)})


def test_the_full_replica_set_is_the_target_then_the_origin() -> None:
    moving = ReplicaAssignment((1, 2)).reassign_to([2, 3])
    assert moving == ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    assert moving.origin == (2, 1) and moving.target == (2, 3)
    # a new target replaces the one under way, from the origin
    assert moving.reassign_to([4, 1]) == ReplicaAssignment((4, 1, 2), adding=(4,), removing=(2,))
    # cancelling is a reassignment to the origin: nothing added or removed is left
    assert moving.reassign_to(moving.origin) == ReplicaAssignment((2, 1))


def test_a_target_is_validated_as_kafkas_controller_does() -> None:
    current = ReplicaAssignment((1, 2))
    assert validate_reassignment([], current, {1, 2, 3}) == "Empty replica list specified in partition reassignment."
    assert "Duplicate replica ids" in (validate_reassignment([2, 2], current, {1, 2, 3}) or "")
    assert "Invalid broker id" in (validate_reassignment([2, -1], current, {1, 2, 3}) or "")
    assert "not alive" in (validate_reassignment([2, 4], current, {1, 2, 3}) or "")
    # only the replicas to add must be live: an origin replica that is down may stay or go
    assert validate_reassignment([2, 3], current, {2, 3}) is None


def test_a_reassignment_finishes_once_every_target_replica_is_in_sync() -> None:
    moving = ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    led_by_2 = LeaderAndIsr(2, 4, (1, 2), 1, zk_version=9)
    assert finish_reassignment(moving, led_by_2, {1, 2, 3}, 3) is None  # 3 still copying
    done = finish_reassignment(moving, LeaderAndIsr(2, 4, (1, 2, 3), 1, zk_version=9), {1, 2, 3}, 3)
    # the leader stays, the epoch goes up, the removed replica leaves the ISR
    assert done == (ReplicaAssignment((2, 3)), LeaderAndIsr(2, 5, (2, 3), 3, 9))


def test_a_leader_moved_off_gives_way_to_the_first_live_in_sync_target_replica() -> None:
    moving = ReplicaAssignment((3, 2, 1), adding=(3,), removing=(1,))
    done = finish_reassignment(moving, LeaderAndIsr(1, 4, (1, 2, 3), 1, zk_version=2), {1, 2, 3}, 3)
    assert done == (ReplicaAssignment((3, 2)), LeaderAndIsr(3, 5, (2, 3), 3, 2))
    # the target's first replica down (in the ISR still): the next one leads
    done = finish_reassignment(moving, LeaderAndIsr(1, 4, (1, 2, 3), 1, zk_version=2), {1, 2}, 3)
    assert done is not None and done[1].leader == 2


def test_a_replica_outside_the_assignment_leaves_the_isr() -> None:
    assert restrict_to_replicas(LeaderAndIsr(2, 4, (2, 3, 1), 1, 5), (2, 3), {1, 2, 3}, 3) == \
        LeaderAndIsr(2, 5, (2, 3), 3, 5)
    assert restrict_to_replicas(LeaderAndIsr(2, 4, (2, 3), 1, 5), (2, 3), {1, 2, 3}, 3) is None
    # nothing of the ISR would be left: Kafka never writes an empty ISR
    assert restrict_to_replicas(LeaderAndIsr(1, 4, (1,), 1, 5), (2, 3), {1, 2, 3}, 3) is None


def test_a_replica_set_without_a_live_in_sync_replica_is_refused() -> None:
    # moved from [1] to [2, 3]; broker 1 died after 2 caught up: 2 leads alone, 3 still fetching
    state = LeaderAndIsr(2, 5, (2,), 1, 0)
    moving = ReplicaAssignment((1,)).reassign_to([2, 3])
    live = {2, 3}
    assert not strands_the_partition(state, moving.replicas, live)
    # cancelling (back to [1]) or a new target without 2 would drop the only in-sync copy
    assert strands_the_partition(state, moving.reassign_to(moving.origin).replicas, live)
    assert strands_the_partition(state, moving.reassign_to([3, 4]).replicas, live)
    # a new target that keeps 2, or a live ISR member besides a leader left out, is fine
    assert not strands_the_partition(state, moving.reassign_to([2, 4]).replicas, live)
    assert not strands_the_partition(LeaderAndIsr(2, 5, (2, 3), 1, 0), moving.reassign_to([3, 4]).replicas, live)
    # a dead leader inside the set does not count, a dead ISR member neither
    assert strands_the_partition(LeaderAndIsr(1, 5, (1,), 1, 0), (1, 2), {2})
