"""The controller's decisions, as pure functions over values (no ZooKeeper, no clock).

The controller (the broker that won the election, see :mod:`pulllog.cluster.membership`) keeps
every partition's leadership right. Its ZooKeeper side (:mod:`pulllog.cluster.active_controller`)
reads the live brokers, the assignments and the partition states, asks the functions here what
to write, and writes it conditionally. Every decision is Kafka's ZooKeeper-mode one.

Triggers and their effects (the ZooKeeper side re-reads everything on any trigger and applies
:func:`reconcile` to every partition, so one pass also finishes whatever a dead controller left
half done)::

    trigger                              effect on a partition (leader epoch +1 whenever written)
    -----------------------------------  ---------------------------------------------------------
    new topic / partitions (assignment   no state yet: leader = first live replica in assignment
      without a state znode)               order, ISR = the live replicas, epoch 0 (no live
                                           replica: nothing written until one registers)
    a broker dies (/brokers/ids)         it led: the first replica in assignment order that is
                                           live and in the ISR leads; ISR = ISR minus the dead;
                                           none: the first live replica if
                                           unclean.leader.election.enable (ISR = [it]), else
                                           leader -1 and the ISR keeps its last member (so it
                                           can lead cleanly when it returns)
                                         it followed in the ISR: ISR minus it, same leader
    a broker returns (/brokers/ids)      a partition without a leader whose ISR holds it (or any
                                           live replica, unclean): elected as above
    controller elected                   the same pass over every partition (a dead controller's
                                           unfinished elections, brokers that died meanwhile)
    /admin/preferred_replica_election    the preferred replica (first in assignment order) leads
      or ElectLeaders PREFERRED            if it is live, in the ISR and not leading already
    ElectLeaders UNCLEAN                 a partition without a live leader: a live ISR replica,
                                           else the first live replica (ISR = [it])
    ControlledShutdown from broker B     every partition with more than one replica: B led it: the
      (a clean stop, see below)            first replica in assignment order that is in the ISR,
                                           live and not shutting down leads, ISR minus the brokers
                                           shutting down (none: B keeps it and it is "remaining");
                                           B followed in the ISR: ISR minus B, same leader
    /admin/delete_topics/<t>             once every replica is live: the topic's znodes go (state,
                                           partitions, assignment, config), then the request;
                                           brokers drop its logs (a replica down: it waits)
    AlterPartitionReassignments          the assignment becomes RS = target + origin with the
      (a target, or null to cancel)        adding and removing replicas recorded in the topic
                                           znode; the new replicas follow the leader (brokers see
                                           themselves in RS); already complete (the target all
                                           in the ISR, as after a cancel): finished at once (below)
    a reassigning partition's target     finished: the leader stays if it is in the target and
      all in its ISR (any pass)            live, else the first live target replica in the ISR
                                           leads; ISR = ISR & target; the assignment becomes the
                                           target, written with the state in one transaction;
                                           the removed replicas' brokers delete their copies
                                           (a leader drops a removed replica from its followers
                                           and, were it back in the ISR, from the ISR too)

Controlled shutdown (Kafka's ``KafkaController.doControlledShutdown``): a broker stopping
cleanly asks the controller first. The controller marks it *shutting down* for as long as its
registration lasts: from then on no election (a death, a new partition, a preferred or unclean
election) picks it as leader, and no ISR it decides includes it
(:func:`electable_brokers`). Its answer names the partitions it still leads (no other in-sync
replica could take them); the broker retries, then stops anyway. A broker shutting down stops
fetching before it asks, so no leader adds it back to an ISR.

Replica assignment at creation is Kafka's rack-unaware ``AdminUtils.assignReplicasToBrokers``:
brokers sorted by id; partition *p*'s first replica is broker ``(p + start) % n``; the others
follow it at a shift that grows by one every *n* partitions, so leaders and followers both
spread evenly. ``start`` is random in Kafka; here it comes from a seedable ``random.Random``.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .state import NO_LEADER, LeaderAndIsr

__all__ = [
    "ElectionError",
    "ElectionType",
    "InvalidReplicationFactorError",
    "assign_replicas",
    "elect",
    "electable_brokers",
    "elect_by_request",
    "initial_state",
    "ReplicaAssignment",
    "finish_reassignment",
    "preferred_start_index",
    "reconcile",
    "restrict_to_replicas",
    "shutdown_decision",
    "validate_reassignment",
]


class InvalidReplicationFactorError(ValueError):
    """More replicas asked for than there are live brokers (or fewer than one)."""


class ElectionType(enum.IntEnum):
    """ElectLeaders' election_type (KIP-460)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True)
class ElectionError:
    """Why an ElectLeaders request changed nothing for a partition (Kafka's error names)."""

    code: str  # "ELECTION_NOT_NEEDED", "PREFERRED_LEADER_NOT_AVAILABLE", "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    message: str


def assign_replicas(brokers: Collection[int], partitions: int, replication_factor: int, *,
                    first_partition: int = 0, start_index: int | None = None,
                    rng: random.Random | None = None) -> dict[int, tuple[int, ...]]:
    """Replicas for partitions ``first_partition`` .. ``first_partition + partitions - 1``.

    ``start_index`` fixes where partition 0's first replica falls (CreatePartitions keeps the
    topic's existing layout by passing it); otherwise it is drawn from ``rng``."""
    ids = sorted(brokers)
    n = len(ids)
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"replication factor must be at least 1, not {replication_factor}")
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {n}.")
    draw = rng or random.Random()
    start = start_index if start_index is not None else draw.randrange(n)
    shift = start_index if start_index is not None else draw.randrange(n)
    out: dict[int, tuple[int, ...]] = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out[partition] = tuple(replicas)
    return out


def initial_state(replicas: Sequence[int], live: Collection[int], controller_epoch: int) -> LeaderAndIsr | None:
    """A new partition's first leadership, or None while none of its replicas is live."""
    alive = tuple(r for r in replicas if r in live)
    if not alive:
        return None
    return LeaderAndIsr(alive[0], 0, alive, controller_epoch)


def elect(state: LeaderAndIsr, replicas: Sequence[int], live: Collection[int], controller_epoch: int, *,
          unclean: bool = False) -> LeaderAndIsr | None:
    """The partition's leadership given which brokers are live now, or None when it stays.

    Handles a death (of the leader or of an ISR follower) and a return (of a replica that can
    lead a partition left without one) alike. The result is based on ``state`` (its
    ``zk_version``) so it is written only over what was read."""
    live_isr = tuple(b for b in state.isr if b in live)
    if state.leader in live:
        if live_isr == state.isr:
            return None
        return LeaderAndIsr(state.leader, state.leader_epoch + 1, live_isr, controller_epoch, state.zk_version)
    clean = [r for r in replicas if r in live and r in state.isr]
    if clean:
        return LeaderAndIsr(clean[0], state.leader_epoch + 1, live_isr, controller_epoch, state.zk_version)
    alive = [r for r in replicas if r in live]
    if unclean and alive:
        return LeaderAndIsr(alive[0], state.leader_epoch + 1, (alive[0],), controller_epoch, state.zk_version)
    # Offline. The ISR keeps one member (Kafka never writes an empty ISR): the old leader when
    # it was in sync, so that it, holding everything acknowledged, leads cleanly on return.
    if live_isr:
        isr = live_isr
    elif state.leader in state.isr:
        isr = (state.leader,)
    else:
        isr = state.isr[-1:]
    if state.leader == NO_LEADER and isr == state.isr:
        return None
    return LeaderAndIsr(NO_LEADER, state.leader_epoch + 1, isr, controller_epoch, state.zk_version)


def elect_by_request(state: LeaderAndIsr | None, replicas: Sequence[int], live: Collection[int],
                     controller_epoch: int, election: ElectionType) -> LeaderAndIsr | ElectionError:
    """ElectLeaders for one partition: the new leadership, or why there is none (Kafka's codes)."""
    if state is None:
        return ElectionError("ELIGIBLE_LEADERS_NOT_AVAILABLE", "the partition has no state yet")
    if election is ElectionType.PREFERRED:
        preferred = replicas[0] if replicas else NO_LEADER
        if state.leader == preferred:
            return ElectionError("ELECTION_NOT_NEEDED", f"broker {preferred}, the preferred leader, leads already")
        if preferred not in live or preferred not in state.isr:
            return ElectionError("PREFERRED_LEADER_NOT_AVAILABLE",
                                 f"the preferred leader {preferred} is not live and in sync (ISR {list(state.isr)})")
        return LeaderAndIsr(preferred, state.leader_epoch + 1, state.isr, controller_epoch, state.zk_version)
    if state.leader in live:
        return ElectionError("ELECTION_NOT_NEEDED", f"broker {state.leader} leads and is live")
    chosen = elect(state, replicas, live, controller_epoch, unclean=True)
    if chosen is None or chosen.leader == NO_LEADER:
        return ElectionError("ELIGIBLE_LEADERS_NOT_AVAILABLE", "no replica of the partition is live")
    return chosen


def reconcile(replicas: Sequence[int], state: LeaderAndIsr | None, live: Collection[int], controller_epoch: int, *,
              unclean: bool = False) -> LeaderAndIsr | None:
    """What the controller writes for one partition on any trigger, or None for nothing."""
    if state is None:
        return initial_state(replicas, live, controller_epoch)
    return elect(state, replicas, live, controller_epoch, unclean=unclean)


def preferred_start_index(brokers: Collection[int], partition0_replicas: Sequence[int]) -> int:
    """Where CreatePartitions starts its new partitions so they continue partition 0's layout
    (Kafka: the index of the first broker whose id is at least partition 0's first replica)."""
    ids = sorted(brokers)
    first = partition0_replicas[0] if partition0_replicas else 0
    return next((i for i, b in enumerate(ids) if b >= first), 0)


def shutdown_decision(state: LeaderAndIsr, replicas: Sequence[int], broker: int, live: Collection[int],
                      shutting_down: Collection[int], controller_epoch: int) -> LeaderAndIsr | None:
    """What a controlled shutdown of ``broker`` writes for one of its partitions, or None.

    Kafka acts only on partitions with more than one replica. One ``broker`` leads: the first
    replica in assignment order that is in the ISR, live and not shutting down (Kafka's
    ControlledShutdownLeaderSelector), with the ISR minus every broker shutting down; none:
    None (the broker keeps it, and the answer names it as remaining). One it follows in the
    ISR: the ISR minus it, same leader. Either way the leader epoch goes up by one."""
    if len(replicas) <= 1:
        return None
    if state.leader == broker:
        candidates = [r for r in replicas
                      if r != broker and r in state.isr and r in live and r not in shutting_down]
        if not candidates:
            return None
        isr = tuple(r for r in state.isr if r not in shutting_down and r != broker)
        return LeaderAndIsr(candidates[0], state.leader_epoch + 1, isr, controller_epoch, state.zk_version)
    if broker in state.isr and len(state.isr) > 1:
        isr = tuple(r for r in state.isr if r != broker)
        return LeaderAndIsr(state.leader, state.leader_epoch + 1, isr, controller_epoch, state.zk_version)
    return None


def electable_brokers(live: Collection[int], shutting_down: Collection[int], state: LeaderAndIsr | None) -> set[int]:
    """The brokers an election may count as live: the live ones not shutting down (Kafka's
    ``liveBrokerIds``), plus the partition's current leader even when it is shutting down, so a
    partition it could not hand over stays led by it rather than go offline."""
    out = {b for b in live if b not in shutting_down}
    if state is not None and state.leader in live:
        out.add(state.leader)
    return out


# ---------------------------------------------------------------------- reassignment (KIP-455)


@dataclass(frozen=True)
class ReplicaAssignment:
    """One partition's assignment, reassignment included (Kafka's ``ReplicaAssignment``):
    ``replicas`` is the full set RS, ``adding`` / ``removing`` are empty unless a reassignment
    is under way (see :mod:`pulllog.cluster.znodes` for how ZooKeeper keeps them)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def origin(self) -> tuple[int, ...]:
        """The replicas before the reassignment (ORS)."""
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas the reassignment moves to (TRS)."""
        return tuple(r for r in self.replicas if r not in self.removing)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        """A reassignment to ``target`` from the origin (a new target replaces one under way,
        and the origin as target is a cancel): RS = target + origin, distinct, target first."""
        origin = self.origin
        full = tuple(dict.fromkeys((*target, *origin)))
        return ReplicaAssignment(full, tuple(r for r in full if r not in origin),
                                 tuple(r for r in full if r not in target))


def validate_reassignment(target: Sequence[int], current: ReplicaAssignment, live: Collection[int]) -> str | None:
    """Why Kafka's controller refuses ``target`` (INVALID_REPLICA_ASSIGNMENT), or None: an empty
    list, a broker twice, a negative id, or a replica to add that is not a live broker."""
    if not target:
        return "Empty replica list specified in partition reassignment."
    if len(set(target)) != len(target):
        return f"Duplicate replica ids in partition reassignment replica list: {list(target)}"
    if any(r < 0 for r in target):
        return f"Invalid broker id in replica list: {list(target)}"
    adding = current.reassign_to(target).adding
    if not set(adding) <= set(live):
        return (f"Replica assignment has brokers that are not alive. Replica list: {list(adding)}, "
                f"live broker list: {sorted(live)}")
    return None


def strands_the_partition(state: LeaderAndIsr, replicas: Sequence[int], live: Collection[int]) -> bool:
    """True when a replica set would leave no live in-sync replica to lead: the leader is not in
    it (or down) and no live ISR member is. Kafka's controller writes such a set anyway (a cancel
    after the origin's broker died, a new target without the replica that leads now), and the
    replicas it drops delete their copies, acknowledged writes included; pulllog refuses it."""
    if state.leader in replicas and state.leader in live:
        return False
    return not any(r in replicas and r in live for r in state.isr)


def finish_reassignment(assignment: ReplicaAssignment, state: LeaderAndIsr | None, live: Collection[int],
                        controller_epoch: int) -> tuple[ReplicaAssignment, LeaderAndIsr] | None:
    """The end of a reassignment once every target replica is in the ISR (Kafka's
    ``isReassignmentComplete``): the assignment becomes the target and the state is
    :func:`restrict_to_replicas`'s for it (the leader epoch goes up by one even when the
    leader stays, as Kafka's controller bumps it). None while it must wait: not reassigning,
    no state yet, a target replica not in sync, or no live target replica in sync to lead."""
    if not assignment.reassigning or state is None:
        return None
    target = assignment.target
    if not set(target) <= set(state.isr):
        return None
    chosen = restrict_to_replicas(state, target, live, controller_epoch, bump=True)
    if chosen is None or chosen.leader not in target:
        return None
    return ReplicaAssignment(target), chosen


def restrict_to_replicas(state: LeaderAndIsr, replicas: Sequence[int], live: Collection[int],
                         controller_epoch: int, *, bump: bool = False) -> LeaderAndIsr | None:
    """The state with its ISR (and leader) inside ``replicas``, or None when nothing changes
    (unless ``bump``) or nothing could: no replica of the ISR is left (Kafka never writes an
    empty ISR). A leader outside ``replicas``, or down, gives way to the first live replica in
    assignment order that is in the ISR (Kafka's ReassignPartitionLeaderElectionStrategy)."""
    isr = tuple(r for r in state.isr if r in replicas)
    if not isr:
        return None
    leader = state.leader
    if leader not in replicas or leader not in live:
        leader = next((r for r in replicas if r in isr and r in live), NO_LEADER)
        if leader == NO_LEADER:
            return None
    if not bump and isr == state.isr and leader == state.leader:
        return None
    return LeaderAndIsr(leader, state.leader_epoch + 1, isr, controller_epoch, state.zk_version)
