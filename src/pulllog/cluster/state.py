"""A partition's replicas and leadership: the values the controller decides and every broker applies.

No I/O and no ZooKeeper client here: these are the values that cross from the cluster layer
(which reads and writes them in ZooKeeper, :mod:`pulllog.cluster.znodes` has their JSON) to the
broker (whose replica manager makes itself leader or follower of each partition by them).

Kafka's ZooKeeper mode keeps two things per partition:

- the *assignment* (``/brokers/topics/<topic>``): the ordered replica list of every partition;
  its first replica is the *preferred leader*;
- the *state* (``/brokers/topics/<topic>/partitions/<p>/state``): ``leader``, ``leader_epoch``,
  ``isr`` and the ``controller_epoch`` of the controller that last wrote it.

Who writes the state: the controller (leader elections: the epoch goes up by one with every
leader change, and with the ISR shrink that follows a broker's death) and the partition's
leader (ISR shrink and expand; the leader epoch stays). Every write is conditional on the znode
version it read (``zk_version``), so a write based on a stale read fails and its writer reads
again instead of overwriting a newer decision.

A broker holds one :class:`PartitionView` per partition of the cluster (the assignment, the
state, the topic's config overrides): every broker answers Metadata for every partition, and
applies the views of the partitions it is a replica of.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["NO_LEADER", "LeaderAndIsr", "PartitionView"]

NO_LEADER = -1


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's leadership: who leads, in which epoch, and which replicas are in sync."""

    leader: int  # a broker id, or NO_LEADER while the partition is offline
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    # The state znode's version this value was read at (-1: not read from ZooKeeper). An ISR
    # change is written only if the znode is still at this version.
    zk_version: int = -1

    def with_isr(self, isr: tuple[int, ...]) -> LeaderAndIsr:
        """The leader's own ISR change: same leader and epoch, based on this read."""
        return LeaderAndIsr(self.leader, self.leader_epoch, isr, self.controller_epoch, self.zk_version)


@dataclass(frozen=True)
class PartitionView:
    """One partition as the cluster's state says, delivered to every broker."""

    topic: str
    partition: int
    topic_id: uuid.UUID
    replicas: tuple[int, ...]  # assignment order; replicas[0] is the preferred leader
    state: LeaderAndIsr | None  # None until the controller has written the partition's state
    configs: Mapping[str, str] = field(default_factory=dict)  # the topic's overrides
    partition_count: int = 0
    """How many partitions the topic has (its assignment's count; 0: not said). A broker may
    get a partition's view before its topic's others (a state watch's first read delivers at
    once), so counting the views it holds can come out short."""

    @property
    def leader(self) -> int:
        return self.state.leader if self.state is not None else NO_LEADER

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch if self.state is not None else -1
